"""spotshift's mark on a node being drained, and putting it right when a drain did not.

The mark is a ``PreferNoSchedule`` taint ``<drain_taint_key>=spotshift-rescheduler`` (or a cordon, by
configuration) plus the annotation ``spotshift.io/drain-state`` (``draining``, then ``drained``). It names
spotshift, so a restarted rescheduler finds and removes what it left and never touches a cordon or taint set
by someone else. Backoff after a failed drain is kept in node annotations too, so a restart or the next leader
respects it.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

from rescheduler.cluster.events import NORMAL, TAINT_CLEANED, EventRecorder, Ref
from rescheduler.cluster.watch_cache import ClusterState
from rescheduler.logs import fields
from rescheduler.plan.drain_marks import (
    BACKOFF_UNTIL_ANNOTATION,
    STATE_ANNOTATION,
    TAINT_VALUE,
    backoff_until,
    is_marked,
)
from shared.config import Config
from shared.kube.api import ApiError, Conflict, Kube, NotFound, Retry, node_path
from shared.model import PDB, PREFER_NO_SCHEDULE, Node, Taint
from shared.movable import is_job_pod, movability

__all__ = [
    "TAINT_VALUE",
    "STATE_ANNOTATION",
    "MODE_ANNOTATION",
    "STARTED_ANNOTATION",
    "BACKOFF_UNTIL_ANNOTATION",
    "FAILURES_ANNOTATION",
    "DRAINING",
    "DRAINED",
    "MAX_BACKOFF",
    "ONE_ATTEMPT",
    "NodeMarker",
    "backoff_until",
    "is_marked",
    "clean_leftovers",
    "MarkReconciler",
    "verdict",
    "KEEP",
    "FINISH",
    "ROLL_BACK",
    "iso",
]

log = logging.getLogger("spotshift.rescheduler.cluster.marks")

MODE_ANNOTATION = "spotshift.io/drain-mode"
STARTED_ANNOTATION = "spotshift.io/drain-started"
FAILURES_ANNOTATION = "spotshift.io/drain-failures"
DRAINING, DRAINED = "draining", "drained"

MAX_BACKOFF = 7 * 24 * 3600.0
ONE_ATTEMPT = Retry(timeout=0.0)
"""A mark's write tries once unless told otherwise: the run loop never waits on the API server for a node, a drain
tries again at a later pass (:mod:`rescheduler.cluster.drain`) and :class:`MarkReconciler` at a later cycle; only
the way out passes a bounded retry."""


def iso(ts: float) -> str:
    """Unix time as the annotations write it (RFC 3339, seconds, UTC)."""
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class NodeMarker:
    """Puts and removes the rescheduler's mark on a node: read, modify, write with the ``resourceVersion``.

    A merge patch that carries ``metadata.resourceVersion`` is refused with 409 if the node changed since it
    was read (the kubelet updates nodes often), so a concurrent change to the node's taints is never lost;
    the read-modify-write is retried a few times at once. Transient errors (the API server or etcd restarting)
    are retried by ``retry``, by default not at all: the caller schedules the next attempt itself, so that one
    node's write never holds up the others.
    """

    def __init__(
        self, kube: Kube, *, taint_key: str, mode: str, identity: str = "", retry: Retry = ONE_ATTEMPT
    ) -> None:
        self.kube = kube
        self.taint_key = taint_key
        self.mode = mode
        self.identity = identity
        self.retry = retry

    def with_retry(self, retry: Retry) -> NodeMarker:
        """The same marker, riding out API errors for another while."""
        return NodeMarker(self.kube, taint_key=self.taint_key, mode=self.mode, identity=self.identity, retry=retry)

    @property
    def taint(self) -> Taint:
        return Taint(self.taint_key, TAINT_VALUE, PREFER_NO_SCHEDULE)

    def _update(self, name: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]) -> dict[str, Any] | None:
        """GET the node, ``change(node)`` → merge patch body (or None: nothing to do), PATCH; retry on 409
        at once, and on transient errors with backoff."""
        return self.retry.call(lambda: self._update_once(name, change))

    def _update_once(
        self, name: str, change: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> dict[str, Any] | None:
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
                        STARTED_ANNOTATION: iso(now),
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

    def mark_drained(self, name: str) -> bool:
        """Record the drain as finished; returns whether the node was not recorded so already."""
        changed = False

        def change(node: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal changed
            annotations = (node.get("metadata") or {}).get("annotations") or {}
            if annotations.get(STATE_ANNOTATION) == DRAINED:
                return None
            changed = True
            return {"metadata": {"annotations": {STATE_ANNOTATION: DRAINED}}}

        try:
            self._update(name, change)
        except NotFound:
            return False
        return changed

    def unmark(self, name: str) -> bool:
        """Remove our taint/cordon and state annotations; returns whether there was anything to remove."""
        removed = False

        def change(node: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal removed
            patch = self._unmark_patch(node)
            removed = patch is not None
            return patch

        try:
            self._update(name, change)
        except NotFound:
            return False
        return removed

    def _unmark_patch(self, node: dict[str, Any]) -> dict[str, Any] | None:
        """The merge patch that removes our mark from ``node`` (``None``: it carries none)."""
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
        return patch or None

    def back_off(self, name: str, now: float, base: float) -> tuple[float, int]:
        """Record one more failure and the time until which the node is left alone; returns both."""
        result: tuple[float, int] = (now, 0)

        def change(node: dict[str, Any]) -> dict[str, Any]:
            nonlocal result
            patch, until, failures = _backoff_patch(node, now, base)
            result = (until, failures)
            return patch

        self._update(name, change)
        return result

    def roll_back(self, name: str, now: float, base: float) -> tuple[float, int] | None:
        """Remove the mark and record one more failure in one write, so the node is never seen unmarked without
        its rest; returns ``(until, failures)``, or ``None`` when the node is gone."""
        result: tuple[float, int] | None = None

        def change(node: dict[str, Any]) -> dict[str, Any]:
            nonlocal result
            patch, until, failures = _backoff_patch(node, now, base)
            result = (until, failures)
            unmark = self._unmark_patch(node) or {}
            patch["metadata"]["annotations"].update((unmark.get("metadata") or {}).get("annotations") or {})
            if "spec" in unmark:
                patch["spec"] = unmark["spec"]
            return patch

        try:
            self._update(name, change)
        except NotFound:
            return None
        return result


def _backoff_patch(node: dict[str, Any], now: float, base: float) -> tuple[dict[str, Any], float, int]:
    """The merge patch recording one more failed drain of ``node``, the time it rests until, and the failures."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    try:
        failures = int(annotations.get(FAILURES_ANNOTATION, "0")) + 1
    except ValueError:
        failures = 1
    until = now + min(base * 2 ** (failures - 1), MAX_BACKOFF)
    patch = {"metadata": {"annotations": {BACKOFF_UNTIL_ANNOTATION: iso(until), FAILURES_ANNOTATION: str(failures)}}}
    return patch, until, failures


