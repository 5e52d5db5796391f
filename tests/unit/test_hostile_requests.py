"""Hostile requests aimed at every field the servers read: a 400 naming the field, or a normal decision, never
the internal-error fallback.

The fields are the ones the door checks (``extender/reviews.py``: ``REVIEW_SHAPE``, ``EXTENDER_ARGS_SHAPE`` and
``NODE_SHAPE`` for each item of a NodeList),
walked with ``msgspec.inspect``, so a field added there is aimed at here too. Each request starts from a document
that holds every one of those fields (one item in every list, one entry in every map; a test checks it does),
then changes one to four of them:

* to a value of the wrong JSON type (an array for an object, a string for a number, a number for a string, an
  object for an array), a number outside its Go type's range, or null where the field is required: the answer
  must be a 400 whose message starts with that field's path (``request.object.metadata: expected an object``);
* to a well-typed value the API server would never send (an unknown operator, an empty key, a 20 KB string,
  extreme numbers, null, thousands of items): the answer must be decided as usual (200), or refused by an
  envelope rule (wrong kind, no uid) naming the field it read.

Reviews go to ``/mutate`` through Flask; extender calls go to ``/filter`` and ``/prioritize`` through the direct
door first and Flask for what it declines, as the poller worker sends them, as NodeNames and as Nodes calls,
under several configurations. After every request the ``spotshift_internal_errors_total`` counter of its
endpoint must not have moved. The generator is seeded (:data:`SEED`): every run sends the same requests, and a
failure prints the case to replay.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from msgspec import inspect as mi
from prometheus_client import REGISTRY

from extender.app import ExtenderApp, create_app
from extender.direct import answer
from extender.reviews import EXTENDER_ARGS_SHAPE, NODE_SHAPE, REVIEW_SHAPE
from shared.config import parse_config
from tests.unit.test_direct import go_request
from tests.unit.test_extender_api import CLUSTER, FakeCache

SEED = 20261128
REQUESTS = 21_000
"""Hostile requests per run, over the three endpoints."""

MAX_BODY = 2 * 1024 * 1024
"""Bodies stay below the smaller body limit (``/mutate``'s 4 MiB)."""

Path = tuple[str | int, ...]
"""A field's path: object keys, ``0`` for a list's first item, ``"*"`` for a map's value."""

SPOT = "karpenter.sh/capacity-type"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
TERM = {
    "matchExpressions": [{"key": SPOT, "operator": "In", "values": ["on-demand"]}],
    "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["od-1"]}],
}
FULL_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-1",
        "generateName": "web-",
        "namespace": "shop",
        "labels": {"app": "web"},
        "annotations": {"spotshift.io/max-spot-percent": "70"},
        "ownerReferences": [{"kind": "ReplicaSet", "name": "web-6d4cf56db6", "controller": True}],
    },
    "spec": {
        "containers": [{"name": "c", "image": "x"}],
        "nodeSelector": {"topology.kubernetes.io/zone": "a"},
        "affinity": {
            "nodeAffinity": {
                REQUIRED: {"nodeSelectorTerms": [copy.deepcopy(TERM)]},
                PREFERRED: [{"weight": 10, "preference": copy.deepcopy(TERM)}],
            }
        },
        "tolerations": [
            {"key": SPOT, "operator": "Equal", "value": "spot", "effect": "NoExecute", "tolerationSeconds": 300}
        ],
        "schedulerName": "default-scheduler",
    },
}
FULL_REVIEW: dict[str, Any] = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "0df28fbd-5f5f-11e8-bc74-36e6bb280816",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "namespace": "shop",
        "object": FULL_POD,
        "dryRun": False,
    },
}
FULL_NODE: dict[str, Any] = {
    "metadata": {"name": "spot-1", "labels": {SPOT: "spot"}},
    "spec": {"taints": [{"key": "x", "value": "y", "effect": "NoSchedule"}], "unschedulable": False},
}
FULL_ARGS: dict[str, Any] = {"Pod": FULL_POD, "Nodes": {"items": [FULL_NODE]}, "NodeNames": ["spot-1", "od-1"]}


