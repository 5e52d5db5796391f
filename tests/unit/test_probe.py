"""``python -m extender.probe`` (the Helm chart's ``helm test``): it tells a pod the webhook mutated from one it
did not. The probe pod is put through the webhook's own mutation (``extender.admission.mutate_pod``) in each
mode, the patch applied as the API server applies it, and the dry run goes through the project's transport
boundary; the e2e tier runs the probe against a real API server."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from extender.admission import mutate_pod
from extender.probe import PROBE_POD, added_by_webhook, dry_run_create, main, report
from shared.kube.api import Kube
from tests.builders.admission import apply_patch, policy


def admitted(mode: str, **webhook: Any) -> dict[str, Any]:
    pod = copy.deepcopy(dict(PROBE_POD))
    mutation = mutate_pod(pod, "default", policy(webhook={"mode": mode, **webhook}))
    out: dict[str, Any] = apply_patch(pod, [dict(op) for op in mutation.ops])
    # What the API server's DefaultTolerationSeconds plugin adds to every pod, mutated or not.
    out["spec"].setdefault("tolerations", []).extend(
        {"key": k, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for k in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    )
    return out


@pytest.mark.parametrize("mode", ["prefer", "tolerate-only", "require"])
def test_every_mode_that_mutates_is_seen(mode: str) -> None:
    added = added_by_webhook(admitted(mode))
    assert added, mode
    assert any(line.startswith("tolerations: ") for line in added)


def test_the_preferred_affinity_is_named() -> None:
    assert any(line.startswith("preferred node affinity: ") for line in added_by_webhook(admitted("prefer")))


def test_an_unmutated_pod_is_seen_as_such_even_with_the_api_servers_own_tolerations() -> None:
    assert added_by_webhook(admitted("off")) == []


def test_the_scheduler_name_the_webhook_sets_is_seen() -> None:
    pod = admitted("tolerate-only", scheduler_name="spotshift-scheduler")
    assert "schedulerName: spotshift-scheduler" in added_by_webhook(pod)


class DryRuns:
    """A :class:`shared.kube.api.Transport` whose API server admits a pod in ``mode`` and answers with it."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.requests: list[tuple[str, str, dict[str, Any]]] = []

    def request(self, method: str, path: str, *, query: Sequence[tuple[str, Any]] = (), **_: Any) -> bytes:
        self.requests.append((method, path, dict(query)))
        return orjson.dumps(admitted(self.mode))

    def stream(self, path: str, **_: Any) -> Any:
        raise AssertionError("no watch")


@pytest.mark.parametrize(("mode", "code", "said"), [("prefer", 0, "probe: PASS: "), ("off", 1, "probe: FAIL: ")])
def test_the_probe_creates_its_pod_as_a_dry_run_and_reports_what_came_back(
    mode: str, code: int, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    api = DryRuns(mode)
    pod = dry_run_create(Kube(api), "shop")
    assert api.requests == [("POST", "/api/v1/namespaces/shop/pods", {"dryRun": "All"})]
    assert report(pod, "shop") == code
    assert capsys.readouterr().out.startswith(f"{said}")


def test_a_dry_run_that_cannot_be_made_is_exit_2_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--namespace", "shop", "--kubeconfig", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("probe: the dry-run pod create in shop failed: cannot load the kubeconfig")
    assert err.count("\n") == 1
