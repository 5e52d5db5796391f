"""``spot-rescheduler plan``, run as a subprocess: the JSON shape, the table, and one-line refusals (exit 2)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from rescheduler.plan.stay_reasons import Kind
from tests.builders import api_list, node_json, owner, pod_json
from tests.support.cluster_gen import DRAINABLE, generate, write_list

ROOT = Path(__file__).resolve().parents[2]


def run(
    *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSHIFT_")}
    full_env["PYTHONPATH"] = str(ROOT)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "rescheduler.cli", *args],
        input=stdin,
        capture_output=True,
        cwd=ROOT,
        env=full_env,
        timeout=120,
    )


@pytest.fixture(scope="module")
def snapshot_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plan") / "snap.json"
    with path.open("wb") as fh:
        write_list(generate(13, 30, 360, DRAINABLE), fh, indent=4)
    return path


def _one_line_refusal(proc: subprocess.CompletedProcess[bytes]) -> str:
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert proc.stdout == b""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("spot-rescheduler: error: ")
    return lines[0]


def test_json_output_has_exactly_the_documented_shape(snapshot_file: Path) -> None:
    proc = run("plan", "--snapshot", str(snapshot_file), "--output", "json")
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stderr == b""  # no progress when stderr is not a terminal
    doc: dict[str, Any] = orjson.loads(proc.stdout)
    # capacity: capacity mode's view (on by default; docs/capacity.md).
    assert list(doc) == ["moves", "drained", "undrainable", "summary", "reasons", "pacing", "worth", "capacity"]
    assert doc["moves"], "the fixture cluster should drain something"
    for m in doc["moves"]:
        assert list(m) == ["pod", "from", "to"]
        assert m["pod"].count("/") == 1 and m["from"] in doc["drained"]
    assert all(isinstance(n, str) for n in doc["drained"])
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in doc["undrainable"].items())
    assert list(doc["reasons"]) == list(doc["undrainable"]), "a record for every node that stays, in order"
    kinds = {k.value for k in Kind}
    for node_name, why in doc["reasons"].items():
        assert list(why) == ["kind", "pod", "detail"]
        assert why["kind"] in kinds
        sentence = f"pod {why['pod']}: {why['detail']}" if why["pod"] is not None else why["detail"]
        assert doc["undrainable"][node_name] == sentence
    for row in doc["summary"]["top_reasons"]:
        assert list(row) == ["reason", "nodes", "kind"] and row["kind"] in kinds
    assert doc["summary"]["drained"] == len(doc["drained"])
    assert doc["summary"]["pods_moved"] == len(doc["moves"])
    for node_name, notes in doc["pacing"].items():
        assert node_name in doc["drained"]
        for note in notes:
            assert list(note) == ["pdb", "pods", "allowed"] and note["pods"] > note["allowed"]
    assert set(doc["drained"]) <= set(doc["worth"]), "every node drained is weighed"
    for node_name, w in doc["worth"].items():
        assert list(w) == ["saving", "cost", "verdict", "stay_seconds", "evictions"]
        assert w["verdict"] == ("worth" if w["saving"] >= w["cost"] else "not-worth-it")
        assert node_name in doc["drained"] or doc["reasons"][node_name]["kind"] in ("not-worth-it", "disruption-budget")
    for need in doc["capacity"]:
        assert list(need) == ["node", "pods", "cpu_millicores", "memory_bytes", "text"]
        assert need["node"] in doc["undrainable"] and need["text"].startswith("needs ")


def test_json_output_is_reproducible(snapshot_file: Path) -> None:
    a = run("plan", "--snapshot", str(snapshot_file), "-o", "json")
    b = run("plan", "--snapshot", str(snapshot_file), "-o", "json")
    assert a.stdout == b.stdout


def test_table_output_is_for_people(snapshot_file: Path) -> None:
    proc = run("plan", "--snapshot", str(snapshot_file))
    assert proc.returncode == 0, proc.stderr.decode()
    out = proc.stdout.decode()
    assert "on-demand nodes can be drained onto" in out
    assert "Pods to move:" in out
    assert "NODE TO DRAIN" in out and "WHY NODES STAY" in out


def test_table_names_the_budgets_that_pace_each_drain() -> None:
    from rescheduler.output.table import render_table
    from rescheduler.plan.budgets import Pacing
    from rescheduler.plan.records import Move, Plan, Summary

    summary = Summary(
        drained=1,
        on_demand_nodes=1,
        spot_targets=1,
        pods_moved=3,
        freed_cpu_millicores=4000,
        freed_memory_bytes=2**33,
        strategy="best-fit",
    )
    moves = tuple(Move(f"shop/web-{i}", "od-1", "spot-1") for i in range(3))
    paced = Plan(moves, ("od-1",), {}, summary, {"od-1": (Pacing("shop/web", 3, 1),)})
    out = render_table(paced)
    assert "1 drain(s) paced by PodDisruptionBudgets" in out
    assert "od-1           shop/web             3 pod(s) here, 1 evicted at a time" in out
    assert "paced" not in render_table(Plan(moves, ("od-1",), {}, summary))


def test_snapshot_from_stdin(snapshot_file: Path) -> None:
    proc = run("plan", "--snapshot", "-", "-o", "json", stdin=snapshot_file.read_bytes())
    assert proc.returncode == 0, proc.stderr.decode()
    assert orjson.loads(proc.stdout)["summary"]["drained"] > 0


def test_progress_goes_to_stderr_only(snapshot_file: Path) -> None:
    proc = run("plan", "--snapshot", str(snapshot_file), "-o", "json", "--progress", "always")
    assert proc.returncode == 0
    assert b"reading objects" in proc.stderr
    orjson.loads(proc.stdout)


def test_verify_mode_agrees(snapshot_file: Path) -> None:
    plain = run("plan", "--snapshot", str(snapshot_file), "-o", "json")
    verified = run("plan", "--snapshot", str(snapshot_file), "-o", "json", "--verify")
    assert verified.returncode == 0, verified.stderr.decode()
    assert orjson.loads(plain.stdout)["moves"] == orjson.loads(verified.stdout)["moves"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(b'{"items": [', "not valid JSON", id="bad-json"),
        pytest.param(b'["not", "a", "list"]', "expected a JSON object with items", id="not-a-list"),
        pytest.param(b'{"kind": "Pod", "metadata": {"name": "p"}}', "expected a List with items", id="a-single-pod"),
        pytest.param(
            b'{"kind": "List", "items": [{"kind": "Secret"}]}', "unsupported kind 'Secret'", id="unknown-kind"
        ),
        pytest.param(
            orjson.dumps(
                {
                    "kind": "List",
                    "items": [
                        {"kind": "Node", "metadata": {"name": "n"}, "status": {"allocatable": {"memory": "12 Gi"}}}
                    ],
                }
            ),
            "node n: status.allocatable.memory: quantity '12 Gi'",
            id="bad-quantity",
        ),
        pytest.param(b"", "is empty", id="empty-file"),
    ],
)
def test_malformed_snapshot_is_one_line_and_exit_2(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    line = _one_line_refusal(run("plan", "--snapshot", str(path)))
    assert expected in line


def test_malformed_stdin_is_one_line_and_exit_2() -> None:
    assert "not valid JSON" in _one_line_refusal(run("plan", "--snapshot", "-", stdin=b"{{"))


def test_missing_snapshot_file(tmp_path: Path) -> None:
    assert "cannot be read" in _one_line_refusal(run("plan", "--snapshot", str(tmp_path / "nope.json")))


def test_bad_config_names_the_field(tmp_path: Path, snapshot_file: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("movability:\n  expendable_priority_cutoff: lots\n")
    line = _one_line_refusal(run("plan", "--snapshot", str(snapshot_file), "--config", str(config)))
    assert "movability.expendable_priority_cutoff" in line


def test_bad_config_from_the_environment(snapshot_file: Path) -> None:
    line = _one_line_refusal(
        run("plan", "--snapshot", str(snapshot_file), env={"SPOTSHIFT_SPOT_CEILING_DEFAULT_MAX_SPOT_PERCENT": "120"})
    )
    assert "spot_ceiling.default_max_spot_percent" in line


def test_config_changes_the_plan(tmp_path: Path, snapshot_file: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("spot_ceiling:\n  default_max_spot_percent: 0\n")
    proc = run("plan", "--snapshot", str(snapshot_file), "-o", "json", "--config", str(config))
    assert proc.returncode == 0, proc.stderr.decode()
    assert orjson.loads(proc.stdout)["moves"] == []


def test_unknown_option_is_a_usage_error() -> None:
    proc = run("plan", "--snapshot")
    assert proc.returncode == 2 and b"Traceback" not in proc.stderr


# --- --kubernetes-version: the cluster's kube-scheduler rules ----------------------------------------------


@pytest.fixture
def over_committed_file(tmp_path: Path) -> Path:
    """A memory-only pod on an on-demand node; the one spot node (cpu: 1) holds a pod bound with cpu: 2."""

    def node(name: str, cpu: str, capacity_type: str) -> dict[str, Any]:
        labels = {"karpenter.sh/capacity-type": capacity_type}
        return node_json(name, labels=labels, allocatable={"cpu": cpu, "memory": "4Gi", "pods": "110"})

    def pod(name: str, on: str, requests: dict[str, str], owned: bool) -> dict[str, Any]:
        owners = [owner("ReplicaSet", "rs")] if owned else None
        return pod_json(name, namespace="shop", uid=f"uid-{name}", owners=owners, node_name=on, requests=requests)

    items = [
        node("od-1", "2", "on-demand"),
        node("spot-1", "1", "spot"),
        pod("big", "spot-1", {"cpu": "2"}, owned=False),
        pod("mem-only", "od-1", {"memory": "100Mi"}, owned=True),
    ]
    path = tmp_path / "over-committed.json"
    path.write_bytes(orjson.dumps(api_list(items)))
    return path


def _drained(*argv: str) -> list[str]:
    from rescheduler.cli import main

    out, err = io.StringIO(), io.StringIO()
    assert main(["plan", *argv, "-o", "json"], stdout=out, stderr=err) == 0, err.getvalue()
    assert err.getvalue() == ""
    return orjson.loads(out.getvalue())["drained"]


@pytest.mark.parametrize(
    ("flag", "drained"),
    [
        pytest.param((), ["od-1"], id="snapshot-default-current-rules"),
        pytest.param(("--kubernetes-version", "v1.27.0"), ["od-1"], id="v1.27"),
        pytest.param(("--kubernetes-version", "1.26.3-eks-abc"), [], id="v1.26-eks"),
        pytest.param(("--kubernetes-version", "v1.20.2"), [], id="v1.20"),
        pytest.param(("--kubernetes-version", "unknown"), [], id="unknown-strictest"),
    ],
)
def test_kubernetes_version_picks_the_schedulers_rules(
    over_committed_file: Path, flag: tuple[str, ...], drained: list[str]
) -> None:
    assert _drained("--snapshot", str(over_committed_file), *flag) == drained


def test_a_bad_kubernetes_version_is_one_line_and_exit_2(snapshot_file: Path) -> None:
    line = _one_line_refusal(run("plan", "--snapshot", str(snapshot_file), "--kubernetes-version", "latest"))
    assert "--kubernetes-version 'latest' is not a Kubernetes version" in line


def test_a_live_plan_reads_the_api_servers_version_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from rescheduler import cli
    from shared.kube import api as kube
    from shared.switches import STRICTEST, for_version
    from tests.support.fake_api import FakeApiServer

    live = argparse.Namespace(snapshot=None, kubeconfig="k", context=None, kubernetes_version=None)
    for git_version, want, said in (
        ("v1.20.2", for_version("v1.20.2"), "API server version v1.20.2: planning with the kube-scheduler rules"),
        (None, STRICTEST, "warning: cannot read the API server's version"),
    ):
        server = FakeApiServer(git_version=git_version)
        monkeypatch.setattr(kube, "transport_from_kubeconfig", lambda *a, server=server, **kw: server)
        err = io.StringIO()
        assert cli._switches_from_flag(live) is None
        assert cli._discover(live, err) == want
        assert err.getvalue().startswith(said) and err.getvalue().count("\n") == 1
    flagged = argparse.Namespace(snapshot=None, kubeconfig="k", context=None, kubernetes_version="v1.24.1")
    assert cli._switches_from_flag(flagged) == for_version("v1.24.1")  # the flag wins
