"""Command-line flags as the fourth configuration source: flag > environment > file > default, and errors that
name the flag a bad value came from, for the loader and for each command that takes flags."""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from rescheduler import cli as rescheduler_cli
from rescheduler.flags import add_run_arguments, config_from_args
from rescheduler.run import run_command
from shared.config import ConfigError, flag_overrides, load_config, parse_config

DELAY = "rescheduler.node_drain_delay"
FLAG = {DELAY: "--node-drain-delay"}


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text("rescheduler:\n  node_drain_delay: 1m\n  housekeeping_interval: 30s\n")
    return path


@pytest.mark.parametrize(
    ("use_file", "env", "override", "expected"),
    [
        pytest.param(False, {}, None, 600.0, id="default"),
        pytest.param(True, {}, None, 60.0, id="file-over-default"),
        pytest.param(True, {"SPOTSHIFT_RESCHEDULER_NODE_DRAIN_DELAY": "2m"}, None, 120.0, id="env-over-file"),
        pytest.param(True, {"SPOTSHIFT_RESCHEDULER_NODE_DRAIN_DELAY": "2m"}, "5m", 300.0, id="flag-over-env"),
        pytest.param(False, {}, "5m", 300.0, id="flag-over-default"),
    ],
)
def test_precedence_is_flag_then_environment_then_file_then_default(
    config_file: Path, use_file: bool, env: dict[str, str], override: str | None, expected: float
) -> None:
    overrides = {DELAY: override} if override is not None else None
    config = load_config(str(config_file) if use_file else None, env, overrides, FLAG)
    assert config.rescheduler.node_drain_delay == expected
    if use_file:
        assert config.rescheduler.housekeeping_interval == 30.0, "a flag for one field leaves the others alone"


def test_a_bad_flag_value_names_the_flag_not_the_variable() -> None:
    env = {"SPOTSHIFT_RESCHEDULER_NODE_DRAIN_DELAY": "2m"}
    with pytest.raises(ConfigError) as e:
        load_config(None, env, {DELAY: "x"}, FLAG)
    assert str(e.value) == (
        "config field rescheduler.node_drain_delay (from --node-drain-delay): must be a duration of zero or more "
        "like 30s, 5m or 1h30m, got 'x'."
    )


def test_a_bad_environment_value_still_names_the_variable_when_no_flag_is_given() -> None:
    with pytest.raises(ConfigError, match=r"\(from SPOTSHIFT_RESCHEDULER_NODE_DRAIN_DELAY\)"):
        load_config(None, {"SPOTSHIFT_RESCHEDULER_NODE_DRAIN_DELAY": "x"}, {}, FLAG)


def test_a_contradiction_names_the_flag_that_set_an_indexed_field() -> None:
    with pytest.raises(ConfigError) as e:
        parse_config(
            None,
            overrides={"node_classes.on_demand_selectors": ["karpenter.sh/capacity-type=spot"]},
            sources={"node_classes.on_demand_selectors": "--on-demand-node-label"},
        )
    assert str(e.value).startswith("config field node_classes.on_demand_selectors[0] (from --on-demand-node-label):")


def test_an_override_of_an_unknown_setting_is_an_error_not_ignored() -> None:
    with pytest.raises(ConfigError, match="--nope: is not a known spotshift setting"):
        parse_config(None, overrides={"rescheduler.nope": "1"}, sources={"rescheduler.nope": "--nope"})


def test_typed_flag_values_are_taken_as_they_are() -> None:
    config = parse_config(None, overrides={"rescheduler.dry_run": True, "rescheduler.max_nodes_per_cycle": "3"})
    assert (config.rescheduler.dry_run, config.rescheduler.max_nodes_per_cycle) == (True, 3)


def test_flag_overrides_takes_only_the_flags_given() -> None:
    values = {"node_drain_delay": "5m", "dry_run": None, "other": "x"}
    flags = {"--node-drain-delay": DELAY, "--dry-run": "rescheduler.dry_run"}
    assert flag_overrides(values, flags) == ({DELAY: "5m"}, {DELAY: "--node-drain-delay"})


def run_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        pytest.param(("--leader-elect=maybe",), "--leader-elect", id="boolean"),
        pytest.param(("--max-nodes-per-cycle=0",), "--max-nodes-per-cycle", id="integer"),
        pytest.param(("--drain-taint=evict",), "--drain-taint", id="choice"),
        pytest.param(("--listen-address=nowhere",), "--listen-address", id="address"),
        pytest.param(("--delete-non-replicated-pods=perhaps",), "--delete-non-replicated-pods", id="optional-boolean"),
        pytest.param(("--spot-node-label=a b c",), "--spot-node-label", id="selector"),
    ],
)
def test_run_flags_are_validated_by_the_configuration_rules(argv: tuple[str, ...], flag: str) -> None:
    with pytest.raises(ConfigError, match=f"\\(from {flag}\\)"):
        config_from_args(run_args(*argv), {})


def test_spot_node_label_adds_to_the_selectors_of_the_environment() -> None:
    env = {"SPOTSHIFT_NODE_CLASSES_SPOT_SELECTORS": "lifecycle=spot"}
    config = config_from_args(run_args("--spot-node-label=pool=cheap"), env)
    assert [s.text for s in config.node_classes.spot_selectors] == ["lifecycle=spot", "pool=cheap"]


@contextlib.contextmanager
def logging_kept() -> Iterator[None]:
    """``run_command`` sets up logging for its process (the root logger's handler on this test's ``sys.stderr``, its
    level, urllib3's level): put it back, so that later tests do not log to a closed stream at another level."""
    root, urllib3 = logging.getLogger(), logging.getLogger("urllib3")
    handlers, level, urllib3_level = root.handlers[:], root.level, urllib3.level
    try:
        yield
    finally:
        for h in root.handlers[:]:
            root.removeHandler(h)
        for h in handlers:
            root.addHandler(h)
        root.setLevel(level)
        urllib3.setLevel(urllib3_level)


def test_run_refuses_a_bad_flag_at_start_up_with_exit_2_and_one_sentence(capsys: pytest.CaptureFixture[str]) -> None:
    with logging_kept():
        assert run_command(run_args("--node-drain-delay=soon", "--log-format=text"), env={}) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "spot-rescheduler: config field rescheduler.node_drain_delay (from --node-drain-delay): must be a duration "
        "of zero or more like 30s, 5m or 1h30m, got 'soon'."
    ]


def test_run_refuses_a_bad_lease_duration_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with logging_kept():
        assert run_command(run_args("--leader-elect-retry-period=never", "--log-format=text"), env={}) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "spot-rescheduler: --leader-elect-retry-period: must be a positive duration like 15s or 1m, got 'never'."
    ]


def test_plan_takes_the_planning_flags_and_names_them_in_errors() -> None:
    err = io.StringIO()
    code = rescheduler_cli.main(
        ["plan", "--snapshot", "-", "--on-demand-node-label=karpenter.sh/capacity-type=spot"],
        env={},
        stdout=io.StringIO(),
        stderr=err,
        stdin=io.BytesIO(b'{"kind": "List", "items": []}'),
    )
    assert code == 2
    assert "(from --on-demand-node-label)" in err.getvalue()
    assert len(err.getvalue().splitlines()) == 1


def test_extender_flags_are_settings_and_errors_name_them(capsys: pytest.CaptureFixture[str]) -> None:
    from extender.cli import main as extender_main

    assert extender_main(["--bind", "nowhere", "--no-node-cache"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("spot-extender: config field server.bind (from --bind): must be an address")
