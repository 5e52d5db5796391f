"""The real peers the benchmarks and the e2e tier run beside spotshift, as ``tests/e2e/controlplane/peers.sh`` builds
them from their Go modules into ``<cache>/peers``: the descheduler (``bin/descheduler``), Karpenter with its KWOK
cloud provider (``bin/karpenter-kwok``) and Karpenter's CRDs (``crds/*.yaml``). A missing binary fails with the
command that builds it. The versions are read from the script's own ``NAME=value`` lines (:func:`peer_versions`), so
the tests and the build cannot disagree on them.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.support.controlplane.process import cache_dir

__all__ = [
    "PEERS_SCRIPT",
    "PeerMissing",
    "descheduler_binary",
    "karpenter_binary",
    "karpenter_crds",
    "peer_versions",
    "peers_dir",
]

PEERS_SCRIPT = Path(__file__).resolve().parents[2] / "tests" / "e2e" / "controlplane" / "peers.sh"


class PeerMissing(RuntimeError):
    """A peer is not built yet."""


def peer_versions() -> dict[str, str]:
    """The script's ``NAME=value`` lines: DESCHEDULER_VERSION, KARPENTER_VERSION, KARPENTER_TOOLCHAIN."""
    lines = re.findall(r"^([A-Z_]+_(?:VERSION|TOOLCHAIN))=([^\s\"$]+)$", PEERS_SCRIPT.read_text(), re.MULTILINE)
    return dict(lines)


def peers_dir() -> Path:
    return cache_dir() / "peers"


def _binary(name: str) -> Path:
    path = peers_dir() / "bin" / name
    if not os.access(path, os.X_OK):
        raise PeerMissing(f"no {name} at {path}: run `bash tests/e2e/controlplane/peers.sh` (tests/run.sh does)")
    return path


def descheduler_binary() -> Path:
    """``sigs.k8s.io/descheduler/cmd/descheduler``; raises PeerMissing."""
    return _binary("descheduler")


def karpenter_binary() -> Path:
    """``sigs.k8s.io/karpenter/kwok``: Karpenter with the KWOK cloud provider; raises PeerMissing."""
    return _binary("karpenter-kwok")


def karpenter_crds() -> list[Path]:
    """Karpenter's CRDs (NodePool, NodeClaim, KWOKNodeClass and the rest its KWOK build reads), in a fixed order."""
    crds = sorted((peers_dir() / "crds").glob("*.yaml"))
    if not crds:
        raise PeerMissing(f"no CRDs in {peers_dir() / 'crds'}: run `bash tests/e2e/controlplane/peers.sh`")
    return crds
