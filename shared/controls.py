"""The operator's controls on drains (``disruption`` in :class:`~shared.config.Config`) that need a time or the
whole cluster: drain budgets and windows, minimum pod and target ages, minimum ready replicas.

Pure like the rest of :mod:`shared`: the time is an argument (Unix seconds), never read here. The controls that
need only a pod and the configuration (namespace and label scoping, Job protection) are rules of
:mod:`shared.movable`. What the rules here decide, and at which boundary:

* **Age.** A pod is too young while ``now - creationTimestamp < min_pod_age``: at exactly ``min_pod_age`` it
  may move. A spot node is too young to be a target while it was created, or last became Ready (the
  ``Ready`` condition's ``lastTransitionTime``), less than ``min_target_age`` ago. A missing or unreadable
  timestamp does not hold anything back (the API server always sets them; hand-made snapshots may not).
* **Ready replicas** of a workload (:func:`shared.workloads.workload_key`: the controller, a Deployment's
  ReplicaSets folded into it) are its pods anywhere in the cluster that are Running, Ready and not
  terminating. A pod without a controller has no workload and is left to :mod:`shared.movable`'s rules.
* **Budgets** (:func:`allowance`): the budgets in force at ``now`` are those without a schedule and those whose
  window is open (:func:`shared.cron.window_open`: start inclusive, end exclusive); the smallest limit among
  them applies, a percentage of the on-demand nodes rounded up. When budgets are configured and none is in
  force, nothing drains until the next window opens.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from shared.config import DisruptionConfig
from shared.cron import next_start, window_open, zone
from shared.model import Node, Pod
from shared.workloads import workload_key

__all__ = [
    "parse_time",
    "pod_too_young",
    "target_too_young",
    "ready_replicas",
    "too_few_replicas",
    "Allowance",
    "allowance",
    "format_time",
]


def parse_time(text: str) -> float | None:
    """Unix time of an RFC 3339 timestamp as the API server writes it (``2024-05-14T09:12:44Z``, fractions and
    offsets accepted); ``None`` when empty or unreadable."""
    if not text:
        return None
    try:
        stamp = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=datetime.UTC)
    return stamp.timestamp()


def _younger(text: str, limit: float, now: float) -> bool:
    born = parse_time(text)
    return born is not None and now - born < limit


def pod_too_young(pod: Pod, min_age: float, now: float) -> bool:
    """Whether ``pod`` is younger than ``min_age`` seconds at ``now`` (exactly ``min_age``: old enough)."""
    return min_age > 0 and _younger(pod.creation_timestamp, min_age, now)


def target_too_young(node: Node, min_age: float, now: float) -> bool:
    """Whether a spot node was created or became Ready less than ``min_age`` seconds before ``now``."""
    if min_age <= 0:
        return False
    return _younger(node.creation_timestamp, min_age, now) or _younger(node.ready_since, min_age, now)


def ready_replicas(pods: Iterable[Pod]) -> dict[str, int]:
    """Per workload, how many of ``pods`` are Running, Ready and not terminating."""
    counts: dict[str, int] = {}
    for p in pods:
        if p.ready and p.phase == "Running" and not p.terminating and p.owners:
            wk = workload_key(p)
            if wk is not None:
                counts[wk] = counts.get(wk, 0) + 1
    return counts


def too_few_replicas(pod: Pod, counts: Mapping[str, int], min_replicas: int) -> int | None:
    """The workload's Ready replicas when fewer than ``min_replicas`` (the pod stays), else ``None``."""
    if min_replicas <= 0:
        return None
    wk = workload_key(pod)
    if wk is None:
        return None
    have = counts.get(wk, 0)
    return have if have < min_replicas else None


@dataclass(frozen=True, slots=True)
class Allowance:
    """How many more on-demand nodes may start draining now; ``limit is None``: no budget limits drains."""

    limit: int | None
    """The budget in force (nodes draining at once), ``None`` without budgets."""
    in_progress: int = 0
    """Nodes already draining, counted against ``limit``."""
    budget: str = ""
    """The budget in force as written (``3``, ``20%``)."""
    closed_until: float | None = None
    """Set when outside every drain window: when the next one opens (``inf`` if none ever does)."""

    @property
    def closed(self) -> bool:
        return self.closed_until is not None

    @property
    def more(self) -> int | None:
        """How many more nodes may start draining (``None``: no limit)."""
        return None if self.limit is None else max(0, self.limit - self.in_progress)


def allowance(config: DisruptionConfig, *, on_demand: int, in_progress: int, now: float) -> Allowance:
    """The drains ``config.budgets`` allow at ``now``, with ``on_demand`` nodes of which ``in_progress`` drain."""
    if not config.budgets:
        return Allowance(None, in_progress)
    tz = zone(config.time_zone)
    best: tuple[int, str] | None = None
    for b in config.budgets:
        if b.schedule is not None and b.duration is not None and not window_open(b.schedule, b.duration, tz, now):
            continue
        limit = b.limit(on_demand)
        if best is None or limit < best[0]:
            best = (limit, b.text)
    if best is not None:
        return Allowance(best[0], in_progress, best[1])
    starts = [next_start(b.schedule, tz, now) for b in config.budgets if b.schedule is not None]
    known = [s for s in starts if s is not None]
    return Allowance(0, in_progress, "", min(known) if known else float("inf"))


def format_time(when: float, time_zone: str) -> str:
    """``when`` as people read it in ``time_zone``: ``2026-03-28T22:00:00+01:00 (Europe/Berlin)``."""
    if when == float("inf"):
        return "never (no schedule matches again)"
    local = datetime.datetime.fromtimestamp(when, zone(time_zone))
    return f"{local.isoformat(timespec='seconds')} ({time_zone})"
