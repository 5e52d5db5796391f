"""Read a cluster snapshot: from a ``kubectl get nodes,pods,pdb -A -o json`` file (or stdin) or a live cluster.

Why this module is more than ``json.load``: a 5,000-node, 150,000-pod cluster prints about 1.2 GB of
JSON (kubectl's indented output, ~8 KB a pod). A generic parse builds several GB of dicts and takes
~12 s here (measured: orjson reaches ~100 MB/s on this two-core machine once it has to allocate every
object), and ``Pod.from_api`` on each pod ~15 s more. The planner needs perhaps a tenth of each object, so:

* The file is decoded by msgspec into typed structs that name only the fields :mod:`shared.model` reads
  (everything else - ``managedFields``, ``containerStatuses``, node images - is skipped without being
  allocated). The scheduling-relevant parts of a pod spec (containers, affinity, tolerations...) stay
  ``msgspec.Raw`` byte slices of the input, decoded only when first seen.
* Pods of one ReplicaSet share their spec, labels and namespace byte for byte, so the parsed results
  (requests, tolerations, parsed selectors and affinity terms) are computed once per distinct template,
  and each part is cached on its own bytes too (DaemonSet pods differ only in their per-node affinity, and
  still share containers and tolerations; a lone node affinity is parsed without the rest). Volumes are
  cached per volume on everything but the name, since every pod's service-account token volume has a
  unique name. A pod is then a handful of dict look-ups and one constructor call (~10 µs; 150,000 pods:
  ~1.2 s to decode, ~2 s to build). The shared objects are immutable (``Pod`` is frozen), so sharing is
  safe and saves memory.
* Everything else (nodes, PDBs, namespaces, PVs, PVCs) goes through the shared ``from_api`` constructors.

The fast path is tested to produce pods equal to ``Pod.from_api`` on the same JSON
(``tests/unit/test_snapshot_io.py``), so it cannot drift from the library silently.

The input file is memory-mapped, not read into the heap; peak memory is the mapping plus the lean views.
A live cluster is listed with pagination (``limit``/``continue``), each page's raw response body decoded
the same way (the Kubernetes client's model objects are far too slow for 150,000 pods).

Every problem with the input is a :class:`SnapshotError` whose message is one line naming the file and
the item (``snapshot snap.json: pod shop/web-1: spec.containers[0].resources.requests.cpu: quantity 'x'
...``), which the CLI prints as is.
"""

from __future__ import annotations

import contextlib
import mmap
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from typing import IO, Any

import msgspec
import orjson
from msgspec import Raw, Struct

from shared.model import (
    EMPTY,
    PDB,
    Namespace,
    Node,
    OwnerRef,
    ParseError,
    PersistentVolume,
    PersistentVolumeClaim,
    Pod,
    Volume,
)
from shared.selectors import parse_node_selector
from shared.snapshot import ClusterSnapshot

__all__ = [
    "SnapshotError",
    "Progress",
    "SnapshotParts",
    "load_snapshot",
    "load_bytes",
    "load_cluster",
    "KINDS",
]

KINDS = ("Node", "Pod", "PodDisruptionBudget", "Namespace", "PersistentVolume", "PersistentVolumeClaim")
"""The item kinds a snapshot may hold; anything else is an error (a typo must not be ignored)."""


class SnapshotError(ValueError):
    """The snapshot cannot be read; the message is one line naming the source and the problem."""


# --- progress ---------------------------------------------------------------------------------------


