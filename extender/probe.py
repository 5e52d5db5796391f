"""``python -m extender.probe``: does the installed webhook mutate a pod? (the Helm chart's ``helm test``).

Creates a pod in ``--namespace`` as a server-side dry run (``dryRun=All``): the API server runs the admission
chain, the spotshift webhook included (it declares ``sideEffects: None``, so dry runs are sent to it), and answers
with the pod as it would have been stored, which is then thrown away. Nothing is left behind. The probe passes when
the answer carries what the webhook adds (spot node affinity, spot tolerations or a scheduler name) and the sent
pod did not; it prints what was added. Exit codes: 0 mutated, 1 not mutated, 2 the dry run failed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

from extender import USER_AGENT
from shared.kube.api import Kube, transport_from_kubeconfig

__all__ = ["PROBE_POD", "added_by_webhook", "dry_run_create", "report", "main"]

# Pod Security "restricted" as it is, so a namespace enforcing it admits the probe too; the image is never pulled.
PROBE_POD: Mapping[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"generateName": "spotshift-probe-", "labels": {"app.kubernetes.io/name": "spotshift-probe"}},
    "spec": {
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "probe",
                "image": "registry.k8s.io/pause:3.9",
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    },
}


def added_by_webhook(answer: Mapping[str, Any]) -> list[str]:
    """What the answer's spec has that :data:`PROBE_POD` did not: the webhook's marks, one line each."""
    spec = answer.get("spec") or {}
    added = []
    preferred = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    ) or []
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if preferred:
        added.append(f"preferred node affinity: {len(preferred)} term(s)")
    if required:
        added.append("required node affinity")
    # The API server's DefaultTolerationSeconds plugin adds the not-ready/unreachable NoExecute ones to every pod.
    own = [
        t
        for t in spec.get("tolerations") or []
        if t.get("key") not in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    ]
    if own:
        added.append("tolerations: " + ", ".join(f"{t.get('key')}:{t.get('effect', '')}" for t in own))
    if spec.get("schedulerName") not in (None, "default-scheduler"):
        added.append(f"schedulerName: {spec['schedulerName']}")
    return added


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m extender.probe", description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", default="default", help="a namespace the webhook mutates (default: default)")
    parser.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, then ~/.kube)")
    args = parser.parse_args(argv)
    try:
        pod = dry_run_create(Kube(transport_from_kubeconfig(args.kubeconfig, user_agent=USER_AGENT)), args.namespace)
    except Exception as e:  # API errors, credentials, the network: one line is what the operator needs
        print(f"probe: the dry-run pod create in {args.namespace} failed: {str(e).splitlines()[0]}", file=sys.stderr)
        return 2
    return report(pod, args.namespace)


def dry_run_create(kube: Kube, namespace: str) -> dict[str, Any]:
    """:data:`PROBE_POD` created in ``namespace`` as a server-side dry run: the pod as it would have been stored."""
    return kube.post(f"/api/v1/namespaces/{quote(namespace)}/pods", dict(PROBE_POD), query=[("dryRun", "All")])


def report(pod: Mapping[str, Any], namespace: str) -> int:
    """Print whether ``pod`` (the dry run's answer) carries the webhook's marks; the exit code."""
    added = added_by_webhook(pod)
    if not added:
        print(f"probe: FAIL: a pod created in {namespace} came back unchanged by the spotshift webhook")
        return 1
    print(f"probe: PASS: the spotshift webhook mutated a pod created in {namespace}: " + "; ".join(added))
    return 0


if __name__ == "__main__":
    sys.exit(main())
