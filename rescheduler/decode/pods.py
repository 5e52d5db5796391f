"""The pod fast path of snapshot reading: pod items decoded into ``Pod`` views, every part cached by its bytes.

Pods of one ReplicaSet share their spec, labels and namespace byte for byte, so the parsed results (requests,
tolerations, parsed selectors and affinity terms) are computed once per distinct template, and each part is
cached on its own bytes too (DaemonSet pods differ only in their per-node affinity, and still share containers
and tolerations; a lone node affinity is parsed without the rest). Volumes are cached per volume on everything
but the name, since every pod's service-account token volume has a unique name. A pod is then a handful of
dict look-ups and one constructor call. The shared objects are immutable (``Pod`` is frozen), so sharing is
safe and saves memory.

Every part is parsed by ``Pod.from_api`` itself, and ``tests/unit/test_snapshot_reader.py`` checks that the fast
path builds pods equal to ``Pod.from_api`` on the same JSON, so it cannot drift from the library silently.
:mod:`rescheduler.decode.reader` (files) and :mod:`rescheduler.cluster.listing` (a live cluster) both use it.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import MISSING, fields
from operator import attrgetter
from typing import Any

import msgspec
import orjson
from msgspec import Raw, Struct

from shared.model import (
    EMPTY,
    OwnerRef,
    ParseError,
    Pod,
    Volume,
    parse_affinity,
    parse_resource_claims,
    parse_scheduling_gates,
    start_up_seconds,
    status_requests,
)
from shared.selectors import parse_node_selector

__all__ = [
    "PodReader",
    "PodItem",
    "POD_ITEM",
    "SPEC_KEYS",
    "FAST_PATH_COMPLETE",
    "NONE",
    "TEMPLATE_FIELDS",
    "validation_problem",
]

# --- the typed skeleton of a pod --------------------------------------------------------------------
# Only the fields shared.model reads. Parts kept as Raw are decoded on first sight of their bytes.

NONE = Raw()  # an absent field (empty bytes)


class _Meta(Struct):
    name: str | None = None
    generateName: str | None = None
    namespace: str | None = None
    uid: str | None = None
    labels: Raw = NONE
    annotations: Raw = NONE
    ownerReferences: Raw = NONE
    deletionTimestamp: str | None = None
    creationTimestamp: str | None = None
    resourceVersion: str | None = None


class _PodSpec(Struct):
    nodeName: str | None = None
    priority: int | None = None
    schedulerName: str | None = None
    containers: Raw = NONE
    initContainers: Raw = NONE
    overhead: Raw = NONE
    resources: Raw = NONE
    tolerations: Raw = NONE
    nodeSelector: Raw = NONE
    affinity: Raw = NONE
    topologySpreadConstraints: Raw = NONE
    volumes: list[dict[str, Raw]] | None = None
    schedulingGates: Raw = NONE
    resourceClaims: Raw = NONE


SPEC_KEYS = frozenset(f for f in _PodSpec.__struct_fields__)
"""The ``spec`` keys decoded; a test checks that ``Pod.from_api`` reads no other."""


class _Container(Struct):
    """What the scheduler reads of a container: requests/limits, host ports, sidecar-ness, and the name its status
    is matched by."""

    name: str | None = None
    resources: Raw = NONE
    ports: Raw = NONE
    restartPolicy: str | None = None


_CONTAINERS = msgspec.json.Decoder(list[_Container] | None)


class _OwnerRef(Struct):
    kind: str | None = None
    name: str | None = None
    apiVersion: str | None = None
    uid: str | None = None
    controller: bool | None = None


_OWNER_REFS = msgspec.json.Decoder(list[_OwnerRef] | None)


class _Condition(Struct):
    type: str | None = None
    status: str | None = None
    reason: str | None = None
    lastTransitionTime: str | None = None


class _ContainerStatus(Struct):
    """What the in-place resize rule reads of a container status (:func:`shared.podrequests.status_requests`)."""

    name: str | None = None
    allocatedResources: Raw = NONE
    resources: Raw = NONE


class _PodStatus(Struct):
    phase: str | None = None
    startTime: str | None = None
    conditions: list[_Condition] | None = None
    containerStatuses: list[_ContainerStatus] | None = None
    initContainerStatuses: list[_ContainerStatus] | None = None
    allocatedResources: Raw = NONE
    resources: Raw = NONE


class PodItem(Struct):
    metadata: _Meta | None = None
    spec: _PodSpec | None = None
    status: _PodStatus | None = None


POD_ITEM = msgspec.json.Decoder(PodItem)
"""One pod object (a watch event's), decoded like the items of a list page."""


# --- pods: the fast path ------------------------------------------------------------------------------

# Pod fields that differ pod by pod (metadata and status); everything else comes from a template part.
_PER_POD = (
    "namespace",
    "name",
    "uid",
    "node_name",
    "phase",
    "labels",
    "annotations",
    "owners",
    "priority",
    "scheduler_name",
    "deletion_timestamp",
    "creation_timestamp",
    "volumes",
    "unschedulable",
    "ready",
    "scheduling_gates",
    "resource_claims",
    "status_requests",
    "start_up",
)
# Template parts: which spec keys each reads, and which Pod fields it determines.
_CONTAINER_FIELDS = ("requests", "non_zero_requests", "host_ports")
_TOLERATION_FIELDS = ("tolerations",)
_SELECTOR_FIELDS = ("node_selector",)
_AFFINITY_FIELDS = (
    "required_affinity",
    "preferred_affinity",
    "pod_affinity",
    "pod_anti_affinity",
    "preferred_pod_affinity",
    "preferred_pod_anti_affinity",
)
_SPREAD_FIELDS = ("topology_spread",)
TEMPLATE_FIELDS = _CONTAINER_FIELDS + _TOLERATION_FIELDS + _SELECTOR_FIELDS + _AFFINITY_FIELDS + _SPREAD_FIELDS
_POD_FIELDS = tuple(f.name for f in fields(Pod))
FAST_PATH_COMPLETE = set(_POD_FIELDS) == set(_PER_POD) | set(TEMPLATE_FIELDS)
"""Whether every ``Pod`` field is covered; a test fails if ``shared.model.Pod`` grows a field unknown here."""
_POD_INDEX = {n: i for i, n in enumerate(_POD_FIELDS)}
_HELD_FIELDS = attrgetter("labels", "annotations", "owners", "status_requests", *TEMPLATE_FIELDS)
"""The fields of a pod that hold cached parts (:meth:`PodReader.prune`)."""
_POD_DEFAULTS = tuple(
    f.default if f.default is not MISSING else (f.default_factory() if f.default_factory is not MISSING else None)
    for f in fields(Pod)
)
_I_NAMESPACE, _I_NAME, _I_UID = _POD_INDEX["namespace"], _POD_INDEX["name"], _POD_INDEX["uid"]
_I_NODE_NAME, _I_PHASE, _I_LABELS = _POD_INDEX["node_name"], _POD_INDEX["phase"], _POD_INDEX["labels"]
_I_ANNOTATIONS, _I_OWNERS, _I_PRIORITY = _POD_INDEX["annotations"], _POD_INDEX["owners"], _POD_INDEX["priority"]
_I_SCHEDULER_NAME, _I_VOLUMES = _POD_INDEX["scheduler_name"], _POD_INDEX["volumes"]
_I_DELETION_TIMESTAMP, _I_CREATION_TIMESTAMP = _POD_INDEX["deletion_timestamp"], _POD_INDEX["creation_timestamp"]
_I_UNSCHEDULABLE, _I_READY = _POD_INDEX["unschedulable"], _POD_INDEX["ready"]
_I_SCHEDULING_GATES, _I_RESOURCE_CLAIMS = _POD_INDEX["scheduling_gates"], _POD_INDEX["resource_claims"]
_I_STATUS_REQUESTS, _I_REQUESTS = _POD_INDEX["status_requests"], _POD_INDEX["requests"]
_I_START_UP = _POD_INDEX["start_up"]

_PVC, _EMPTY_DIR = "persistentVolumeClaim", "emptyDir"
_CACHE_LIMIT = 200_000


class PodReader:
    """Turns decoded pod items into ``Pod`` views, caching every part by its bytes.

    A reader made for one list (``compact=False``) caches whole templates and keeps the bytes it was given as
    keys: the fastest way through 150,000 pods, and dropped with the list. A reader that lives as long as the
    watched state (``compact=True``, the watch events of :mod:`rescheduler.cluster.watch_cache`) caches only
    the parts, each keyed by a 16-byte BLAKE2b digest of the bytes it was parsed from (a digest collision would
    take about 2**64 distinct parts), so what it keeps is small next to the pods, and :meth:`prune` drops the
    parts no pod holds any more. A pod is then a little slower to read (its template is assembled from the
    parts), which a watch, a few events a second, does not feel.
    """

    def __init__(self, *, compact: bool = False) -> None:
        self.compact = compact
        self.templates: dict[Hashable, list[Any]] = {}
        self._bases: dict[Hashable, list[Any]] = {}
        self._containers: dict[Hashable, tuple[Any, ...]] = {}
        self._tolerations: dict[Hashable, tuple[Any, ...]] = {}
        self._selectors: dict[Hashable, tuple[Any, ...]] = {}
        self._affinity: dict[Hashable, tuple[Any, ...]] = {}
        self._spread: dict[Hashable, tuple[Any, ...]] = {}
        self._maps: dict[Hashable, Mapping[str, str]] = {}
        self._owners: dict[Hashable, Any] = {}
        self._volumes: dict[tuple[tuple[str, bytes], ...], Volume] = {}
        self._by_owner: dict[tuple[str, bytes], tuple[tuple[Raw, ...], list[Any]]] = {}
        self._on_node: dict[Hashable, tuple[Any, Any]] = {}

    def size(self) -> int:
        """How many entries the caches hold (what :meth:`prune` is weighed by)."""
        return sum(len(c) for c in self._caches())

    def _caches(self) -> tuple[dict[Any, Any], ...]:
        return (
            self.templates,
            self._bases,
            self._containers,
            self._tolerations,
            self._selectors,
            self._affinity,
            self._spread,
            self._maps,
            self._owners,
            self._volumes,
            self._by_owner,
            self._on_node,
        )

    def prune(self, pods: Iterable[Pod]) -> None:
        """Keep only the cached parts that one of ``pods`` (every pod this reader's owner still holds) holds.

        A part is held when the very object the cache gives out is one of a pod's fields, so a part whose pods
        were all replaced or deleted goes, and so does one no pod took in the end. The caches that serve only
        the speed of a list (whole templates, the owner hint, volumes) are emptied; they fill again as needed.
        """
        live: set[int] = set()
        for pod in pods:
            live.update(map(id, _HELD_FIELDS(pod)))

        def held(values: Iterable[Any]) -> bool:
            return all(id(v) in live for v in values)

        parts: tuple[dict[Hashable, tuple[Any, ...]], ...] = (
            self._containers,
            self._tolerations,
            self._selectors,
            self._affinity,
            self._spread,
        )
        for part_cache in parts:
            for key in [k for k, part in part_cache.items() if not held(part)]:
                del part_cache[key]
        values: tuple[dict[Hashable, Any], ...] = (self._maps, self._owners)
        for value_cache in values:
            for key in [k for k, value in value_cache.items() if id(value) not in live]:
                del value_cache[key]
        for key in [k for k, hit in self._on_node.items() if not held(v for v in hit if v is not None)]:
            del self._on_node[key]
        speed: tuple[dict[Any, Any], ...] = (self.templates, self._bases, self._volumes, self._by_owner)
        for speed_cache in speed:
            speed_cache.clear()

    def _fold(self, key: Hashable) -> Hashable:
        """A cache key as this reader keeps it: as given, or its digest (``compact``)."""
        if not self.compact:
            return key
        data = key if isinstance(key, bytes) else repr(key).encode()
        return hashlib.blake2b(data, digest_size=16).digest()

    def read(self, item: PodItem) -> Pod:
        """The ``Pod`` view of ``item``: its template's parts from the caches, its own fields read here."""
        m = item.metadata or _Meta()
        s = item.spec
        ns = m.namespace or "default"
        name = m.name or m.generateName or ""
        if s is None:
            raise ParseError(f"pod {ns}/{name}: spec is missing")
        st = item.status or _PodStatus()
        owners_b = bytes(m.ownerReferences)
        raws = (
            m.labels,
            s.containers,
            s.initContainers,
            s.overhead,
            s.resources,
            s.tolerations,
            s.nodeSelector,
            s.affinity,
            s.topologySpreadConstraints,
        )
        # The previous pod of the same owner usually has the same template: comparing the slices costs a
        # fraction of copying and hashing them (the owner is only a hint; equal slices are the proof). The
        # hint keeps copies, not the slices, which would keep a live listing's whole page alive.
        hint = self._by_owner.get((ns, owners_b))
        proto = hint[1] if hint is not None and hint[0] == raws else self._prototype_of(raws, ns, name, owners_b)
        unschedulable = ready = False
        ready_at = None
        for c in st.conditions or ():
            if c.type == "PodScheduled":
                unschedulable = c.status == "False" and c.reason == "Unschedulable"
            elif c.type == "Ready":
                ready = c.status == "True"
                ready_at = c.lastTransitionTime
        # Positional arguments in field order (half the cost of keywords); the strings pods repeat are interned.
        args = proto.copy()
        args[_I_NAME] = name
        args[_I_UID] = m.uid or ""
        args[_I_NODE_NAME] = sys.intern(s.nodeName) if s.nodeName else ""
        args[_I_PHASE] = sys.intern(st.phase) if st.phase else "Pending"
        args[_I_ANNOTATIONS] = self._map(bytes(m.annotations), ns, name, "metadata.annotations")
        args[_I_OWNERS] = self._owner_refs(owners_b, ns, name)
        args[_I_PRIORITY] = int(s.priority) if s.priority is not None else 0
        args[_I_SCHEDULER_NAME] = sys.intern(s.schedulerName) if s.schedulerName else "default-scheduler"
        args[_I_DELETION_TIMESTAMP] = m.deletionTimestamp
        args[_I_CREATION_TIMESTAMP] = m.creationTimestamp or ""
        args[_I_VOLUMES] = self._volume_list(s.volumes, f"pod {ns}/{name}") if s.volumes else ()
        args[_I_UNSCHEDULABLE] = unschedulable
        args[_I_READY] = ready
        args[_I_START_UP] = start_up_seconds(st.startTime, ready_at) if ready else None
        # Both rare, so read per pod and only when present: gates are removed before a pod is scheduled.
        gates = bytes(s.schedulingGates)
        if gates and gates != b"null":
            args[_I_SCHEDULING_GATES] = _names(parse_scheduling_gates, gates, ns, name)
        claims = bytes(s.resourceClaims)
        if claims and claims != b"null":
            args[_I_RESOURCE_CLAIMS] = _names(parse_resource_claims, claims, ns, name)
        if st.containerStatuses or st.initContainerStatuses or st.allocatedResources or st.resources:
            args[_I_STATUS_REQUESTS] = self._status_requests(proto, s, st, ns, name)
        return Pod(*args)

    def _prototype_of(self, raws: tuple[Raw, ...], ns: str, name: str, owners_b: bytes) -> list[Any]:
        """The prototype of the template whose parts are ``raws``: found by their bytes, else built; kept as
        the owner's hint for its next pod."""
        parts = tuple(map(bytes, raws))
        if self.compact:
            return self._prototype(None, parts, ns, name)
        key = (ns, *parts)
        found = self.templates.get(key)
        proto = found if found is not None else self._prototype(key, parts, ns, name)
        if len(self._by_owner) >= _CACHE_LIMIT:
            self._by_owner.clear()
        self._by_owner[(ns, owners_b)] = (tuple(Raw(b) for b in parts), proto)
        return proto

    def _status_requests(self, proto: list[Any], s: _PodSpec, st: _PodStatus, ns: str, name: str) -> Any:
        """The pod's ``status_requests``, cached on its template's container part (the containers' names and
        resources, overhead and pod-level resources: one ``requests`` object, shared by every template with that
        part) and the bytes of the status fields the rule reads (pods resized alike share them; the rest of a
        container status differs pod by pod)."""
        reported = (_reported(st.containerStatuses), _reported(st.initContainerStatuses))
        pod_level = (_present(st.allocatedResources), _present(st.resources))
        if not (reported[0] or reported[1] or pod_level[0] or pod_level[1]):
            return None
        # IsPodResizeInfeasible: the first PodResizePending condition decides.
        resize = next((c for c in st.conditions or () if c.type == "PodResizePending"), None)
        infeasible = resize is not None and resize.reason == "Infeasible"
        requests = proto[_I_REQUESTS]
        key = self._fold((id(requests), reported, pod_level, infeasible))
        hit = self._on_node.get(key)
        if hit is None:
            parts = {"containers": s.containers, "initContainers": s.initContainers, "overhead": s.overhead}
            parts["resources"] = s.resources
            spec = _spec({k: bytes(v) for k, v in parts.items()})
            status: dict[str, Any] = {
                "containerStatuses": [_status_dict(*c) for c in reported[0]],
                "initContainerStatuses": [_status_dict(*c) for c in reported[1]],
            }
            if pod_level[0]:
                status["allocatedResources"] = orjson.loads(pod_level[0])
            if pod_level[1]:
                status["resources"] = orjson.loads(pod_level[1])
            if infeasible:
                status["conditions"] = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]
            try:
                on_node = status_requests(spec, status)
            except ParseError as e:
                raise ParseError(f"pod {ns}/{name}: {e}") from None
            # The requests object is kept with the entry: its id is the key's, never reused while the entry lives.
            hit = (requests, on_node if on_node != requests else None)
            if len(self._on_node) >= _CACHE_LIMIT:
                self._on_node.clear()
            self._on_node[key] = hit
        return hit[1]

    def _prototype(self, key: tuple[Any, ...] | None, parts: tuple[bytes, ...], ns: str, name: str) -> list[Any]:
        """The positional arguments shared by every pod of a template: its parts, namespace and labels; kept
        under ``key`` (``None``: not kept, the compact way).

        Built from the template without its affinity (cached on its own: a DaemonSet's pods differ only in
        the node their affinity names, so each is a template of its own that shares everything else) plus
        the affinity part."""
        base_key = None if key is None else key[:8] + key[9:]
        base = self._bases.get(base_key) if base_key is not None else None
        if base is None:
            labels = self._map(parts[0], ns, name, "metadata.labels")
            base = list(_POD_DEFAULTS)
            for field_name, value in self._template(parts, ns, name):
                base[_POD_INDEX[field_name]] = value
            base[_I_NAMESPACE] = sys.intern(ns)
            base[_I_LABELS] = labels
            if base_key is not None:
                if len(self._bases) >= _CACHE_LIMIT:
                    self._bases.clear()
                self._bases[base_key] = base
        args = base.copy()
        for field_name, value in zip(_AFFINITY_FIELDS, self._affinity_part(parts, ns, name), strict=True):
            args[_POD_INDEX[field_name]] = value
        if key is not None:
            if len(self.templates) >= _CACHE_LIMIT:
                self.templates.clear()
            self.templates[key] = args
        return args

    def _affinity_part(self, parts: tuple[bytes, ...], ns: str, name: str) -> tuple[Any, ...]:
        """The affinity fields of a template, cached on the affinity's bytes (plus the namespace, the default
        of pod affinity terms)."""
        labels_b, affinity = parts[0], parts[7]
        aff_key = self._fold((affinity, ns if b"podAffinity" in affinity or b"podAntiAffinity" in affinity else ""))
        part = self._affinity.get(aff_key)
        if part is None:
            raw = _spec({"affinity": affinity}).get("affinity")
            part = _node_affinity_only(raw)
            if part is None:
                labels = self._map(labels_b, ns, name, "metadata.labels")
                part = _affinity(raw, ns, name, labels)
            if len(self._affinity) >= _CACHE_LIMIT:
                self._affinity.clear()
            self._affinity[aff_key] = part
        return part

    def _template(self, parts: tuple[bytes, ...], ns: str, name: str) -> list[tuple[str, Any]]:
        """Parse a template's parts but its affinity, each cached on the bytes it depends on (plus the labels
        where the model reads them: ``matchLabelKeys``): ``(field, value)`` pairs."""
        labels_b, containers, init, overhead, resources, tolerations, selector, _, spread = parts
        labels = self._map(labels_b, ns, name, "metadata.labels")
        try:
            reduced = (_reduce(containers), _reduce(init), overhead, resources)
        except (msgspec.ValidationError, msgspec.DecodeError):
            reduced = (containers, init, overhead, resources)  # let the model report what is wrong
        where = (ns, name, labels)
        spec = {"containers": reduced[0], "initContainers": reduced[1], "overhead": overhead, "resources": resources}
        out = self._part(self._containers, reduced, spec, _CONTAINER_FIELDS, where)
        out += self._part(self._tolerations, tolerations, {"tolerations": tolerations}, _TOLERATION_FIELDS, where)
        out += self._part(self._selectors, selector, {"nodeSelector": selector}, _SELECTOR_FIELDS, where)
        spread_key = (spread, labels_b if b"LabelKeys" in spread else b"")
        out += self._part(self._spread, spread_key, {"topologySpreadConstraints": spread}, _SPREAD_FIELDS, where)
        return out

    def _part(
        self,
        cache: dict[Hashable, tuple[Any, ...]],
        raw_key: Hashable,
        spec: Mapping[str, Any],
        names: tuple[str, ...],
        where: tuple[str, str, Mapping[str, str]],
    ) -> list[tuple[str, Any]]:
        """One template part but the affinity: the values of the fields ``names``, parsed from the spec keys
        ``spec`` (their bytes) once per distinct ``raw_key`` and cached as a tuple in ``cache``."""
        key = self._fold(raw_key)
        part = cache.get(key)
        if part is None:
            ns, name, labels = where
            part = cache[key] = _parse_part(ns, name, labels, _spec(spec), names)
        return list(zip(names, part, strict=True))

    def _map(self, b: bytes, ns: str, name: str, field_name: str) -> Mapping[str, str]:
        if not b or b == b"null":
            return EMPTY
        key = self._fold(b)
        hit = self._maps.get(key)
        if hit is not None:
            return hit
        value = orjson.loads(b)
        if not value:
            value = EMPTY
        elif not isinstance(value, dict):
            raise ParseError(f"pod {ns}/{name}: {field_name}: expected an object of strings")
        if len(self._maps) >= _CACHE_LIMIT:
            self._maps.clear()
        self._maps[key] = value
        return value

    def _owner_refs(self, b: bytes, ns: str, name: str) -> Any:
        if not b or b == b"null":
            return ()
        key = self._fold(b)
        hit = self._owners.get(key)
        if hit is None:
            try:
                refs = _OWNER_REFS.decode(b) or ()
            except msgspec.ValidationError as e:
                raise ParseError(f"pod {ns}/{name}: metadata.ownerReferences: {validation_problem(e)}") from None
            hit = tuple(
                OwnerRef(r.kind or "", r.name or "", r.apiVersion or "", r.uid or "", bool(r.controller)) for r in refs
            )
            if len(self._owners) >= _CACHE_LIMIT:
                self._owners.clear()
            self._owners[key] = hit
        return hit

    def _volume_list(self, volumes: list[dict[str, Raw]] | None, where: str) -> tuple[Volume, ...]:
        """The model's volume list. Each volume arrives as ``{key: raw bytes}``; what the model derives
        besides the name (source kind = first key that is not ``name``, claim name, emptyDir medium) is
        cached on the other keys' bytes, which repeat pod after pod even though the service-account token
        volume's name (``kube-api-access-x7k2p``) never does."""
        if not volumes:
            return ()
        out = []
        cache = self._volumes
        for v in volumes:
            name_raw = v.get("name")
            key = tuple((k, bytes(r)) for k, r in v.items() if k != "name")
            proto = cache.get(key)
            if proto is None:
                raw = {k: orjson.loads(b) for k, b in key}
                try:
                    proto = Pod.from_api({"spec": {"volumes": [raw]}}).volumes[0]
                except (AttributeError, TypeError, ValueError) as e:
                    raise ParseError(f"{where}: spec.volumes: {e}") from None
                if len(cache) < _CACHE_LIMIT:
                    cache[key] = proto
            name = orjson.loads(bytes(name_raw)) if name_raw is not None else None
            if name is not None and not isinstance(name, str):
                raise ParseError(f"{where}: spec.volumes: name must be a string")
            out.append(Volume(name or "", proto.kind, proto.claim_name, proto.medium))
        return tuple(out)


