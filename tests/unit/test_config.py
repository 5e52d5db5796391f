"""shared.config: defaults, the YAML loader and durations (environment overrides are in test_config_env.py,
one-sentence errors in test_config_errors.py)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from shared.classes import PRESET_NAMES, Selector
from shared.config import (
    ENV_CONFIG_PATH,
    Config,
    ConfigError,
    NodeClasses,
    load_config,
    parse_config,
    parse_duration,
)
from shared.model import Toleration
from tests.support.config_helpers import assert_one_sentence, error

CONFIG_SOURCES = tuple(Path(__file__).resolve().parents[2] / "shared" / f for f in ("config.py", "config_sections.py"))


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
    """Each field of each section has a docstring right below it (docs/configuration.md's reference is built from
    them)."""
    undocumented = []
    classes = [n for src in CONFIG_SOURCES for n in ast.parse(src.read_text()).body if isinstance(n, ast.ClassDef)]
    assert {c.name for c in classes} >= {"Config", "ReschedulerConfig", "CapacityConfig"}
    for cls in classes:
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


def test_node_classes_default_object_is_shared_safely() -> None:
    # Frozen tuples of frozen objects: two Configs may share defaults without aliasing bugs.
    assert Config().node_classes == NodeClasses()
    assert Config().node_classes is not Config().node_classes
