"""shared/ stays pure: no Kubernetes client, no web framework, no clock, no environment, no I/O.

DESIGN.md "The one rule of the architecture": the webhook, the extender and the rescheduler agree because
they call the same pure functions. These tests read every module's imports (so a lazy import inside a
function is caught too) rather than trusting a convention.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"
FORBIDDEN = {
    "kubernetes": "a Kubernetes client",
    "flask": "a web framework",
    "gunicorn": "a web server",
    "requests": "an HTTP client",
    "urllib3": "an HTTP client",
    "http": "an HTTP client",
    "socket": "the network",
    "subprocess": "processes",
    "logging": "logging configuration",
    "time": "the clock",
    "datetime": "the clock",
    "os": "the environment",
    "prometheus_client": "metrics",
}


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


MODULES = sorted(SHARED.glob("*.py"))


def test_shared_has_modules() -> None:
    # Guards the parametrised test below against silently checking nothing.
    assert len(MODULES) >= 8


@pytest.mark.parametrize("path", MODULES, ids=[p.name for p in MODULES])
def test_shared_module_imports_nothing_impure(path: Path) -> None:
    bad = [f"{name} ({FORBIDDEN[name.split('.')[0]]})" for name in _imports(path) if name.split(".")[0] in FORBIDDEN]
    assert bad == [], f"shared/{path.name} imports {bad}"


def test_importing_shared_does_not_load_the_kubernetes_client() -> None:
    import subprocess
    import sys

    code = (
        "import importlib, pkgutil, sys, shared\n"
        "for m in pkgutil.iter_modules(shared.__path__):\n"
        "    importlib.import_module('shared.' + m.name)\n"
        "loaded = sorted(n for n in sys.modules if n.split('.')[0] in ('kubernetes', 'flask'))\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
