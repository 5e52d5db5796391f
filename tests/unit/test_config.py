"""shared.config: defaults, YAML, environment overrides, and one-sentence errors naming the field."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from shared.classes import PRESET_NAMES, Selector
from shared.config import (
    ENV_CONFIG_PATH,
    Config,
    ConfigError,
    NodeClasses,
    env_names,
    load_config,
    parse_config,
    parse_duration,
)
from shared.model import Toleration

CONFIG_SOURCE = Path(__file__).resolve().parents[2] / "shared" / "config.py"


def assert_one_sentence(message: str) -> None:
    """One line, one full stop at the end, no second sentence starting inside (quoted values aside)."""
    assert "\n" not in message
    assert message.endswith(".")
    assert not message.endswith("..")
    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "''", message)
    assert re.search(r"[.!?]\s+[A-Z]", unquoted) is None, message


def error(data: Any = None, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as e:
        parse_config(data, env or {})
    message = str(e.value)
    assert_one_sentence(message)
    return message


# --- defaults -------------------------------------------------------------------------------------


def test_defaults() -> None:
    c = Config()
    assert c.namespace == "spotshift"
    assert c.node_classes.presets == PRESET_NAMES
    assert c.node_classes.spot_selectors == ()
    assert c.node_classes.on_demand_selectors == ()
    assert c.node_classes.spot_tolerations is None
    assert c.webhook.mode == "prefer"
    assert 1 <= c.webhook.weight <= 100
    assert c.webhook.excluded_namespaces == ("kube-system",)
    assert c.webhook.scheduler_name == ""
    assert c.webhook_excluded_namespaces == frozenset({"kube-system", "spotshift"})
    assert (c.extender.spot_score, c.extender.on_demand_score) == (10, 0)
    r = c.rescheduler
    # pusher/k8s-spot-rescheduler's flag defaults.
    assert (r.housekeeping_interval, r.node_drain_delay, r.pod_eviction_timeout, r.max_graceful_termination) == (
        10.0,
        600.0,
        120.0,
        120.0,
    )
    assert (r.max_nodes_per_cycle, r.drain_taint, r.dry_run) == (1, "prefer-no-schedule", False)
    m = c.movability
    assert (m.delete_non_replicated_pods, m.allow_local_storage, m.kube_system_without_pdb_blocks) == (
        False,
        False,
        True,
    )
    assert m.expendable_priority_cutoff == -10
    assert m.opt_out_key == "spotshift.io/exclude"
    assert c.spot_ceiling.max_spot_percent_annotation == "spotshift.io/max-spot-percent"
    assert c.spot_ceiling.min_on_demand_annotation == "spotshift.io/min-on-demand"


def test_no_configuration_at_all_is_the_default() -> None:
    assert parse_config(None) == Config()
    assert parse_config({}, {}) == Config()
    assert load_config(None, {}) == Config()
    assert load_config(None, {"HOME": "/root", "PATH": "/bin"}) == Config()


def test_config_is_frozen() -> None:
    c = Config()
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.webhook.weight = 5  # type: ignore[misc]


def test_every_setting_is_documented() -> None:
    """Each field of each section has a docstring right below it (the README reference is built from them)."""
    tree = ast.parse(CONFIG_SOURCE.read_text())
    undocumented = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        body = cls.body
        for i, stmt in enumerate(body):
            if not isinstance(stmt, ast.AnnAssign) or not isinstance(stmt.target, ast.Name):
                continue
            is_section = isinstance(stmt.value, ast.Call) and any(
                k.arg == "default_factory" for k in stmt.value.keywords
            )
            nxt = body[i + 1] if i + 1 < len(body) else None
            documented = (
                isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)
            )
            if not is_section and not documented:
                undocumented.append(f"{cls.name}.{stmt.target.id}")
    assert undocumented == []


# --- YAML -----------------------------------------------------------------------------------------

FULL_YAML = """\
namespace: spot-system
node_classes:
  presets: [karpenter, aks]
  spot_selectors: ["lifecycle=Ec2Spot", "pool in (batch, ci)"]
  on_demand_selectors: ["node-role.kubernetes.io/worker"]
  spot_tolerations:
    - {key: lifecycle, value: Ec2Spot, effect: NoSchedule}
    - {key: pool, operator: Exists, effect: NoExecute, tolerationSeconds: 30}
  extra_reclaim_taints: [example.com/terminating]
webhook:
  mode: require
  weight: 80
  excluded_namespaces: [kube-system, monitoring]
  scheduler_name: spot-scheduler
extender:
  spot_score: 8
  on_demand_score: 2
rescheduler:
  housekeeping_interval: 30s
  node_drain_delay: 1h30m
  pod_eviction_timeout: 90
  max_graceful_termination: 500ms
  max_nodes_per_cycle: 3
  drain_taint: cordon
  dry_run: true
movability:
  delete_non_replicated_pods: true
  allow_local_storage: true
  kube_system_without_pdb_blocks: false
  expendable_priority_cutoff: 0
  opt_out_key: example.com/no-spot
spot_ceiling:
  default_max_spot_percent: 70
server:
  bind: "[::]:9443"
  tls_cert_file: /certs/tls.crt
  tls_key_file: /certs/tls.key
