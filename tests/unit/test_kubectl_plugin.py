"""``kubectl-spotshift``: the plugin dispatches ``plan`` to ``spot-rescheduler plan`` under its own name.

The plugin against a real API server, found by the real kubectl on ``PATH``, is in
``tests/e2e/test_kubectl_plugin_e2e.py``.
"""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest

from rescheduler.kubectl_plugin import USAGE, main
from tests.unit.test_plan_page import cluster


def test_plan_from_a_snapshot_is_spot_rescheduler_plan(tmp_path: Path) -> None:
    snap = tmp_path / "snap.json"
    snap.write_bytes(cluster())
    out, err = io.StringIO(), io.StringIO()
    assert main(["plan", "--snapshot", str(snap), "-o", "json"], stdout=out, stderr=err) == 0, err.getvalue()
    doc = orjson.loads(out.getvalue())
    assert doc["drained"] == ["od-1"]
    assert "safe-to-evict" in doc["undrainable"]["od-2"]


@pytest.mark.parametrize("argv", [["--help"], ["help"], ["-h"]])
def test_help_prints_the_plugin_usage(argv: list[str]) -> None:
    out = io.StringIO()
    assert main(argv, stdout=out) == 0
    assert out.getvalue() == USAGE
    assert "kubectl spotshift plan" in USAGE


def test_no_command_and_unknown_commands_are_usage_errors() -> None:
    err = io.StringIO()
    assert main([], stderr=err) == 2
    assert err.getvalue() == USAGE
    err = io.StringIO()
    assert main(["run"], stderr=err) == 2, "the plugin previews; it never runs the rescheduler"
    assert err.getvalue().startswith("kubectl spotshift: unknown command 'run'")


def test_errors_name_the_plugin(tmp_path: Path) -> None:
    err = io.StringIO()
    code = main(["plan", "--snapshot", str(tmp_path / "missing.json")], stdout=io.StringIO(), stderr=err)
    assert code == 2
    assert err.getvalue().startswith("kubectl spotshift: error: snapshot ")


def test_plan_help_names_the_plugin(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--help"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.startswith("usage: kubectl spotshift plan ")
