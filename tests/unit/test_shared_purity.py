"""shared/ stays pure: no Kubernetes client, no web framework, no clock, no environment, no I/O.

The clock is kept out twice: no ``time`` module, and no call of ``datetime``'s clock reads (``now``, ``utcnow``,
``today``); ``datetime`` itself is allowed as a calendar (a given time, converted between time zones).

The one rule of the architecture: the webhook, the extender and the rescheduler agree because they call the
same pure functions. These tests read every module's imports (so a lazy import inside a function is caught
too) rather than trusting a convention.

``shared/kube/`` is exempt: it is the one place in ``shared/`` that talks to an API server (the one transport,
the informer used by the extender's cache and the rescheduler's state, the cluster's release, and credential
loading), kept in ``shared/`` because both parts need it and apart so that nothing pure depends on it. Every
other module must not import it.
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


KUBE = SHARED / "kube"
# shared/kube/ talks to the API server by design (see the module docstring); everything else is checked.
MODULES = sorted(p for p in SHARED.rglob("*.py") if KUBE not in p.parents)


def test_shared_has_modules() -> None:
    # Guards the parametrised test below against silently checking nothing.
    assert len(MODULES) >= 8


def _relative_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level > 0]


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(SHARED)) for p in MODULES])
def test_shared_module_imports_nothing_impure(path: Path) -> None:
    bad = [f"{name} ({FORBIDDEN[name.split('.')[0]]})" for name in _imports(path) if name.split(".")[0] in FORBIDDEN]
    assert bad == [], f"shared/{path.name} imports {bad}"


CLOCK_READS = frozenset({"now", "utcnow", "today"})
"""``datetime``'s calls that read the clock. The rest of ``datetime`` (with ``zoneinfo``) is a calendar: turning a
given Unix time into a wall-clock time in a time zone, and back, which drain windows need (shared/cron.py)."""


def _clock_reads(source: str) -> list[str]:
    tree = ast.parse(source)
    return [
        f"line {n.lineno}: .{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in CLOCK_READS
    ]


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(SHARED)) for p in MODULES])
def test_shared_module_never_reads_the_clock(path: Path) -> None:
    bad = _clock_reads(path.read_text())
    assert bad == [], f"shared/{path.name} reads the clock: {bad}"


def test_the_clock_reader_finds_every_way_to_read_the_clock() -> None:
    # Guards the test above: each of these reads the clock and must be found.
    for source in (
        "import datetime\ndatetime.datetime.now()",
        "from datetime import datetime\ndatetime.utcnow()",
        "from datetime import date\ndate.today()",
        "import datetime as d\nd.datetime.now(d.UTC)",
    ):
        assert _clock_reads(source), source
    assert _clock_reads("import datetime\ndatetime.datetime.fromtimestamp(0, datetime.UTC)") == []


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(SHARED)) for p in MODULES])
def test_pure_shared_modules_do_not_import_shared_kube(path: Path) -> None:
    bad = [name for name in _imports(path) if name == "shared.kube" or name.startswith("shared.kube.")]
    bad += [f"relative {name}" for name in _relative_imports(path) if name.split(".")[0] == "kube"]
    assert bad == [], f"shared/{path.relative_to(SHARED)} imports {bad}, the API-talking part"


def test_shared_kube_is_where_the_api_client_lives() -> None:
    # Guards the exemption: it covers a real package, and the purity checks above really skip only it.
    assert all((KUBE / name).is_file() for name in ("api.py", "informer.py", "version.py", "credentials.py"))
    assert all(KUBE not in p.parents for p in MODULES)


def test_importing_shared_does_not_load_the_kubernetes_client() -> None:
    import subprocess
    import sys

    code = (
        "import importlib, pkgutil, sys, shared\n"
        "for m in pkgutil.iter_modules(shared.__path__):\n"
        "    if m.name != 'kube':  # the API-talking part, exempt (see the module docstring)\n"
        "        importlib.import_module('shared.' + m.name)\n"
        "loaded = sorted(n for n in sys.modules if n.split('.')[0] in ('kubernetes', 'flask'))\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
