"""A big snapshot file read by two processes at once: :func:`read_in_two`.

Reading a 1.25 GB snapshot is one core's work for seconds (``bench/plan_scale.py``): msgspec decodes the JSON,
then every pod is built (:mod:`rescheduler.decode.pods`). Both scale with the bytes, so on a machine with
another core the file is cut in two at an item boundary; a forked child reads the second half while this
process reads the first, then sends what it built as plain rows (each pod's own fields, plus its template's
once), which this process turns back into the same objects. The snapshot is the one a single process reads:
the same objects in the same order (``tests/unit/test_snapshot_split.py``).

Where to cut without parsing: kubectl prints a list with four-space indentation, the items one level in, so
in its layout the bytes ``\\n        },\\n        {\\n`` (a JSON string cannot hold a newline) separate two
items of a top-level array; it is ``items`` when the first half holds nothing but ``apiVersion`` and
``items`` (decoded strictly: an ``items`` that ended before the cut would be followed by another key). Each
half is made a document of its own in the process's private copy-on-write view of the file (``]}`` after the
first half, ``{"items":[`` before the second: a page copied, nothing else), and decoded with the same typed
decoders. Anything else (another layout, a file too small to be worth it, no ``fork``,
an error in either half, a child that fails) returns ``None`` and the caller reads the file in one piece,
which also words any error as it always has.
"""

from __future__ import annotations

import contextlib
import mmap
import pickle
from collections.abc import Callable
from io import BytesIO
from itertools import starmap
from operator import attrgetter, itemgetter
from types import MappingProxyType
from typing import Any

import msgspec

from rescheduler.decode.pods import TEMPLATE_FIELDS
from rescheduler.parallel import forked
from shared.model import EMPTY, Pod, Volume

__all__ = ["read_in_two", "split_point", "MIN_BYTES", "HEAD"]

MIN_BYTES = 64 * 2**20
"""Below this, forking costs more than it saves."""
FIRST_SHARE = 0.55
"""Where the cut is looked for, as a share of the bytes: this process takes a little more than half, since the
child also packs what it built and this process unpacks it once both are done (tuned with the two-process
parse phase of ``bench/plan_scale.py``)."""
HEAD = b'{\n    "apiVersion": "v1",\n    "items": [\n'
"""How kubectl's ``-o json`` list starts."""
_BETWEEN = b"\n        },\n        {\n"
"""Between two items of a list in kubectl's layout."""
_CLOSE = b"]}"  # after the first half's last item, in place of ",\n"
_OPEN = b'{"items":['  # before the second half's first item, in place of ",\n" and 8 spaces

Reader = Callable[[Any, bool], Any]
"""Decodes a buffer holding a tagged ``v1 List`` into :class:`~rescheduler.decode.reader.SnapshotParts`; with
``True``, a top level holding any key but ``apiVersion`` and ``items`` is an error."""


def split_point(data: Any, min_bytes: int = MIN_BYTES) -> int | None:
    """Where the items of a kubectl-layout list are cut in two: the offset of the ``}`` ending the first half's
    last item (the first boundary after :data:`FIRST_SHARE` of the bytes), or ``None`` when the data is not in
    that layout or smaller than ``min_bytes``."""
    if len(data) < min_bytes or data[: len(HEAD)] != HEAD:
        return None
    at = data.find(_BETWEEN, int(len(data) * FIRST_SHARE))
    return None if at < 0 else at + len(b"\n        ")


def read_in_two(fd: int, size: int, read: Reader, min_bytes: int = MIN_BYTES) -> Any | None:
    """The snapshot parts of the file ``fd`` (``size`` bytes), read by this process and a forked child, or
    ``None`` (see the module docstring). ``read`` decodes one half; it is called in both processes."""
    if not forked.can_fork() or size < min_bytes or size == 0:
        return None
    try:
        view = mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except (OSError, ValueError):
        return None
    try:
        return _read_in_two(view, read, min_bytes)
    finally:
        with contextlib.suppress(BufferError):  # something decoded still points into it: it goes with that
            view.close()


def _read_in_two(view: mmap.mmap, read: Reader, min_bytes: int) -> Any | None:
    end = split_point(view, min_bytes)
    if end is None:
        return None

    def second_half() -> bytes:
        start = end + 1  # the ",\n" and eight spaces after the "}" make room for the opening
        view[start : start + len(_OPEN)] = _OPEN
        return _pack(read(memoryview(view)[start:], False))

    child = forked.fork(second_half)
    if child is None:
        return None
    first: Any = None
    try:
        view[end + 1 : end + 1 + len(_CLOSE)] = _CLOSE
        first = read(memoryview(view)[: end + 1 + len(_CLOSE)], True)
    except Exception:
        first = None
    answer = forked.read_back(child)
    if first is None or answer is None:
        return None
    try:
        kinds, pods = _unpack(answer)
    except Exception:
        return None
    for name in _KINDS:
        getattr(first, name).extend(kinds[name])
    first.pods.extend(pods)
    return first


