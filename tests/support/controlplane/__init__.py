"""A real Kubernetes 1.20 control plane on loopback for the e2e tier (see tests/e2e/README.md)."""

from __future__ import annotations

from .api import Api, ApiError
from .certs import KeyPair, issue_cert, make_ca
from .cluster import ControlPlane, running_control_plane
from .kubelet import KubeletStandIn
from .process import BUILD_HINT, Binaries, BinariesMissing, wait_for

__all__ = [
    "BUILD_HINT",
    "Api",
    "ApiError",
    "Binaries",
    "BinariesMissing",
    "ControlPlane",
    "KeyPair",
    "KubeletStandIn",
    "issue_cert",
    "make_ca",
    "running_control_plane",
    "wait_for",
]