class Progress:
    """A one-line progress indicator on a terminal (``\\r``-rewritten), silent when disabled.

    A person waiting for a gigabyte snapshot sees what is happening; logs and pipes get nothing, so the
    CLI enables it only when stderr is a TTY.
    """

    def __init__(self, stream: IO[str] | None = None, *, enabled: bool = True, interval: float = 0.1) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self._interval = interval
        self._last = 0.0
        self._width = 0

    def phase(self, text: str) -> None:
        """Show ``text`` now (a new phase always shows)."""
        if self.enabled:
            self._show(text)

    def step(self, label: str, done: int, total: int) -> None:
        """Show ``label: done/total (pct%)``, at most every ``interval`` seconds."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < self._interval and done < total:
            return
        pct = 100 * done // total if total else 100
        self._show(f"{label}: {done:,}/{total:,} ({pct}%)")

    def done(self) -> None:
        """Clear the line."""
        if self.enabled and self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()
            self._width = 0

    def _show(self, text: str) -> None:
        self._last = time.monotonic()
        pad = max(0, self._width - len(text))
        self._stream.write("\r" + text + " " * pad)
        self._stream.flush()
        self._width = len(text)


_QUIET = Progress(enabled=False)

# --- the typed skeleton of the JSON ----------------------------------------------------------------
# Only the fields shared.model reads. Parts kept as Raw are decoded on first sight of their bytes.

_NONE = Raw()


class _Meta(Struct):
    name: str | None = None
    generateName: str | None = None
    namespace: str | None = None
    uid: str | None = None
    labels: Raw = _NONE
    annotations: Raw = _NONE
    ownerReferences: Raw = _NONE
    deletionTimestamp: str | None = None
    creationTimestamp: str | None = None


class _PodSpec(Struct):
    nodeName: str | None = None
    priority: int | None = None
    schedulerName: str | None = None
    containers: Raw = _NONE
    initContainers: Raw = _NONE
    overhead: Raw = _NONE
    resources: Raw = _NONE
    tolerations: Raw = _NONE
    nodeSelector: Raw = _NONE
    affinity: Raw = _NONE
    topologySpreadConstraints: Raw = _NONE
    volumes: list[dict[str, Raw]] | None = None


SPEC_KEYS = frozenset(f for f in _PodSpec.__struct_fields__)
"""The ``spec`` keys decoded; a test checks that ``Pod.from_api`` reads no other."""


class _Container(Struct):
    """What the scheduler reads of a container: requests/limits, host ports, sidecar-ness."""

    resources: Raw = _NONE
    ports: Raw = _NONE
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


class _PodStatus(Struct):
    phase: str | None = None
    conditions: list[_Condition] | None = None


class _NodeStatus(Struct):
    allocatable: Raw = _NONE
    capacity: Raw = _NONE
    conditions: Raw = _NONE


class _PodItem(Struct):
    metadata: _Meta | None = None
    spec: _PodSpec | None = None
    status: _PodStatus | None = None


class _NodeItem(Struct):
    metadata: Raw = _NONE
    spec: Raw = _NONE
    status: _NodeStatus | None = None


class _GenericItem(Struct):
    apiVersion: str | None = None
    metadata: Raw = _NONE
    spec: Raw = _NONE
    status: Raw = _NONE


# Tagged variants for mixed ``v1 List`` items (``kubectl get a,b,c -o json`` sets kind on every item).
class _TPod(_PodItem, tag_field="kind", tag="Pod"):
    pass


class _TNode(_NodeItem, tag_field="kind", tag="Node"):
    pass


class _TPDB(_GenericItem, tag_field="kind", tag="PodDisruptionBudget"):
    pass


class _TNamespace(_GenericItem, tag_field="kind", tag="Namespace"):
    pass


class _TPV(_GenericItem, tag_field="kind", tag="PersistentVolume"):
    pass


class _TPVC(_GenericItem, tag_field="kind", tag="PersistentVolumeClaim"):
    pass


_Tagged = _TPod | _TNode | _TPDB | _TNamespace | _TPV | _TPVC
_UNTAGGED: dict[str, type[Struct]] = {
    "Pod": _PodItem,
    "Node": _NodeItem,
    "PodDisruptionBudget": _GenericItem,
    "Namespace": _GenericItem,
    "PersistentVolume": _GenericItem,
    "PersistentVolumeClaim": _GenericItem,
}
_TAGGED_KIND = {_TPod: "Pod", _TNode: "Node", _TPDB: "PodDisruptionBudget", _TNamespace: "Namespace"}
_TAGGED_KIND.update({_TPV: "PersistentVolume", _TPVC: "PersistentVolumeClaim"})


class _Head(Struct):
    """The top level without decoding the items: their kind tells which typed decoder to use."""

    kind: str | None = None
    apiVersion: str | None = None
    items: Raw = _NONE


class _ListMeta(Struct):
    # ``continue`` is a Python keyword, hence the rename.
    continue_: str | None = msgspec.field(default=None, name="continue")


class _Top(Struct):
    """A ``v1 List`` whose items carry their kind: decoded in one pass."""

    kind: str | None = None
    items: list[_Tagged] | None = None


_HEAD = msgspec.json.Decoder(_Head)
_TOP = msgspec.json.Decoder(_Top)
_LIST_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {
    kind: msgspec.json.Decoder(list[cls])
    for kind, cls in _UNTAGGED.items()  # type: ignore[valid-type]
}


def _loads(raw: Raw) -> Any:
    """A Raw slice as a Python value; an absent field is ``None``."""
    b = bytes(raw)
    return orjson.loads(b) if b else None


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
_TEMPLATE_FIELDS = _CONTAINER_FIELDS + _TOLERATION_FIELDS + _SELECTOR_FIELDS + _AFFINITY_FIELDS + _SPREAD_FIELDS
_POD_FIELDS = tuple(f.name for f in fields(Pod))
FAST_PATH_COMPLETE = set(_POD_FIELDS) == set(_PER_POD) | set(_TEMPLATE_FIELDS)
"""Whether every ``Pod`` field is covered; a test fails if ``shared.model.Pod`` grows a field unknown here."""
_POD_INDEX = {n: i for i, n in enumerate(_POD_FIELDS)}
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

_PVC, _EMPTY_DIR = "persistentVolumeClaim", "emptyDir"
_CACHE_LIMIT = 200_000


class _PodReader:
    """Turns decoded pod items into ``Pod`` views, caching every part by its bytes."""

    def __init__(self) -> None:
        self.templates: dict[tuple[Any, ...], list[Any]] = {}
        self._containers: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._tolerations: dict[bytes, dict[str, Any]] = {}
        self._selectors: dict[bytes, dict[str, Any]] = {}
        self._affinity: dict[tuple[Any, ...], dict[str, Any]] = {}
        self._spread: dict[tuple[bytes, bytes], dict[str, Any]] = {}
        self._maps: dict[bytes, Mapping[str, str]] = {}
        self._owners: dict[bytes, Any] = {}
        self._volumes: dict[tuple[tuple[str, bytes], ...], Volume] = {}

    def read(self, item: _PodItem) -> Pod:
        m = item.metadata or _Meta()
        s = item.spec
        ns = m.namespace or "default"
        name = m.name or m.generateName or ""
        if s is None:
            raise ParseError(f"pod {ns}/{name}: spec is missing")
        st = item.status or _PodStatus()
        labels_b = bytes(m.labels)
        key = (
            ns,
            labels_b,
            bytes(s.containers),
            bytes(s.initContainers),
            bytes(s.overhead),
            bytes(s.resources),
            bytes(s.tolerations),
            bytes(s.nodeSelector),
            bytes(s.affinity),
            bytes(s.topologySpreadConstraints),
        )
        proto = self.templates.get(key)
        if proto is None:
            proto = self._prototype(key, ns, name)
        unschedulable = ready = False
        for c in st.conditions or ():
            if c.type == "PodScheduled":
                unschedulable = c.status == "False" and c.reason == "Unschedulable"
            elif c.type == "Ready":
                ready = c.status == "True"
        # Positional arguments in field order, template values already in place: half the cost of keywords.
        args = proto.copy()
        args[_I_NAME] = name
        args[_I_UID] = m.uid or ""
        args[_I_NODE_NAME] = s.nodeName or ""
        args[_I_PHASE] = st.phase or "Pending"
        args[_I_ANNOTATIONS] = self._map(bytes(m.annotations), ns, name, "metadata.annotations")
        args[_I_OWNERS] = self._owner_refs(bytes(m.ownerReferences), ns, name)
        args[_I_PRIORITY] = int(s.priority) if s.priority is not None else 0
        args[_I_SCHEDULER_NAME] = s.schedulerName or "default-scheduler"
        args[_I_DELETION_TIMESTAMP] = m.deletionTimestamp
        args[_I_CREATION_TIMESTAMP] = m.creationTimestamp or ""
        args[_I_VOLUMES] = self._volume_list(s.volumes, f"pod {ns}/{name}") if s.volumes else ()
        args[_I_UNSCHEDULABLE] = unschedulable
        args[_I_READY] = ready
        return Pod(*args)

    def _prototype(self, key: tuple[Any, ...], ns: str, name: str) -> list[Any]:
        """The positional arguments shared by every pod of a template: its parts, namespace and labels."""
        labels = self._map(key[1], ns, name, "metadata.labels")
        args = list(_POD_DEFAULTS)
        for field_name, value in self._template(key, ns, name).items():
            args[_POD_INDEX[field_name]] = value
        args[_I_NAMESPACE] = ns
        args[_I_LABELS] = labels
        if len(self.templates) >= _CACHE_LIMIT:
            self.templates.clear()
        self.templates[key] = args
        return args

    def _template(self, key: tuple[Any, ...], ns: str, name: str) -> dict[str, Any]:
        """Parse a template's parts, each cached on the bytes it depends on (plus namespace and labels
        where the model reads them: affinity's default namespaces and ``matchLabelKeys``)."""
        _, labels_b, containers, init, overhead, resources, tolerations, selector, affinity, spread = key
        labels = self._map(labels_b, ns, name, "metadata.labels")
        out: dict[str, Any] = {}
        try:
            reduced = (_reduce(containers), _reduce(init), overhead, resources)
        except (msgspec.ValidationError, msgspec.DecodeError):
            reduced = (containers, init, overhead, resources)  # let the model report what is wrong
        part = self._containers.get(reduced)
        if part is None:
            spec = _spec(
                {"containers": reduced[0], "initContainers": reduced[1], "overhead": overhead, "resources": resources}
            )
            part = self._containers[reduced] = _parse_part(ns, name, labels, spec, _CONTAINER_FIELDS)
        out.update(part)
        part = self._tolerations.get(tolerations)
        if part is None:
            spec = _spec({"tolerations": tolerations})
            part = self._tolerations[tolerations] = _parse_part(ns, name, labels, spec, _TOLERATION_FIELDS)
        out.update(part)
        part = self._selectors.get(selector)
        if part is None:
            spec = _spec({"nodeSelector": selector})
            part = self._selectors[selector] = _parse_part(ns, name, labels, spec, _SELECTOR_FIELDS)
        out.update(part)
        aff_key = (
            affinity,
            ns if b"podAffinity" in affinity or b"podAntiAffinity" in affinity else "",
            labels_b if b"LabelKeys" in affinity else b"",
        )
        part = self._affinity.get(aff_key)
        if part is None:
            spec = _spec({"affinity": affinity})
            part = _node_affinity_only(spec.get("affinity"))
            if part is None:
                part = _parse_part(ns, name, labels, spec, _AFFINITY_FIELDS)
            self._affinity[aff_key] = part
        out.update(part)
        spread_key = (spread, labels_b if b"LabelKeys" in spread else b"")
        part = self._spread.get(spread_key)
        if part is None:
            spec = _spec({"topologySpreadConstraints": spread})
            part = self._spread[spread_key] = _parse_part(ns, name, labels, spec, _SPREAD_FIELDS)
        out.update(part)
        return out

    def _map(self, b: bytes, ns: str, name: str, field_name: str) -> Mapping[str, str]:
        if not b or b == b"null":
            return EMPTY
        hit = self._maps.get(b)
        if hit is not None:
            return hit
        value = orjson.loads(b)
        if not value:
            value = EMPTY
        elif not isinstance(value, dict):
            raise ParseError(f"pod {ns}/{name}: {field_name}: expected an object of strings")
        if len(self._maps) >= _CACHE_LIMIT:
            self._maps.clear()
        self._maps[b] = value
        return value

    def _owner_refs(self, b: bytes, ns: str, name: str) -> Any:
        if not b or b == b"null":
            return ()
        hit = self._owners.get(b)
        if hit is None:
            try:
                refs = _OWNER_REFS.decode(b) or ()
            except msgspec.ValidationError as e:
                raise ParseError(f"pod {ns}/{name}: metadata.ownerReferences: {_validation_problem(e)}") from None
            hit = tuple(
                OwnerRef(r.kind or "", r.name or "", r.apiVersion or "", r.uid or "", bool(r.controller)) for r in refs
            )
            if len(self._owners) >= _CACHE_LIMIT:
                self._owners.clear()
            self._owners[b] = hit
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