# --- the child's answer ----------------------------------------------------------------------------------

_KINDS = ("nodes", "pdbs", "namespaces", "pvs", "pvcs", "storage_classes", "node_pools")
_FIELDS = Pod.__dataclass_fields__
_TEMPLATE = ("namespace", "labels", *TEMPLATE_FIELDS)
"""The fields pods of one template share (the same objects: :mod:`rescheduler.decode.pods`)."""
_OWN = tuple(f for f in _FIELDS if f not in _TEMPLATE)
"""Each pod's own fields."""
_template_of = attrgetter(*_TEMPLATE)
_own_of = attrgetter(*_OWN)
_in_field_order = itemgetter(*((_TEMPLATE + _OWN).index(f) for f in _FIELDS))
"""A pod's arguments in ``Pod``'s field order, from its template's values followed by its own."""


def _proxy(d: dict[str, str]) -> Any:
    return MappingProxyType(d) if d else EMPTY


class _Pickler(pickle.Pickler):
    """Pickles the model's read-only mappings (``MappingProxyType``, which pickle refuses) as their dicts."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is MappingProxyType:
            return _proxy, (dict(obj),)
        return NotImplemented


_I_ANNOTATIONS = _OWN.index("annotations")
_I_OWNERS = _OWN.index("owners")
_I_VOLUMES = _OWN.index("volumes")
_I_SCHEDULING_GATES = _OWN.index("scheduling_gates")
_I_RESOURCE_CLAIMS = _OWN.index("resource_claims")


def _pack(parts: Any) -> bytes:
    """The parts as bytes: each pod a msgpack row of its own fields, with its template and its owner
    references as indexes into lists pickled once (the same objects for every pod of a template or owner)."""
    index: dict[tuple[int, ...], int] = {}
    templates: list[tuple[Any, ...]] = []
    owner_index: dict[int, int] = {}
    owners: list[Any] = []
    rows: list[list[Any]] = []
    for pod in parts.pods:
        shared = _template_of(pod)
        key = tuple(map(id, shared))
        t = index.get(key)
        if t is None:
            t = index[key] = len(templates)
            templates.append(shared)
        row = [t, *_own_of(pod)]
        refs = pod.owners
        o = owner_index.get(id(refs))
        if o is None:
            o = owner_index[id(refs)] = len(owners)
            owners.append(refs)
        row[1 + _I_OWNERS] = o
        row[1 + _I_ANNOTATIONS] = dict(pod.annotations) if pod.annotations else None
        row[1 + _I_VOLUMES] = [(v.name, v.kind, v.claim_name, v.medium) for v in pod.volumes]
        rows.append(row)
    out = BytesIO()
    _Pickler(out, protocol=pickle.HIGHEST_PROTOCOL).dump(
        ({name: getattr(parts, name) for name in _KINDS}, templates, owners)
    )
    head = out.getvalue()
    return len(head).to_bytes(8, "little") + head + msgspec.msgpack.encode(rows)


def _unpack(data: bytes) -> tuple[dict[str, list[Any]], list[Pod]]:
    """The child's parts: the other kinds by name, and the pods in order."""
    n = int.from_bytes(data[:8], "little")
    # This process's own child's answer, over a pipe only the two of them hold.
    kinds, templates, owners = pickle.loads(data[8 : 8 + n])
    rows = msgspec.msgpack.decode(memoryview(data)[8 + n :])
    pods = []
    order, volume, empty = _in_field_order, Volume, EMPTY
    for row in rows:
        own = row[1:]
        own[_I_OWNERS] = owners[own[_I_OWNERS]]
        own[_I_ANNOTATIONS] = own[_I_ANNOTATIONS] or empty
        own[_I_VOLUMES] = tuple(starmap(volume, own[_I_VOLUMES]))
        own[_I_SCHEDULING_GATES] = tuple(own[_I_SCHEDULING_GATES])  # msgpack hands tuples back as lists
        own[_I_RESOURCE_CLAIMS] = tuple(own[_I_RESOURCE_CLAIMS])
        pods.append(Pod(*order(templates[row[0]] + tuple(own))))
    return kinds, pods