# --- the fields, from the shapes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    path: Path
    type: mi.Type
    nullable: bool


def _unwrap(t: mi.Type) -> tuple[mi.Type, bool]:
    if isinstance(t, mi.UnionType):
        (inner,) = [m for m in t.types if not isinstance(m, mi.NoneType)]
        return inner, True
    return t, False


def fields(shape: type, path: Path = ()) -> Iterator[Field]:
    def walk(t: mi.Type, at: Path, nullable: bool) -> Iterator[Field]:
        t, optional = _unwrap(t)
        if isinstance(t, mi.AnyType):
            return  # checked by a shape of its own (a NodeList's items: NODE_SHAPE)
        if at:
            yield Field(at, t, nullable or optional)
        if isinstance(t, mi.StructType):
            for f in t.fields:
                yield from walk(f.type, (*at, f.encode_name), not f.required)
        elif isinstance(t, mi.ListType):
            yield from walk(t.item_type, (*at, 0), False)
        elif isinstance(t, mi.DictType):
            yield from walk(t.value_type, (*at, "*"), False)

    yield from walk(mi.type_info(shape), path, False)


REVIEW_FIELDS = list(fields(REVIEW_SHAPE))
ARGS_FIELDS = [*fields(EXTENDER_ARGS_SHAPE), *fields(NODE_SHAPE, ("Nodes", "items", 0))]


def _tokens(doc: Any, path: Path) -> list[str | int]:
    """``path`` with each ``"*"`` replaced by the map's first key."""
    out: list[str | int] = []
    node = doc
    for t in path:
        key = next(iter(node)) if t == "*" else t
        out.append(key)
        node = node[key]
    return out


def _get(doc: Any, path: Path) -> Any:
    node = doc
    for t in _tokens(doc, path):
        node = node[t]
    return node


def _set(doc: Any, path: Path, value: Any) -> None:
    *parents, last = _tokens(doc, path)
    node = doc
    for t in parents:
        node = node[t]
    node[last] = value


def shown(path: Path, root: str) -> str:
    """The path as the door's message spells it: ``request.object.spec.tolerations[0].key``, ``labels[*]``."""
    out = root
    for t in path:
        out += f"[{t}]" if isinstance(t, int) or t == "*" else (f".{t}" if out else t)
    return out


@pytest.mark.parametrize(
    ("document", "found"),
    [pytest.param(FULL_REVIEW, REVIEW_FIELDS, id="review"), pytest.param(FULL_ARGS, ARGS_FIELDS, id="args")],
)
def test_the_full_documents_hold_every_field_the_door_checks(document: dict[str, Any], found: list[Field]) -> None:
    assert len(found) > 20
    for f in found:
        assert _get(document, f.path) is not None, shown(f.path, "")


# --- values ------------------------------------------------------------------------------------------------

_OBJECT_JUNK: list[Any] = [[], [{}], "x", 7, 1.5, True]
_LIST_JUNK: list[Any] = [{}, {"0": 1}, "x", 7, True]
_STR_JUNK: list[Any] = [7, -1.5, True, [], {}, ["x"]]
_BOOL_JUNK: list[Any] = ["true", 1, 0, [], {}]
_INT_JUNK: list[Any] = ["5", 1.5, True, [], {}, 10**30]
_STRINGS = [
    "",
    "In",
    "NotIn",
    "Exists",
    "DoesNotExist",
    "Gt",
    "Lt",
    "Equal",
    "Bogus",
    "NoSchedule",
    "NoExecute",
    "PreferNoSchedule",
    "true",
    "spot",
    "on-demand",
    SPOT,
    "a/b~c",
    "~1/0",
    "ü" * 3,
    "1e3",
    "-5",
    " ",
    "\x00",
    "metadata.name",
    "kube-system",
    "Pod",
    "DaemonSet",
    "kubernetes.io/config.mirror",
    "spotshift.io/exclude",
]


