"""The churn benchmark's days kept on disk (bench/churnlab/daycache.py, ``bench/churn.py --cache``)."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path

import pytest

from bench import churn
from bench.churnlab.daycache import APART, CODE, ROOT, DayCache, code_digest
from bench.churnlab.sim import Figures, Scenario


def _figures(policy: str, cost: float) -> Figures:
    zero = {f.name: ([] if f.name == "on_demand_series" else 0) for f in fields(Figures)}
    return replace(Figures(**zero), policy=policy, cost=cost, on_demand_series=[(0.0, 3), (60.0, 4)])


def test_a_day_kept_reads_back_as_the_same_figures(tmp_path: Path) -> None:
    cache = DayCache(tmp_path, "abc")
    sc = Scenario("web", "spiky", 3)
    day = _figures("spotshift eviction-cost:2", 123.4)
    assert cache.get(sc, day.policy, 0.3) is None
    cache.put(sc, day, 0.3)
    assert cache.get(sc, day.policy, 0.3) == day
    assert cache.get(sc, day.policy, 0.4) is None  # another spot fraction is another day
    assert cache.get(Scenario("web", "spiky", 4), day.policy, 0.3) is None
    assert [p.name for p in (tmp_path / "abc").iterdir()] == ["web_spiky_3_1_0.3_spotshift-eviction-cost-2.json"]


def test_a_file_that_is_not_a_day_counts_as_none(tmp_path: Path) -> None:
    cache = DayCache(tmp_path, "abc")
    sc = Scenario("web", "calm", 1)
    path = cache.path(sc, "none", 0.3)
    path.parent.mkdir(parents=True)
    for text in ("{", '{"policy": "none"}', "[]"):
        path.write_text(text)
        assert cache.get(sc, "none", 0.3) is None


def test_the_digest_follows_every_source_the_days_run_and_nothing_else(tmp_path: Path) -> None:
    for part in CODE:
        (tmp_path / part).mkdir(parents=True)
        (tmp_path / part / "a.py").write_text(f"# {part}\n")
    first = code_digest(tmp_path)
    (tmp_path / "shared" / "notes.md").write_text("not code")
    (tmp_path / "bench" / "churnlab" / "page.py").write_text("# the page, not the days\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "t.py").write_text("x = 1\n")
    assert code_digest(tmp_path) == first
    (tmp_path / "rescheduler" / "a.py").write_text("# changed\n")
    assert code_digest(tmp_path) != first
    (tmp_path / "rescheduler" / "a.py").write_text("# rescheduler\n")
    (tmp_path / "extender" / "deep").mkdir()
    (tmp_path / "extender" / "deep" / "b.py").write_text("")
    assert code_digest(tmp_path) != first


def test_the_command_prints_a_kept_day_instead_of_simulating_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sc = Scenario("web", "calm", 1)
    DayCache(tmp_path, code_digest()).put(sc, _figures("none", 9876.5), 0.3)
    argv = ["--profile", "web", "--trace", "calm", "--seed", "1", "--policy", "none", "--jobs", "1"]
    assert churn.main([*argv, "--cache", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "9876.5" in out
    assert f"1 simulated days (1 read from {tmp_path / code_digest()})" in out


def test_the_modules_left_out_of_the_digest_are_not_imported_by_a_simulated_day() -> None:
    code = (
        "import sys; import bench.churnlab.sim; "
        "print(sorted(m.rsplit('.', 1)[1] + '.py' for m in sys.modules if m.startswith('bench.churnlab.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    loaded = set(ast.literal_eval(out))
    assert "world.py" in loaded and not loaded & APART