def _names(parse: Callable[[Any], tuple[str, ...]], raw: bytes, ns: str, name: str) -> tuple[str, ...]:
    """A list-of-names spec field by the function ``Pod.from_api`` reads it with, the error worded alike."""
    try:
        return parse(orjson.loads(raw))
    except ParseError as e:
        raise ParseError(f"pod {ns}/{name}: {e}") from None


def _present(raw: Raw) -> bytes:
    """A field's bytes, empty when it is absent or ``null``."""
    b = bytes(raw)
    return b"" if b == b"null" else b


def _reported(statuses: list[_ContainerStatus] | None) -> tuple[tuple[str | None, bytes, bytes], ...]:
    """``(name, allocatedResources, resources)`` of the container statuses that report either, as bytes."""
    out = []
    for c in statuses or ():
        alloc, res = _present(c.allocatedResources), _present(c.resources)
        if alloc or res:
            out.append((c.name, alloc, res))
    return tuple(out)


def _status_dict(name: str | None, alloc: bytes, res: bytes) -> dict[str, Any]:
    out: dict[str, Any] = {} if name is None else {"name": name}
    if alloc:
        out["allocatedResources"] = orjson.loads(alloc)
    if res:
        out["resources"] = orjson.loads(res)
    return out


def _reduce(raw: bytes) -> Any:
    """A container list reduced to what the scheduler reads, as hashable bytes (``None`` if absent)."""
    if not raw or raw == b"null":
        return None
    containers = _CONTAINERS.decode(raw)
    if containers is None:
        return None
    return tuple((c.name, bytes(c.resources), bytes(c.ports), c.restartPolicy) for c in containers)


