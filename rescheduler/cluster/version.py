"""Which kube-scheduler rules to plan with: the API server's ``/version``, read once at start-up.

The rescheduler's run loop and live ``plan`` call :func:`discover_switches`; what it returns goes to
:func:`rescheduler.plan.planner.plan`. A version that cannot be read or parsed gives
:data:`shared.switches.STRICTEST` and a warning that says so: planning then never assumes a rule more
permissive than any release has.
"""

from __future__ import annotations

import logging

from rescheduler.cluster.kube import ApiError, Kube
from rescheduler.logs import fields
from shared.switches import STRICTEST, Switches, for_version_info

__all__ = ["discover_switches"]


def discover_switches(kube: Kube, log: logging.Logger) -> Switches:
    """GET ``/version`` and log the rules it selects (info), or why the strictest rules are used (warning)."""
    try:
        info = kube.get("/version")
    except (ApiError, ValueError) as e:
        log.warning(
            "cannot read the API server's version (%s): planning with the strictest kube-scheduler rules of any "
            "release",
            " ".join(str(e).split()),
            extra=fields(kubernetes_version=None, scheduler_rules=STRICTEST.describe()),
        )
        return STRICTEST
    switches = for_version_info(info)
    git_version = info.get("gitVersion") if isinstance(info, dict) else None
    if switches.kubernetes_version is None:
        log.warning(
            "the API server's version %r is not a Kubernetes 1.x version: planning with the strictest "
            "kube-scheduler rules of any release",
            git_version,
            extra=fields(kubernetes_version=git_version, scheduler_rules=switches.describe()),
        )
    else:
        log.info(
            "API server version %s: planning with the %s",
            git_version or switches.kubernetes_version,
            switches.describe(),
            extra=fields(kubernetes_version=git_version, scheduler_rules=switches.describe()),
        )
    return switches
