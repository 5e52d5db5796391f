#!/usr/bin/env bash
# helm for linting, rendering and installing deploy/chart/spotshift, built from its Go module and cached; prints the
# binary's path on stdout.
#   helm=$(bash tools/helm.sh)  &&  "$helm" template spotshift deploy/chart/spotshift --set provider=gke
# Only cmd/helm is built, stamped as helm's own Makefile stamps a release: its version, and the Kubernetes release
# of its k8s.io modules (client-go v0.37: K8S_MINOR), which `helm template` and `helm lint` render for (unstamped
# they assume v1.20). Built with the machine's Go (GOTOOLCHAIN=local) into
# ${SPOTSHIFT_CACHE:-~/.cache/spotshift}/tools/helm-<version>-k8s1.<minor>/ with the control-plane build's module
# cache (<cache>/gomod). A stamp (.complete) holds a hash of this script: a rerun with it exits at once, a changed
# recipe builds again.
set -euo pipefail
VERSION=v3.22.0
K8S_MINOR=37
cache="${SPOTSHIFT_CACHE:-$HOME/.cache/spotshift}"
dir="$cache/tools/helm-$VERSION-k8s1.$K8S_MINOR"
bin="$dir/helm"
stamp="$dir/.complete"
want=$(sha256sum "$0" | cut -d' ' -f1)
if [ ! -x "$bin" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  command -v go >/dev/null 2>&1 || { echo "helm.sh: no go on PATH (Go 1.26 or newer is needed)" >&2; exit 1; }
  echo "helm.sh: building helm.sh/helm/v3/cmd/helm@$VERSION into $dir" >&2
  mkdir -p "$dir"
  rm -f "$stamp"
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$VERSION"
  for pkg in pkg/chartutil pkg/lint/rules; do
    ldflags="$ldflags -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$K8S_MINOR"
  done
  GOTOOLCHAIN=local GOFLAGS= GOMODCACHE="$cache/gomod" CGO_ENABLED=0 GOBIN="$dir/.tmp" \
    go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$VERSION" >&2
  mv -f "$dir/.tmp/helm" "$bin"
  rmdir "$dir/.tmp"
  said=$("$bin" version --short 2>&1 || true)
  [[ "$said" == "$VERSION"* ]] || { echo "helm.sh: $bin does not report $VERSION (it says: $said)" >&2; exit 1; }
  echo "$want" >"$stamp"
fi
echo "$bin"
