"""shared.config: SPOTSHIFT_* environment variables override every setting, win over YAML, and round-trip the
defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shared.classes import Selector
from shared.config import ENV_CONFIG_PATH, Config, env_names, load_config, parse_config
from shared.model import Toleration


@pytest.mark.parametrize(
    ("name", "value", "path", "want"),
    [
        pytest.param("SPOTSHIFT_WEBHOOK_MODE", "tolerate-only", "webhook.mode", "tolerate-only", id="webhook-mode"),
        pytest.param("SPOTSHIFT_WEBHOOK_WEIGHT", " 42 ", "webhook.weight", 42, id="webhook-weight-trimmed"),
        pytest.param("SPOTSHIFT_WEBHOOK_MODE", "prefer", "webhook.mode", "prefer", id="webhook-mode-prefer"),
        pytest.param("SPOTSHIFT_RESCHEDULER_DRY_RUN", "true", "rescheduler.dry_run", True, id="dry-run-true"),
        pytest.param("SPOTSHIFT_RESCHEDULER_DRY_RUN", "YES", "rescheduler.dry_run", True, id="dry-run-yes"),
        pytest.param("SPOTSHIFT_RESCHEDULER_DRY_RUN", "1", "rescheduler.dry_run", True, id="dry-run-1"),
        pytest.param("SPOTSHIFT_RESCHEDULER_DRY_RUN", "off", "rescheduler.dry_run", False, id="dry-run-off"),
        pytest.param(
            "SPOTSHIFT_RESCHEDULER_NODE_DRAIN_DELAY", "5m", "rescheduler.node_drain_delay", 300.0, id="duration"
        ),
        pytest.param(
            "SPOTSHIFT_RESCHEDULER_NODE_DRAIN_DELAY", "45", "rescheduler.node_drain_delay", 45.0, id="bare-seconds"
        ),
        pytest.param(
            "SPOTSHIFT_MOVABILITY_EXPENDABLE_PRIORITY_CUTOFF",
            "-100",
            "movability.expendable_priority_cutoff",
            -100,
            id="negative-int",
        ),
        pytest.param(
            "SPOTSHIFT_NODE_CLASSES_PRESETS",
            "karpenter, aks",
            "node_classes.presets",
            ("karpenter", "aks"),
            id="comma-list",
        ),
        pytest.param("SPOTSHIFT_NODE_CLASSES_PRESETS", "[eks]", "node_classes.presets", ("eks",), id="yaml-flow-list"),
        pytest.param(
            "SPOTSHIFT_WEBHOOK_EXCLUDED_NAMESPACES",
            "",
            "webhook.excluded_namespaces",
            (),
            id="empty-value-is-empty-list",
        ),
        pytest.param(
            "SPOTSHIFT_NODE_CLASSES_SPOT_SELECTORS",
            "pool in (batch,ci),lifecycle=spot",
            "node_classes.spot_selectors",
            (Selector.parse("pool in (batch,ci),lifecycle=spot"),),
            id="bare-selector-is-one-selector-with-its-commas",
        ),
        pytest.param(
            "SPOTSHIFT_NODE_CLASSES_SPOT_SELECTORS",
            '["a=b", "c in (d,e)"]',
            "node_classes.spot_selectors",
            (Selector.parse("a=b"), Selector.parse("c in (d,e)")),
            id="selectors-as-yaml-flow-list",
        ),
        pytest.param(
            "SPOTSHIFT_NODE_CLASSES_SPOT_TOLERATIONS",
            "[{key: spot, value: 'true', effect: NoSchedule}]",
            "node_classes.spot_tolerations",
            (Toleration("spot", "Equal", "true", "NoSchedule"),),
            id="tolerations-as-yaml-flow-list",
        ),
        pytest.param("SPOTSHIFT_NAMESPACE", "ops", "namespace", "ops", id="top-level-field"),
        pytest.param(
            "SPOTSHIFT_WEBHOOK_SCHEDULER_NAME",
            "spot-scheduler",
            "webhook.scheduler_name",
            "spot-scheduler",
            id="scheduler-name",
        ),
    ],
)
def test_environment_overrides(name: str, value: str, path: str, want: Any) -> None:
    c = parse_config({}, {name: value})
    got: Any = c
    for part in path.split("."):
        got = getattr(got, part)
    assert got == want


def test_environment_wins_over_yaml(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("webhook: {mode: require, weight: 10}\n")
    c = load_config(str(path), {"SPOTSHIFT_WEBHOOK_MODE": "off"})
    assert (c.webhook.mode, c.webhook.weight) == ("off", 10)


def test_unrelated_environment_is_ignored_and_config_path_is_not_a_setting() -> None:
    assert parse_config({}, {"HOME": "/root", "spotshift_webhook_mode": "off", ENV_CONFIG_PATH: ""}) == Config()


def test_every_setting_has_an_environment_variable() -> None:
    names = env_names()
    assert names["SPOTSHIFT_WEBHOOK_MODE"] == "webhook.mode"
    assert names["SPOTSHIFT_RESCHEDULER_DRY_RUN"] == "rescheduler.dry_run"
    assert names["SPOTSHIFT_NAMESPACE"] == "namespace"
    assert len(names) == len(set(names.values()))
    for name, path in names.items():
        assert name == "SPOTSHIFT_" + path.replace(".", "_").upper()


PLAIN_NUMBERS = frozenset({"worth.spot_price_ratio", "worth.eviction_cost", "worth.margin"})
"""The float settings that are numbers, not durations."""


def _as_env_text(value: Any, path: str = "") -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}" if path in PLAIN_NUMBERS else f"{value:g}s"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
        return ",".join(value)
    if isinstance(value, tuple) and all(isinstance(v, Selector) for v in value):
        return "[" + ", ".join(f'"{v.text}"' for v in value) + "]"
    return None  # spot_tolerations=None has no text form: leave the variable unset


def test_defaults_survive_a_round_trip_through_the_environment() -> None:
    """Every default is valid under its own validator, written as an operator would write it."""
    default = Config()
    env = {}
    for name, path in env_names().items():
        value: Any = default
        for part in path.split("."):
            value = getattr(value, part)
        text = _as_env_text(value, path)
        if text is not None:
            env[name] = text
    assert parse_config({}, env) == default


def test_the_worth_numbers_are_read_from_the_environment() -> None:
    config = parse_config({}, {"SPOTSHIFT_WORTH_EVICTION_COST": "1.5", "SPOTSHIFT_WORTH_SPOT_PRICE_RATIO": "0.4"})
    assert (config.worth.eviction_cost, config.worth.spot_price_ratio) == (1.5, 0.4)
