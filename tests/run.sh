#!/usr/bin/env bash
# The test command: installs what the tests need on a fresh Debian machine (a virtual environment with the
# project and its test requirements, made by tools/venv.sh; Chromium; kustomize, helm, promtool, the e2e control
# planes and the container image, built from registry packages and cached after the first build), then lints,
# builds the documentation site and runs every tier.
#   bash tests/run.sh            unit + e2e on the default release with the tests of the real peers (descheduler,
#                                Karpenter) on it beside, then the compatibility run on each older release
#   bash tests/run.sh unit       unit tier only (no control plane, no image)
# The releases are in tests/e2e/controlplane/releases.env. SPOTSHIFT_K8S_VERSION=X runs unit + e2e + the peers'
# tests on release X only (no compatibility run). SPOTSHIFT_SKIP_IMAGE=1 skips the image build and its e2e tests
# (they need root: buildah, mmdebstrap).
set -euo pipefail
cd "$(dirname "$0")/.."
tier=${1:-all}
venv=$(bash tools/venv.sh)
export PATH="$venv/bin:$PATH"
py="$venv/bin/python"
# spot-extender and spot-rescheduler reject unknown SPOTSHIFT_* variables: keep the scripts' own out of the tests.
unset SPOTSHIFT_VENV SPOTSHIFT_REBUILD_BASE
"$py" -m ruff check shared extender rescheduler tests bench demo tools
"$py" -m ruff format --check shared extender rescheduler tests bench demo tools
"$py" -m mypy shared extender rescheduler
# The documentation site (mkdocs.yml, docs/): built strict into a scratch directory, so a broken link or anchor, or a
# page missing from the nav, fails the run. Not --quiet: mkdocs 1.6 then drops the warnings --strict counts.
# NO_MKDOCS_2_WARNING: the theme's banner about its own future, not about these pages.
NO_MKDOCS_2_WARNING=1 "$py" -m mkdocs build --strict --site-dir "$(mktemp -d)"
# The HTML plan is rendered in headless Chromium by a unit test: Debian's chromium, installed once.
if ! command -v chromium >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q chromium >/dev/null
fi
# deploy/ is rendered by the unit tier with kustomize built from its Go module (tests/support/kustomize.py); the
# Helm chart with helm, and the alerts checked with promtool, both built from their Go modules too
# (tests/support/gotools.py). Each is cached after its first build.
bash tools/kustomize.sh >/dev/null
bash tools/helm.sh >/dev/null
bash tools/promtool.sh >/dev/null
# The release is handed to the e2e tier only: spotshift's commands, which the unit tier runs, refuse SPOTSHIFT_*
# variables that are not their settings.
release=${SPOTSHIFT_K8S_VERSION:-}
unset SPOTSHIFT_K8S_VERSION
# The unit tier runs in a random order (pytest-randomly), a new one each time, so that no test leans on what
# another left behind; the seed is printed, and replays that order. The e2e tier keeps its files' order (they share
# control planes in a set order): -p no:randomly.
unit_tier() {
  local seed
  seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
  echo "tests/run.sh: unit tier in random order, seed $seed (replay: python -m pytest tests/unit -p randomly --randomly-seed=$seed)"
  "$py" -m pytest tests/unit -q -p randomly --randomly-seed="$seed"
}
if [ "$tier" = unit ]; then
  unit_tier
  exit
fi
# shellcheck source=e2e/controlplane/releases.env
source tests/e2e/controlplane/releases.env
compat=""
if [ -z "$release" ]; then
  release=$SPOTSHIFT_K8S_DEFAULT
  compat=$SPOTSHIFT_K8S_COMPAT