"""


def test_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "spotshift.yaml"
    path.write_text(FULL_YAML)
    c = load_config(str(path), {})
    assert c.namespace == "spot-system"
    nc = c.node_classes
    assert nc.presets == ("karpenter", "aks")
    assert [s.text for s in nc.spot_selectors] == ["lifecycle=Ec2Spot", "pool in (batch, ci)"]
    assert nc.spot_selectors[1] == Selector.parse("pool in (batch, ci)")
    assert nc.on_demand_selectors == (Selector.parse("node-role.kubernetes.io/worker"),)
    assert nc.spot_tolerations == (
        Toleration("lifecycle", "Equal", "Ec2Spot", "NoSchedule"),
        Toleration("pool", "Exists", "", "NoExecute", 30),
    )
    assert nc.extra_reclaim_taints == ("example.com/terminating",)
    assert (c.webhook.mode, c.webhook.weight, c.webhook.scheduler_name) == ("require", 80, "spot-scheduler")
    assert c.webhook_excluded_namespaces == frozenset({"kube-system", "monitoring", "spot-system"})
    assert (c.extender.spot_score, c.extender.on_demand_score) == (8, 2)
    r = c.rescheduler
    assert (r.housekeeping_interval, r.node_drain_delay, r.pod_eviction_timeout, r.max_graceful_termination) == (
        30.0,
        5400.0,
        90.0,
        0.5,
    )
    assert (r.max_nodes_per_cycle, r.drain_taint, r.dry_run) == (3, "cordon", True)
    m = c.movability
    assert (m.delete_non_replicated_pods, m.allow_local_storage, m.kube_system_without_pdb_blocks) == (
        True,
        True,
        False,
    )
    assert (m.expendable_priority_cutoff, m.opt_out_key) == (0, "example.com/no-spot")
    assert c.spot_ceiling.default_max_spot_percent == 70
    assert (c.server.bind, c.server.tls_cert_file, c.server.tls_key_file) == (
        "[::]:9443",
        "/certs/tls.crt",
        "/certs/tls.key",
    )


def test_unquoted_off_in_yaml_is_mode_off(tmp_path: Path) -> None:
    # YAML 1.1 reads `off` as false; an operator writing `mode: off` means the mode.
    path = tmp_path / "c.yaml"
    path.write_text("webhook:\n  mode: off\n")
    assert load_config(str(path), {}).webhook.mode == "off"
    assert "got true" in error({"webhook": {"mode": True}})


def test_yaml_path_from_spotshift_config_variable(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("webhook:\n  mode: tolerate-only\n")
    assert load_config(None, {ENV_CONFIG_PATH: str(path)}).webhook.mode == "tolerate-only"


def test_explicit_path_wins_over_spotshift_config(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("webhook: {weight: 10}\n")
    b.write_text("webhook: {weight: 20}\n")
    assert load_config(str(a), {ENV_CONFIG_PATH: str(b)}).webhook.weight == 10


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty-file"),
        pytest.param("# only a comment\n", id="comment-only"),
        pytest.param("webhook:\nrescheduler: ~\n", id="empty-sections"),
    ],
)
def test_empty_yaml_is_the_default(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert load_config(str(path), {}) == Config()


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as e:
        load_config(str(missing), {})
    assert str(e.value) == f"config file {missing}: does not exist."


def test_directory_instead_of_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        load_config(str(tmp_path), {})
    assert str(e.value) == f"config file {tmp_path}: is a directory, not a file."


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("webhook: [1\nmode: x\n", "is not valid YAML (line 2, column 5:", id="syntax-error"),
        pytest.param("webhook:\n  mode: prefer\n  mode: off\n", "key 'mode' appears twice", id="duplicate-key"),
        pytest.param("- webhook\n", "must be a mapping of settings at the top level, got a list.", id="top-level-list"),
        pytest.param("webhook: !!python/object:os.system {}\n", "is not valid YAML", id="unsafe-tag-rejected"),
    ],
)
def test_bad_yaml_file(tmp_path: Path, text: str, want: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(str(path), {})
    message = str(e.value)
    assert message.startswith(f"config file {path}: ")
    assert want in message
    assert_one_sentence(message)


# --- environment ----------------------------------------------------------------------------------


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


def _as_env_text(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}s"
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
        text = _as_env_text(value)
        if text is not None:
            env[name] = text
    assert parse_config({}, env) == default


# --- durations ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30s", 30.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        ("1m30s500ms", 90.5),
        ("250us", 0.00025),
        ("0", 0.0),
        ("0s", 0.0),
        ("90", 90.0),
        ("2.5", 2.5),
        (" 10s ", 10.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "5x", "m5", "1h 30m", "5 m", "abc", "1d", "5M", "--5s"])
def test_parse_duration_errors(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


# --- validation errors: one sentence naming the field ---------------------------------------------


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
            "movability, spot_ceiling, server).",
            id="unknown-top-level-key",
        ),
        # Contradictions.
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


def test_node_classes_default_object_is_shared_safely() -> None:
    # Frozen tuples of frozen objects: two Configs may share defaults without aliasing bugs.
    assert Config().node_classes == NodeClasses()
    assert Config().node_classes is not Config().node_classes
