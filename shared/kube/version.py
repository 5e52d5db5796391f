"""The cluster's kube-scheduler release, read from the API server's ``/version``: which rules to judge with.

Both servers read it once at start-up through the one transport (:mod:`shared.kube.api`): the rescheduler
plans with the rules it selects (:mod:`shared.switches`), the extender reports them next to the rescheduler's so
one look at both logs tells which kube-scheduler behaviour the cluster has. A version that cannot be read or
parsed gives :data:`shared.switches.STRICTEST` and a warning that says so: nothing then assumes a rule more
permissive than any release has. :attr:`Discovered.message` says what was found; each component adds what
it does with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from shared.kube.api import ApiError, Kube
from shared.switches import STRICTEST, Switches, for_version_info

__all__ = ["Discovered", "read_switches", "version_unknown"]


@dataclass(frozen=True, slots=True)
class Discovered:
    """What ``/version`` said: the switches, the ``gitVersion`` read (if any), one clause saying what was found
    (``API server version v1.20.2``), and whether it is a warning (the strictest rules because the version is
    not usable)."""

    switches: Switches
    git_version: str | None
    message: str
    warning: bool


def version_unknown(reason: str) -> Discovered:
    """The strictest rules, with a warning, because the version could not be read (``reason`` says why)."""
    return Discovered(STRICTEST, None, f"cannot read the API server's version ({reason})", True)


def read_switches(kube: Kube, *, timeout: float | None = None) -> Discovered:
    """GET ``/version`` and say which rules it selects. An answer that is refused, missing or not JSON gives
    :func:`version_unknown`; ``timeout`` bounds the read (the transport's default when ``None``)."""
    try:
        info = orjson.loads(kube.get_raw("/version", timeout=timeout))
    except (ApiError, ValueError) as e:
        return version_unknown(" ".join(str(e).split()))
    switches = for_version_info(info)
    git = info.get("gitVersion") if isinstance(info, dict) else None
    git_version = git if isinstance(git, str) else None
    if switches.kubernetes_version is None:
        return Discovered(
            switches, git_version, f"the API server's version {git_version!r} is not a Kubernetes 1.x version", True
        )
    return Discovered(switches, git_version, f"API server version {git_version or switches.kubernetes_version}", False)
