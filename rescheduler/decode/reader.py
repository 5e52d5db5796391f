"""Read a cluster snapshot from a ``kubectl get nodes,pods,pdb,pv,pvc,storageclass -A -o json`` file (or stdin).

Why this module is more than ``json.load``: a 5,000-node, 150,000-pod cluster prints about 1.2 GB of JSON
(kubectl's indented output). A generic parse builds several GB of dicts, and ``Pod.from_api`` on each pod
costs as much again; the planner needs perhaps a tenth of each object (``bench/plan_scale.py`` measures the
whole path, figures in ``bench/README.md``). So:

* The file is decoded by msgspec into typed structs that name only the fields :mod:`shared.model` reads
  (everything else - ``managedFields``, ``containerStatuses``, node images - is skipped without being
  allocated). The scheduling-relevant parts of a pod spec (containers, affinity, tolerations...) stay
  ``msgspec.Raw`` byte slices of the input, decoded only when first seen.
* Pods take the fast path of :mod:`rescheduler.decode.pods`: parsed once per distinct template, each part
  cached on its own bytes, tested to build pods equal to ``Pod.from_api``.
* Everything else (nodes, PDBs, namespaces, PVs, PVCs, StorageClasses) goes through the shared ``from_api``
  constructors.

The input file is memory-mapped, not read into the heap; peak memory is the mapping plus the lean views.
A live cluster is read by :mod:`rescheduler.cluster.listing` into the same :class:`SnapshotParts`.

Every problem with the input is a :class:`SnapshotError` whose message is one line naming the file and
the item (``snapshot snap.json: pod shop/web-1: spec.containers[0].resources.requests.cpu: quantity 'x'
...``), which the CLI prints as is.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

import msgspec
import orjson
from msgspec import Raw, Struct

from rescheduler.decode.pods import NONE, PodItem, PodReader, validation_problem
from rescheduler.decode.split import MIN_BYTES as SPLIT_MIN_BYTES
from rescheduler.decode.split import read_in_two
from shared.disruption import with_computed_status
from shared.model import PDB, Namespace, Node, ParseError, PersistentVolume, PersistentVolumeClaim, Pod
from shared.nodepools import NodePool
from shared.snapshot import ClusterSnapshot
from shared.storage import StorageClass

__all__ = [
    "SnapshotError",
    "Progress",
    "SnapshotParts",
    "load_snapshot",
    "load_bytes",
    "KINDS",
    "LIST_DECODERS",
    "SnapshotReader",
    "json_problem",
    "read_tagged",
]

KINDS = (
    "Node",
    "Pod",
    "PodDisruptionBudget",
    "Namespace",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "StorageClass",
    "NodePool",
)
"""The item kinds a snapshot may hold; anything else is an error (a typo must not be ignored). The volume check
(:mod:`shared.volumes`) reads PersistentVolumes, their claims and the claims' StorageClasses; Karpenter's
NodePools (``kubectl get nodes,pods,pdb,pv,pvc,storageclass,nodepools.karpenter.sh -A -o json`` on a Karpenter
cluster) say which nodes Karpenter consolidates by itself (:mod:`shared.nodepools`)."""


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

# --- the typed skeleton of the other kinds ------------------------------------------------------


class _NodeStatus(Struct):
    allocatable: Raw = NONE
    capacity: Raw = NONE
    conditions: Raw = NONE


class _NodeItem(Struct):
    metadata: Raw = NONE
    spec: Raw = NONE
    status: _NodeStatus | None = None


class _GenericItem(Struct):
    apiVersion: str | None = None
    metadata: Raw = NONE
    spec: Raw = NONE
    status: Raw = NONE


class _StorageClassItem(Struct):
    """A StorageClass keeps its fields at the top level, not under ``spec``."""

    metadata: Raw = NONE
    provisioner: str | None = None
    volumeBindingMode: str | None = None
    allowedTopologies: Raw = NONE


# Tagged variants for mixed ``v1 List`` items (``kubectl get a,b,c -o json`` sets kind on every item).
class _TPod(PodItem, tag_field="kind", tag="Pod"):
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


class _TSC(_StorageClassItem, tag_field="kind", tag="StorageClass"):
    pass


class _TNodePool(_GenericItem, tag_field="kind", tag="NodePool"):
    pass


_Tagged = _TPod | _TNode | _TPDB | _TNamespace | _TPV | _TPVC | _TSC | _TNodePool
_UNTAGGED: dict[str, type[Struct]] = {
    "Pod": PodItem,
    "Node": _NodeItem,
    "PodDisruptionBudget": _GenericItem,
    "Namespace": _GenericItem,
    "PersistentVolume": _GenericItem,
    "PersistentVolumeClaim": _GenericItem,
    "StorageClass": _StorageClassItem,
    "NodePool": _GenericItem,
}
_TAGGED_KIND: dict[type, str] = {_TPod: "Pod", _TNode: "Node", _TPDB: "PodDisruptionBudget", _TNamespace: "Namespace"}
_TAGGED_KIND.update({_TPV: "PersistentVolume", _TPVC: "PersistentVolumeClaim", _TSC: "StorageClass"})
_TAGGED_KIND[_TNodePool] = "NodePool"


class _Head(Struct):
    """The top level without decoding the items: their kind tells which typed decoder to use."""

    kind: str | None = None
    apiVersion: str | None = None
    items: Raw = NONE


class _Top(Struct):
    """A ``v1 List`` whose items carry their kind: decoded in one pass."""

    kind: str | None = None
    items: list[_Tagged] | None = None


_HEAD = msgspec.json.Decoder(_Head)
_TOP = msgspec.json.Decoder(_Top)
LIST_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {
    kind: msgspec.json.Decoder(list[cls])  # type: ignore[valid-type]
    for kind, cls in _UNTAGGED.items()
}


def _loads(raw: Raw) -> Any:
    """A Raw slice as a Python value; an absent field is ``None``."""
    b = bytes(raw)
    return orjson.loads(b) if b else None


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


def _storage_class(item: _StorageClassItem) -> StorageClass:
    return StorageClass.from_api(
        {
            "metadata": _loads(item.metadata) or {},
            "provisioner": item.provisioner,
            "volumeBindingMode": item.volumeBindingMode,
            "allowedTopologies": _loads(item.allowedTopologies),
        }
    )


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
    storage_classes: list[StorageClass]
    node_pools: list[NodePool]
    node_pools_problem: str | None = None
    """Why the NodePools could not be listed (a live cluster refusing them), ``None`` otherwise."""

    @classmethod
    def empty(cls) -> SnapshotParts:
        return cls([], [], [], [], [], [], [], [])

    def snapshot(self) -> ClusterSnapshot:
        """The snapshot; budgets whose status is absent or stale get it computed from the pods, as the run
        loop's state does (:mod:`shared.disruption`)."""
        return ClusterSnapshot(
            self.nodes,
            self.pods,
            pdbs=with_computed_status(self.pdbs, self.pods),
            namespaces=self.namespaces,
            pvs=self.pvs,
            pvcs=self.pvcs,
            storage_classes=self.storage_classes,
            node_pools=self.node_pools,
            node_pools_problem=self.node_pools_problem,
        )


