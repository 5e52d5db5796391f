"""kustomize for the tests that render ``deploy/``: the binary ``tools/kustomize.sh`` builds from its Go module.

``tests/run.sh`` builds it into the cache; a missing binary fails the test with the command that builds it:
rendering is what those tests check. (No variable points elsewhere: spotshift's commands, which the unit tier
runs in and out of process, refuse ``SPOTSHIFT_*`` variables that are not their settings.)
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["BUILD_HINT", "KustomizeMissing", "kustomize_binary", "render_text"]

BUILD_HINT = "bash tools/kustomize.sh"
_VERSION_LINE = "VERSION="
_SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "kustomize.sh"


class KustomizeMissing(RuntimeError):
    """No kustomize binary is built."""


def _cached() -> Path:
    version = next(
        line.removeprefix(_VERSION_LINE) for line in _SCRIPT.read_text().splitlines() if line.startswith(_VERSION_LINE)
    )
    cache = Path(os.environ.get("SPOTSHIFT_CACHE") or Path.home() / ".cache" / "spotshift")
    return cache / "tools" / f"kustomize-{version}" / "kustomize"


def kustomize_binary() -> str:
    """The cached build of ``tools/kustomize.sh``; raises KustomizeMissing."""
    path = _cached()
    if not os.access(path, os.X_OK):
        raise KustomizeMissing(f"no kustomize at {path}: run `{BUILD_HINT}` (tests/run.sh does)")
    return str(path)


def render_text(path: Path, *, timeout: float = 120) -> str:
    """``kustomize build PATH``'s output; a failure raises with kustomize's own message."""
    done = subprocess.run(
        [kustomize_binary(), "build", str(path)], capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"kustomize build {path} failed: {done.stderr.strip()}")
    return done.stdout