def wrong_value(rng: random.Random, f: Field) -> Any:
    """A value of another JSON type than ``f``'s, out of its range, or null where it is required."""
    t = f.type
    if not f.nullable and rng.random() < 0.1:
        return None
    if isinstance(t, mi.StructType | mi.DictType):
        return rng.choice(_OBJECT_JUNK)
    if isinstance(t, mi.ListType):
        return rng.choice(_LIST_JUNK)
    if isinstance(t, mi.StrType):
        return rng.choice(_STR_JUNK)
    if isinstance(t, mi.BoolType):
        return rng.choice(_BOOL_JUNK)
    assert isinstance(t, mi.IntType), t
    assert t.ge is not None and t.le is not None
    return rng.choice([*_INT_JUNK, t.le + 1, t.ge - 1])


def odd_value(rng: random.Random, f: Field, current: Any) -> Any:
    """A value of ``f``'s own type that no API server would send."""
    t = f.type
    if f.nullable and rng.random() < 0.15:
        return None
    if isinstance(t, mi.StrType):
        return rng.choice([*_STRINGS, "x" * 20_000, "".join(rng.choice("aZ/.-_~ü") for _ in range(rng.randint(1, 70)))])
    if isinstance(t, mi.BoolType):
        return rng.random() < 0.5
    if isinstance(t, mi.IntType):
        assert t.ge is not None and t.le is not None
        return rng.choice([t.ge, t.le, 0, -1, 1, 101, rng.randint(t.ge, t.le)])
    if isinstance(t, mi.ListType):
        return rng.choice([[], [copy.deepcopy(current[0])] * rng.choice([2, 150, 1200]) if current else []])
    if isinstance(t, mi.DictType):
        return rng.choice(
            [{}, {f"k{i}/{rng.choice(_STRINGS)}": rng.choice(_STRINGS) for i in range(rng.choice([1, 30, 1100]))}]
        )
    assert isinstance(t, mi.StructType)
    kept = {f.encode_name: current[f.encode_name] for f in t.fields if f.required}  # only the optional ones go
    return {**kept, **rng.choice([{}, {"unknown": [[[[]]]] * 3}, {"deep": _nested(rng.choice([50, 300, 900]))}])}


def _nested(depth: int) -> str:
    """A marker :func:`_encode` replaces with ``depth`` nested arrays (past what orjson writes)."""
    return f"<nested {depth}>"


def _encode(doc: Any) -> bytes:
    """The JSON body: the standard library writes integers past 64 bits, which orjson refuses."""
    body = json.dumps(doc, ensure_ascii=False).encode()
    for depth in (50, 300, 900):
        body = body.replace(f'"<nested {depth}>"'.encode(), b"[" * depth + b"1" + b"]" * depth)
    return body


@dataclass(frozen=True)
class Case:
    path: str
    body: bytes
    wrong: str | None
    """The field whose type is wrong (as the message must name it), None when every type is right."""
    named: frozenset[str]
    """What a refusal of a well-typed case may name: a changed field's path or one of its parents'."""


def _names(path: Path, root: str) -> set[str]:
    """``a.b.c`` names ``a.b.c`` and ``a.b`` (one top-level name alone is too vague, unless it is the whole path)."""
    shortest = 1 if root or len(path) == 1 else 2
    return {shown(path[:k], root) for k in range(shortest, len(path) + 1)}


def _inside(inner: Path, outer: Path) -> bool:
    return inner[: len(outer)] == outer


def cases(rng: random.Random, full: dict[str, Any], found: list[Field], path: str, root: str) -> Iterator[Case]:
    """Endless cases from ``full``: one to four fields changed, the one wrongly typed field (if any) kept."""
    while True:
        doc = copy.deepcopy(full)
        picked = rng.sample(found, rng.randint(1, 4))
        wrong = rng.choice(picked) if rng.random() < 0.6 else None
        if wrong is not None:  # a change to a parent of the wrong field would replace it
            picked = [f for f in picked if f is wrong or not _inside(wrong.path, f.path)]
        picked.sort(key=lambda f: len(f.path), reverse=True)  # inner fields first
        named: set[str] = set()
        for f in picked:
            try:
                current = _get(doc, f.path)
            except (KeyError, IndexError, TypeError, StopIteration):
                continue  # a field inside one changed before it: the parent is changed later
            _set(doc, f.path, wrong_value(rng, f) if f is wrong else odd_value(rng, f, current))
            named |= _names(f.path, root)
        body = _encode(doc)
        if len(body) > MAX_BODY:
            continue  # past the body limit (413, unread): the fields are not reached
        yield Case(path, body, None if wrong is None else shown(wrong.path, root), frozenset(named))


