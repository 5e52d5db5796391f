#!/usr/bin/env bash
# Build a real Kubernetes control plane for the e2e tier, the demo and the benches, from Go modules only.
#
#   bash tests/e2e/controlplane/build.sh                 the release SPOTSHIFT_K8S_VERSION, else the default
#   SPOTSHIFT_K8S_VERSION=1.34.4 bash tests/e2e/...      another release (releases.env lists the ones run in CI)
#
# kube-apiserver, kube-controller-manager, kube-scheduler and kubectl come from the module k8s.io/kubernetes at
# the release's tag, built the way out-of-tree schedulers build kube-scheduler: a wrapper module requires
# k8s.io/kubernetes vX and pins every staging module k8s.io/<name> to v0.X with a replace line (the list is read
# from that tag's own go.mod, whose replace block points at ./staging/src/k8s.io/<name>; it changes between minor
# releases), with the tag's `godebug default=` line copied (it only applies in the main module). Built as upstream
# builds them: CGO_ENABLED=0, -tags notest,selinux,grpcnotrace, the version stamped into
# k8s.io/component-base/version and k8s.io/client-go/pkg/version so `--version` and /version tell the truth.
# etcd is the release's own pairing (ETCD_VERSION in the tag's hack/lib/etcd.sh), built from
# go.etcd.io/etcd/server/v3 in a wrapper module of its own, so module version selection does not mix the two.
#
# Output: ${SPOTSHIFT_CACHE:-~/.cache/spotshift}/k8s-<release>/bin/{etcd,kube-apiserver,kube-controller-manager,
# kube-scheduler,kubectl} and a stamp naming the release, etcd, Go and a hash of this script: a rerun with that
# stamp exits at once; a new release or a changed recipe builds again. The Go module and build caches live under
# ~/.cache as well (GOMODCACHE=<cache>/gomod, GOCACHE as the machine sets it, by default ~/.cache/go-build).
#
# Environment:
#   SPOTSHIFT_K8S_VERSION  release to build (default: SPOTSHIFT_K8S_DEFAULT in releases.env)
#   SPOTSHIFT_CACHE        cache root (default: $HOME/.cache/spotshift)
#   SPOTSHIFT_REBUILD=1    ignore the stamp and build again
set -Eeuo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=releases.env
source "${HERE}/releases.env"
K8S_VERSION="${SPOTSHIFT_K8S_VERSION:-${SPOTSHIFT_K8S_DEFAULT}}"
K8S_VERSION="${K8S_VERSION#v}"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl)

CACHE_ROOT="${SPOTSHIFT_CACHE:-${HOME}/.cache/spotshift}"
K8S_DIR="${CACHE_ROOT}/k8s-${K8S_VERSION}"
BIN_DIR="${K8S_DIR}/bin"
STAMP="${BIN_DIR}/.complete"

START_TS=$(date +%s)
log() { echo "[spotshift build ${K8S_VERSION} $(date +%H:%M:%S) +$(($(date +%s) - START_TS))s] $*"; }
die() {
    echo "[spotshift build ${K8S_VERSION}] ERROR: $*" >&2
    exit 1
}
trap 'echo "[spotshift build] FAILED (exit $?) at line ${LINENO}: ${BASH_COMMAND}" >&2' ERR

[[ "${K8S_VERSION}" =~ ^1\.([0-9]+)\.[0-9]+$ ]] || die "SPOTSHIFT_K8S_VERSION=${K8S_VERSION} is not a release like 1.37.2"
MINOR="${BASH_REMATCH[1]}"
STAGING_VERSION="v0.${K8S_VERSION#1.}"

command -v go >/dev/null 2>&1 || die "no go on PATH: the build needs Go 1.26 or newer (the machine's toolchain)"
export GOTOOLCHAIN=local # the machine's Go, never a downloaded toolchain
export GOFLAGS=-mod=mod
export GOMODCACHE="${CACHE_ROOT}/gomod"
export CGO_ENABLED=0
GO_VERSION=$(go env GOVERSION)

RECIPE=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)
stamp_content() { echo "kubernetes v${K8S_VERSION} etcd v$1 ${GO_VERSION} recipe ${RECIPE} ${BINARIES[*]} etcd"; }

cache_complete() {
    [[ -f "${STAMP}" ]] || return 1
    local etcd_version
    etcd_version=$(sed -n 's/.* etcd v\([^ ]*\) .*/\1/p' "${STAMP}")
    [[ -n "${etcd_version}" && "$(cat "${STAMP}")" == "$(stamp_content "${etcd_version}")" ]] || return 1
    local b
    for b in "${BINARIES[@]}" etcd; do
        [[ -x "${BIN_DIR}/${b}" ]] || return 1
    done
}

if [[ "${SPOTSHIFT_REBUILD:-0}" != 1 ]] && cache_complete; then
    log "cached binaries are complete in ${BIN_DIR}: nothing to build"
    exit 0
fi
log "building Kubernetes ${K8S_VERSION} into ${BIN_DIR} with ${GO_VERSION} (about 10-15 minutes on 2 cores, cold)"

# --- 1. the tag's go.mod: the staging modules, the go and godebug lines ---------------------------------------
log "go mod download k8s.io/kubernetes@v${K8S_VERSION}"
download_json=$(go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}") \
    || die "the Go module proxy does not serve k8s.io/kubernetes@v${K8S_VERSION}: ${download_json}"
