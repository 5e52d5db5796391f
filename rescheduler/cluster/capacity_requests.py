"""Asking for spot capacity, the API part: create a node's placeholder pods, follow them, delete them.

Once per cycle, after the plan (``capacity.enabled``; :meth:`CapacityRequester.step`):

1. placeholders that no live request of this process owns (a predecessor's, after a crash or a restart) are
   deleted (``orphaned``); the rescheduler owns its placeholders by label, not by ``ownerReferences``;
2. each request out is judged (:func:`rescheduler.plan.capacity_needs.judge`) against the watch: ``provisioned``
   once every placeholder runs on spot (the plan then counts their room as free, since the planner treats
   placeholders like expendable pods, and drains the node as any other); ended when one lands on a non-spot
   node (``on-demand``), one is preempted (``preempted``), the node no longer needs the room (``deleted``), or
   ``capacity.timeout`` passes (``timed-out``). ``timed-out`` and ``on-demand`` back the node off like a
   failed drain (``rescheduler.node_backoff``, doubling: the same annotations, the same Event);
3. new requests for the plan's :func:`~rescheduler.plan.capacity_needs.capacity_needs`, whole nodes only, while the
   placeholders out stay within ``capacity.max_pods``, ``max_cpu`` and ``max_memory``.

A drain, before its first eviction, calls :meth:`CapacityRequester.give_room`: the node's own request ends
(``drained``), and so does every request with a placeholder in the way of the drain
(:func:`~rescheduler.plan.capacity_needs.in_the_way`: on a target node, or waiting for a node; ``deleted``, asked
again once no drain is in flight); the drain evicts nothing until the watch shows them gone
(:mod:`rescheduler.cluster.drain`). kube-scheduler preempts a placeholder only for a pod that fits no node
at all, so a replacement that found the room held would be scheduled onto an on-demand node with room rather
than preempt it. While a drain is in flight (the cycle follows the requests after starting its drains),
:meth:`CapacityRequester.step` asks for no new room (``hold``): a new placeholder would be scheduled into the
room the drain freed before the evicted pods' replacements exist. The loop calls
:meth:`CapacityRequester.shutdown` on the way out. Every request and every end is logged, counted in
``spotshift_rescheduler_capacity_requests{outcome}`` and recorded as an Event on the on-demand node. Dry-run
creates and deletes nothing: it logs what it would ask for.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rescheduler.cluster.events import (
    CAPACITY_FAILED,
    CAPACITY_PROVISIONED,
    CAPACITY_RELEASED,
    CAPACITY_REQUESTED,
    NORMAL,
    WARNING,
    EventRecorder,
    Ref,
)
from rescheduler.cluster.watch_cache import ClusterState
from rescheduler.logs import fields
from rescheduler.metrics import Metrics
from rescheduler.plan.capacity_needs import (
    BACKS_OFF,
    DELETED,
    DRAINED,
    ORPHANED,
    PROVISIONED,
    REQUESTED,
    CapacityNeed,
    Caps,
    MovabilityMemo,
    Seen,
    capacity_needs,
    choose_needs,
    judge,
)
from rescheduler.plan.placeholder_pods import avoiding_terms, placeholder_pod
from rescheduler.plan.records import Plan
from rescheduler.plan.stay_reasons import Kind, StayReason
from shared.classes import node_class
from shared.config import Config
from shared.kube.api import ApiError, Kube, NotFound, pod_path
from shared.model import Pod
from shared.placeholders import NODE_ANNOTATION, REQUEST_LABEL, is_placeholder
from shared.snapshot import ClusterSnapshot
from shared.spot_pools import PoolKey

__all__ = ["CapacityRequester", "Request", "CREATE_FAILED"]

log = logging.getLogger("spotshift.rescheduler.cluster.capacity")

SETTLE = 5.0
"""Seconds after which a placeholder created but never shown by the watch counts as seen (so its absence is a
preemption): a watch that lags a create longer than this is failing anyway."""

CREATE_FAILED = "create-failed"
"""The API server refused a placeholder (quota, admission, RBAC): the request is undone and the node backed off."""

Owner = Callable[[], "dict[str, Any] | None"]
"""The ``ownerReference`` placeholders get (the leader-election Lease; ``None``: none)."""

BackOff = Callable[[str, str], object]
"""``(node, reason)``: back the node off like a failed drain
(:meth:`rescheduler.cluster.node_backoff.NodeBackoff.back_off`, shared with the drainer)."""


@dataclass(slots=True)
class Request:
    """One node's placeholders, asked for together."""

    id: str
    node: str
    pods: tuple[str, ...]
    """Keys of the pods whose room the placeholders hold."""
    cpu: int
    memory: int
    created: float
    """On the requester's clock (monotonic)."""
    names: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    provisioned_at: float | None = None
    avoided: frozenset[PoolKey] = frozenset()
    """The unsettled spot pools its placeholders keep off (:func:`avoiding_terms`)."""


