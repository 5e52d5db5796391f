#!/usr/bin/env bash
# Build the real peers spotshift is measured against, from their Go modules only, as build.sh builds the control
# plane: the descheduler and Karpenter with its KWOK cloud provider, plus Karpenter's CRDs.
#
#   bash tests/e2e/controlplane/peers.sh
#
# The descheduler is sigs.k8s.io/descheduler/cmd/descheduler at DESCHEDULER_VERSION, built in a wrapper module that
# requires it, with the module's own replace lines (read from its go.mod; a replace only applies in the main
# module) and its `godebug` line copied. Its version is stamped into sigs.k8s.io/descheduler/pkg/version as its
# Makefile does (v<build day>-<tag>), so `descheduler version` tells the truth.
# Karpenter is the package sigs.k8s.io/karpenter/kwok (Karpenter with the KWOK cloud provider, which makes Node
# objects instead of machines) at KARPENTER_VERSION, in a wrapper module of its own, with its version stamped into
# sigs.k8s.io/karpenter/pkg/operator.Version. Its go.mod asks for a newer Go than the machine's, so it is built
# with GOTOOLCHAIN=KARPENTER_TOOLCHAIN: `go` downloads that toolchain from the Go module proxy into GOMODCACHE
# (golang.org/toolchain, checked against the checksum database) the first time. Every other build stays on the
# machine's Go (GOTOOLCHAIN=local). Nothing else prebuilt is downloaded.
# The CRDs are Karpenter's own files, copied from the module: kwok/charts/crds/*.yaml (NodePool, NodeClaim,
# NodeOverlay, CapacityBuffer) and kwok/apis/crds/*.yaml (KWOKNodeClass).
# The two builds run one after another (each link takes about 2 GiB); each prints how long it took.
#
# Output: ${SPOTSHIFT_CACHE:-~/.cache/spotshift}/peers/{bin/descheduler,bin/karpenter-kwok,crds/*.yaml} and a stamp
# (peers/.complete) naming both versions, both Go versions and a hash of this script: a rerun with that stamp exits
# at once; another version or a changed recipe builds again. The Go module cache is <cache>/gomod, as for build.sh.
# tests/support/peers.py reads the versions below from this file.
#
# Environment:
#   SPOTSHIFT_CACHE        cache root (default: $HOME/.cache/spotshift)
#   SPOTSHIFT_REBUILD=1    ignore the stamp and build again
set -Eeuo pipefail

DESCHEDULER_VERSION=v0.36.0
KARPENTER_VERSION=v1.15.0
KARPENTER_TOOLCHAIN=go1.27.3

CACHE_ROOT="${SPOTSHIFT_CACHE:-${HOME}/.cache/spotshift}"
PEERS_DIR="${CACHE_ROOT}/peers"
BIN_DIR="${PEERS_DIR}/bin"
CRD_DIR="${PEERS_DIR}/crds"
STAMP="${PEERS_DIR}/.complete"
BINARIES=(descheduler karpenter-kwok)

START_TS=$(date +%s)
log() { echo "[spotshift peers $(date +%H:%M:%S) +$(($(date +%s) - START_TS))s] $*"; }
die() {
    echo "[spotshift peers] ERROR: $*" >&2
    exit 1
}
trap 'echo "[spotshift peers] FAILED (exit $?) at line ${LINENO}: ${BASH_COMMAND}" >&2' ERR

# The directives of a module's go.mod that only apply in the main module, for its wrapper: the `godebug` lines
# and each replace line, one directive a line (`replace A => B v`), whether written alone or in a replace block.
# A replace to a local directory cannot leave its repository: it fails the build.
main_module_directives() {
    local gomod=$1
    grep '^godebug ' "${gomod}" || true
    sed -n -e 's/^replace[[:space:]]\{1,\}\([^([:space:]].*=>.*\)$/\1/p' \
        -e '/^replace[[:space:]]*($/,/^)/{/=>/p}' "${gomod}" \
        | sed -e 's|[[:space:]]*//.*$||' -e 's/^[[:space:]]*//' -e 's/[[:space:]]\{1,\}/ /g' \
        | while read -r line; do
            [[ "${line}" != *"=> ."* && "${line}" != *"=> /"* ]] || die "local replace in ${gomod}: ${line}"
            echo "replace ${line}"
        done
}
# Sourced by the unit tests (PEERS_SH_FUNCTIONS_ONLY=1): the functions above, nothing built.
[[ "${PEERS_SH_FUNCTIONS_ONLY:-0}" != 1 ]] || return 0

