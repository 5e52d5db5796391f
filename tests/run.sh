#!/usr/bin/env bash
# The test command: installs what the tests need on a fresh Debian machine (a virtual environment with the
# project and its test requirements, made by tools/venv.sh; Chromium; the e2e control plane and the container
# image, both cached after the first build), then lints and runs every tier.
#   bash tests/run.sh            unit + e2e (the e2e tier includes the image built by deploy/image/build.sh)
#   bash tests/run.sh unit       unit tier only (no control plane, no image)
# SPOTSHIFT_SKIP_IMAGE=1 skips the image build and its e2e tests (they need root: buildah, mmdebstrap).
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
# The HTML plan is rendered in headless Chromium by a unit test: Debian's chromium, installed once.
if ! command -v chromium >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q chromium >/dev/null
fi
if [ "$tier" = unit ]; then
  exec "$py" -m pytest tests/unit -q
fi
if [ -f tests/e2e/controlplane/build.sh ]; then
  bash tests/e2e/controlplane/build.sh
fi
if [ "${SPOTSHIFT_SKIP_IMAGE:-0}" != 1 ]; then
  # No registry is reachable in CI: the base is made from Debian packages (cached), then the image is built
  # daemonlessly; tests/e2e/test_image_e2e.py runs the servers from it.
  bash deploy/image/build.sh --base "$(bash deploy/image/base.sh)"
fi
exec "$py" -m pytest tests -q
