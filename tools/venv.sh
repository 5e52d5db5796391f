#!/usr/bin/env bash
# The project's virtual environment for tests/run.sh and demo/run.sh; prints its directory on stdout.
#   venv=$(bash tools/venv.sh)  &&  "$venv/bin/python" -m pytest ...
# Debian 12's python3 refuses `pip install` outside a virtual environment (PEP 668), so nothing is installed
# into the system interpreter: the environment is SPOTSHIFT_VENV, else an active one (VIRTUAL_ENV), else
# .venv in the repository, made with ${PYTHON:-python3} (python3-venv is installed with apt when the
# interpreter lacks venv/ensurepip, as Debian's does without that package). The project is installed into it
# in editable mode with its test extras, again only when pyproject.toml changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
venv=${SPOTSHIFT_VENV:-${VIRTUAL_ENV:-$PWD/.venv}}

say() { echo "venv.sh: $*" >&2; }

if [ ! -x "$venv/bin/python" ]; then
  if ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    say "$python has no venv module: installing python3-venv with apt"
    $sudo apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q python3-venv >/dev/null
  fi
  say "creating a virtual environment in $venv with $python"
  "$python" -m venv "$venv"
fi
stamp="$venv/.spotshift-installed"
want="$(cat pyproject.toml | cksum) $PWD"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  say "installing spotshift (editable) and its test requirements into $venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test]' >&2
  echo "$want" > "$stamp"
fi
say "using the virtual environment $venv ($("$venv/bin/python" --version 2>&1))"
echo "$venv"