def _spec(parts: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in parts.items():
        if v is None or v == b"" or v == b"null":
            continue
        if isinstance(v, tuple):  # a reduced container list
            out[k] = [_container(*c) for c in v]
        else:
            out[k] = orjson.loads(v)
    return out


def _container(name: str | None, resources: bytes, ports: bytes, restart_policy: str | None) -> dict[str, Any]:
    c: dict[str, Any] = {} if name is None else {"name": name}
    if resources:
        c["resources"] = orjson.loads(resources)
    if ports:
        c["ports"] = orjson.loads(ports)
    if restart_policy is not None:
        c["restartPolicy"] = restart_policy
    return c


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _node_affinity_only(affinity: Any) -> tuple[Any, ...] | None:
    """The affinity part when it is only a required node affinity, as every DaemonSet pod has (a
    ``matchFields`` term naming its node, so no two are alike): ``parse_node_selector`` directly, which is
    what ``Pod.from_api`` does for it, without the rest of a pod's parsing. ``None`` for anything else."""
    if not isinstance(affinity, dict) or list(affinity) != ["nodeAffinity"]:
        return None
    node_aff = affinity["nodeAffinity"]
    if not isinstance(node_aff, dict) or list(node_aff) != [_REQUIRED]:
        return None
    try:
        required = parse_node_selector(node_aff[_REQUIRED], f"spec.affinity.nodeAffinity.{_REQUIRED}")
    except Exception:
        return None
    empty: tuple[Any, ...] = ()
    return tuple(required if f == "required_affinity" else empty for f in _AFFINITY_FIELDS)


def _affinity(raw: Any, ns: str, name: str, labels: Mapping[str, str]) -> tuple[Any, ...]:
    """The affinity fields, parsed by the function ``Pod.from_api`` parses them with; a shape it does not
    expect goes through ``Pod.from_api`` itself, which words the error."""
    if raw is None:
        raw = {}
    if isinstance(raw, dict):
        where = f"pod {ns}/{name}"
        try:
            return tuple(parse_affinity(raw, ns, where))
        except Exception:
            pass
    return _parse_part(ns, name, labels, {"affinity": raw}, _AFFINITY_FIELDS)


def _parse_part(
    ns: str, name: str, labels: Mapping[str, str], spec: dict[str, Any], names: Iterable[str]
) -> tuple[Any, ...]:
    """The values of the fields ``names`` (in that order) of the pod ``Pod.from_api`` reads from ``spec``."""
    pod = Pod.from_api({"metadata": {"namespace": ns, "name": name, "labels": dict(labels)}, "spec": spec})
    return tuple(getattr(pod, n) for n in names)


def validation_problem(e: msgspec.ValidationError, kinds: tuple[str, ...] = ()) -> str:
    """msgspec's message with the path made relative to the items array: ``$[3].kind`` → ``items[3].kind``."""
    text = str(e)
    msg, sep, path = text.partition(" - at `")
    path = path.rstrip("`")
    if path.startswith("$"):
        path = "items" + path[1:]
    msg = msg.replace("Invalid value", "unsupported kind").replace(
        "Object missing required field `kind`", "item has no kind"
    )
    if "unsupported kind" in msg and kinds:
        msg += f" (supported: {', '.join(kinds)})"
    msg = msg[0].lower() + msg[1:] if msg else msg
    return f"{path}: {msg}" if sep else msg
