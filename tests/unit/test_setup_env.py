"""The README's commands set up their environment with Debian's own interpreter (PEP 668 in force).

``tests/run.sh`` and ``demo/run.sh`` get their virtual environment from ``tools/venv.sh``; on Debian 12,
``/usr/bin/python3`` refuses ``pip install`` outside a virtual environment (``EXTERNALLY-MANAGED``), so this
runs the real script with that interpreter, into a fresh directory, and checks the project is importable
from the environment and was not installed into the system.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEBIAN_PYTHON = Path("/usr/bin/python3")


def _marker() -> Path | None:
    if not DEBIAN_PYTHON.exists():
        return None
    stdlib = subprocess.run(
        [str(DEBIAN_PYTHON), "-c", "import sysconfig; print(sysconfig.get_path('stdlib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    marker = Path(stdlib) / "EXTERNALLY-MANAGED"
    return marker if marker.exists() else None


@pytest.mark.skipif(_marker() is None, reason="no /usr/bin/python3 with PEP 668's EXTERNALLY-MANAGED marker")
def test_the_scripts_environment_is_made_with_debians_python3(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "SPOTSHIFT_VENV", "PYTHONPATH")}
    env.update(PYTHON=str(DEBIAN_PYTHON), SPOTSHIFT_VENV=str(venv))

    first = subprocess.run(["bash", "tools/venv.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.strip() == str(venv)
    assert f"using the virtual environment {venv}" in first.stderr, "the script says where the environment is"

    python = venv / "bin" / "python"
    probe = (
        "import sys, importlib.metadata as m, shared, pytest, pytest_randomly, ruff; "
        "print(sys.base_prefix, m.version('spotshift'), shared.__file__)"
    )
    out = subprocess.run([str(python), "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True)
    base_prefix, version, shared_file = out.stdout.split()
    assert base_prefix == "/usr", "the environment is built on Debian's interpreter"
    assert Path(shared_file).is_relative_to(ROOT), "editable install of this checkout"
    assert version

    # Nothing went into the system interpreter.
    system = subprocess.run(
        [str(DEBIAN_PYTHON), "-c", "import importlib.metadata as m; m.version('spotshift')"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert system.returncode != 0

    again = subprocess.run(["bash", "tools/venv.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout.strip() == str(venv)
    assert "installing" not in again.stderr, "an unchanged pyproject.toml is not installed again"


def test_both_readme_scripts_use_the_environment_not_the_system_interpreter() -> None:
    for script in ("tests/run.sh", "demo/run.sh"):
        text = (ROOT / script).read_text()
        assert "venv=$(bash tools/venv.sh)" in text, script
        assert "pip install" not in text, f"{script} must not install into whatever python3 is"
