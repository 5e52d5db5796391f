"""The extender service: ``mutate``, ``filter`` and ``prioritize`` on decoded arguments, answering a status and bytes.

Each request kind has one door (the Flask app, :mod:`extender.app`, for reviews; the direct door,
:mod:`extender.direct`, for the scheduler's calls); the door decodes the body once with :func:`decode_extender_args` or
:func:`extender.admission.parse_review`, asks :class:`ExtenderService`, and sends the :class:`Answer` it gets. The
service is the one place that decides the no-opinion answers and counts the metrics.

No-opinion answers. A pod is never blocked by spotshift: ``/mutate`` admits it unchanged with a warning,
``/filter`` answers with its ``Error`` field (the scheduler skips an ``ignorable`` extender), ``/prioritize``
answers an empty list. They are given when the node cache has not synced (NodeNames calls only: a Nodes call
carries its nodes), when the request's first byte arrived longer ago than its deadline (:data:`MUTATE_DEADLINE`,
:data:`EXTENDER_DEADLINE`: the caller is about to give up on it), and on an internal error.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import orjson

from extender import metrics
from extender.admission import MutationMemo, MutationPolicy, allow_unchanged, build_response
from extender.errors import ExtenderError, InvalidRequest
from extender.reviews import (
    EXTENDER_ARGS_SHAPE,
    NODE_SHAPE,
    AdmissionReview,
    ExtenderFilterResult,
    ShapeError,
    check_shape,
    fold_keys,
)
from extender.scheduling import (
    ExtenderPolicy,
    NodeEntry,
    NodeIndex,
    PodIndex,
    ceilings,
    filter_names,
    filter_nodes,
    prioritize_names,
    prioritize_nodes,
    share_of,
    spot_allowed,
    workload_key,
)
from shared.config import Config

__all__ = [
    "Answer",
    "ExtenderArgs",
    "NodeSource",
    "Service",
    "ExtenderService",
    "decode_extender_args",
    "error_answer",
    "DEFAULT_MAX_NODES",
    "MUTATE_DEADLINE",
    "EXTENDER_DEADLINE",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_NODES = 15_000
"""Node names or Node objects per extender call: the largest cluster a managed provider supports. The
scheduler sends at most the cluster's node count."""
MUTATE_DEADLINE = 2.5
"""Seconds from a review's first byte to its answer: below the webhook's ``timeoutSeconds: 3`` (deploy/)."""
EXTENDER_DEADLINE = 4.5
"""Seconds from an extender call's first byte to its answer: below the scheduler's ``httpTimeout: 5s``."""

_NOT_SYNCED = "spotshift node cache has not synced yet"
_TOO_LATE = "spotshift: the request arrived too slowly to be answered in time"


@dataclass(frozen=True, slots=True)
class Answer:
    """A JSON answer: its status code and body. ``decided`` is False for a no-opinion answer (not synced, too
    late, an internal error)."""

    status: int
    body: bytes
    decided: bool = True


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """Decoded ``ExtenderArgs``: the pod and exactly one of node names and a NodeList."""

    pod: Mapping[str, Any]
    names: list[str] | None
    nodes: Mapping[str, Any] | None


class NodeSource(Protocol):
    """What the service needs of a node cache; :class:`extender.cache.ClusterCache` provides it."""

    @property
    def nodes(self) -> NodeIndex: ...

    @property
    def pods(self) -> PodIndex | None: ...

    def synced(self) -> bool: ...


class Service(Protocol):
    """What the doors ask of the service. ``arrived`` is ``time.monotonic()`` at the request's first byte (None:
    unknown, never late); ``started`` is ``time.perf_counter()`` when the door began on the request."""

    def mutate(self, review: AdmissionReview, arrived: float | None) -> Answer: ...

    def filter(self, args: ExtenderArgs, arrived: float | None) -> Answer: ...

    def prioritize(self, args: ExtenderArgs, arrived: float | None) -> Answer: ...

    def count(self, endpoint: str, status: int, started: float | None) -> None: ...

    def internal_error(self, endpoint: str) -> Answer: ...


def error_answer(error: ExtenderError) -> Answer:
    """The answer to a request that cannot be served: its status and a JSON message."""
    return Answer(error.status, orjson.dumps({"error": error.message, "status": error.status}))


_DECODER = msgspec.json.Decoder()


