"""Whom the webhook leaves alone, and why: each skip rule with its named reason, and pods that look alike but
are mutated.
"""

from __future__ import annotations

from typing import Any

import pytest

from extender.admission import (
    SKIP_DAEMONSET,
    SKIP_EXCLUDED_NAMESPACE,
    SKIP_MIRROR_POD,
    SKIP_NOT_CREATE,
    SKIP_OPT_OUT,
    SKIP_PINNED_ON_DEMAND,
    mutate_pod,
)
from tests.builders import expr
from tests.builders.admission import DEFAULT, make_pod, policy, term

# --- skip rules -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pod", "namespace", "reason"),
    [
        pytest.param(make_pod(), "kube-system", SKIP_EXCLUDED_NAMESPACE, id="kube-system-excluded"),
        pytest.param(make_pod(), "spotshift", SKIP_EXCLUDED_NAMESPACE, id="own-namespace-excluded"),
        pytest.param(
            make_pod(annotations={"kubernetes.io/config.mirror": "abc"}), "shop", SKIP_MIRROR_POD, id="mirror-pod"
        ),
        pytest.param(make_pod(owner_kind="DaemonSet"), "shop", SKIP_DAEMONSET, id="daemonset-pod"),
        pytest.param(make_pod(labels={"spotshift.io/exclude": "true"}), "shop", SKIP_OPT_OUT, id="opt-out-label"),
        pytest.param(
            make_pod(annotations={"spotshift.io/exclude": "true"}), "shop", SKIP_OPT_OUT, id="opt-out-annotation"
        ),
        pytest.param(
            make_pod(node_selector={"karpenter.sh/capacity-type": "on-demand"}),
            "shop",
            SKIP_PINNED_ON_DEMAND,
            id="node-selector-pins-on-demand",
        ),
        pytest.param(
            make_pod(required=[term(expr("eks.amazonaws.com/capacityType", "NotIn", "SPOT"))]),
            "shop",
            SKIP_PINNED_ON_DEMAND,
            id="required-affinity-pins-on-demand",
        ),
        pytest.param(
            make_pod(required=[term(expr("cloud.google.com/gke-spot", "DoesNotExist"))]),
            "shop",
            SKIP_PINNED_ON_DEMAND,
            id="does-not-exist-on-a-spot-key-pins-on-demand",
        ),
    ],
)
def test_skip_rules(pod: dict[str, Any], namespace: str, reason: str) -> None:
    m = mutate_pod(pod, namespace, DEFAULT)
    assert m.ops == ()
    assert m.skipped == reason


@pytest.mark.parametrize(
    "pod",
    [
        pytest.param(make_pod(owner_kind="ReplicaSet"), id="replicaset-pod"),
        pytest.param(make_pod(labels={"spotshift.io/exclude": "false"}), id="opt-out-false"),
        pytest.param(
            make_pod(node_selector={"topology.kubernetes.io/zone": "a"}),
            id="zone-selector-says-nothing-of-spot",
        ),
        pytest.param(
            make_pod(required=[term(expr("karpenter.sh/capacity-type", "In", "spot", "on-demand"))]),
            id="affinity-allowing-spot-or-on-demand",
        ),
        pytest.param(
            make_pod(
                required=[
                    term(expr("karpenter.sh/capacity-type", "In", "on-demand")),
                    term(expr("topology.kubernetes.io/zone", "In", "a")),
                ]
            ),
            id="one-term-of-two-allows-spot",
        ),
    ],
)
def test_pods_not_skipped(pod: dict[str, Any]) -> None:
    assert mutate_pod(pod, "shop", DEFAULT).skipped is None


def test_excluded_namespaces_are_configurable_and_own_namespace_always_excluded() -> None:
    pol = policy(namespace="ops", webhook={"excluded_namespaces": ["batch"]})
    assert mutate_pod(make_pod(), "batch", pol).skipped == SKIP_EXCLUDED_NAMESPACE
    assert mutate_pod(make_pod(), "ops", pol).skipped == SKIP_EXCLUDED_NAMESPACE
    assert mutate_pod(make_pod(), "kube-system", pol).skipped is None


def test_opt_out_key_is_configurable() -> None:
    pol = policy(movability={"opt_out_key": "example.com/no-spot"})
    assert mutate_pod(make_pod(labels={"example.com/no-spot": "true"}), "shop", pol).skipped == SKIP_OPT_OUT


def test_update_is_not_mutated() -> None:
    assert mutate_pod(make_pod(), "shop", DEFAULT, "UPDATE").skipped == SKIP_NOT_CREATE
