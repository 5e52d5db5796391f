"""Drain one on-demand node onto spot, or leave it exactly as it was.

The steps, each a place where the drain may stop safely:

1. **Re-check** against the live state: the node's movable pods are still the planned ones, and the
   PodDisruptionBudgets of their namespaces (listed fresh, not from the watch cache) let the drain start by
   ``rescheduler.pdb_rule`` (:func:`rescheduler.plan.safety.pdb_refusals`): each allows a disruption now, or
   under ``all-at-once`` every eviction together. A refusal skips the node untouched.
2. **Mark** the node so evicted pods do not come back: a ``PreferNoSchedule`` taint ``<drain_taint_key>=
   spotshift-rescheduler`` or a cordon, plus the annotation ``spotshift.io/drain-state: draining``. The
   mark names spotshift, so a restarted rescheduler finds and removes what it left (:func:`clean_leftovers`)
   and never touches a cordon or taint set by someone else.
3. **Evict** each pod, one at a time, through :class:`~rescheduler.cluster.evictor.Evictor`, which retries a
   budget's 429 until ``pod_eviction_timeout``: a budget allowing fewer disruptions than the node's pods
   paces the drain as replacements become Ready.
4. **Wait** for the evicted pods to be gone (``max_graceful_termination`` plus headroom) and for as many new
   pods of each owner as were evicted to be Running and Ready (``replacement_timeout``), from the watch.
5. **Judge**: a replacement that landed on an on-demand node means the move did not work (the scheduler
   prefers on-demand for it, or spot is full): the node is unmarked and backed off exponentially
   (``node_backoff`` × 2^(failures-1), stored in node annotations so a restart or the next leader respects it),
   so the rescheduler never loops evicting the same pods.
6. **Finish**: the emptied node keeps its mark as ``drained`` for the autoscaler (``keep_drained_tainted``), or
   is made schedulable again.

Any failure after step 2 unmarks the node (rollback). A shutdown (SIGTERM) or a lost lease stops at the
next step: no further eviction, the mark removed; pods already evicted are replaced by their controllers.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rescheduler.cluster.events import (
    DRAIN_ABORTED,
    DRAIN_FAILED,
    DRAIN_STARTED,
    DRAIN_SUCCEEDED,
    NODE_BACKOFF,
    NORMAL,
    TAINT_CLEANED,
    WARNING,
    EventRecorder,
    Ref,
)
from rescheduler.cluster.evictor import Evictor, Result
from rescheduler.cluster.kube import ApiError, Conflict, Kube, NotFound, node_path
from rescheduler.cluster.state import ClusterState
from rescheduler.logs import fields
from rescheduler.metrics import Metrics
from rescheduler.plan.marks import BACKOFF_UNTIL_ANNOTATION, STATE_ANNOTATION, TAINT_VALUE, backoff_until, is_marked
from rescheduler.plan.safety import Refusal, pdb_refusals, stale_pdbs
from shared.classes import node_class
from shared.config import Config
from shared.model import PDB, PREFER_NO_SCHEDULE, Pod, Taint
from shared.movable import movability

__all__ = [
    "TAINT_VALUE",
    "STATE_ANNOTATION",
    "MODE_ANNOTATION",
    "STARTED_ANNOTATION",
    "BACKOFF_UNTIL_ANNOTATION",
    "FAILURES_ANNOTATION",
    "DRAINING",
    "DRAINED",
    "Outcome",
    "DrainResult",
    "NodeMarker",
    "Drainer",
    "backoff_until",
    "movable_pods",
    "clean_leftovers",
    "SKIP_PDB",
    "SKIP_PLAN_STALE",
    "SKIP_NODE_CHANGED",
    "SKIP_PDB_LIST",
    "FAIL_MARK",
    "FAIL_EVICTION_REFUSED",
    "FAIL_EVICTION",
    "FAIL_TERMINATION_TIMEOUT",
    "FAIL_REPLACEMENT_TIMEOUT",
    "FAIL_REPLACED_ON_DEMAND",
    "FAIL_INTERRUPTED",
]

log = logging.getLogger("spotshift.rescheduler.cluster.drain")

MODE_ANNOTATION = "spotshift.io/drain-mode"
STARTED_ANNOTATION = "spotshift.io/drain-started"
FAILURES_ANNOTATION = "spotshift.io/drain-failures"
DRAINING, DRAINED = "draining", "drained"

# Why a planned drain was not started (metric label values, also in logs and Events).
SKIP_PDB = "pdb-precheck"
SKIP_PLAN_STALE = "plan-stale"
SKIP_NODE_CHANGED = "node-changed"
SKIP_PDB_LIST = "pdb-list-failed"
# Why a started drain failed.
FAIL_MARK = "mark-failed"
FAIL_EVICTION_REFUSED = "eviction-refused"
FAIL_EVICTION = "eviction-failed"
FAIL_TERMINATION_TIMEOUT = "termination-timeout"
FAIL_REPLACEMENT_TIMEOUT = "replacement-timeout"
FAIL_REPLACED_ON_DEMAND = "replaced-on-on-demand"
FAIL_INTERRUPTED = "interrupted"

TERMINATION_HEADROOM = 30.0
"""Added to ``max_graceful_termination`` when waiting for evicted pods to be gone (pusher's podEvictionHeadroom)."""
MAX_BACKOFF = 7 * 24 * 3600.0


class Outcome:
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    DRY_RUN = "dry-run"


@dataclass(frozen=True, slots=True)
class DrainResult:
    node: str
    outcome: str
    reason: str = ""
    message: str = ""
    evicted: tuple[str, ...] = ()
    replacements: tuple[tuple[str, str], ...] = ()
    """``(pod key, node)`` of each replacement seen Running and Ready."""
    refusals: tuple[Refusal, ...] = field(default=())

    @property
    def started(self) -> bool:
        return self.outcome in (Outcome.SUCCEEDED, Outcome.FAILED)


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def movable_pods(pods: Iterable[Pod], config: Config, pdbs: Sequence[PDB]) -> tuple[list[Pod], list[Pod]]:
    """``(to move, blocking)`` among a node's pods, by :func:`shared.movable.movability`."""
    move, block = [], []
    for p in pods:
        m = movability(p, config, pdbs)
        if m.moves:
            move.append(p)
        elif m.blocks:
            block.append(p)
    return move, block


class NodeMarker:
    """Puts and removes the rescheduler's mark on a node: read, modify, write with the ``resourceVersion``.

    A merge patch that carries ``metadata.resourceVersion`` is refused with 409 if the node changed since it
    was read (the kubelet updates nodes often), so a concurrent change to the node's taints is never lost;
    the read-modify-write is retried a few times.
    """

    def __init__(self, kube: Kube, *, taint_key: str, mode: str, identity: str = "") -> None:
        self.kube = kube
        self.taint_key = taint_key
        self.mode = mode
        self.identity = identity

    @property
    def taint(self) -> Taint:
        return Taint(self.taint_key, TAINT_VALUE, PREFER_NO_SCHEDULE)

    def _update(self, name: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> dict[str, Any] | None:
        """GET the node, ``change(node)`` → merge patch body (or None: nothing to do), PATCH; retry on 409."""
        for _ in range(6):
            node = self.kube.get(node_path(name))
            patch = change(node)
            if patch is None:
                return node
            patch.setdefault("metadata", {})["resourceVersion"] = node["metadata"]["resourceVersion"]
            try:
                return self.kube.patch(node_path(name), patch)
            except Conflict:
                continue
        raise Conflict(f"node {name} kept changing while being updated", status=409)

    def mark(self, name: str, now: float) -> None:
        def change(node: dict[str, Any]) -> dict[str, Any] | None:
            spec = node.get("spec") or {}
            patch: dict[str, Any] = {
                "metadata": {
                    "annotations": {
                        STATE_ANNOTATION: DRAINING,
                        MODE_ANNOTATION: self.mode,
                        STARTED_ANNOTATION: _iso(now),
                    }
                }
            }
            if self.mode == "cordon":
                patch["spec"] = {"unschedulable": True}
            else:
                taints = [t for t in spec.get("taints") or () if t.get("key") != self.taint_key]
                taints.append(self.taint.to_api())
                patch["spec"] = {"taints": taints}
            return patch

        self._update(name, change)

    def mark_drained(self, name: str) -> None:
        self._update(name, lambda node: {"metadata": {"annotations": {STATE_ANNOTATION: DRAINED}}})

    def unmark(self, name: str) -> bool:
        """Remove our taint/cordon and state annotations; returns whether there was anything to remove."""
        removed = False

        def change(node: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal removed
            meta = node.get("metadata") or {}
            spec = node.get("spec") or {}
            annotations = meta.get("annotations") or {}
            patch: dict[str, Any] = {}
            taints = spec.get("taints") or []
            kept = [t for t in taints if not _is_our_taint(t, self.taint_key)]
            if len(kept) != len(taints):
                patch.setdefault("spec", {})["taints"] = kept
            if annotations.get(MODE_ANNOTATION) == "cordon" and spec.get("unschedulable"):
                patch.setdefault("spec", {})["unschedulable"] = None
            gone = {k: None for k in (STATE_ANNOTATION, MODE_ANNOTATION, STARTED_ANNOTATION) if k in annotations}
            if gone:
                patch["metadata"] = {"annotations": gone}
            removed = bool(patch)
            return patch or None

        try:
            self._update(name, change)
        except NotFound:
            return False
        return removed

    def back_off(self, name: str, now: float, base: float) -> tuple[float, int]:
        """Record one more failure and the time until which the node is left alone; returns both."""
        result: tuple[float, int] = (now, 0)

        def change(node: dict[str, Any]) -> dict[str, Any]:
            nonlocal result
            annotations = (node.get("metadata") or {}).get("annotations") or {}
            try:
                failures = int(annotations.get(FAILURES_ANNOTATION, "0")) + 1
            except ValueError:
                failures = 1
            until = now + min(base * 2 ** (failures - 1), MAX_BACKOFF)
            result = (until, failures)
            return {
                "metadata": {"annotations": {BACKOFF_UNTIL_ANNOTATION: _iso(until), FAILURES_ANNOTATION: str(failures)}}
            }

        self._update(name, change)
        return result


def _is_our_taint(taint: dict[str, Any], key: str) -> bool:
    return taint.get("key") == key and taint.get("value") == TAINT_VALUE


def clean_leftovers(
    state: ClusterState,
    marker: NodeMarker,
    config: Config,
    events: EventRecorder,
    *,
    dry_run: bool,
) -> list[str]:
    """Remove the marks a previous run left: drains in progress when it stopped, and drained nodes that
    are no longer empty (pods came back, or the autoscaler never removed them and work landed there).

    Returns the names of the nodes cleaned. A ``drained`` node that is still empty keeps its mark.
    """
    cleaned = []
    with state.cond:
        nodes = [n for n in state.nodes.values() if is_marked(n, marker.taint_key)]
        pdbs = list(state.pdbs.values())
    for node in nodes:
        status = node.annotations.get(STATE_ANNOTATION, DRAINING)
        if status == DRAINED and config.rescheduler.keep_drained_tainted:
            still, _ = movable_pods(state.pods_on(node.name), config, pdbs)
            if not still:
                continue
        log.info(
            "%s the mark left on node %s (state %s)",
            "would remove" if dry_run else "removing",
            node.name,
            status,
            extra=fields(node=node.name, state=status, dry_run=dry_run),
        )
        if dry_run:
            continue
        try:
            if marker.unmark(node.name):
                cleaned.append(node.name)
                events.record(
                    Ref.node(node.name, node.uid),
                    NORMAL,
                    TAINT_CLEANED,
                    f"Removed the drain mark left by an earlier run (state {status})",
                )
        except ApiError as e:
            log.warning("could not clean node %s: %s", node.name, e, extra=fields(node=node.name))
    return cleaned


class Drainer:
    """Drains one node at a time (see the module docstring). ``should_abort`` is shutdown or lost leadership."""

    def __init__(
        self,
        kube: Kube,
        state: ClusterState,
        config: Config,
        evictor: Evictor,
        events: EventRecorder,
        metrics: Metrics,
        marker: NodeMarker,
        *,
        dry_run: bool,
        should_abort: Callable[[], bool],
        stop: threading.Event,
        heartbeat: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.state = state
        self.config = config
        self.evictor = evictor
        self.events = events
        self.metrics = metrics
        self.marker = marker
        self.dry_run = dry_run
        self.should_abort = should_abort
        self.stop = stop
        self.heartbeat = heartbeat
        self.clock = clock
        self.wall = wall
        self.memory_backoff: dict[str, float] = {}
        """Backoffs decided in dry-run, or that could not be written to the node."""

    # ---- step 1 -------------------------------------------------------------------------------------------

    def precheck(self, node_name: str, planned: Sequence[str]) -> tuple[list[Pod], DrainResult | None]:
        """The pods to evict, or the reason the drain must not start."""
        cfg = self.config
        node = self.state.node(node_name)
        if node is None or node_class(node, cfg.node_classes) != "on-demand":
            return [], DrainResult(node_name, Outcome.SKIPPED, SKIP_NODE_CHANGED, "node is gone or no longer on-demand")
        with self.state.cond:
            pdbs = list(self.state.pdbs.values())
        pods, blocking = movable_pods(self.state.pods_on(node_name), cfg, pdbs)
        if blocking:
            why = f"pod {blocking[0].key} now blocks the drain"
            return [], DrainResult(node_name, Outcome.SKIPPED, SKIP_PLAN_STALE, why)
        if {p.key for p in pods} != set(planned):
            extra = sorted({p.key for p in pods} - set(planned))
            why = f"pods changed since the plan (new: {', '.join(extra[:3]) or 'none'})"
            return [], DrainResult(node_name, Outcome.SKIPPED, SKIP_PLAN_STALE, why)
        live: list[PDB] = []
        raw_items: list[dict[str, Any]] = []
        try:
            api_version = f"policy/{self.kube.pdb_version()}"
            for ns in sorted({p.namespace for p in pods}):
                items = self.kube.get(self.kube.pdb_path(ns)).get("items") or []
                raw_items.extend(items)
                live.extend(PDB.from_api({"apiVersion": api_version, **i}) for i in items)
        except (ApiError, ValueError) as e:
            return [], DrainResult(node_name, Outcome.SKIPPED, SKIP_PDB_LIST, f"cannot list PodDisruptionBudgets: {e}")
        refusals = pdb_refusals(pods, live, stale=stale_pdbs(raw_items), rule=cfg.rescheduler.pdb_rule)
        if refusals:
            return [], DrainResult(node_name, Outcome.SKIPPED, SKIP_PDB, str(refusals[0]), refusals=tuple(refusals))
        return pods, None

    # ---- the drain ------------------------------------------------------------------------------------------

    def drain(self, node_name: str, planned: Sequence[str], targets: dict[str, str] | None = None) -> DrainResult:
        """Drain ``node_name`` whose movable pods the plan moves (``planned`` keys; ``targets``: key → spot node)."""
        pods, skipped = self.precheck(node_name, planned)
        if skipped is not None:
            self.metrics.drains_skipped.labels(skipped.reason).inc()
            log.info(
                "not draining node %s: %s",
                node_name,
                skipped.message,
                extra=fields(node=node_name, reason=skipped.reason, dry_run=self.dry_run),
            )
            return skipped
        node = self.state.node(node_name)
        assert node is not None
        ref = Ref.node(node_name, node.uid)
        moves = ", ".join(f"{p.key}→{(targets or {}).get(p.key, 'spot')}" for p in pods)
        if self.dry_run:
            how = "cordon" if self.marker.mode == "cordon" else f"taint {self.marker.taint_key}:{PREFER_NO_SCHEDULE}"
            log.info(
                "dry-run: would %s node %s and evict %d pods",
                how,
                node_name,
                len(pods),
                extra=fields(node=node_name, pods=[p.key for p in pods], dry_run=True),
            )
            for p in pods:
                self.evictor.evict(p, why=f"dry-run: would move from on-demand node {node_name} to spot")
            return DrainResult(node_name, Outcome.DRY_RUN, message=moves)

        # Step 2: mark.
        try:
            self.marker.mark(node_name, self.wall())
        except ApiError as e:
            return self._failed(node_name, ref, FAIL_MARK, f"could not mark the node: {e}", (), unmark=True)
        self.metrics.drains_started.inc()
        log.info(
            "draining node %s: %d pods to spot",
            node_name,
            len(pods),
            extra=fields(node=node_name, pods=[p.key for p in pods]),
        )
        self.events.record(ref, NORMAL, DRAIN_STARTED, f"Moving {len(pods)} pods to spot nodes: {moves}"[:1000])

        # Who will replace whom: the pods of each owner that exist now are not replacements.
        before: dict[str, set[str]] = {}
        need: dict[str, int] = {}
        for p in pods:
            ctrl = p.controller
            if ctrl is None or not ctrl.uid:
                continue
            if ctrl.uid not in before:
                before[ctrl.uid] = {q.uid for q in self.state.pods_of_owner(ctrl.uid)}
            need[ctrl.uid] = need.get(ctrl.uid, 0) + 1

        # Step 3: evict.
        evicted: list[Pod] = []
        for p in pods:
            if self.should_abort():
                return self._interrupted(node_name, ref, evicted)
            self.heartbeat()
            result = self.evictor.evict(p, why=f"moving from on-demand node {node_name} to spot")
            if result.result is Result.ABORTED:
                return self._interrupted(node_name, ref, evicted)
            if not result.result.ok:
                reason = FAIL_EVICTION_REFUSED if result.result is Result.REFUSED else FAIL_EVICTION
                return self._failed(
                    node_name, ref, reason, f"eviction of {p.key}: {result.message}", evicted, back_off=True
                )
            evicted.append(p)

        # Step 4: wait for the pods to be gone, then for their replacements.
        def gone() -> bool:
            for p in evicted:
                now = self.state.pods.get(p.key)
                if now is not None and now.uid == p.uid:
                    return False
            return True

        limit = self.config.rescheduler.max_graceful_termination + TERMINATION_HEADROOM
        waited = self._wait(gone, limit)
        if waited is None:
            return self._interrupted(node_name, ref, evicted)
        if not waited:
            left = [p.key for p in evicted if (q := self.state.pod(p.key)) is not None and q.uid == p.uid]
            msg = f"pods still present {limit:.0f}s after eviction: {', '.join(left[:5])}"
            return self._failed(node_name, ref, FAIL_TERMINATION_TIMEOUT, msg, evicted, back_off=True)

        def replacements() -> list[Pod]:
            out = []
            for owner, count in need.items():
                fresh = [
                    q
                    for q in self.state.by_owner.get(owner, {}).values()
                    if q.uid not in before[owner] and not q.terminating and q.node_name
                ]
                fresh.sort(key=lambda q: (not (q.phase == "Running" and q.ready), q.creation_timestamp))
                out.extend(fresh[:count])
            return out

        def replaced() -> bool:
            got = replacements()
            return len(got) >= sum(need.values()) and all(q.phase == "Running" and q.ready for q in got)

        waited = self._wait(replaced, self.config.rescheduler.replacement_timeout)
        if waited is None:
            return self._interrupted(node_name, ref, evicted)
        with self.state.cond:
            got = replacements()
        placed = tuple((q.key, q.node_name) for q in got)
        if not waited:
            ready = sum(1 for q in got if q.phase == "Running" and q.ready)
            msg = (
                f"{ready} of {sum(need.values())} replacements Running and Ready after "
                f"{self.config.rescheduler.replacement_timeout:.0f}s"
            )
            return self._failed(node_name, ref, FAIL_REPLACEMENT_TIMEOUT, msg, evicted, back_off=True, placed=placed)

        # Step 5: judge where they went.
        on_demand = []
        for key, where in placed:
            target = self.state.node(where)
            if target is None or node_class(target, self.config.node_classes) != "spot":
                on_demand.append(f"{key} on {where}")
        if on_demand:
            msg = f"replacements landed on non-spot nodes: {', '.join(on_demand[:5])}"
            return self._failed(node_name, ref, FAIL_REPLACED_ON_DEMAND, msg, evicted, back_off=True, placed=placed)

        # Step 6: finish.
        try:
            if self.config.rescheduler.keep_drained_tainted:
                self.marker.mark_drained(node_name)
            else:
                self.marker.unmark(node_name)
        except ApiError as e:
            log.warning("could not update node %s after its drain: %s", node_name, e, extra=fields(node=node_name))
        self.metrics.drains_succeeded.inc()
        msg = f"{len(evicted)} pods moved to spot: " + ", ".join(f"{k}→{n}" for k, n in placed)
        self.events.record(ref, NORMAL, DRAIN_SUCCEEDED, msg[:1000])
        log.info(
            "drained node %s",
            node_name,
            extra=fields(node=node_name, evicted=[p.key for p in evicted], replacements=dict(placed)),
        )
        return DrainResult(
            node_name, Outcome.SUCCEEDED, message=msg, evicted=tuple(p.key for p in evicted), replacements=placed
        )

    def _wait(self, predicate: Callable[[], bool], timeout: float) -> bool | None:
        """``True`` when ``predicate`` held, ``False`` on timeout, ``None`` when the drain must stop."""
        deadline = self.clock() + timeout
        while True:
            if self.should_abort():
                return None
            self.heartbeat()
            left = deadline - self.clock()
            if self.state.wait_until(predicate, min(max(left, 0.0), 1.0), self.stop):
                return True
            if self.clock() >= deadline:
                return False

    def _interrupted(self, node_name: str, ref: Ref, evicted: Sequence[Pod]) -> DrainResult:
        msg = f"stopped (shutdown or lost leadership) after {len(evicted)} evictions; the node's mark is removed"
        try:
            self.marker.unmark(node_name)
        except ApiError as e:
            msg += f" (could not remove the mark: {e})"
        self.metrics.drains_failed.labels(FAIL_INTERRUPTED).inc()
        self.events.record(ref, WARNING, DRAIN_ABORTED, msg)
        log.warning(
            "drain of node %s interrupted: %s", node_name, msg, extra=fields(node=node_name, reason=FAIL_INTERRUPTED)
        )
        return DrainResult(node_name, Outcome.FAILED, FAIL_INTERRUPTED, msg, tuple(p.key for p in evicted))

    def _failed(
        self,
        node_name: str,
        ref: Ref,
        reason: str,
        message: str,
        evicted: Sequence[Pod],
        *,
        unmark: bool = True,
        back_off: bool = False,
        placed: tuple[tuple[str, str], ...] = (),
    ) -> DrainResult:
        if unmark:
            try:
                self.marker.unmark(node_name)
            except ApiError as e:
                message += f" (could not remove the mark: {e})"
        if back_off:
            base = self.config.rescheduler.node_backoff
            now = self.wall()
            try:
                until, failures = self.marker.back_off(node_name, now, base)
            except ApiError as e:
                until, failures = now + base, 1
                self.memory_backoff[node_name] = until
                message += f" (backoff kept in memory only: {e})"
            self.events.record(
                ref,
                WARNING,
                NODE_BACKOFF,
                f"Not draining this node again before {_iso(until)} (failure {failures}): {reason}",
            )
        self.metrics.drains_failed.labels(reason).inc()
        self.events.record(ref, WARNING, DRAIN_FAILED, f"{reason}: {message}"[:1000])
        log.warning(
            "drain of node %s failed: %s: %s",
            node_name,
            reason,
            message,
            extra=fields(node=node_name, reason=reason, evicted=[p.key for p in evicted]),
        )
        return DrainResult(
            node_name, Outcome.FAILED, reason, message, tuple(p.key for p in evicted), replacements=placed
        )