command -v go >/dev/null 2>&1 || die "no go on PATH: the build needs Go 1.26 or newer (the machine's toolchain)"
export GOTOOLCHAIN=local # the machine's Go; only the Karpenter build below names another
export GOFLAGS=-mod=mod
export GOMODCACHE="${CACHE_ROOT}/gomod"
export CGO_ENABLED=0
GO_VERSION=$(go env GOVERSION)

RECIPE=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)
stamp_content() {
    echo "descheduler ${DESCHEDULER_VERSION} ${GO_VERSION} karpenter ${KARPENTER_VERSION} ${KARPENTER_TOOLCHAIN}" \
        "recipe ${RECIPE} ${BINARIES[*]} crds"
}

cache_complete() {
    [[ -f "${STAMP}" && "$(cat "${STAMP}")" == "$(stamp_content)" ]] || return 1
    local b
    for b in "${BINARIES[@]}"; do
        [[ -x "${BIN_DIR}/${b}" ]] || return 1
    done
    compgen -G "${CRD_DIR}/*.yaml" >/dev/null
}

if [[ "${SPOTSHIFT_REBUILD:-0}" != 1 ]] && cache_complete; then
    log "cached peers are complete in ${PEERS_DIR}: nothing to build"
    exit 0
fi
log "building the descheduler ${DESCHEDULER_VERSION} (${GO_VERSION}) and Karpenter ${KARPENTER_VERSION} with KWOK" \
    "(${KARPENTER_TOOLCHAIN}) into ${PEERS_DIR} (a few minutes each with a warm build cache, far longer cold)"

# The module's go.mod and source directory, as `go mod download -json` reports them: "<go.mod> <dir>".
module_files() {
    local json gomod dir
    json=$(go mod download -json "$1") || die "the Go module proxy does not serve $1: ${json}"
    gomod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p' <<<"${json}")
    dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"${json}")
    [[ -f "${gomod}" && -d "${dir}" ]] || die "go mod download gave no go.mod or source directory for $1: ${json}"
    echo "${gomod} ${dir}"
}

# A wrapper module in $1 requiring module $2 at $3: the module's go line and main-module directives copied.
write_wrapper() {
    local wrap=$1 module=$2 version=$3 gomod=$4 go_line
    go_line=$(grep -m1 '^go ' "${gomod}") || die "no go line in ${gomod}"
    rm -rf "${wrap}"
    mkdir -p "${wrap}"
    {
        echo "// Generated by tests/e2e/controlplane/peers.sh: builds ${module} ${version}."
        echo "module spotshift.local/peers/$(basename "${wrap}")"
        echo
        echo "${go_line}"
        echo
        echo "require ${module} ${version}"
        echo
        main_module_directives "${gomod}"
    } >"${wrap}/go.mod"
    log "$(basename "${wrap}")/go.mod: ${go_line}; $(grep -c '^replace ' "${wrap}/go.mod" || true) replace line(s);" \
        "$(grep -m1 '^godebug ' "${wrap}/go.mod" || echo 'no godebug line')"
}

OUT="${PEERS_DIR}/out"
rm -rf "${OUT}"
mkdir -p "${OUT}/crds" "${BIN_DIR}" "${CRD_DIR}"
BUILD_DATE=$(date -u +%Y-%m-%dT%H:%M:%SZ)
said() { "$@" 2>&1 || true; }

# --- 1. the descheduler -----------------------------------------------------------------------------------------
step_ts=$(date +%s)
files=$(module_files "sigs.k8s.io/descheduler@${DESCHEDULER_VERSION}")
read -r gomod _ <<<"${files}"
WRAP="${PEERS_DIR}/descheduler-wrapper"
write_wrapper "${WRAP}" sigs.k8s.io/descheduler "${DESCHEDULER_VERSION}" "${gomod}"
VERSION_PKG=sigs.k8s.io/descheduler/pkg/version
LDFLAGS="-s -w -X ${VERSION_PKG}.version=v$(date -u +%Y%m%d)-${DESCHEDULER_VERSION}"
LDFLAGS+=" -X ${VERSION_PKG}.buildDate=${BUILD_DATE}"
log "go build sigs.k8s.io/descheduler/cmd/descheduler ${DESCHEDULER_VERSION}"
(
    cd "${WRAP}" && go get "sigs.k8s.io/descheduler/cmd/descheduler@${DESCHEDULER_VERSION}" \
        && go build -trimpath -ldflags "${LDFLAGS}" -o "${OUT}/descheduler" sigs.k8s.io/descheduler/cmd/descheduler
) || die "go build of the descheduler ${DESCHEDULER_VERSION} failed"
semver="${DESCHEDULER_VERSION#v}"
reported=$(said "${OUT}/descheduler" version)
[[ "${reported}" == *"Major:${semver%%.*} Minor:${semver#*.} GitVersion:v"*"-${DESCHEDULER_VERSION} "* ]] \
    || die "the descheduler does not report ${DESCHEDULER_VERSION}: ${reported}"
