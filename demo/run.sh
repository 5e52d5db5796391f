#!/usr/bin/env bash
# The demo in one command on a fresh Debian machine: installs what it needs like tests/run.sh does (a virtual
# environment with the project, made by tools/venv.sh; then the local Kubernetes control plane of
# tests/e2e/controlplane/releases.env, built once from Go modules and cached under ~/.cache/spotshift), then runs `python -m demo` in that environment (arguments are
# passed on: --plain, --timeout, --keep).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(bash tools/venv.sh)
export PATH="$venv/bin:$PATH"
bash tests/e2e/controlplane/build.sh
exec "$venv/bin/python" -m demo "$@"