def _is_our_taint(taint: dict[str, Any], key: str) -> bool:
    return taint.get("key") == key and taint.get("value") == TAINT_VALUE


KEEP = "keep"
"""A ``drained`` node still empty: the mark stays for the autoscaler."""
FINISH = "finish"
"""A drain that emptied the node but stopped before recording it: the node is marked ``drained``."""
ROLL_BACK = "roll-back"
"""A drain that did not finish, or a drained node that work landed on again: the mark is removed."""


def verdict(node: Node, state: ClusterState, config: Config, pdbs: Sequence[PDB]) -> tuple[str, str]:
    """What to do with a marked node nobody is draining, and why (the Event's words).

    A node that still holds a pod to move is rolled back: the drain did not finish (or, for a ``drained``
    node, work landed on it again), and the mark would keep the scheduler away for nothing. An empty
    ``drained`` node keeps its mark (``keep_drained_tainted``). An empty ``draining`` node with no pod
    anywhere waiting to be scheduled is a drain that stopped after its work was done: its pods' replacements
    run elsewhere, and it is recorded as drained; with pods waiting, it is rolled back (they may need it).
    With ``keep_drained_tainted`` off, a finished node ends unmarked too.
    """
    status = node.annotations.get(STATE_ANNOTATION, DRAINING)
    with state.cond:
        # A running Job pod holds the node too: a drain that stopped while waiting for it did not finish.
        holds = any(
            movability(p, config, pdbs).moves or (is_job_pod(p) and not p.terminal) for p in state.pods_on(node.name)
        )
        waiting = sum(1 for p in state.pods.values() if not p.node_name and not p.terminating)
    if holds:
        if status == DRAINED:
            return ROLL_BACK, "Removed the drain mark: pods run on this drained node again"
        return ROLL_BACK, f"Removed the drain mark: the drain stopped before the node was empty (state {status})"
    if status == DRAINED:
        if config.rescheduler.keep_drained_tainted:
            return KEEP, ""
        return FINISH, "Removed the mark of a drained node: keep_drained_tainted is off"
    if waiting:
        return ROLL_BACK, f"Removed the drain mark: the node is empty but {waiting} pods wait to be scheduled"
    return FINISH, "Finished a drain that stopped after emptying the node: its pods run elsewhere"


