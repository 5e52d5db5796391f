"""Why a planned drain was not started, or why a started one failed: one set of names.

The values are the label values of ``spotshift_rescheduler_drains_skipped{reason}`` and
``spotshift_rescheduler_drains_failed{reason}``, and the reasons logs and Events give. The cycle's decision
(:mod:`rescheduler.plan.cycle`) skips by the first group, the drain's own checks against the live API
(:mod:`rescheduler.cluster.drain`) by the second, and a drain in flight fails by the third.
"""

from __future__ import annotations

import enum

__all__ = ["DrainLabel"]


class DrainLabel(enum.StrEnum):
    """A skip or failure reason; the value is the metric label and the word in logs and Events."""

    # The cycle leaves a planned node alone (rescheduler.plan.cycle).
    BACKOFF = "backoff"
    """The node rests after a failed drain (its backoff annotation, or the loop's memory)."""
    ALREADY_MARKED = "already-marked"
    """The node carries spotshift's mark: a drain is in flight, or it is drained."""
    CORDONED = "cordoned"
    UNREADABLE_POD = "unreadable-pod"
    """A pod on the node could not be read from the API (its node cannot be judged)."""
    NOTHING_TO_MOVE = "nothing-to-move"
    PDB_PRECHECK = "pdb-precheck"
    """A PodDisruptionBudget of the node's pods does not let the drain start now (cached or live status)."""
    PDB_IN_USE = "pdb-in-use"
    """A PodDisruptionBudget of the node's pods has no disruption left beyond the evictions the drains in flight (or
    started before it this cycle) still have to make: the node waits its turn instead of competing for it."""
    # The drain's re-check against the live API (rescheduler.cluster.drain).
    PLAN_STALE = "plan-stale"
    NODE_CHANGED = "node-changed"
    PDB_LIST_FAILED = "pdb-list-failed"
    # A drain that started and did not finish.
    MARK_FAILED = "mark-failed"
    ROOM_NOT_FREED = "room-not-freed"
    """Placeholders that hold the drain's spot room (or could take it) were still there ``pod_eviction_timeout``
    after the drain asked for them to be deleted: nothing was evicted."""
    EVICTION_REFUSED = "eviction-refused"
    EVICTION_FAILED = "eviction-failed"
    TERMINATION_TIMEOUT = "termination-timeout"
    REPLACEMENT_TIMEOUT = "replacement-timeout"
    REPLACED_ON_DEMAND = "replaced-on-on-demand"
    INTERRUPTED = "interrupted"
    JOB_TIMEOUT = "job-timeout"