TAG_GOMOD=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' <<<"${download_json}")
TAG_DIR=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"${download_json}")
[[ -f "${TAG_GOMOD}" && -d "${TAG_DIR}" ]] || die "go mod download gave no go.mod or source directory: ${download_json}"

STAGING=$(sed -n 's|^[[:space:]]*\(k8s\.io/[a-z0-9-]*\)[[:space:]]*=>[[:space:]]*\./staging/src/k8s\.io/[a-z0-9-]*[[:space:]]*$|\1|p' \
    "${TAG_GOMOD}")
N_STAGING=$(grep -c . <<<"${STAGING}")
[[ ${N_STAGING} -ge 25 ]] || die "found ${N_STAGING} staging replace lines in ${TAG_GOMOD}; expected about 30"
GO_LINE=$(grep -m1 '^go ' "${TAG_GOMOD}") || die "no go line in ${TAG_GOMOD}"
GODEBUG_LINE=$(grep -m1 '^godebug ' "${TAG_GOMOD}" || true)
ETCD_VERSION=$(sed -n 's/^ETCD_VERSION=\${ETCD_VERSION:-\([0-9.]*\)}$/\1/p' "${TAG_DIR}/hack/lib/etcd.sh")
[[ "${ETCD_VERSION}" =~ ^3\.[0-9]+\.[0-9]+$ ]] || die "no ETCD_VERSION in ${TAG_DIR}/hack/lib/etcd.sh"
log "${N_STAGING} staging modules at ${STAGING_VERSION}; ${GO_LINE}; ${GODEBUG_LINE:-no godebug line}; etcd ${ETCD_VERSION}"

# --- 2. the wrapper module ------------------------------------------------------------------------------------
WRAP="${K8S_DIR}/wrapper"
rm -rf "${WRAP}"
mkdir -p "${WRAP}"
{
    echo "// Generated by tests/e2e/controlplane/build.sh: builds the control plane of Kubernetes v${K8S_VERSION}."
    echo "module spotshift.local/k8s-${K8S_VERSION}"
    echo
    echo "${GO_LINE}"
    echo
    [[ -z "${GODEBUG_LINE}" ]] || printf '%s\n\n' "${GODEBUG_LINE}"
    echo "require k8s.io/kubernetes v${K8S_VERSION}"
    echo
    echo "replace ("
    while read -r module; do
        printf '\t%s => %s %s\n' "${module}" "${module}" "${STAGING_VERSION}"
    done <<<"${STAGING}"
    echo ")"
} >"${WRAP}/go.mod"

# --- 3. build ---------------------------------------------------------------------------------------------------
BUILD_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    LDFLAGS+=" -X ${p}.gitVersion=v${K8S_VERSION} -X ${p}.gitMajor=1 -X ${p}.gitMinor=${MINOR}"
    LDFLAGS+=" -X ${p}.gitTreeState=clean -X ${p}.buildDate=${BUILD_DATE}"
done
OUT="${K8S_DIR}/out"
rm -rf "${OUT}"
mkdir -p "${OUT}" "${BIN_DIR}"
PKGS=()
for b in "${BINARIES[@]}"; do PKGS+=("k8s.io/kubernetes/cmd/${b}"); done
log "go build ${BINARIES[*]} (the long step; quiet while it compiles)"
(cd "${WRAP}" && go build -trimpath -tags notest,selinux,grpcnotrace -ldflags "${LDFLAGS}" -o "${OUT}/" "${PKGS[@]}") \
    || die "go build of the control plane failed"

ETCD_WRAP="${K8S_DIR}/etcd-wrapper"
rm -rf "${ETCD_WRAP}"
mkdir -p "${ETCD_WRAP}"
printf '// Generated by tests/e2e/controlplane/build.sh: etcd for Kubernetes v%s.\nmodule spotshift.local/etcd-%s\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' \
    "${K8S_VERSION}" "${ETCD_VERSION}" "${ETCD_VERSION}" >"${ETCD_WRAP}/go.mod"
log "go build etcd ${ETCD_VERSION}"
(cd "${ETCD_WRAP}" && go build -trimpath -ldflags "-s -w" -o "${OUT}/etcd" go.etcd.io/etcd/server/v3) \
    || die "go build of etcd v${ETCD_VERSION} failed"

# Each binary's own word for its version (captured first: `grep -q` closing the pipe early would fail it).
said() { "$@" 2>&1 || true; }
for b in kube-apiserver kube-controller-manager kube-scheduler; do
    [[ "$(said "${OUT}/${b}" --version)" == "Kubernetes v${K8S_VERSION}" ]] || die "${b} does not report v${K8S_VERSION}"
done
[[ "$(said "${OUT}/kubectl" version --client)" == *"Client Version: v${K8S_VERSION}"* ]] \
    || die "kubectl does not report v${K8S_VERSION}"
[[ "$(said "${OUT}/etcd" --version)" == *"etcd Version: ${ETCD_VERSION}"* ]] || die "etcd does not report ${ETCD_VERSION}"

# --- 4. publish into the cache -------------------------------------------------------------------------------
rm -f "${STAMP}"
for b in "${BINARIES[@]}" etcd; do
    install -m 0755 "${OUT}/${b}" "${BIN_DIR}/${b}.tmp"
    mv -f "${BIN_DIR}/${b}.tmp" "${BIN_DIR}/${b}"
done
rm -rf "${OUT}"
stamp_content "${ETCD_VERSION}" >"${STAMP}"
log "binaries cached in ${BIN_DIR}: ${BINARIES[*]} etcd; done in $(($(date +%s) - START_TS))s"
