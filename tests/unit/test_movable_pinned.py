"""shared.movable.pinned_to_on_demand: which pods' node selectors and required node affinity keep them on
on-demand nodes, with the default presets and with custom node classes.
"""

from __future__ import annotations

from typing import Any

import pytest

from shared.movable import (
    movability,
    pinned_to_on_demand,
)
from tests.builders import expr
from tests.builders.movable import (
    CT,
    DEFAULT,
    classes,
    pod,
    required,
)

# --- pinned to on-demand --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "pinned"),
    [
        # nodeSelector
        pytest.param({}, False, id="no-constraints"),
        pytest.param({"node_selector": {CT: "on-demand"}}, True, id="node-selector-karpenter-on-demand"),
        pytest.param({"node_selector": {CT: "spot"}}, False, id="node-selector-karpenter-spot"),
        pytest.param(
            {"node_selector": {"eks.amazonaws.com/capacityType": "ON_DEMAND"}}, True, id="node-selector-eks-on-demand"
        ),
        pytest.param(
            {"node_selector": {"cloud.google.com/gke-spot": "false"}}, True, id="node-selector-gke-spot-false"
        ),
        pytest.param(
            {"node_selector": {"kubernetes.azure.com/scalesetpriority": "regular"}},
            True,
            id="node-selector-aks-regular",
        ),
        pytest.param(
            {"node_selector": {"topology.kubernetes.io/zone": "a"}}, False, id="node-selector-unrelated-label"
        ),
        pytest.param(
            {"node_selector": {CT: "on-demand", "topology.kubernetes.io/zone": "a"}},
            True,
            id="node-selector-on-demand-and-zone",
        ),
        # required affinity
        pytest.param({"affinity": required([expr(CT, "NotIn", "spot")])}, True, id="required-affinity-notin-spot"),
        pytest.param({"affinity": required([expr(CT, "In", "on-demand")])}, True, id="required-affinity-in-on-demand"),
        pytest.param(
            {"affinity": required([expr(CT, "In", "spot", "on-demand")])},
            False,
            id="required-affinity-in-spot-or-on-demand",
        ),
        pytest.param({"affinity": required([expr(CT, "Exists")])}, False, id="required-affinity-capacity-type-exists"),
        pytest.param(
            {"affinity": required([expr("cloud.google.com/gke-spot", "DoesNotExist")])},
            True,
            id="required-affinity-gke-spot-does-not-exist",
        ),
        pytest.param(
            {"affinity": required([expr("node-role.kubernetes.io/spot-worker", "DoesNotExist")])},
            True,
            id="required-affinity-spot-worker-does-not-exist",
        ),
        pytest.param(
            {"affinity": required([expr("node-role.kubernetes.io/spot-worker", "In", "false")])},
            False,
            id="spot-worker-any-value-is-spot-so-in-false-is-not-pinned",
        ),
        pytest.param(
            {"affinity": required([expr("kubernetes.azure.com/scalesetpriority", "NotIn", "spot")])},
            True,
            id="required-affinity-aks-notin-spot",
        ),
        pytest.param(
            {"affinity": required([expr(CT, "In", "on-demand")], [expr("topology.kubernetes.io/zone", "In", "a")])},
            False,
            id="one-of-two-terms-reaches-spot",
        ),
        pytest.param(
            {"affinity": required([expr(CT, "In", "on-demand")], [expr("cloud.google.com/gke-spot", "DoesNotExist")])},
            True,
            id="every-term-pinned",
        ),
        pytest.param(
            {
                "node_selector": {CT: "on-demand"},
                "affinity": required([expr("topology.kubernetes.io/zone", "In", "a")]),
            },
            True,
            id="node-selector-pins-whatever-the-affinity-says",
        ),
        pytest.param(
            {"affinity": required([expr(CT, "In", "spot"), expr("cloud.google.com/gke-spot", "DoesNotExist")])},
            False,
            id="term-asking-for-karpenter-spot-without-gke-label-is-not-pinned",
        ),
        pytest.param(
            {"affinity": required([expr("example.com/gen", "Gt", "3")])}, False, id="gt-on-an-unrelated-label"
        ),
        pytest.param(
            {"affinity": required(fields=[{"key": "metadata.name", "operator": "In", "values": ["od-1"]}])},
            False,
            id="match-fields-by-node-name-is-left-to-the-planner",
        ),
        pytest.param(
            {"affinity": required([expr(CT, "Bogus", "x")])}, True, id="only-a-malformed-term-matches-no-node"
        ),
        pytest.param(
            {"affinity": required([expr(CT, "Bogus", "x")], [expr("topology.kubernetes.io/zone", "In", "a")])},
            False,
            id="malformed-term-beside-a-good-one",
        ),
        pytest.param(
            {
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 100, "preference": {"matchExpressions": [expr(CT, "In", "on-demand")]}}
                        ]
                    }
                }
            },
            False,
            id="preferred-affinity-does-not-pin",
        ),
    ],
)
def test_pinned_to_on_demand_with_default_presets(spec: dict[str, Any], pinned: bool) -> None:
    p = pod(**spec)
    assert pinned_to_on_demand(p, DEFAULT.node_classes) is pinned
    assert movability(p, DEFAULT).blocks is pinned


@pytest.mark.parametrize(
    ("node_classes", "spec", "pinned"),
    [
        pytest.param(
            {"on_demand_selectors": ["node-role.kubernetes.io/worker"]},
            {"node_selector": {"node-role.kubernetes.io/worker": "true"}},
            True,
            id="requires-a-label-only-on-demand-nodes-have",
        ),
        pytest.param(
            {},
            {"node_selector": {"node-role.kubernetes.io/worker": "true"}},
            False,
            id="same-label-without-on-demand-selectors-is-unknown",
        ),
        pytest.param(
            {"on_demand_selectors": ["pool in (general, system)"]},
            {"affinity": required([expr("pool", "In", "system")])},
            True,
            id="in-subset-of-on-demand-selector-values",
        ),
        pytest.param(
            {"on_demand_selectors": ["pool in (general, system)"]},
            {"affinity": required([expr("pool", "In", "system", "batch")])},
            False,
            id="in-wider-than-on-demand-selector-values",
        ),
        pytest.param(
            {"spot_selectors": ["lifecycle=spot"]},
            {"node_selector": {"lifecycle": "normal"}},
            True,
            id="custom-spot-key-other-value",
        ),
        pytest.param(
            {"presets": [], "spot_selectors": ["pool=batch,lifecycle=spot"]},
            {"node_selector": {"pool": "web"}},
            False,
            id="keys-of-multi-requirement-spot-selectors-are-not-spot-class",
        ),
        pytest.param(
            {"presets": ["aks"]},
            {"node_selector": {CT: "on-demand"}},
            False,
            id="disabled-preset-key-is-not-spot-class",
        ),
        pytest.param(
            {"presets": [], "spot_selectors": ["example.com/tier in (1, 2)"]},
            {"affinity": required([expr("example.com/tier", "Gt", "5")])},
            True,
            id="gt-above-every-spot-value",
        ),
        pytest.param(
            {"presets": [], "spot_selectors": ["example.com/tier in (1, 7)"]},
            {"affinity": required([expr("example.com/tier", "Gt", "5")])},
            False,
            id="gt-below-some-spot-value",
        ),
    ],
)
def test_pinned_to_on_demand_with_custom_classes(
    node_classes: dict[str, Any], spec: dict[str, Any], pinned: bool
) -> None:
    assert pinned_to_on_demand(pod(**spec), classes(**node_classes)) is pinned
