"""Which kube-scheduler rules to plan with: the API server's ``/version``, read once at start-up.

The rescheduler's run loop and live ``plan`` read it here; what they get goes to
:func:`rescheduler.plan.planner.plan`. A version that cannot be read or parsed gives
:data:`shared.switches.STRICTEST` and a warning that says so: planning then never assumes a rule more
permissive than any release has.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from rescheduler.logs import fields
from shared.kube.api import ApiError, Kube
from shared.switches import STRICTEST, Switches, for_version_info

__all__ = ["Discovered", "read_switches", "discover_switches"]


@dataclass(frozen=True, slots=True)
class Discovered:
    """What ``/version`` said: the switches, the ``gitVersion`` read (if any), one sentence, and whether it
    is a warning (the strictest rules because the version is not usable)."""

    switches: Switches
    git_version: str | None
    message: str
    warning: bool


def read_switches(kube: Kube) -> Discovered:
    """GET ``/version`` and say which rules it selects."""
    try:
        info = kube.get("/version")
    except (ApiError, ValueError) as e:
        reason = " ".join(str(e).split())
        message = f"cannot read the API server's version ({reason}): planning with {STRICTEST.describe()}"
        return Discovered(STRICTEST, None, message, True)
    switches = for_version_info(info)
    git = info.get("gitVersion") if isinstance(info, dict) else None
    git_version = git if isinstance(git, str) else None
    if switches.kubernetes_version is None:
        message = (
            f"the API server's version {git_version!r} is not a Kubernetes 1.x version: planning with "
            f"{switches.describe()}"
        )
        return Discovered(switches, git_version, message, True)
    shown = git_version or switches.kubernetes_version
    return Discovered(
        switches, git_version, f"API server version {shown}: planning with the {switches.describe()}", False
    )


def discover_switches(kube: Kube, log: logging.Logger) -> Switches:
    """:func:`read_switches`, logged (info, or a warning when the strictest rules are used)."""
    found = read_switches(kube)
    extra = fields(kubernetes_version=found.git_version, scheduler_rules=found.switches.describe())
    log.log(logging.WARNING if found.warning else logging.INFO, "%s", found.message, extra=extra)
    return found.switches
