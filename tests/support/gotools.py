"""helm and promtool for the tests, as ``tools/helm.sh`` and ``tools/promtool.sh`` build them from their Go modules.

``tests/run.sh`` builds both into the cache; a missing binary fails the test with the command that builds it
(as :mod:`tests.support.kustomize` does for kustomize). The cached path is read from the script's own
``VERSION=`` (and, for helm, ``K8S_MINOR=``) lines, so the tests and the scripts cannot disagree on it.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

__all__ = ["ToolMissing", "helm_binary", "promtool_binary", "run_tool"]

_TOOLS = Path(__file__).resolve().parents[2] / "tools"


class ToolMissing(RuntimeError):
    """A tool is not built yet."""


def _assignments(script: Path) -> dict[str, str]:
    return dict(re.findall(r"^([A-Z0-9_]+)=(\S+)$", script.read_text(), re.MULTILINE))


def _cache() -> Path:
    return Path(os.environ.get("SPOTSHIFT_CACHE") or Path.home() / ".cache" / "spotshift")


def _located(name: str, directory: str) -> str:
    path = _cache() / "tools" / directory / name
    if not os.access(path, os.X_OK):
        raise ToolMissing(f"no {name} at {path}: run `bash tools/{name}.sh` (tests/run.sh does)")
    return str(path)


def helm_binary() -> str:
    """The cached build of ``tools/helm.sh``; raises ToolMissing."""
    v = _assignments(_TOOLS / "helm.sh")
    return _located("helm", f"helm-{v['VERSION']}-k8s1.{v['K8S_MINOR']}")


def promtool_binary() -> str:
    """The cached build of ``tools/promtool.sh``; raises ToolMissing."""
    v = _assignments(_TOOLS / "promtool.sh")
    return _located("promtool", f"promtool-{v['VERSION']}")


def run_tool(argv: list[str], *, timeout: float = 120, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Runs a tool, capturing its output; the caller judges the exit code (some tests expect a failure)."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd)