def _decode_object(body: bytes) -> dict[str, Any]:
    """Decode an extender body. msgspec builds the objects straight from the bytes: orjson's parser first
    builds a document of its own, whose peak was ~15 times the body (336 MB for 5,000 full Nodes)."""
    try:
        value = _DECODER.decode(body)
    except (msgspec.DecodeError, RecursionError) as e:
        raise InvalidRequest(f"request body is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise InvalidRequest("request body must be a JSON object")
    return value


def decode_extender_args(body: bytes, max_nodes: int = DEFAULT_MAX_NODES) -> ExtenderArgs:
    """Decode ``ExtenderArgs``; :class:`InvalidRequest` says what is wrong with it, naming the field.

    The count of names or Nodes is checked before their shape (:data:`extender.reviews.EXTENDER_ARGS_SHAPE`),
    so an oversized list is refused without being walked.
    """
    args = fold_keys(_decode_object(body))
    names, nodes = args.get("NodeNames"), args.get("Nodes")
    if isinstance(names, list) and len(names) > max_nodes:
        raise InvalidRequest(f"ExtenderArgs.NodeNames has {len(names)} names, over the limit of {max_nodes}")
    items = nodes.get("items") if isinstance(nodes, dict) else None
    if isinstance(items, list) and len(items) > max_nodes:
        raise InvalidRequest(f"ExtenderArgs.Nodes has {len(items)} items, over the limit of {max_nodes}")
    try:
        check_shape(args, EXTENDER_ARGS_SHAPE, "ExtenderArgs")
        for i, item in enumerate(items or ()):
            check_shape(item, NODE_SHAPE, f"ExtenderArgs.Nodes.items[{i}]")
    except ShapeError as e:
        raise InvalidRequest(str(e)) from None
    if names is not None:
        return ExtenderArgs(args["Pod"], names, None)
    if nodes is not None:
        return ExtenderArgs(args["Pod"], None, nodes)
    raise InvalidRequest("ExtenderArgs.NodeNames and ExtenderArgs.Nodes are both missing: one of them must be set")


def _filter_error(message: str) -> Answer:
    """A filter answer the scheduler reads as an error: with ``ignorable: true`` it skips this extender."""
    result: ExtenderFilterResult = {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": message,
    }
    return Answer(200, orjson.dumps(result), decided=False)


_NO_OPINION = Answer(200, b"[]", decided=False)


def _late(arrived: float | None, budget: float) -> bool:
    """Whether the request's caller has (nearly) given up on it: past ``budget`` s since its first byte."""
    return arrived is not None and time.monotonic() - arrived > budget


class _Children:
    """A metric's labelled children, resolved once: ``labels()`` validates and locks on every call."""

    __slots__ = ("metric", "by")

    def __init__(self, metric: Any) -> None:
        self.metric = metric
        self.by: dict[Any, Any] = {}

    def __call__(self, *labels: str) -> Any:
        child = self.by.get(labels)
        if child is None:
            child = self.by[labels] = self.metric.labels(*labels)
        return child


class ExtenderService:
    """The webhook's and the extender's answers over a node (and pod) cache; see the module docstring.

    Without a cache, NodeNames calls are answered from an empty index (``nodeCacheCapable: false`` still works)
    and the service is ready at once.
    """

    def __init__(self, config: Config | None = None, cache: NodeSource | None = None) -> None:
        config = config or Config()
        self.cache = cache
        self.mutation = MutationPolicy.from_config(config)
        self.memo = MutationMemo()
        self.policy = ExtenderPolicy.from_config(config)
        self._empty = NodeIndex()
        self._requests = _Children(metrics.REQUESTS)
        self._latency = _Children(metrics.LATENCY)
        self._skips = _Children(metrics.SKIPS)
        self._patches = _Children(metrics.PATCHES)
        self._internal = _Children(metrics.INTERNAL_ERRORS)
        for endpoint in ("mutate", "filter", "prioritize"):
            self._internal(endpoint)  # exported at 0, so that an alert on increase() sees the first one

    def synced(self) -> bool:
        return self.cache is None or self.cache.synced()

    def node_index(self) -> NodeIndex:
        return self.cache.nodes if self.cache is not None else self._empty

    def count(self, endpoint: str, status: int, started: float | None) -> None:
        """Count a request answered by any door: by endpoint and status, and its time from ``started``."""
        self._requests(endpoint, str(status)).inc()
        if started is not None:
            self._latency(endpoint).observe(time.perf_counter() - started)

    def mutate(self, review: AdmissionReview, arrived: float | None) -> Answer:
        if _late(arrived, MUTATE_DEADLINE):
            self._skips("deadline").inc()
            message = "spotshift: the review arrived too slowly, pod admitted unchanged"
            return Answer(200, orjson.dumps(allow_unchanged(review, message)), decided=False)
        try:
            answer, mutation = build_response(review, self.mutation, self.memo)
        except Exception:
            log.exception("mutate: internal error; admitting the pod unchanged")
            self._internal("mutate").inc()
            self._skips("internal-error").inc()
            message = "spotshift: internal error, pod admitted unchanged"
            return Answer(200, orjson.dumps(allow_unchanged(review, message)), decided=False)
        if not review["request"].get("dryRun"):
            if mutation.skipped:
                self._skips(mutation.skipped).inc()
            for kind in mutation.kinds:
                self._patches(kind).inc()
        return Answer(200, orjson.dumps(answer))

    def filter(self, args: ExtenderArgs, arrived: float | None) -> Answer:
        """The filter result; :class:`InvalidRequest` for Nodes that cannot be echoed back (no real Node)."""
        if _late(arrived, EXTENDER_DEADLINE):
            return _filter_error(_TOO_LATE)
        try:
            if args.names is not None:
                if not self.synced():
                    return _filter_error(_NOT_SYNCED)
                index = self.node_index()
                result = filter_names(args.names, index, self.policy)
                self._count_filtered(result["FailedNodes"], index.items)
            else:
                assert args.nodes is not None
                result, why = filter_nodes(args.nodes, self.policy)
                for reason in why:
                    metrics.FILTERED.labels(reason).inc()
        except Exception as e:
            log.exception("filter: internal error")
            self._internal("filter").inc()
            return _filter_error(f"spotshift: {e}")
        try:
            return Answer(200, orjson.dumps(result))
        except orjson.JSONEncodeError as e:  # nested past 254 levels, an integer past 64 bits: no real Node
            raise InvalidRequest(f"ExtenderArgs.Nodes items cannot be echoed back: {e}") from None

    def prioritize(self, args: ExtenderArgs, arrived: float | None) -> Answer:
        if _late(arrived, EXTENDER_DEADLINE):
            return _NO_OPINION
        try:
            if args.names is not None:
                if not self.synced():
                    return _NO_OPINION
                index = self.node_index()
                return Answer(200, prioritize_names(args.names, index, spot_ok=self._spot_ok(args.pod, index.items)))
            assert args.nodes is not None
            entries = self.node_index().items
            items = args.nodes.get("items") or ()
            return Answer(200, prioritize_nodes(items, self.policy, spot_ok=self._spot_ok(args.pod, entries)))
        except Exception:
            log.exception("prioritize: internal error; answering with no opinion")
            self._internal("prioritize").inc()
            return _NO_OPINION

    def internal_error(self, endpoint: str) -> Answer:
        """The answer to a request a door failed on before the service could decide it (a bug of ours), counted:
        the scheduler's no-opinion answers; for a review, whose uid may not be known, a 500 (the webhook's
        ``failurePolicy: Ignore`` admits the pod)."""
        self._internal(endpoint).inc()
        if endpoint == "filter":
            return _filter_error("spotshift: internal error")
        if endpoint == "prioritize":
            return _NO_OPINION
        return Answer(500, orjson.dumps({"error": "spotshift: internal error", "status": 500}), decided=False)

    def _spot_ok(self, pod: Mapping[str, Any], nodes: Mapping[str, NodeEntry]) -> bool:
        """Per-workload ceiling: False when one more pod on spot would break it (see extender.scheduling)."""
        pods = self.cache.pods if self.cache is not None else None
        if pods is None:
            return True
        meta = pod.get("metadata") or {}
        max_pct, min_on_demand = ceilings(meta, self.policy.ceiling)
        if max_pct >= 100 and min_on_demand <= 0:
            return True
        workload = workload_key(meta)
        if workload is None:
            return True
        return spot_allowed(max_pct, min_on_demand, share_of(workload, pods, nodes))

    @staticmethod
    def _count_filtered(failed: Iterable[str], entries: Mapping[str, NodeEntry]) -> None:
        """Count the nodes a node-name /filter dropped, by the reclaim signal the cache recorded for each."""
        for name in failed:
            entry = entries.get(name)
            metrics.FILTERED.labels(entry.reclaim if entry is not None and entry.reclaim else "reclaimed").inc()
