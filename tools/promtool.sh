#!/usr/bin/env bash
# promtool for checking and unit-testing the PrometheusRule of deploy/dashboards and parsing the dashboard's queries,
# built from the github.com/prometheus/prometheus Go module and cached; prints the binary's path on stdout.
#   promtool=$(bash tools/promtool.sh)  &&  "$promtool" check rules rules.yaml
# The module's v0.X.Y is Prometheus 3.X.Y. Only cmd/promtool is built, with the tag remove_all_sd: no service
# discovery mechanism (cloud SDKs, client-go) is compiled in, which rule and query checks never use.
# Built with the machine's Go (GOTOOLCHAIN=local) into ${SPOTSHIFT_CACHE:-~/.cache/spotshift}/tools/promtool-<version>/
# with the control-plane build's module cache (<cache>/gomod). A stamp (.complete) holds a hash of this script: a
# rerun with it exits at once, a changed recipe builds again.
set -euo pipefail
VERSION=v0.316.0
cache="${SPOTSHIFT_CACHE:-$HOME/.cache/spotshift}"
dir="$cache/tools/promtool-$VERSION"
bin="$dir/promtool"
stamp="$dir/.complete"
want=$(sha256sum "$0" | cut -d' ' -f1)
if [ ! -x "$bin" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  command -v go >/dev/null 2>&1 || { echo "promtool.sh: no go on PATH (Go 1.26 or newer is needed)" >&2; exit 1; }
  echo "promtool.sh: building github.com/prometheus/prometheus/cmd/promtool@$VERSION into $dir" >&2
  mkdir -p "$dir"
  rm -f "$stamp"
  GOTOOLCHAIN=local GOFLAGS= GOMODCACHE="$cache/gomod" CGO_ENABLED=0 GOBIN="$dir/.tmp" \
    go install -trimpath -tags remove_all_sd -ldflags "-s -w -X github.com/prometheus/common/version.Version=$VERSION" \
    "github.com/prometheus/prometheus/cmd/promtool@$VERSION" >&2
  mv -f "$dir/.tmp/promtool" "$bin"
  rmdir "$dir/.tmp"
  echo "$want" >"$stamp"
fi
echo "$bin"