class SnapshotReader:
    """Adds decoded items of any kind to :class:`SnapshotParts`."""

    def __init__(self, progress: Progress) -> None:
        self.parts = SnapshotParts.empty()
        self.pods = PodReader()
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
        elif kind == "StorageClass":
            parts.storage_classes.append(_storage_class(item))
        elif kind == "NodePool":
            parts.node_pools.append(NodePool.from_api(_generic(item)))
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


def json_problem(e: Exception) -> str:
    text = str(e).strip().rstrip(".")
    return text[0].lower() + text[1:] if text else type(e).__name__


class _FirstHalf(Struct, forbid_unknown_fields=True):
    """The first part of a list cut in two (:mod:`rescheduler.decode.split`): nothing but these keys."""

    apiVersion: str | None = None
    items: list[_Tagged] | None = None


_FIRST_HALF = msgspec.json.Decoder(_FirstHalf)


def read_tagged(data: Any, progress: Progress = _QUIET, first_half: bool = False) -> SnapshotParts:
    """The parts of a ``v1 List`` whose items all carry their kind (kubectl's ``get a,b,c -o json``), from any
    bytes-like object; raises what :func:`load_bytes` turns into a :class:`SnapshotError`. ``first_half``:
    refuse a top level with any key but ``apiVersion`` and ``items``."""
    reader = SnapshotReader(progress)
    top = (_FIRST_HALF if first_half else _TOP).decode(data)
    if top.items is None:
        raise ParseError("no items")
    items = top.items
    del top
    reader.add_all(lambda it: _TAGGED_KIND[type(it)], items, "reading objects")
    return reader.parts


