"""The last plan made with a :class:`~rescheduler.plan.candidates.PlanCache`, handed out again while nothing it is
made from changed: the idle cycle of a quiet cluster costs a comparison, not a plan.

What a plan is made from (:class:`Inputs`): every node (the same ``Node`` object, the same ``Pod`` objects in the same
order), the pods waiting for a node and those bound to a node the snapshot does not know, the PodDisruptionBudgets
(with the status the snapshot computed for them), the namespaces, volumes, claims, StorageClasses, NodePools and
their problem, the spot pools' outlook, the configuration, the kube-scheduler rules, the nodes left alone, the
planning settings, and the time when the configuration reads the clock (:func:`rescheduler.plan.gate.reads_clock`).
Objects are compared by identity first and then by value (``==`` on equal-content copies is equal, and a plan is a
function of the values): the watch-backed state hands every cycle the objects of the one before until an event
replaces them, so an idle comparison is a pass of identity checks over the pods.

A plan made with a caller's ``stay_of`` function is never reused (the function could answer differently); a
plan made under a time budget is reused as the run loop reuses its last plan (its passes depend on the clock).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Generic, TypeVar

from rescheduler.plan.gate import reads_clock
from shared.config import Config
from shared.snapshot import ClusterSnapshot

Plan = TypeVar("Plan")
"""The plan kept (:class:`rescheduler.plan.records.Plan`)."""

__all__ = ["Inputs", "LastPlan", "inputs_of"]

Inputs = tuple[object, ...]
"""What one plan is made from (:func:`inputs_of`)."""


def inputs_of(
    snapshot: ClusterSnapshot,
    config: Config,
    settings: Hashable,
    exclude: Mapping[str, object] | None,
    now: float | None,
) -> Inputs:
    """Everything :func:`rescheduler.plan.planner.plan` reads of its arguments (module docstring). ``settings``: the
    planning settings (strategies, verify, time budget, improvement, kube-scheduler rules)."""
    nodes = tuple((info.node, tuple(info.pods)) for info in snapshot)
    when = now if now is None or reads_clock(config) else "any"
    return (
        config,
        settings,
        dict(exclude or {}),
        when,
        nodes,
        tuple(snapshot.pending),
        tuple(snapshot.unknown_node_pods),
        tuple(snapshot.pdbs),
        dict(snapshot.namespaces),
        dict(snapshot.pvs),
        dict(snapshot.pvcs),
        dict(snapshot.storage_classes),
        dict(snapshot.node_pools),
        snapshot.node_pools_problem,
        snapshot.spot_outlook,
    )


class LastPlan(Generic[Plan]):
    """One plan and its :data:`Inputs`."""

    __slots__ = ("_inputs", "_plan")

    def __init__(self) -> None:
        self._inputs: Inputs | None = None
        self._plan: Plan | None = None

    def get(self, inputs: Inputs) -> Plan | None:
        """The plan kept, if it was made from ``inputs``."""
        if self._plan is None or self._inputs is None or not _same(self._inputs, inputs):
            return None
        return self._plan

    def put(self, inputs: Inputs, plan: Plan) -> None:
        self._inputs, self._plan = inputs, plan

    def forget(self) -> None:
        self._inputs = self._plan = None


def _same(kept: Inputs, now: Inputs) -> bool:
    """``kept == now``, the cheap parts first and the nodes last (a tuple compares its items by identity first)."""
    if len(kept) != len(now):
        return False
    order = sorted(range(len(kept)), key=lambda i: i == _NODES)
    return all(kept[i] is now[i] or kept[i] == now[i] for i in order)


_NODES = 4
"""The position of the nodes in :data:`Inputs`."""