def extender_cases(rng: random.Random) -> Iterator[Case]:
    names_only = {**FULL_ARGS, "Nodes": None}
    nodes_only = {**FULL_ARGS, "NodeNames": None}
    by_names = cases(rng, names_only, [f for f in ARGS_FIELDS if f.path[0] != "Nodes"], "", "ExtenderArgs")
    by_nodes = cases(rng, nodes_only, [f for f in ARGS_FIELDS if f.path[0] != "NodeNames"], "", "ExtenderArgs")
    while True:
        case = next(by_names if rng.random() < 0.5 else by_nodes)
        yield Case(rng.choice(["/filter", "/prioritize"]), case.body, case.wrong, case.named)


# --- sending ----------------------------------------------------------------------------------------------

CONFIGS = [
    {},
    {"webhook": {"mode": "require", "scheduler_name": "spot-scheduler"}},
    {"webhook": {"mode": "tolerate-only"}, "spot_ceiling": {"default_max_spot_percent": 50}},
    {"node_classes": {"presets": ["eks", "gke-spot"]}, "spot_ceiling": {"default_min_on_demand": 1}},
]


def _apps() -> list[ExtenderApp]:
    out = []
    for raw in CONFIGS:
        config = parse_config(raw)
        out.append(create_app(config, FakeCache(CLUSTER, config)))
    return out


def _fallbacks(endpoint: str) -> float:
    return REGISTRY.get_sample_value("spotshift_internal_errors_total", {"endpoint": endpoint}) or 0.0


def send(app: ExtenderApp, case: Case) -> tuple[int, bytes]:
    """The answer as the poller worker gives it: the direct door first for the scheduler's calls."""
    if case.path != "/mutate":
        direct = answer(go_request(case.path, case.body), app.direct.decide, None, True)
        if direct is not None:
            head, _, body = direct[0].partition(b"\r\n\r\n")
            return int(head.split(b" ")[1]), body
        raise AssertionError(f"the direct door did not answer {case.path}")
    r = app.test_client().post(case.path, data=case.body, content_type="application/json")
    return r.status_code, r.data


def check(app: ExtenderApp, case: Case) -> None:
    endpoint = case.path.lstrip("/")
    before = _fallbacks(endpoint)
    status, body = send(app, case)
    replay = f"case (changed {sorted(case.named)}, wrong {case.wrong}): {case.body[:3000]!r}"
    assert _fallbacks(endpoint) == before, f"the internal-error fallback answered: {replay}"
    assert status in (200, 400), f"{status} {body[:500]!r} {replay}"
    if case.wrong is not None:
        assert status == 400, f"a wrong type was decided: {body[:500]!r} {replay}"
        message = orjson.loads(body)["error"]
        assert message.startswith(case.wrong + ":") and "expected" in message, f"{message!r} {replay}"
    elif status == 400:
        message = orjson.loads(body)["error"]
        assert any(name in message for name in case.named), f"{message!r} {replay}"


def test_hostile_requests_get_a_400_naming_the_field_or_a_decision_never_the_fallback() -> None:
    rng = random.Random(SEED)
    apps = _apps()
    reviews = cases(rng, FULL_REVIEW, REVIEW_FIELDS, "/mutate", "")
    calls = extender_cases(rng)
    sent = {"/mutate": 0, "/filter": 0, "/prioritize": 0}
    refused = decided = 0
    for i in range(REQUESTS):
        case = next(reviews if i % 2 == 0 else calls)
        check(apps[i % len(apps)], case)
        sent[case.path] += 1
        refused += case.wrong is not None
        decided += case.wrong is None
    assert sum(sent.values()) >= 20_000 and min(sent.values()) >= 4_000, sent
    assert refused >= 8_000 and decided >= 6_000, (refused, decided)
