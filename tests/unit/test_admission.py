"""The webhook's pure core: extender.admission and extender.patches, table-driven.

Each patch is applied with a small, strict RFC 6902 applier below (it refuses to add below a missing parent,
as the API server's does), and the result is checked as a pod, not as a list of operations.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from extender.admission import (
    SKIP_PINNED_ON_DEMAND,
    MutationMemo,
    MutationPolicy,
    build_response,
    mutate_pod,
    parse_review,
)
from extender.errors import BadRequest
from shared.config import Config, parse_config

PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"

# --- a strict JSON patch applier (RFC 6902 add/replace, RFC 6901 pointers) ---------------------------


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    doc = copy.deepcopy(doc)
    for op in ops:
        assert op["op"] in ("add", "replace"), op
        tokens = [_unescape(t) for t in op["path"].split("/")[1:]]
        parent = doc
        for t in tokens[:-1]:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]  # KeyError: missing parent
        last = tokens[-1]
        value = copy.deepcopy(op["value"])
        if isinstance(parent, list):
            if last == "-":
                parent.append(value)
            else:
                parent.insert(int(last), value)
        else:
            if op["op"] == "replace":
                assert last in parent, f"replace of a missing member {op['path']}"
            parent[last] = value
    return doc


# --- builders -----------------------------------------------------------------------------------------

Mod = Callable[[dict[str, Any]], None]


def make_pod(*mods: Mod) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "web-6d4cf56db6-", "namespace": "shop", "labels": {"app": "web"}},
        "spec": {
            "containers": [{"name": "web", "image": "nginx", "resources": {"requests": {"cpu": "100m"}}}],
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            ],
        },
    }
    for mod in mods:
        mod(pod)
    return pod


def without_tolerations(pod: dict[str, Any]) -> None:
    pod["spec"].pop("tolerations", None)


def with_tolerations(*tols: dict[str, Any]) -> Mod:
    def mod(pod: dict[str, Any]) -> None:
        pod["spec"].setdefault("tolerations", []).extend(tols)

    return mod


def with_node_selector(**labels: str) -> Mod:
    def mod(pod: dict[str, Any]) -> None:
        pod["spec"]["nodeSelector"] = dict(labels)

    return mod


def with_preferred(*terms: dict[str, Any]) -> Mod:
    def mod(pod: dict[str, Any]) -> None:
        na = pod["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})
        na.setdefault(PREFERRED, []).extend(terms)

    return mod


def with_required(*terms: dict[str, Any]) -> Mod:
    def mod(pod: dict[str, Any]) -> None:
        na = pod["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})
        na[REQUIRED] = {"nodeSelectorTerms": list(terms)}

    return mod


def with_pod_anti_affinity(pod: dict[str, Any]) -> None:
    pod["spec"].setdefault("affinity", {})["podAntiAffinity"] = {
        PREFERRED: [
            {"weight": 50, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "h"}}
        ]
    }


def with_owner(kind: str, name: str = "owner") -> Mod:
    def mod(pod: dict[str, Any]) -> None:
        pod["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": "u", "controller": True}
        ]

    return mod


def with_label(key: str, value: str) -> Mod:
    def mod(pod: dict[str, Any]) -> None:
        pod["metadata"].setdefault("labels", {})[key] = value

    return mod


def with_annotation(key: str, value: str) -> Mod:
    def mod(pod: dict[str, Any]) -> None:
        pod["metadata"].setdefault("annotations", {})[key] = value

    return mod


def with_scheduler(name: str | None) -> Mod:
    def mod(pod: dict[str, Any]) -> None:
        if name is None:
            pod["spec"].pop("schedulerName", None)
        else:
            pod["spec"]["schedulerName"] = name

    return mod


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


def term(*exprs: dict[str, Any]) -> dict[str, Any]:
    return {"matchExpressions": list(exprs)}


def review(pod: dict[str, Any], *, namespace: str = "shop", operation: str = "CREATE", dry_run: bool = False) -> dict:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0df28fbd-5f5f-11e8-bc74-36e6bb280816",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": operation,
            "object": pod,
            "dryRun": dry_run,
        },
    }


def policy(**settings: Any) -> MutationPolicy:
    """A policy from config sections given as keyword dicts, e.g. ``policy(webhook={"mode": "require"})``."""
    return MutationPolicy.from_config(parse_config(settings))


KARPENTER = policy(node_classes={"presets": ["karpenter"]})
KARPENTER_TERM = term(expr("karpenter.sh/capacity-type", "In", "spot"))
AKS_TOLERATION = {
    "key": "kubernetes.azure.com/scalesetpriority",
    "operator": "Equal",
    "value": "spot",
    "effect": "NoSchedule",
}
AKS = policy(node_classes={"presets": ["aks"]})
DEFAULT = MutationPolicy.from_config(Config())


def mutated(pod: dict[str, Any], pol: MutationPolicy, namespace: str = "shop") -> tuple[dict[str, Any], Any]:
    m = mutate_pod(pod, namespace, pol)
    return apply_patch(pod, list(m.ops)), m


def node_affinity(pod: dict[str, Any]) -> dict[str, Any]:
    return pod["spec"].get("affinity", {}).get("nodeAffinity", {})


# --- hostile and malformed input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(
            orjson.dumps({"kind": "AdmissionReview", "apiVersion": []}), "apiVersion", id="api-version-a-list"
        ),
        pytest.param(b'{"kind":' + b'{"k":' * 1000 + b"1" + b"}" * 1001, "kind", id="kind-nested-1000-deep"),
        pytest.param(b'{"kind":' + b'{"k":' * 1100 + b"1" + b"}" * 1101, "not valid JSON", id="nested-past-1024"),
        pytest.param(
            orjson.dumps({**review(make_pod()), "request": {**review(make_pod())["request"], "operation": ""}}),
            "operation",
            id="empty-operation",
        ),
        pytest.param(
            orjson.dumps(
                {
                    **review(make_pod()),
                    "request": {k: v for k, v in review(make_pod())["request"].items() if k != "operation"},
                }
            ),
            "operation",
            id="missing-operation",
        ),
        pytest.param(
            orjson.dumps({**review(make_pod()), "request": {**review(make_pod())["request"], "namespace": ["x"]}}),
            "namespace",
            id="namespace-not-a-string",
        ),
    ],
)
def test_parse_review_rejects_hostile_envelopes_with_a_sentence(body: bytes, message: str) -> None:
    with pytest.raises(BadRequest, match=message) as caught:
        parse_review(body)
    assert len(caught.value.message) < 300


def test_a_review_without_spec_never_poisons_the_memo() -> None:
    """A review with no operation once skipped validation, and its patch (``add /spec``) was remembered for
    every later pod that read alike: now it is refused before anything is computed or remembered."""
    memo = MutationMemo()
    forged = review({"metadata": {"labels": {"app": "web"}}})
    del forged["request"]["operation"]
    with pytest.raises(BadRequest):
        parse_review(orjson.dumps(forged))
    real = make_pod(without_tolerations)
    real["spec"].pop("schedulerName")
    answer, _ = build_response(review(real), DEFAULT, memo)  # type: ignore[arg-type]
    ops = orjson.loads(base64.b64decode(answer["response"]["patch"]))
    assert all(op["path"] != "/spec" for op in ops)
    assert MutationMemo.key(real, "shop", "CREATE") != MutationMemo.key({"metadata": {}}, "shop", "CREATE")


@pytest.mark.parametrize(
    "mod",
    [
        pytest.param(lambda p: p["spec"].update(affinity="x"), id="affinity-a-string"),
        pytest.param(lambda p: p["spec"].update(affinity={"nodeAffinity": []}), id="node-affinity-a-list"),
        pytest.param(lambda p: p["spec"].update(tolerations={"key": "x"}), id="tolerations-an-object"),
        pytest.param(lambda p: p["spec"].update(tolerations=[{"tolerationSeconds": "5"}]), id="seconds-a-string"),
        pytest.param(lambda p: p["spec"].update(nodeSelector={"a": ["b"]}), id="node-selector-value-a-list"),
        pytest.param(lambda p: p["spec"].update(schedulerName=7), id="scheduler-name-a-number"),
        pytest.param(
            with_required({"matchExpressions": [{"key": "zone", "operator": "In", "values": "a"}]}),
            id="values-a-string",
        ),
        pytest.param(with_required("x"), id="term-a-string"),  # type: ignore[arg-type]
        pytest.param(lambda p: p["metadata"].update(labels={"a": 1}), id="label-value-a-number"),
    ],
)
@pytest.mark.parametrize("pol", [DEFAULT, policy(webhook={"mode": "require", "scheduler_name": "s"})])
def test_wrongly_typed_fields_get_an_allow_with_a_warning_and_no_patch(mod: Mod, pol: MutationPolicy) -> None:
    m = mutate_pod(make_pod(mod), "shop", pol)
    assert m.ops == () and m.skipped == "malformed" and m.warnings


@pytest.mark.parametrize(
    ("pod", "what"),
    [
        pytest.param(make_pod(with_required(*[term(expr("zone", "In", "a"))] * 101)), "terms", id="terms"),
        pytest.param(
            make_pod(with_node_selector(**{f"k{i}": "v" for i in range(1001)})), "requirements", id="selector-keys"
        ),
        pytest.param(
            make_pod(with_required(term(*[expr(f"k{i}", "Exists") for i in range(1001)]))),
            "requirements",
            id="expressions",
        ),
        pytest.param(
            make_pod(with_required(term(expr("zone", "In", *[f"z{i}" for i in range(10001)])))), "values", id="values"
        ),
        pytest.param(make_pod(with_tolerations(*[AKS_TOLERATION] * 1001)), "tolerations", id="tolerations"),
    ],
)
def test_a_pod_over_the_limits_is_admitted_unchanged_with_a_warning(pod: dict[str, Any], what: str) -> None:
    m = mutate_pod(pod, "shop", DEFAULT)
    assert m.ops == () and m.skipped == "over-limits"
    assert m.warnings and what in m.warnings[0] and "over the limit" in m.warnings[0]


def test_the_pinned_check_reduces_the_node_selector_once_not_once_per_term(monkeypatch: pytest.MonkeyPatch) -> None:
    """The quadratic case: thousands of nodeSelector keys ANDed into thousands of terms. The check now
    reduces the nodeSelector once and each term once: the number of reductions is terms + 1."""
    import shared.movable as movable

    sizes: list[int] = []
    original = movable._Pinning.__init__

    def counting(self: Any, conj: Any, classes: Any) -> None:
        sizes.append(len(conj))
        original(self, conj, classes)

    monkeypatch.setattr(movable._Pinning, "__init__", counting)
    on_demand = term(expr("karpenter.sh/capacity-type", "In", "on-demand"))
    pod = make_pod(with_node_selector(**{f"k{i}": "v" for i in range(400)}), with_required(*[on_demand] * 100))
    assert mutate_pod(pod, "shop", DEFAULT).skipped == SKIP_PINNED_ON_DEMAND
    assert sorted(sizes) == [1] * 100 + [400]
