"""shared.config: a bad config fails with one sentence naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from shared.classes import Selector
from shared.config import ConfigError, parse_config
from tests.support.config_helpers import error


@pytest.mark.parametrize(
    ("data", "env", "want"),
    [
        pytest.param(
            {"webhook": {"weight": 150}},
            None,
            "config field webhook.weight: must be an integer from 1 to 100, got 150.",
            id="weight-too-high",
        ),
        pytest.param(
            {"webhook": {"weight": 0}},
            None,
            "config field webhook.weight: must be an integer from 1 to 100, got 0.",
            id="weight-zero",
        ),
        pytest.param(
            {"webhook": {"weight": "50"}},
            None,
            "config field webhook.weight: must be an integer from 1 to 100, got '50'.",
            id="weight-quoted-string-in-yaml",
        ),
        pytest.param(
            {"webhook": {"weight": True}},
            None,
            "config field webhook.weight: must be an integer from 1 to 100, got true.",
            id="weight-bool",
        ),
        pytest.param(
            {"webhook": {"mode": "always"}},
            None,
            "config field webhook.mode: must be one of prefer, tolerate-only, require, off, got 'always'.",
            id="mode-unknown",
        ),
        pytest.param(
            {"rescheduler": {"dry_run": "yes"}},
            None,
            "config field rescheduler.dry_run: must be true or false, got 'yes'.",
            id="bool-as-string-in-yaml",
        ),
        pytest.param(
            {"rescheduler": {"housekeeping_interval": "0s"}},
            None,
            "config field rescheduler.housekeeping_interval: must be a positive duration like 30s, 5m or 1h30m, "
            "got '0s'.",
            id="interval-zero",
        ),
        pytest.param(
            {"rescheduler": {"node_drain_delay": "-5m"}},
            None,
            "config field rescheduler.node_drain_delay: must be a duration of zero or more like 30s, 5m or "
            "1h30m, got '-5m'.",
            id="negative-duration",
        ),
        pytest.param(
            {"rescheduler": {"node_drain_delay": "10 minutes"}},
            None,
            "config field rescheduler.node_drain_delay: must be a duration of zero or more like 30s, 5m or "
            "1h30m, got '10 minutes'.",
            id="duration-in-words",
        ),
        pytest.param(
            {"rescheduler": {"max_nodes_per_cycle": 0}},
            None,
            "config field rescheduler.max_nodes_per_cycle: must be an integer of at least 1, got 0.",
            id="count-zero",
        ),
        pytest.param(
            {"spot_ceiling": {"default_min_on_demand": -1}},
            None,
            "config field spot_ceiling.default_min_on_demand: must be an integer of at least 0, got -1.",
            id="negative-count",
        ),
        pytest.param(
            {"movability": {"expendable_priority_cutoff": 1.5}},
            None,
            "config field movability.expendable_priority_cutoff: must be an integer, got 1.5.",
            id="float-for-int",
        ),
        pytest.param(
            {"webhook": {"excluded_namespaces": "kube-system"}},
            None,
            "config field webhook.excluded_namespaces: must be a list, got 'kube-system'.",
            id="string-for-list",
        ),
        pytest.param(
            {"webhook": {"excluded_namespaces": ["kube-system", "Bad_NS"]}},
            None,
            "config field webhook.excluded_namespaces[1]: must be a namespace name (lower-case letters, digits "
            "and '-', "
            "at most 63), got 'Bad_NS'.",
            id="bad-list-item-named-by-index",
        ),
        pytest.param(
            {"node_classes": {"presets": ["karpenter", "gcp"]}},
            None,
            "config field node_classes.presets[1]: must be one of karpenter, eks, gke-spot, gke-preemptible, aks, "
            "spot-worker, got 'gcp'.",
            id="unknown-preset",
        ),
        pytest.param(
            {"node_classes": {"spot_selectors": ["lifecycle in (spot"]}},
            None,
            "config field node_classes.spot_selectors[0]: must have balanced parentheses, got 'lifecycle in (spot'.",
            id="selector-unbalanced",
        ),
        pytest.param(
            {"node_classes": {"spot_selectors": [42]}},
            None,
            "config field node_classes.spot_selectors[0]: must be a label selector string like key=value, key or "
            "key in (a,b), got 42.",
            id="selector-not-a-string",
        ),
        pytest.param(
            {"node_classes": {"spot_tolerations": [{"operator": "Exists", "effect": "NoSchedule"}]}},
            None,
            "config field node_classes.spot_tolerations[0].key: must be a taint key like example.com/name "
            "(a key-less toleration would tolerate every taint), got null.",
            id="keyless-exists-toleration",
        ),
        pytest.param(
            {"node_classes": {"spot_tolerations": [{"key": "spot", "effect": ""}]}},
            None,
            "config field node_classes.spot_tolerations[0].effect: must be one of NoSchedule, PreferNoSchedule, "
            "NoExecute (an empty effect tolerates every effect), got ''.",
            id="toleration-without-effect",
        ),
        pytest.param(
            {
                "node_classes": {
                    "spot_tolerations": [{"key": "spot", "operator": "Exists", "value": "x", "effect": "NoSchedule"}]
                }
            },
            None,
            "config field node_classes.spot_tolerations[0].value: must be empty with operator Exists, got 'x'.",
            id="exists-toleration-with-value",
        ),
        pytest.param(
            {"node_classes": {"spot_tolerations": [{"key": "spot", "when": "x", "effect": "NoSchedule"}]}},
            None,
            "config field node_classes.spot_tolerations[0].when: is not a toleration field "
            "(one of key, operator, value, effect, tolerationSeconds).",
            id="unknown-toleration-field",
        ),
        pytest.param(
            {"node_classes": {"spot_tolerations": [{"key": "spot", "effect": "NoSchedule", "tolerationSeconds": 30}]}},
            None,
            "config field node_classes.spot_tolerations[0].tolerationSeconds: must be an integer and is only allowed "
            "with effect NoExecute, got 30.",
            id="toleration-seconds-without-noexecute",
        ),
        pytest.param(
            {
                "node_classes": {
                    "spot_tolerations": [{"key": "cloud.google.com/gke-spot", "value": True, "effect": "NoSchedule"}]
                }
            },
            None,
            "config field node_classes.spot_tolerations[0].value: must be a label value (quote true in YAML), "
            "got true.",
            id="unquoted-true-toleration-value",
        ),
        pytest.param(
            {"rescheduler": {"node_backoff": float("inf")}},
            None,
            "config field rescheduler.node_backoff: must be a duration of zero or more like 30s, 5m or 1h30m, got inf.",
            id="infinite-duration",
        ),
        pytest.param(
            {"webhook": "prefer"},
            None,
            "config field webhook: must be a mapping of settings, got 'prefer'.",
            id="section-not-a-mapping",
        ),
        pytest.param(
            {"rescheduler": {"metrics_bind": "0.0.0.0:70000"}},
            None,
            "config field rescheduler.metrics_bind: must be an address like 0.0.0.0:8443 or [::]:8443, got "
            "'0.0.0.0:70000'.",
            id="port-out-of-range",
        ),
        pytest.param(
            {"movability": {"opt_out_key": "bad key"}},
            None,
            "config field movability.opt_out_key: must be a valid label or annotation key like example.com/name, "
            "got 'bad key'.",
            id="bad-annotation-key",
        ),
        # Unknown keys, with a suggestion.
        pytest.param(
            {"webhok": {}},
            None,
            "config field webhok: is not a known setting (did you mean webhook?).",
            id="typo-section",
        ),
        pytest.param(
            {"webhook": {"wieght": 1}},
            None,
            "config field webhook.wieght: is not a known setting (did you mean webhook.weight?).",
            id="typo",
        ),
        pytest.param(
            {"rescheduler": {"podEvictionTimeout": "1m"}},
            None,
            "config field rescheduler.podEvictionTimeout: is not a known setting (did you mean "
            "rescheduler.pod_eviction_timeout?).",
            id="camel-case-key",
        ),
        pytest.param(
            {"zzz": 1},
            None,
            "config field zzz: is not a known setting (known: namespace, node_classes, webhook, extender, rescheduler, "
            "movability, spot_ceiling, server, disruption, capacity, karpenter, worth, spot).",
            id="unknown-top-level-key",
        ),
        pytest.param(
            {"worth": {"spot_price_ratio": 1}},
            None,
            "config field worth.spot_price_ratio: must be a number from 0 to below 1, got 1.",
            id="spot-as-dear-as-on-demand",
        ),
        pytest.param(
            {"worth": {"eviction_cost": -0.5}},
            None,
            "config field worth.eviction_cost: must be a number of at least 0, got -0.5.",
            id="negative-eviction-cost",
        ),
        pytest.param(
            {"worth": {"margin": "2"}},
            None,
            "config field worth.margin: must be a number of at least 0, got '2'.",
            id="margin-quoted-string-in-yaml",
        ),
        pytest.param(
            None,
            {"SPOTSHIFT_WORTH_EVICTION_COST": "a lot"},
            "config field worth.eviction_cost (from SPOTSHIFT_WORTH_EVICTION_COST): must be a number of at least 0, "
            "got 'a lot'.",
            id="eviction-cost-env-not-a-number",
        ),
        # Contradictions.
        pytest.param(
            {"worth": {"removal_delay": "24h"}},
            None,
            "config field worth.removal_delay: must be shorter than worth.horizon (86400s), or no drain could save "
            "anything, got 86400.0.",
            id="removal-delay-not-shorter-than-horizon",
        ),
        pytest.param(
            {"node_classes": {"on_demand_selectors": ["karpenter.sh/capacity-type=spot"]}},
            None,
            "config field node_classes.on_demand_selectors[0]: must not select the spot label "
            "karpenter.sh/capacity-type=spot of preset karpenter, got 'karpenter.sh/capacity-type=spot'.",
            id="same-label-spot-and-on-demand",
        ),
        pytest.param(
            {
                "node_classes": {
                    "spot_selectors": ["lifecycle=spot"],
                    "on_demand_selectors": ["lifecycle in (spot, normal)"],
                }
            },
            None,
            "config field node_classes.on_demand_selectors[0]: must not select the spot label lifecycle=spot of "
            "node_classes.spot_selectors[0], got 'lifecycle in (spot, normal)'.",
            id="on-demand-values-overlap-spot-values",
        ),
        pytest.param(
            {"node_classes": {"spot_selectors": ["lifecycle"], "on_demand_selectors": ["lifecycle=normal"]}},
            None,
            "config field node_classes.on_demand_selectors[0]: must not select the spot label lifecycle of "
            "node_classes.spot_selectors[0], got 'lifecycle=normal'.",
            id="spot-key-exists-and-on-demand-value",
        ),
        pytest.param(
            {"node_classes": {"presets": []}},
            None,
            "config field node_classes.spot_selectors: must not be empty when node_classes.presets is empty, "
            "since then "
            "no node would be spot, got an empty list.",
            id="no-way-to-be-spot",
        ),
        pytest.param(
            {"extender": {"spot_score": 3, "on_demand_score": 5}},
            None,
            "config field extender.on_demand_score: must not be higher than extender.spot_score (3), or spot nodes "
            "would score lower, got 5.",
            id="on-demand-scored-above-spot",
        ),
        pytest.param(
            {"server": {"tls_cert_file": "/certs/tls.crt"}},
            None,
            "config field server.tls_key_file: must be set together with server.tls_cert_file, got ''.",
            id="certificate-without-key",
        ),
        pytest.param(
            {"spot_ceiling": {"min_on_demand_annotation": "spotshift.io/max-spot-percent"}},
            None,
            "config field spot_ceiling.min_on_demand_annotation: must differ from "
            "spot_ceiling.max_spot_percent_annotation, "
            "got 'spotshift.io/max-spot-percent'.",
            id="one-annotation-for-two-meanings",
        ),
        # From the environment: the variable is named too.
        pytest.param(
            None,
            {"SPOTSHIFT_WEBHOOK_WEIGHT": "heavy"},
            "config field webhook.weight (from SPOTSHIFT_WEBHOOK_WEIGHT): must be an integer from 1 to 100, got "
            "'heavy'.",
            id="env-bad-int",
        ),
        pytest.param(
            None,
            {"SPOTSHIFT_RESCHEDULER_DRY_RUN": "maybe"},
            "config field rescheduler.dry_run (from SPOTSHIFT_RESCHEDULER_DRY_RUN): must be true or false, got "
            "'maybe'.",
            id="env-bad-bool",
        ),
        pytest.param(
            None,
            {"SPOTSHIFT_WEBHOK_MODE": "prefer"},
            "environment variable SPOTSHIFT_WEBHOK_MODE: is not a known spotshift setting (did you mean "
            "SPOTSHIFT_WEBHOOK_MODE?).",
            id="env-typo",
        ),
        pytest.param(
            None,
            {"SPOTSHIFT_NODE_CLASSES_SPOT_SELECTORS": "[a, "},
            "config field node_classes.spot_selectors (from SPOTSHIFT_NODE_CLASSES_SPOT_SELECTORS): must be a "
            "YAML flow "
            "list like [a, b], got '[a, '.",
            id="env-bad-flow-list",
        ),
        pytest.param(
            None,
            {"SPOTSHIFT_EXTENDER_SPOT_SCORE": "5", "SPOTSHIFT_EXTENDER_ON_DEMAND_SCORE": "10"},
            "config field extender.on_demand_score (from SPOTSHIFT_EXTENDER_ON_DEMAND_SCORE): must not be higher than "
            "extender.spot_score (5), or spot nodes would score lower, got 10.",
            id="env-contradiction",
        ),
    ],
)
def test_validation_errors(data: Any, env: dict[str, str] | None, want: str) -> None:
    assert error(data, env) == want


def test_on_demand_selector_on_a_spot_key_with_another_value_is_fine() -> None:
    nc = parse_config({"node_classes": {"on_demand_selectors": ["karpenter.sh/capacity-type=on-demand"]}}).node_classes
    assert nc.on_demand_selectors == (Selector.parse("karpenter.sh/capacity-type=on-demand"),)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({"webhook": {"weight": 1000}}, id="range"),
        pytest.param({"rescheduler": {"pod_eviction_timeout": "soon"}}, id="duration"),
        pytest.param({"node_classes": {"spot_selectors": ["a in (b"]}}, id="selector"),
        pytest.param({"nonsense": {"deep": [1, 2]}}, id="unknown"),
        pytest.param({"server": {"tls_key_file": "k.pem"}}, id="contradiction"),
        pytest.param({"node_classes": {"spot_tolerations": [{"key": "a", "effect": "Never"}]}}, id="nested"),
        pytest.param({"webhook": {"scheduler_name": "Spot Scheduler. Now"}}, id="value-with-a-full-stop"),
    ],
)
def test_a_bad_config_message_is_a_single_sentence(data: Any) -> None:
    message = error(data)
    assert message.startswith("config field ")
    assert message.count(": ") >= 1


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)
