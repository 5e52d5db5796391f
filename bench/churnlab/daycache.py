"""Simulated days kept on disk, so that a long run of many seeds can stop and go on where it stopped.

A day's figures are kept under the digest of every Python source a simulated day runs (the simulator and the
product's ``shared``, ``extender`` and ``rescheduler``): a figure read back was computed by exactly the code on disk,
and any change to that code starts a fresh directory. Within it, one file per scenario, policy and spot fraction.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import asdict
from pathlib import Path

from bench.churnlab.sim import Figures, Scenario

ROOT = Path(__file__).resolve().parents[2]
CODE = ("bench/churnlab", "shared", "extender", "rescheduler")
"""The directories whose sources decide a simulated day's figures."""
APART = frozenset({"page.py", "replay.py", "stats.py", "daycache.py"})
"""Modules of ``bench/churnlab`` a simulated day does not import (the page, the replay, the intervals, this cache):
changing them keeps the days computed."""


def code_digest(root: Path = ROOT) -> str:
    """The digest of every ``*.py`` file under :data:`CODE` in ``root`` but :data:`APART`: its path and its bytes,
    in path order."""
    digest = hashlib.sha256()
    for part in CODE:
        for path in sorted((root / part).rglob("*.py")):
            if part == "bench/churnlab" and path.name in APART:
                continue
            digest.update(path.relative_to(root).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


class DayCache:
    """The days computed by the code of ``digest``, under ``directory/digest``."""

    def __init__(self, directory: Path, digest: str) -> None:
        self.directory = directory / digest

    def path(self, scenario: Scenario, policy: str, fraction: float) -> Path:
        slug = re.sub(r"[^A-Za-z0-9.]+", "-", policy).strip("-")
        sc = scenario
        return self.directory / f"{sc.profile}_{sc.trace}_{sc.seed}_{sc.scale:g}_{fraction:g}_{slug}.json"

    def get(self, scenario: Scenario, policy: str, fraction: float) -> Figures | None:
        """The figures kept for this day, or ``None``; a file that cannot be read as them counts as none."""
        try:
            data = json.loads(self.path(scenario, policy, fraction).read_text())
            data["on_demand_series"] = [tuple(point) for point in data["on_demand_series"]]
            figures = Figures(**data)
        except (OSError, ValueError, TypeError, KeyError):
            return None
        return figures if figures.policy == policy else None

    def put(self, scenario: Scenario, figures: Figures, fraction: float) -> None:
        """Keep ``figures`` (written whole or not at all: a run stopped while writing leaves no partial file)."""
        path = self.path(scenario, figures.policy, fraction)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(json.dumps(asdict(figures)))
        partial.replace(path)