class MarkReconciler:
    """Puts right every node that carries spotshift's mark but is not being drained: called every cycle.

    Why every cycle and not only at start-up: a drain stopped by a lost lease, or on the way out, while the API
    server is away leaves its mark behind (it is no longer in flight to try again), and the node would then stay
    marked (avoided by the scheduler, skipped by every later plan) for good. Each pass makes one attempt per
    node (the marker's retry, one attempt in the run loop). A node whose mark cannot be put right now is tried
    again in a later cycle, ``backoff`` × 2^(failures-1) seconds later at the earliest (``max_backoff`` at
    most), so an API server that is down is not hammered. ``force`` (shutdown) ignores that wait.
    """

    def __init__(
        self,
        state: ClusterState,
        marker: NodeMarker,
        config: Config,
        events: EventRecorder,
        *,
        dry_run: bool,
        backoff: float = 2.0,
        max_backoff: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state = state
        self.marker = marker
        self.config = config
        self.events = events
        self.dry_run = dry_run
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.clock = clock
        self.failures: dict[str, int] = {}
        self.retry_at: dict[str, float] = {}

    def reconcile(self, *, busy: Collection[str] = (), force: bool = False) -> list[str]:
        """Roll back or finish every marked node not in ``busy``; returns the names of the nodes changed."""
        with self.state.cond:
            nodes = [n for n in self.state.nodes.values() if is_marked(n, self.marker.taint_key)]
            pdbs = list(self.state.pdbs.values())
        now = self.clock()
        for name in set(self.failures) - {n.name for n in nodes}:
            self.failures.pop(name, None)
            self.retry_at.pop(name, None)
        changed = []
        for node in nodes:
            if node.name in busy or (not force and self.retry_at.get(node.name, 0.0) > now):
                continue
            action, why = verdict(node, self.state, self.config, pdbs)
            if action == KEEP:
                continue
            if self.dry_run:
                verb = "would finish the drain left on" if action == FINISH else "would remove the mark left on"
                log.info("%s node %s: %s", verb, node.name, why, extra=fields(node=node.name, dry_run=True))
                continue
            try:
                # The watch may be behind (a drain that just finished): decide again on the node as it is now.
                live = self._live(node.name)
                if live is None:
                    continue
                action, why = verdict(live, self.state, self.config, pdbs)
                done = action != KEEP and self._apply(node.name, action)
            except ApiError as e:
                failures = self.failures[node.name] = self.failures.get(node.name, 0) + 1
                wait = min(self.backoff * 2 ** (failures - 1), self.max_backoff)
                self.retry_at[node.name] = self.clock() + wait
                log.warning(
                    "could not put the mark on node %s right (failure %d, next try in %.0fs): %s",
                    node.name,
                    failures,
                    wait,
                    e,
                    extra=fields(node=node.name, failures=failures),
                )
                continue
            self.failures.pop(node.name, None)
            self.retry_at.pop(node.name, None)
            if done:  # else the watch was behind: the node is already right
                changed.append(node.name)
                verb = "finished the drain left on" if action == FINISH else "removed the mark left on"
                log.info("%s node %s: %s", verb, node.name, why, extra=fields(node=node.name, action=action))
                self.events.record(Ref.node(node.name, node.uid), NORMAL, TAINT_CLEANED, why)
        return changed

    def _live(self, name: str) -> Node | None:
        """The node as the API server has it now, if it still carries the mark."""
        try:
            raw = self.marker.retry.call(lambda: self.marker.kube.get(node_path(name)))
        except NotFound:
            return None
        node = Node.from_api(raw)
        return node if is_marked(node, self.marker.taint_key) else None

    def _apply(self, name: str, action: str) -> bool:
        if action == FINISH and self.config.rescheduler.keep_drained_tainted:
            return self.marker.mark_drained(name)
        return self.marker.unmark(name)


def clean_leftovers(
    state: ClusterState,
    marker: NodeMarker,
    config: Config,
    events: EventRecorder,
    *,
    dry_run: bool,
) -> list[str]:
    """One :meth:`MarkReconciler.reconcile` pass over every marked node; returns the names changed."""
    return MarkReconciler(state, marker, config, events, dry_run=dry_run).reconcile(force=True)