def _reduce(raw: bytes) -> Any:
    """A container list reduced to what the scheduler reads, as hashable bytes (``None`` if absent)."""
    if not raw or raw == b"null":
        return None
    containers = _CONTAINERS.decode(raw)
    if containers is None:
        return None
    return tuple((bytes(c.resources), bytes(c.ports), c.restartPolicy) for c in containers)


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


def _container(resources: bytes, ports: bytes, restart_policy: str | None) -> dict[str, Any]:
    c: dict[str, Any] = {}
    if resources:
        c["resources"] = orjson.loads(resources)
    if ports:
        c["ports"] = orjson.loads(ports)
    if restart_policy is not None:
        c["restartPolicy"] = restart_policy
    return c


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _node_affinity_only(affinity: Any) -> dict[str, Any] | None:
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
    part = dict.fromkeys(_AFFINITY_FIELDS, empty)
    part["required_affinity"] = required
    return part


def _parse_part(
    ns: str, name: str, labels: Mapping[str, str], spec: dict[str, Any], names: Iterable[str]
) -> dict[str, Any]:
    pod = Pod.from_api({"metadata": {"namespace": ns, "name": name, "labels": dict(labels)}, "spec": spec})
    return {n: getattr(pod, n) for n in names}


# --- other kinds ----------------------------------------------------------------------------------


