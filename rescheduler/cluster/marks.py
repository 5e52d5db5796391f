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
from collections.abc import Callable
from typing import Any

from rescheduler.cluster.events import NORMAL, TAINT_CLEANED, EventRecorder, Ref
from rescheduler.cluster.kube import ApiError, Conflict, Kube, NotFound, Retry, node_path
from rescheduler.cluster.state import ClusterState
from rescheduler.logs import fields
from shared.config import Config
from shared.model import PDB, PREFER_NO_SCHEDULE, Node, Taint
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
    "MAX_BACKOFF",
    "NodeMarker",
    "backoff_until",
    "is_marked",
    "clean_leftovers",
    "iso",
]

log = logging.getLogger("spotshift.rescheduler.cluster.marks")

TAINT_VALUE = "spotshift-rescheduler"
"""The value of the drain taint: names spotshift, so a restart knows the taint is its own."""
STATE_ANNOTATION = "spotshift.io/drain-state"
MODE_ANNOTATION = "spotshift.io/drain-mode"
STARTED_ANNOTATION = "spotshift.io/drain-started"
BACKOFF_UNTIL_ANNOTATION = "spotshift.io/drain-backoff-until"
FAILURES_ANNOTATION = "spotshift.io/drain-failures"
DRAINING, DRAINED = "draining", "drained"

MAX_BACKOFF = 7 * 24 * 3600.0
DEFAULT_RETRY = Retry(timeout=30.0)
"""How long a mark's write rides out API errors unless told otherwise (the run loop passes its own)."""


def iso(ts: float) -> str:
    """Unix time as the annotations write it (RFC 3339, seconds, UTC)."""
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_iso(text: str) -> float | None:
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()
    except (TypeError, ValueError):
        return None


def backoff_until(node: Node) -> float | None:
    """Unix time until which the node is left alone, from its annotation (``None``: no backoff)."""
    text = node.annotations.get(BACKOFF_UNTIL_ANNOTATION)
    return _parse_iso(text) if text else None


class NodeMarker:
    """Puts and removes the rescheduler's mark on a node: read, modify, write with the ``resourceVersion``.

    A merge patch that carries ``metadata.resourceVersion`` is refused with 409 if the node changed since it
    was read (the kubelet updates nodes often), so a concurrent change to the node's taints is never lost;
    the read-modify-write is retried a few times. Transient errors (the API server or etcd restarting) are
    retried by ``retry``: a mark that cannot be removed is a node the scheduler avoids for nothing.
    """

    def __init__(
        self, kube: Kube, *, taint_key: str, mode: str, identity: str = "", retry: Retry = DEFAULT_RETRY
    ) -> None:
        self.kube = kube
        self.taint_key = taint_key
        self.mode = mode
        self.identity = identity
        self.retry = retry

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
                "metadata": {"annotations": {BACKOFF_UNTIL_ANNOTATION: iso(until), FAILURES_ANNOTATION: str(failures)}}
            }

        self._update(name, change)
        return result


def _is_our_taint(taint: dict[str, Any], key: str) -> bool:
    return taint.get("key") == key and taint.get("value") == TAINT_VALUE


def _kept_drained(node: Node, state: ClusterState, config: Config, pdbs: list[PDB]) -> bool:
    """A drained node keeps its mark for the autoscaler while configured so and empty of movable pods."""
    if not config.rescheduler.keep_drained_tainted:
        return False
    return not any(movability(p, config, pdbs).moves for p in state.pods_on(node.name))


def is_marked(node: Node, taint_key: str) -> bool:
    """Whether the node carries the rescheduler's mark (taint with our value, or our state annotation)."""
    if STATE_ANNOTATION in node.annotations:
        return True
    return any(t.key == taint_key and t.value == TAINT_VALUE for t in node.taints)


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
        if status == DRAINED and _kept_drained(node, state, config, pdbs):
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