def load_bytes(data: Any, *, source: str = "snapshot", progress: Progress = _QUIET) -> ClusterSnapshot:
    """Parse a snapshot from a bytes-like object (bytes, mmap): a ``v1 List`` or any object with ``items``.

    Items need a ``kind`` unless the top-level kind names one (``PodList``, as the API returns it).
    """
    where = f"snapshot {source}"
    progress.phase(f"decoding {source} ({len(data) / 1e6:,.0f} MB)")
    reader = SnapshotReader(progress)
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
            if single not in LIST_DECODERS:
                if single:
                    raise SnapshotError(
                        f"{where}: unsupported kind {top_kind!r} (supported: {', '.join(KINDS)})"
                    ) from None
                raise
            items: list[Any] = LIST_DECODERS[single].decode(head.items)
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
        raise SnapshotError(f"{where}: not valid JSON: {json_problem(e)}") from None
    except ParseError as e:
        raise SnapshotError(f"{where}: {e}") from None
    progress.phase(f"indexing {len(reader.parts.pods):,} pods on {len(reader.parts.nodes):,} nodes")
    snap = reader.parts.snapshot()
    progress.done()
    return snap


def _validation_problem(e: msgspec.ValidationError) -> str:
    return validation_problem(e, KINDS)


def _map(fd: int) -> mmap.mmap:
    """The whole file, read-only; on Linux its pages are faulted in at once (``MAP_POPULATE``): the decoder
    reads every byte, and one call costs less than a fault every few pages."""
    populate = getattr(mmap, "MAP_POPULATE", 0)
    if populate:
        return mmap.mmap(fd, 0, flags=mmap.MAP_SHARED | populate, prot=mmap.PROT_READ)
    return mmap.mmap(fd, 0, access=mmap.ACCESS_READ)


def _read_in_two(fh: IO[bytes], path: str, progress: Progress) -> ClusterSnapshot | None:
    """The snapshot of a big regular file in kubectl's layout, read by two processes; ``None`` otherwise."""
    try:
        size = os.fstat(fh.fileno()).st_size
    except OSError:
        return None
    if size < SPLIT_MIN_BYTES:
        return None
    progress.phase(f"decoding {path} ({size / 1e6:,.0f} MB) in two processes")
    # Only this process, which reads the first half, shows progress: two writers would garble the line.
    parts = read_in_two(fh.fileno(), size, lambda half, first: read_tagged(half, progress if first else _QUIET, first))
    if parts is None:
        return None
    progress.phase(f"indexing {len(parts.pods):,} pods on {len(parts.nodes):,} nodes")
    snap = parts.snapshot()
    progress.done()
    return snap


def load_snapshot(
    path: str, *, progress: Progress = _QUIET, stdin: IO[bytes] | None = None, workers: int = 1
) -> ClusterSnapshot:
    """Load ``path`` (``-`` is stdin). A regular file is memory-mapped rather than read into the heap; with
    ``workers`` above 1, a big file in kubectl's layout is read by two processes at once
    (:mod:`rescheduler.decode.split`), which gives the same snapshot."""
    if path == "-":
        stream = stdin if stdin is not None else sys.stdin.buffer
        progress.phase("reading standard input")
        return load_bytes(stream.read(), source="<stdin>", progress=progress)
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below; the mapping outlives the with-block otherwise
    except OSError as e:
        raise SnapshotError(f"snapshot {path}: cannot be read ({e.strerror or type(e).__name__})") from None
    with fh:
        if workers > 1:
            snap = _read_in_two(fh, path, progress)
            if snap is not None:
                return snap
        data: Any
        try:
            data = _map(fh.fileno())
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
