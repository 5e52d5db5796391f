"""Per-snapshot memo for what kube-scheduler's PreFilter computes once per pod.

kube-scheduler runs a plugin's PreFilter once per scheduling cycle (one pod, one snapshot) and then calls
Filter for every node against that precomputed state. spotshift's predicates are plain functions called
per (pod, node), so the same precomputation is memoised here, keyed on the snapshot's identity, its
``version`` (bumped by every ``add_pod``/``remove_pod``/``move_pod``) and the pod's identity. Checking one
pod against many nodes at one version then costs one cluster scan plus O(1) per node.

Correctness rests on the snapshot changing only through its own methods: a direct ``NodeInfo.add_pod``
does not bump the version, so state memoised before it would be stale. The memo keeps at most a bounded
number of pods per snapshot and never keeps a snapshot alive (a weak reference checks its identity).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from shared.snapshot import ClusterSnapshot

__all__ = ["SnapshotMemo"]

K = TypeVar("K")
V = TypeVar("V")


class _Entry:
    __slots__ = ("ref", "version", "values")

    def __init__(self, ref: weakref.ref[ClusterSnapshot], version: int) -> None:
        self.ref = ref
        self.version = version
        self.values: dict[int, tuple[object, object]] = {}


class SnapshotMemo(Generic[K, V]):
    """``lookup(snapshot, key, build)`` returns ``build(key, snapshot)``, computed once per snapshot version.

    ``key`` is compared by identity (pods hold dicts, so they are not hashable); the memo holds a strong
    reference to it, so its ``id`` cannot be reused while the entry lives. ``max_keys`` bounds memory: when a
    snapshot version has seen that many keys, its memo starts over.
    """

    __slots__ = ("_entries", "_max_keys")

    def __init__(self, max_keys: int = 4096) -> None:
        self._entries: dict[int, _Entry] = {}
        self._max_keys = max_keys

    def lookup(self, snapshot: ClusterSnapshot, key: K, build: Callable[[K, ClusterSnapshot], V]) -> V:
        version = snapshot.version
        entry = self._entries.get(id(snapshot))
        if entry is None or entry.ref() is not snapshot:
            entry = self._new_entry(snapshot, version)
        elif entry.version != version:
            entry.version = version
            entry.values = {}
        hit = entry.values.get(id(key))
        if hit is not None and hit[0] is key:
            return hit[1]  # type: ignore[return-value]
        value = build(key, snapshot)
        values = entry.values
        if len(values) >= self._max_keys:
            values.clear()
        values[id(key)] = (key, value)
        return value

    def _new_entry(self, snapshot: ClusterSnapshot, version: int) -> _Entry:
        sid = id(snapshot)
        entries = self._entries

        def _forget(_: object, sid: int = sid) -> None:
            entry = entries.get(sid)
            if entry is not None and entry.ref() is None:
                del entries[sid]

        entry = _Entry(weakref.ref(snapshot, _forget), version)
        entries[sid] = entry
        return entry

    def clear(self) -> None:
        """Forget everything (tests; a caller that mutated a snapshot behind its back)."""
        self._entries.clear()