def _generic(item: _GenericItem, api_version: str | None = None) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    if item.apiVersion or api_version:
        raw["apiVersion"] = item.apiVersion or api_version
    for key in ("metadata", "spec", "status"):
        value = _loads(getattr(item, key))
        if value is not None:
            raw[key] = value
    return raw


def _node(item: _NodeItem) -> Node:
    raw: dict[str, Any] = {"metadata": _loads(item.metadata) or {}, "spec": _loads(item.spec) or {}}
    st = item.status
    if st is not None:
        status = {
            "allocatable": _loads(st.allocatable),
            "capacity": _loads(st.capacity),
            "conditions": _loads(st.conditions),
        }
        raw["status"] = {k: v for k, v in status.items() if v is not None}
    return Node.from_api(raw)


@dataclass(slots=True)
class SnapshotParts:
    """The lean objects of a snapshot before they are assembled (the live loader fills it page by page)."""

    nodes: list[Node]
    pods: list[Pod]
    pdbs: list[PDB]
    namespaces: list[Namespace]
    pvs: list[PersistentVolume]
    pvcs: list[PersistentVolumeClaim]

    @classmethod
    def empty(cls) -> SnapshotParts:
        return cls([], [], [], [], [], [])

    def snapshot(self) -> ClusterSnapshot:
        return ClusterSnapshot(
            self.nodes, self.pods, pdbs=self.pdbs, namespaces=self.namespaces, pvs=self.pvs, pvcs=self.pvcs
        )


