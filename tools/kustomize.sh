#!/usr/bin/env bash
# kustomize for rendering deploy/, built from its Go module and cached; prints the binary's path on stdout.
#   kustomize=$(bash tools/kustomize.sh)  &&  "$kustomize" build deploy/overlays/gke
# The version is the one kubectl of the default e2e release embeds (tests/e2e/controlplane/releases.env), so the
# unit tier and `kubectl kustomize` on the e2e control plane render alike. Built with the machine's Go
# (GOTOOLCHAIN=local) into ${SPOTSHIFT_CACHE:-~/.cache/spotshift}/tools/kustomize-<version>/; the module cache is
# the control-plane build's (<cache>/gomod). About a minute the first time, then it only prints the path.
set -euo pipefail
VERSION=v5.8.1
cache="${SPOTSHIFT_CACHE:-$HOME/.cache/spotshift}"
dir="$cache/tools/kustomize-$VERSION"
bin="$dir/kustomize"
if [ ! -x "$bin" ]; then
  command -v go >/dev/null 2>&1 || { echo "kustomize.sh: no go on PATH (Go 1.26 or newer is needed)" >&2; exit 1; }
  echo "kustomize.sh: building sigs.k8s.io/kustomize/kustomize/v5@$VERSION into $dir" >&2
  mkdir -p "$dir"
  GOTOOLCHAIN=local GOFLAGS= GOMODCACHE="$cache/gomod" CGO_ENABLED=0 GOBIN="$dir/.tmp" \
    go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kustomize/kustomize/v5@$VERSION" >&2
  mv -f "$dir/.tmp/kustomize" "$bin"
  rmdir "$dir/.tmp"
fi
said=$("$bin" version 2>&1 || true)
[[ "$said" == *"$VERSION"* ]] || { echo "kustomize.sh: $bin does not report $VERSION (it says: $said)" >&2; exit 1; }
echo "$bin"
