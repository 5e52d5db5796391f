"""Which kube-scheduler rules to plan with: the API server's ``/version``, read once at start-up.

The rescheduler's run loop and live ``plan`` read it through :func:`shared.kube.version.read_switches`; what
they get goes to :func:`rescheduler.plan.planner.plan`. A version that cannot be read or parsed gives
:data:`shared.switches.STRICTEST` and a warning that says so: planning then never assumes a rule more
permissive than any release has.
"""

from __future__ import annotations

import logging

from rescheduler.logs import fields
from shared.kube.api import Kube
from shared.kube.version import Discovered, read_switches
from shared.switches import Switches

__all__ = ["planning_sentence", "discover_switches"]


def planning_sentence(found: Discovered) -> str:
    """What was found and the rules planning uses: ``API server version v1.20.2: planning with the ...``."""
    rules = found.switches.describe()
    return f"{found.message}: planning with {rules if found.switches.kubernetes_version is None else 'the ' + rules}"


def discover_switches(kube: Kube, log: logging.Logger) -> Switches:
    """:func:`~shared.kube.version.read_switches`, logged (info, or a warning when the strictest rules are used)."""
    found = read_switches(kube)
    extra = fields(kubernetes_version=found.git_version, scheduler_rules=found.switches.describe())
    log.log(logging.WARNING if found.warning else logging.INFO, "%s", planning_sentence(found), extra=extra)
    return found.switches
