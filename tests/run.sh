#!/usr/bin/env bash
# The test command: installs what the tests need on a fresh Debian machine (pip packages, then the
# e2e control plane, cached after the first build), then lints and runs every tier.
#   bash tests/run.sh            unit + e2e
#   bash tests/run.sh unit       unit tier only (no control plane needed)
set -euo pipefail
cd "$(dirname "$0")/.."
tier=${1:-all}
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
python3 -m ruff check shared extender rescheduler tests bench demo tools
python3 -m ruff format --check shared extender rescheduler tests bench demo tools
# The HTML plan is rendered in headless Chromium by a unit test: Debian's chromium, installed once.
if ! command -v chromium >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q chromium >/dev/null
fi
if [ "$tier" = unit ]; then
  exec python3 -m pytest tests/unit -q
fi
if [ -f tests/e2e/controlplane/build.sh ]; then
  bash tests/e2e/controlplane/build.sh
fi
exec python3 -m pytest tests -q
