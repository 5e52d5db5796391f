"""JSON Patch (RFC 6902) operations with RFC 6901 pointers, built only by appending.

The webhook never removes anything and replaces nothing the user wrote. A missing parent is created with one
``add`` of the whole subtree (JSON Patch cannot create intermediate objects by itself), an existing array gets
``/-`` appends. Pointer tokens are escaped here, once, so a label key such as
``node-role.kubernetes.io/spot-worker`` used as a map key can never turn into extra path segments.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any, Literal, TypedDict

__all__ = ["Op", "escape", "pointer", "Patch"]


class Op(TypedDict):
    """One RFC 6902 operation: ``add``, and ``replace`` only for a value the API server defaulted."""

    op: Literal["add", "replace"]
    path: str
    value: Any


def escape(token: str | int) -> str:
    """Escape one reference token (RFC 6901 §3): ``~`` → ``~0`` first, then ``/`` → ``~1``."""
    return str(token).replace("~", "~0").replace("/", "~1")


def pointer(tokens: Iterable[str | int]) -> str:
    """``["metadata", "labels", "a/b"]`` → ``/metadata/labels/a~1b``; ``[]`` is the whole document."""
    return _pointer(tuple(tokens))


@functools.lru_cache(maxsize=1024)
def _pointer(tokens: tuple[str | int, ...]) -> str:
    # The webhook writes the same few paths for every pod: build each string once.
    return "".join("/" + escape(t) for t in tokens)


class Patch:
    """Collects ``add`` operations against a document, creating missing parents and appending to arrays.

    Existence is looked up in the caller's document plus the subtrees this patch has created so far, so a
    later append below a parent created earlier in the same patch becomes ``/-`` rather than a second,
    clobbering ``add`` of the parent. Neither the document nor an emitted value is ever modified.
    """

    __slots__ = ("_doc", "_created", "ops")

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self._doc = doc
        self._created: dict[tuple[str | int, ...], Any] = {}
        self.ops: list[Op] = []

    def __bool__(self) -> bool:
        return bool(self.ops)

    def _lookup(self, tokens: tuple[str | int, ...]) -> tuple[Any, int]:
        """The deepest existing value along ``tokens`` and how many tokens exist (``null`` counts as absent)."""
        node: Any = self._doc
        for i, t in enumerate(tokens):
            child = None
            if type(t) is int:
                if isinstance(node, list) and 0 <= t < len(node):
                    child = node[t]
                if child is None:
                    raise IndexError(f"{pointer(tokens[: i + 1])} does not exist")
            elif isinstance(node, Mapping):
                child = node.get(t)
            if child is None:
                child = self._created.get(tokens[: i + 1])
                if child is None:
                    return node, i
            node = child
        return node, len(tokens)

    def append(self, path: Iterable[str | int], *items: Any) -> None:
        """Append ``items`` to the array at ``path``, creating the array and any missing parents."""
        if not items:
            return
        tokens = tuple(path)
        node, depth = self._lookup(tokens)
        if depth == len(tokens):
            if not isinstance(node, list):
                raise TypeError(f"{pointer(tokens)} is not an array")
            at = _pointer(tokens) + "/-"
            self.ops.extend({"op": "add", "path": at, "value": item} for item in items)
        else:
            self._create(tokens, depth, list(items))

    def set_missing(self, path: Iterable[str | int], value: Any) -> bool:
        """Set ``path`` to ``value`` only if it is absent (or null); returns whether an op was added."""
        tokens = tuple(path)
        _, depth = self._lookup(tokens)
        if depth == len(tokens):
            return False
        self._create(tokens, depth, value)
        return True

    def replace(self, path: Iterable[str | int], value: Any) -> None:
        """Replace an existing value, or add it if absent. Only for fields the user did not write:
        ``schedulerName`` is defaulted to ``default-scheduler`` by the API server before admission."""
        tokens = tuple(path)
        _, depth = self._lookup(tokens)
        if depth < len(tokens):
            self._create(tokens, depth, value)
        else:
            self.ops.append({"op": "replace", "path": pointer(tokens), "value": value})

    def _create(self, tokens: tuple[str | int, ...], depth: int, leaf: Any) -> None:
        value = leaf
        for t in reversed(tokens[depth + 1 :]):
            if type(t) is int:
                raise IndexError(f"{pointer(tokens)}: cannot create an array element by index")
            value = {t: value}
        self.ops.append({"op": "add", "path": _pointer(tokens[: depth + 1]), "value": value})
        self._created[tokens[: depth + 1]] = value