class _Reader:
    """Adds decoded items of any kind to :class:`SnapshotParts`."""

    def __init__(self, progress: Progress) -> None:
        self.parts = SnapshotParts.empty()
        self.pods = _PodReader()
        self.progress = progress

    def add(self, kind: str, item: Any, api_version: str | None = None) -> None:
        parts = self.parts
        if kind == "Pod":
            parts.pods.append(self.pods.read(item))
        elif kind == "Node":
            parts.nodes.append(_node(item))
        elif kind == "PodDisruptionBudget":
            parts.pdbs.append(PDB.from_api(_generic(item, api_version)))
        elif kind == "Namespace":
            parts.namespaces.append(Namespace.from_api(_generic(item)))
        elif kind == "PersistentVolume":
            parts.pvs.append(PersistentVolume.from_api(_generic(item)))
        elif kind == "PersistentVolumeClaim":
            parts.pvcs.append(PersistentVolumeClaim.from_api(_generic(item)))
        else:  # pragma: no cover - the decoders admit only KINDS
            raise ParseError(f"unsupported kind {kind!r}")

    def add_all(self, kind_of: Callable[[Any], str], items: list[Any], label: str) -> None:
        total = len(items)
        progress = self.progress
        for i, item in enumerate(items):
            if not i & 1023:
                progress.step(label, i, total)
            kind = kind_of(item)
            try:
                self.add(kind, item)
            except ParseError:
                raise
            except (TypeError, AttributeError, ValueError, KeyError, IndexError) as e:
                # A shape the library's constructors do not expect (a list where an object belongs...).
                raise ParseError(f"items[{i}] ({kind}): malformed object: {e}") from None
            items[i] = None  # drop the decoded struct as soon as it is converted
        progress.step(label, total, total)


# --- files --------------------------------------------------------------------------------------------


def _json_problem(e: Exception) -> str:
    text = str(e).strip().rstrip(".")
    return text[0].lower() + text[1:] if text else type(e).__name__


