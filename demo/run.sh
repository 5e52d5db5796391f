#!/usr/bin/env bash
# The demo in one command on a fresh Debian machine: installs what it needs like tests/run.sh does (the
# Python packages, then the local Kubernetes 1.20.2 control plane, built once and cached under
# ~/.cache/spotshift), then runs `python3 -m demo` (arguments are passed on: --plain, --timeout, --keep).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check -e '.[test]'
bash tests/e2e/controlplane/build.sh
exec python3 -m demo "$@"
