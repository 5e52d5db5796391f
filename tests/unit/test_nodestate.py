"""shared.nodestate: cordoned and not-ready nodes.

Transcribed: ``pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable_test.go``
TestNodeUnschedulable (ids are the upstream case names), plus edge cases of the toleration rule it relies on.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.fit_reasons import ERR_NOT_READY, ERR_UNSCHEDULABLE, Reason
from shared.model import Node, Pod
from shared.nodestate import TAINT_NODE_UNSCHEDULABLE, check_ready, check_unschedulable
from tests import builders

CORDONED = Reason(ERR_UNSCHEDULABLE, ERR_UNSCHEDULABLE, True)
NOT_READY = Reason(ERR_NOT_READY, ERR_NOT_READY, True)


def node_json(*, unschedulable: bool | None = None, conditions: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A node named ``node``, ready unless ``conditions`` says otherwise."""
    return builders.node_json("node", unschedulable=unschedulable, conditions=conditions)


def pod_json(tolerations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return builders.pod_json("pod", image="pause", tolerations=tolerations)


@pytest.mark.parametrize(
    ("tolerations", "unschedulable", "want"),
    [
        pytest.param(
            None, True, CORDONED, id="Does not schedule pod to unschedulable node (node.Spec.Unschedulable==true)"
        ),
        pytest.param(None, False, None, id="Schedule pod to normal node"),
        pytest.param(
            [{"key": TAINT_NODE_UNSCHEDULABLE, "effect": "NoSchedule"}],
            True,
            None,
            id="Schedule pod with toleration to unschedulable node (node.Spec.Unschedulable==true)",
        ),
        # Edge cases beyond upstream.
        pytest.param(None, None, None, id="unschedulable unset"),
        pytest.param([{"operator": "Exists"}], True, None, id="key-less Exists tolerates the cordon"),
        pytest.param([{"key": TAINT_NODE_UNSCHEDULABLE, "operator": "Exists"}], True, None, id="Exists without effect"),
        pytest.param(
            [{"key": TAINT_NODE_UNSCHEDULABLE, "operator": "Exists", "effect": "NoExecute"}],
            True,
            CORDONED,
            id="NoExecute toleration does not tolerate the NoSchedule cordon",
        ),
        pytest.param(
            [{"key": TAINT_NODE_UNSCHEDULABLE, "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
            True,
            CORDONED,
            id="Equal with a value does not match the value-less taint",
        ),
        pytest.param([{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}], True, CORDONED, id="other key"),
    ],
)
def test_node_unschedulable(
    tolerations: list[dict[str, str]] | None, unschedulable: bool | None, want: Reason | None
) -> None:
    got = check_unschedulable(
        Pod.from_api(pod_json(tolerations)), Node.from_api(node_json(unschedulable=unschedulable))
    )
    assert got == want
    if got is not None:
        assert got.message == "node(s) were unschedulable"


@pytest.mark.parametrize(
    ("conditions", "want"),
    [
        pytest.param([{"type": "Ready", "status": "True"}], None, id="ready"),
        pytest.param([{"type": "Ready", "status": "False"}], NOT_READY, id="not ready"),
        pytest.param([{"type": "Ready", "status": "Unknown"}], NOT_READY, id="node lost (Unknown)"),
        pytest.param([], NOT_READY, id="no conditions yet"),
        pytest.param(
            [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
            None,
            id="Ready among other conditions",
        ),
        pytest.param([{"type": "MemoryPressure", "status": "True"}], NOT_READY, id="only other conditions"),
    ],
)
def test_check_ready(conditions: list[dict[str, str]], want: Reason | None) -> None:
    assert check_ready(Node.from_api(node_json(conditions=conditions))) == want


def test_nodestate_predicates_do_not_mutate_inputs() -> None:
    raw_node = node_json(unschedulable=True, conditions=[{"type": "Ready", "status": "False"}])
    raw_pod = pod_json([{"key": TAINT_NODE_UNSCHEDULABLE, "operator": "Exists"}])
    before = copy.deepcopy((raw_node, raw_pod))
    node, pod = Node.from_api(raw_node), Pod.from_api(raw_pod)
    assert node == Node.from_api(raw_node) and pod == Pod.from_api(raw_pod)
    assert check_unschedulable(pod, node) is None and check_ready(node) == NOT_READY
    assert check_unschedulable(pod, node) is None and check_ready(node) == NOT_READY
    assert (raw_node, raw_pod) == before
    assert node == Node.from_api(before[0]) and pod == Pod.from_api(before[1])