def load_bytes(data: Any, *, source: str = "snapshot", progress: Progress = _QUIET) -> ClusterSnapshot:
    """Parse a snapshot from a bytes-like object (bytes, mmap): a ``v1 List`` or any object with ``items``.

    Items need a ``kind`` unless the top-level kind names one (``PodList``, as the API returns it).
    """
    where = f"snapshot {source}"
    progress.phase(f"decoding {source} ({len(data) / 1e6:,.0f} MB)")
    reader = _Reader(progress)
    try:
        try:
            top = _TOP.decode(data)
        except msgspec.ValidationError as e:
            if " - at `" not in str(e):  # the top level itself is not an object
                raise SnapshotError(
                    f"{where}: expected a JSON object with items (a List), got something else"
                ) from None
            if "missing required field `kind`" not in str(e):
                raise
            # Items without a kind: only a typed list (``PodList``, as the API returns it) says what they are.
            head = _HEAD.decode(data)
            top_kind = head.kind or ""
            single = top_kind[:-4] if top_kind.endswith("List") else ""
            if single not in _LIST_DECODERS:
                if single:
                    raise SnapshotError(
                        f"{where}: unsupported kind {top_kind!r} (supported: {', '.join(KINDS)})"
                    ) from None
                raise
            items: list[Any] = _LIST_DECODERS[single].decode(head.items)
            del head
            reader.add_all(lambda _: single, items, f"reading {single.lower()}s")
        else:
            if top.items is None:
                got = f"a {top.kind}" if top.kind else "an object without items"
                raise SnapshotError(
                    f"{where}: expected a List with items (kubectl get nodes,pods,pdb -A -o json), got {got}"
                )
            items = top.items
            del top
            reader.add_all(lambda it: _TAGGED_KIND[type(it)], items, "reading objects")
    except msgspec.ValidationError as e:
        raise SnapshotError(f"{where}: {_validation_problem(e)}") from None
    except msgspec.DecodeError as e:
        raise SnapshotError(f"{where}: not valid JSON: {_json_problem(e)}") from None
    except ParseError as e:
        raise SnapshotError(f"{where}: {e}") from None
    progress.phase(f"indexing {len(reader.parts.pods):,} pods on {len(reader.parts.nodes):,} nodes")
    snap = reader.parts.snapshot()
    progress.done()
    return snap


def _validation_problem(e: msgspec.ValidationError) -> str:
    """msgspec's message with the path made relative to the items array: ``$[3].kind`` → ``items[3].kind``."""
    text = str(e)
    msg, sep, path = text.partition(" - at `")
    path = path.rstrip("`")
    if path.startswith("$"):
        path = "items" + path[1:]
    msg = msg.replace("Invalid value", "unsupported kind").replace(
        "Object missing required field `kind`", "item has no kind"
    )
    if "unsupported kind" in msg:
        msg += f" (supported: {', '.join(KINDS)})"
    msg = msg[0].lower() + msg[1:] if msg else msg
    return f"{path}: {msg}" if sep else msg


def load_snapshot(path: str, *, progress: Progress = _QUIET, stdin: IO[bytes] | None = None) -> ClusterSnapshot:
    """Load ``path`` (``-`` is stdin). A regular file is memory-mapped rather than read into the heap."""
    if path == "-":
        stream = stdin if stdin is not None else sys.stdin.buffer
        progress.phase("reading standard input")
        return load_bytes(stream.read(), source="<stdin>", progress=progress)
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below; the mapping outlives the with-block otherwise
    except OSError as e:
        raise SnapshotError(f"snapshot {path}: cannot be read ({e.strerror or type(e).__name__})") from None
    with fh:
        data: Any
        try:
            data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):
            data = fh.read()  # not mappable (a pipe, /dev/stdin, an empty file): read it
        if len(data) == 0:
            raise SnapshotError(f"snapshot {path}: is empty")
        try:
            return load_bytes(data, source=path, progress=progress)
        finally:
            if isinstance(data, mmap.mmap):
                # An error's traceback may still reference the input: then the mapping goes with it.
                with contextlib.suppress(BufferError):
                    data.close()


# --- a live cluster -------------------------------------------------------------------------------


class _Page(Struct):
    metadata: _ListMeta | None = None
    items: Raw = _NONE


_PAGE = msgspec.json.Decoder(_Page)