class CapacityRequester:
    """Placeholder pods for the nodes that only lack spot room (see the module docstring)."""

    def __init__(
        self,
        kube: Kube,
        state: ClusterState,
        config: Config,
        events: EventRecorder,
        metrics: Metrics,
        *,
        dry_run: bool,
        back_off: BackOff,
        owner: Owner = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.state = state
        self.config = config
        self.events = events
        self.metrics = metrics
        self.dry_run = dry_run
        self.back_off = back_off
        self.owner = owner
        self.clock = clock
        self.requests: dict[str, Request] = {}
        """Node name → its request out."""
        self.needs: list[CapacityNeed] = []
        """What the last :meth:`step` found the nodes need (dry-run included)."""
        self._said: set[str] = set()
        self._movability = MovabilityMemo()
        self.paused_until = -math.inf
        """No request is made before this time (``clock``): the API server refused a placeholder."""
        self._deleted: set[str] = set()
        """Placeholders this process deleted that the watch may still show (not orphans: already dealt with)."""
        self._leftovers_collected = False
        self._avoid: list[Any] = []
        self._unsettled: frozenset[PoolKey] = frozenset()
        """The node-selector terms keeping this cycle's placeholders off unsettled spot pools."""

    # ---- bookkeeping ----------------------------------------------------------------------------------------

    def _placeholders(self) -> list[Pod]:
        home = self.config.namespace
        with self.state.cond:
            return [p for p in self.state.pods.values() if is_placeholder(p, home)]

    def in_use(self) -> tuple[int, int, int]:
        """(pods, millicores, bytes) held or asked for by the requests out."""
        reqs = self.requests.values()
        return sum(len(r.names) for r in reqs), sum(r.cpu for r in reqs), sum(r.memory for r in reqs)

    def _count(self) -> None:
        self.metrics.placeholder_pods.set(sum(len(r.names) for r in self.requests.values()))

    def _record(self, node: str, outcome: str, message: str, *, warning: bool = False) -> None:
        self.metrics.capacity_requests.labels(outcome).inc()
        reason = CAPACITY_FAILED if warning else CAPACITY_RELEASED
        if outcome == REQUESTED:
            reason = CAPACITY_REQUESTED
        elif outcome == PROVISIONED:
            reason = CAPACITY_PROVISIONED
        self.events.record(Ref.node(node), WARNING if warning else NORMAL, reason, f"{outcome}: {message}"[:1000])
        (log.warning if warning else log.info)(
            "spot capacity for node %s: %s: %s",
            node,
            outcome,
            message,
            extra=fields(node=node, outcome=outcome, dry_run=self.dry_run),
        )

    def _delete(self, names: Collection[str]) -> list[str]:
        """Delete placeholders (already gone is fine); returns the errors."""
        errors = []
        for name in names:
            try:
                self.kube.delete(
                    pod_path(self.config.namespace, name),
                    {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
                )
            except NotFound:
                pass
            except ApiError as e:
                errors.append(f"{name}: {e}")
                continue
            self._deleted.add(name)
        return errors

    # ---- ending requests ------------------------------------------------------------------------------------

    def release(self, node: str, outcome: str = DRAINED, why: str = "the node's drain is starting") -> bool:
        """End the request for ``node`` (if one is out): delete its placeholders, record ``outcome``, back the
        node off when the outcome calls for it. Returns whether there was one."""
        req = self.requests.pop(node, None)
        if req is None:
            return False
        if outcome == DRAINED and req.provisioned_at is None:
            # The plan found room enough before every placeholder ran (those Running count as free).
            self._record(node, PROVISIONED, "the spot room appeared: the plan can empty the node onto it")
        errors = self._delete(req.names)
        self._count()
        message = f"{why}; {len(req.names)} placeholder(s) deleted"
        if errors:
            message += f" (could not delete {len(errors)}: {errors[0]}; retried as orphans next cycle)"
        warning = outcome not in (DRAINED, DELETED)
        self._record(node, outcome, message, warning=warning)
        if outcome in BACKS_OFF:
            self.back_off(node, f"spot capacity {outcome}")
        return True

    def give_room(self, node: str, placeholders: Sequence[Pod]) -> None:
        """``node``'s drain is about to evict: end the node's own request (``drained``) and every request with a
        placeholder among ``placeholders`` (``deleted``: its room goes to the drain), and delete the others (no
        request of this process owns them, or their deletion failed before)."""
        left = {p.name for p in placeholders}
        own = self.requests.get(node)
        if own is not None:
            left -= set(own.names)
            self.release(node)
        for other, req in list(self.requests.items()):
            if left & set(req.names):
                left -= set(req.names)
                why = f"its spot room goes to the drain of node {node} (asked again once no drain is in flight)"
                self.release(other, DELETED, why)
        rest = [p for p in placeholders if p.name in left]
        if rest:
            errors = self._delete([p.name for p in rest])
            log.info(
                "deleted %d placeholder(s) in the way of node %s's drain",
                len(rest) - len(errors),
                node,
                extra=fields(node=node, pods=[p.key for p in rest][:20], errors=errors[:3]),
            )
        self._count()

    def shutdown(self) -> None:
        """Delete every placeholder this process asked for (the lease is about to go)."""
        for node in list(self.requests):
            self.release(node, DELETED, "the rescheduler is stopping")

    def forget(self) -> None:
        """Leadership lost: drop the requests without touching them; the new leader deletes their placeholders
        as orphans (it owns no request of ours)."""
        self.requests.clear()
        self._count()

    def collect_leftovers(self) -> None:
        """With capacity mode off: delete, once, the placeholders left from when it was on (they have no purpose
        now)."""
        if not self._leftovers_collected:
            self.collect_orphans()
            self._leftovers_collected = True

    def collect_orphans(self) -> int:
        """Delete placeholders no request of this process owns; returns how many were found."""
        ours = {r.id for r in self.requests.values()}
        placeholders = self._placeholders()
        self._deleted &= {p.name for p in placeholders}  # the watch has shown the others gone
        orphans = [
            p
            for p in placeholders
            if p.labels.get(REQUEST_LABEL) not in ours and not p.terminating and p.name not in self._deleted
        ]
        if not orphans or self.dry_run:
            return len(orphans)
        by_node: dict[str, list[str]] = {}
        for p in orphans:
            by_node.setdefault(p.annotations.get(NODE_ANNOTATION, ""), []).append(p.name)
        for node, names in sorted(by_node.items()):
            errors = self._delete(names)
            message = f"{len(names)} placeholder(s) left by an earlier rescheduler deleted"
            if errors:
                message += f" (could not delete {len(errors)}: {errors[0]})"
            if node:
                self._record(node, ORPHANED, message)
            else:
                self.metrics.capacity_requests.labels(ORPHANED).inc()
                log.info("deleted placeholders without a node: %s", ", ".join(names), extra=fields(outcome=ORPHANED))
        return len(orphans)

    # ---- one cycle ------------------------------------------------------------------------------------------

    def ask(self, plan: Plan | None, snapshot: ClusterSnapshot, *, hold: bool) -> None:
        """Follow the requests out, and ask for the nodes that only lack spot room, from the cycle's ``plan``;
        with ``hold``, ask for none (the run loop's capacity mode)."""
        if plan is None or plan.window_closed:
            # No drain may start now (outside every drain window): ask for no new room, whose placeholders would
            # only hold spot capacity until a window opens; follow the requests out.
            self.tend()
            return
        # A node the budget holds back until its turn still wants its room: the placeholders keep it meanwhile.
        waiting_turn = tuple(n for n, why in plan.reasons.items() if why.kind is Kind.DISRUPTION_BUDGET)
        self.step(snapshot, plan.reasons, plan.drained + waiting_turn, hold=hold)

    def step(
        self,
        snapshot: ClusterSnapshot,
        reasons: Mapping[str, StayReason],
        planned: Collection[str],
        *,
        hold: bool = False,
    ) -> None:
        """Judge the requests out, then ask for the nodes that need room (see the module docstring).
        ``reasons``: why each on-demand node stays in this cycle's plan; ``planned``: the nodes it drains;
        ``hold``: a drain is in flight, so nothing new is asked for."""
        self.needs = capacity_needs(snapshot, reasons, self.config, self._movability)
        if self.dry_run:
            for need in self.needs:
                if need.node not in self._said:
                    self._said.add(need.node)
                    log.info(
                        "dry-run: would ask for spot capacity for node %s: %s (%d placeholder pods)",
                        need.node,
                        need.text,
                        len(need.pods),
                        extra=fields(node=need.node, pods=[p.key for p in need.pods], dry_run=True),
                    )
            return
        self.collect_orphans()
        unsettled = snapshot.spot_outlook.unsettled
        self._ask_again_where_settled(unsettled)
        ended = self._judge({n.node for n in self.needs} | set(planned))
        skip = set(self.requests) | ended  # a node whose request just ended is not asked for again at once
        # Not from a spot pool reclaimed a moment ago; with too many such pools to leave out, from none this cycle.
        avoid = avoiding_terms(unsettled)
        self._unsettled = unsettled
        self._avoid = avoid or []
        asking = not hold and avoid is not None and self.clock() >= self.paused_until
        fresh = (
            choose_needs(self.needs, Caps.of(self.config.capacity), in_use=self.in_use(), skip=skip) if asking else []
        )
        for need in fresh:
            if not self._ask(need):
                break
        self._count()

    def _ask_again_where_settled(self, unsettled: frozenset[PoolKey]) -> None:
        """End the requests not yet provisioned whose placeholders keep off a spot pool that has settled since
        (``deleted``, no backoff): their placeholders could wait for no other pool, so they are asked for again in
        this cycle, keeping off only the pools unsettled now."""
        for node, req in list(self.requests.items()):
            if req.provisioned_at is None and req.avoided - unsettled:
                self.release(node, DELETED, "a spot pool its placeholders kept off has settled: asked for again")

    def tend(self) -> None:
        """A cycle without a plan (paused): delete orphans, and end the requests that are over by themselves
        (preempted, on a non-spot node, timed out); each still counts as wanted."""
        if self.dry_run:
            return
        self.collect_orphans()
        self._judge(set(self.requests))
        self._count()

    def _judge(self, wanted: Collection[str]) -> set[str]:
        """Judge every request out (see :func:`rescheduler.plan.capacity_needs.judge`); returns the nodes whose
        request ended."""
        ended: set[str] = set()
        classes = self.config.node_classes
        now_pods = self._placeholders()
        by_request: dict[str, dict[str, Seen]] = {}
        for p in now_pods:
            target = self.state.node(p.node_name) if p.node_name else None
            cls = node_class(target, classes) if target is not None else ""
            seen = Seen(p.name, p.node_name, cls, p.phase == "Running", p.terminating)
            by_request.setdefault(p.labels.get(REQUEST_LABEL, ""), {})[p.name] = seen
        timeout = self.config.capacity.timeout
        now = self.clock()
        for node, req in list(self.requests.items()):
            current = by_request.get(req.id, {})
            req.seen.update(n for n in current if n in req.names)
            if now - req.created >= SETTLE:
                req.seen.update(req.names)
            since = req.provisioned_at if req.provisioned_at is not None else req.created
            outcome, why = judge(
                req.names,
                req.seen,
                current,
                provisioned=req.provisioned_at is not None,
                waited=now - since,
                timeout=timeout,
                wanted=node in wanted,
            )
            if outcome == PROVISIONED:
                req.provisioned_at = now
                where = sorted({s.node_name for s in current.values()})
                self._record(node, PROVISIONED, f"{why} ({', '.join(where[:5])})")
            elif outcome is not None:
                self.release(node, outcome, why)
                ended.add(node)
        return ended

    def _ask(self, need: CapacityNeed) -> bool:
        """Create the placeholders of ``need``; False when the API server refused one: the request is undone and
        none is made for ``rescheduler.node_backoff``. The cause (a missing PriorityClass or Role, a quota) is the
        deployment's, not the node's, so the node is not backed off and still drains onto room that is free."""
        req = Request(
            uuid.uuid4().hex[:12], need.node, tuple(p.key for p in need.pods), need.cpu, need.memory, self.clock()
        )
        req.avoided = self._unsettled if self._avoid else frozenset()
        self.requests[need.node] = req
        try:
            owner = self.owner()
            for pod in need.pods:
                created = self.kube.post(
                    f"/api/v1/namespaces/{self.config.namespace}/pods",
                    placeholder_pod(pod, need.node, self.config, req.id, owner, self._avoid),
                )
                req.names.append(created["metadata"]["name"])
        except ApiError as e:
            self.release(need.node, CREATE_FAILED, f"a placeholder pod could not be created: {e}")
            pause = self.config.rescheduler.node_backoff
            self.paused_until = self.clock() + pause
            log.error(
                "capacity mode cannot create placeholder pods in namespace %s (%s): no spot capacity is asked for "
                "in the next %.0fs; check that PriorityClass %s and the rescheduler's Role to create pods there "
                "exist (deploy/base/rescheduler), or turn the mode off (capacity.enabled: false)",
                self.config.namespace,
                e,
                pause,
                self.config.capacity.priority_class_name,
                extra=fields(outcome=CREATE_FAILED, node=need.node),
            )
            return False
        self._record(
            need.node,
            REQUESTED,
            f"{len(req.names)} placeholder pod(s) in {self.config.namespace}: the node {need.text} "
            f"(stays because: {need.reason.message})",
        )
        return True