log "descheduler ${DESCHEDULER_VERSION} built in $(($(date +%s) - step_ts))s"

# --- 2. Karpenter with its KWOK cloud provider, and its CRDs -----------------------------------------------------
step_ts=$(date +%s)
files=$(GOTOOLCHAIN="${KARPENTER_TOOLCHAIN}" module_files "sigs.k8s.io/karpenter@${KARPENTER_VERSION}")
read -r gomod dir <<<"${files}"
WRAP="${PEERS_DIR}/karpenter-wrapper"
write_wrapper "${WRAP}" sigs.k8s.io/karpenter "${KARPENTER_VERSION}" "${gomod}"
log "go build sigs.k8s.io/karpenter/kwok ${KARPENTER_VERSION} with GOTOOLCHAIN=${KARPENTER_TOOLCHAIN}"
(
    export GOTOOLCHAIN="${KARPENTER_TOOLCHAIN}"
    cd "${WRAP}" && go get "sigs.k8s.io/karpenter/kwok@${KARPENTER_VERSION}" \
        && go build -trimpath -ldflags "-s -w -X sigs.k8s.io/karpenter/pkg/operator.Version=${KARPENTER_VERSION}" \
        -o "${OUT}/karpenter-kwok" sigs.k8s.io/karpenter/kwok
) || die "go build of Karpenter ${KARPENTER_VERSION} (kwok) failed"
# The build information names the toolchain and the module; Karpenter has no version flag, so the version comes
# from its first debug log line, written before it reaches for the API server (here an address that refuses).
built=$(go version -m "${OUT}/karpenter-kwok") || die "no build information in karpenter-kwok"
[[ "${built}" == *": ${KARPENTER_TOOLCHAIN}"* && "${built}" == *"sigs.k8s.io/karpenter"$'\t'"${KARPENTER_VERSION}"* ]] \
    || die "karpenter-kwok is not Karpenter ${KARPENTER_VERSION} built with ${KARPENTER_TOOLCHAIN}: ${built}"
printf 'apiVersion: v1\nkind: Config\nclusters: [{name: none, cluster: {server: "https://127.0.0.1:1"}}]\n%s\n%s\n%s\n' \
    "users: [{name: none, user: {token: none}}]" "contexts: [{name: none, context: {cluster: none, user: none}}]" \
    "current-context: none" >"${OUT}/refused.kubeconfig"
reported=$(said timeout 60 env KUBECONFIG="${OUT}/refused.kubeconfig" LOG_LEVEL=debug DISABLE_LEADER_ELECTION=true \
    SYSTEM_NAMESPACE=kube-system METRICS_PORT=0 HEALTH_PROBE_PORT=0 "${OUT}/karpenter-kwok")
[[ "${reported}" == *'"discovered karpenter version","version":"'"${KARPENTER_VERSION}"'"'* ]] \
    || die "karpenter-kwok does not report ${KARPENTER_VERSION}: ${reported}"
cp "${dir}"/kwok/charts/crds/*.yaml "${dir}"/kwok/apis/crds/*.yaml "${OUT}/crds/"
n_crds=$(find "${OUT}/crds" -name '*.yaml' | wc -l)
[[ -f "${OUT}/crds/karpenter.sh_nodepools.yaml" && -f "${OUT}/crds/karpenter.kwok.sh_kwoknodeclasses.yaml" ]] \
    || die "the CRDs of Karpenter ${KARPENTER_VERSION} lack NodePool or KWOKNodeClass (${n_crds} found)"
log "karpenter-kwok ${KARPENTER_VERSION} built in $(($(date +%s) - step_ts))s; ${n_crds} CRDs"

# --- 3. publish into the cache ----------------------------------------------------------------------------------
rm -f "${STAMP}"
for b in "${BINARIES[@]}"; do
    install -m 0755 "${OUT}/${b}" "${BIN_DIR}/${b}.tmp"
    mv -f "${BIN_DIR}/${b}.tmp" "${BIN_DIR}/${b}"
done
rm -f "${CRD_DIR}"/*.yaml
install -m 0644 "${OUT}"/crds/*.yaml "${CRD_DIR}/"
rm -rf "${OUT}"
stamp_content >"${STAMP}"
log "peers cached in ${PEERS_DIR}: ${BINARIES[*]} and ${n_crds} CRDs; done in $(($(date +%s) - START_TS))s"