# (kind, path, api version given to from_api, required): PDBs fall back to policy/v1beta1 (Kubernetes < 1.21).
_RESOURCES = (
    ("Node", "/api/v1/nodes", None),
    ("Namespace", "/api/v1/namespaces", None),
    ("PersistentVolume", "/api/v1/persistentvolumes", None),
    ("PersistentVolumeClaim", "/api/v1/persistentvolumeclaims", None),
    ("PodDisruptionBudget", "/apis/policy/v1/poddisruptionbudgets", "policy/v1"),
    ("Pod", "/api/v1/pods", None),
)
_PDB_V1BETA1 = "/apis/policy/v1beta1/poddisruptionbudgets"

Fetch = Callable[[str, list[tuple[str, Any]]], bytes]
"""``fetch(path, query) -> raw response body``; raises :class:`NotFound` for HTTP 404."""


class NotFound(Exception):
    """The API server does not serve this path (HTTP 404)."""


def list_pages(
    fetch: Fetch,
    kind: str,
    path: str,
    reader: _Reader,
    *,
    page_size: int,
    query: list[tuple[str, Any]] | None = None,
    api_version: str | None = None,
) -> int:
    """List one resource page by page (``limit``/``continue``), adding each item; returns the item count."""
    token: str | None = None
    count = 0
    decoder = _LIST_DECODERS[kind]
    while True:
        q = [("limit", page_size), *(query or [])]
        if token:
            q.append(("continue", token))
        body = fetch(path, q)
        page = _PAGE.decode(body)
        items = decoder.decode(page.items) if bytes(page.items) not in (b"", b"null") else []
        for item in items:
            try:
                reader.add(kind, item, api_version)
            except ParseError:
                raise
            except (TypeError, AttributeError, ValueError, KeyError, IndexError) as e:
                raise ParseError(f"{kind}: malformed object: {e}") from None
        count += len(items)
        reader.progress.phase(f"listing {kind} objects: {count:,}")
        token = page.metadata.continue_ if page.metadata is not None else None
        if not token:
            return count


def load_cluster(
    kubeconfig: str | None = None,
    *,
    context: str | None = None,
    page_size: int = 500,
    progress: Progress = _QUIET,
    fetch: Fetch | None = None,
) -> ClusterSnapshot:
    """List nodes, namespaces, PVs, PVCs, PDBs and non-terminal pods from the cluster into a snapshot.

    ``fetch`` replaces the HTTP layer (tests); by default the kubeconfig (or the in-cluster service
    account when there is no kubeconfig) configures a Kubernetes ``ApiClient`` used only for raw GETs.
    """
    if fetch is None:
        fetch = _client_fetch(kubeconfig, context)
    reader = _Reader(progress)
    try:
        for kind, path, api_version in _RESOURCES:
            query: list[tuple[str, Any]] = []
            if kind == "Pod":
                # Finished pods hold no resources and are never moved: do not transfer them at all.
                query = [("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed")]
            try:
                list_pages(fetch, kind, path, reader, page_size=page_size, query=query, api_version=api_version)
            except NotFound:
                if kind != "PodDisruptionBudget":
                    raise
                list_pages(fetch, kind, _PDB_V1BETA1, reader, page_size=page_size, api_version="policy/v1beta1")
    except NotFound as e:
        raise SnapshotError(f"cluster: {e} is not served by the API server") from None
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise SnapshotError(f"cluster: unexpected response: {_json_problem(e)}") from None
    except ParseError as e:
        raise SnapshotError(f"cluster: {e}") from None
    progress.phase(f"indexing {len(reader.parts.pods):,} pods on {len(reader.parts.nodes):,} nodes")
    snap = reader.parts.snapshot()
    progress.done()
    return snap


def _client_fetch(kubeconfig: str | None, context: str | None) -> Fetch:
    """Raw GETs through :mod:`rescheduler.cluster.kube`, the rescheduler's one door to the API server."""
    from rescheduler.cluster.kube import ApiError, Kube, KubeconfigError, transport_from_kubeconfig
    from rescheduler.cluster.kube import NotFound as ApiNotFound

    try:
        kube = Kube(transport_from_kubeconfig(kubeconfig, context))
    except KubeconfigError as e:
        raise SnapshotError(f"cluster: {e}") from None

    def fetch(path: str, query: list[tuple[str, Any]]) -> bytes:
        try:
            return kube.get_raw(path, query)
        except ApiNotFound:
            raise NotFound(path) from None
        except ApiError as e:
            raise SnapshotError(f"cluster: GET {path}: {' '.join(str(e).split())}") from None

    return fetch