fi
SPOTSHIFT_K8S_VERSION=$release bash tests/e2e/controlplane/build.sh
# The real peers (the descheduler, Karpenter with KWOK: tests/e2e/controlplane/peers.sh), then the compatibility
# releases, build one after another while the default release's tiers run (a cold build is mostly compiling, the e2e
# tier mostly waiting), at a lower priority than the tests; each build's log is printed when its run is reached, and
# a file named after the build says it is over (its content: the build's exit code).
compat_dir=$(mktemp -d)
(
  rc=0
  nice -n 10 bash tests/e2e/controlplane/peers.sh >"$compat_dir/peers.log" 2>&1 || rc=$?
  echo "$rc" >"$compat_dir/peers.done"
  for r in $compat; do
    rc=0
    SPOTSHIFT_K8S_VERSION=$r nice -n 10 bash tests/e2e/controlplane/build.sh >"$compat_dir/$r.log" 2>&1 || rc=$?
    echo "$rc" >"$compat_dir/$r.done"
  done
) &
compat_build=$!
peers_tests=""
# Stopped with this script if a tier fails first: the builds (their go process is a child of the subshell), and
# the peers' tests, interrupted as Ctrl-C would so that their control plane is torn down.
stop_background() {
  pkill -P "$compat_build" 2>/dev/null || true
  kill "$compat_build" 2>/dev/null || true
  if [ -n "$peers_tests" ] && kill -0 "$peers_tests" 2>/dev/null; then
    pkill -INT -P "$peers_tests" 2>/dev/null || true
    wait "$peers_tests" 2>/dev/null || true
  fi
}
trap stop_background EXIT
# Waits for the background build named $1 (what it builds: $2), prints its log and stops the run if it failed.
background_built() {
  while [ ! -f "$compat_dir/$1.done" ]; do
    if ! kill -0 "$compat_build" 2>/dev/null && [ ! -f "$compat_dir/$1.done" ]; then
      echo "tests/run.sh: the background builds stopped before $2 was built" >&2
      exit 1
    fi
    sleep 5
  done
  cat "$compat_dir/$1.log"
  if [ "$(cat "$compat_dir/$1.done")" != 0 ]; then
    echo "tests/run.sh: the build of $2 failed (its log is above)" >&2
    exit 1
  fi
}
if [ "${SPOTSHIFT_SKIP_IMAGE:-0}" != 1 ]; then
  # No registry is reachable in CI: the base is made from Debian packages (cached), then the image is built
  # daemonlessly; tests/e2e/test_image_e2e.py runs the servers from it.
  bash deploy/image/build.sh --base "$(bash deploy/image/base.sh)"
fi
unit_tier
# The tests marked `peers` run the real descheduler and Karpenter beside spotshift, once their build is over, in the
# background beside the e2e tier and the compatibility runs: they mostly wait on the replay's clock (a replay keeps
# the machine's two cores about a tenth busy), each test session starts its own control plane on free ports, and
# they get pytest directories of their own. Their output is printed when the other tiers are over.
(
  background_built peers "the peers (the descheduler, Karpenter)"
  echo "tests/run.sh: the peers' tests on Kubernetes $release"
  SPOTSHIFT_K8S_VERSION=$release "$py" -m pytest tests/e2e -q -p no:randomly -p no:cacheprovider \
    --basetemp="$compat_dir/peers-tmp" -m peers
) >"$compat_dir/peers-tests.log" 2>&1 &
peers_tests=$!
echo "tests/run.sh: e2e tier on Kubernetes $release (the peers' tests run beside it once built)"
SPOTSHIFT_K8S_VERSION=$release "$py" -m pytest tests/e2e -q -p no:randomly -m "not peers"
for r in $compat; do
  # The compatibility run: the e2e tests marked `compat` (tests/e2e/conftest.py) on each older release.
  background_built "$r" "Kubernetes $r"
  echo "tests/run.sh: compatibility run on Kubernetes $r"
  SPOTSHIFT_K8S_VERSION=$r "$py" -m pytest tests/e2e -q -p no:randomly -m compat
done
rc=0
wait "$peers_tests" || rc=$?
peers_tests=""
cat "$compat_dir/peers-tests.log"
if [ "$rc" != 0 ]; then
  echo "tests/run.sh: the peers' build or tests failed (their output is above)" >&2
  exit 1
fi
