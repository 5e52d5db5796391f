"""``python -m extender.probe`` (the Helm chart's ``helm test``): it tells a pod the webhook mutated from one it
did not. The probe pod is put through the webhook's own mutation (``extender.admission.mutate_pod``) in each
mode, the patch applied as the API server applies it; the e2e tier runs the probe against a real API server."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from extender.admission import mutate_pod
from extender.probe import PROBE_POD, added_by_webhook
from tests.unit.admission_builders import apply_patch, policy


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
