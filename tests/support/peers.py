"""The real peers the benchmarks and the e2e tier run beside spotshift, as ``tests/e2e/controlplane/peers.sh`` builds
them from their Go modules into ``<cache>/peers``: the descheduler (``bin/descheduler``), Karpenter with its KWOK
cloud provider (``bin/karpenter-kwok``) and Karpenter's CRDs (``crds/*.yaml``). A missing binary fails with the
command that builds it.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.controlplane.process import cache_dir

__all__ = ["PeerMissing", "descheduler_binary", "karpenter_binary", "karpenter_crds", "peers_dir"]


class PeerMissing(RuntimeError):
    """A peer is not built yet."""


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
