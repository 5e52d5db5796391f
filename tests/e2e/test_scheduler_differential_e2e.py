"""Randomized differential test: kube-scheduler and ``shared.fit.fits()`` decide the same generated cases alike.

Each case (``tests/support/scheduling_cases.py``) is a few nodes, the pods already on them and one probe pod,
drawn from a seeded generator: every rule a pod can be refused by, topology spread with every selector shape
(``{}`` included), ports, volumes, resources, sidecars and pod-level resources. Cases run in batches on the e2e
control plane: the batch's nodes are created, a witness pod in a namespace of its own is bound to every node (so
the scheduler has seen the node as the test made it, as in ``test_scheduler_agreement_e2e.py``), the cases' pods
are placed by kube-scheduler itself (each pinned to its node with a hostname ``nodeSelector``, tolerating every
taint; one the scheduler refuses, say for an anti-affinity term or a full node, is deleted), the volumes are
made (bound as the PersistentVolume controller binds them), and then every probe is created and left to
kube-scheduler. Once each probe is bound or refused, the cluster is read as
``spot-rescheduler plan`` reads a live cluster (``rescheduler.cluster.listing.load_cluster``) and ``fits()``
judges each probe with the API server's release's rules (``shared.switches.for_version_info``):

* bound to node N: ``fits(probe, N)`` gives no reason (judged without the probe on N);
* refused: kube-scheduler's message counts, for every reason text, the nodes that failed by it
  (``0/212 nodes are available: 1 Insufficient cpu, 211 node(s) didn't match Pod's node affinity/selector.``).
  ``fits()`` must give exactly those counts over every node of the cluster, taking for each node the reasons of
  its first failing check (the scheduler stops at a node's first failing plugin; a resource check names every
  resource short).

Any disagreement fails with the seed, the case, both answers. The default release decides
:data:`DEFAULT_CASES` cases, the compatibility releases :data:`COMPAT_CASES`; ``--differential-cases N`` and
``--differential-seed S`` (``tests/e2e/conftest.py``) replay or widen a run.
"""

from __future__ import annotations

import random
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from rescheduler.cluster.listing import load_cluster
from shared.fit import fits
from shared.fit_reasons import InsufficientResource, Reason
from shared.model import Pod
from shared.snapshot import ClusterSnapshot
from shared.switches import Switches, for_version_info
from tests.support.controlplane import ControlPlane, wait_for
from tests.support.controlplane.process import k8s_version, releases
from tests.support.scheduling_cases import Case, fit_error_counts, generate

pytestmark = [pytest.mark.e2e, pytest.mark.compat]

DEFAULT_CASES = 500
COMPAT_CASES = 200
DEFAULT_SEED = 1
BATCH = 50
BATCH_LABEL = "diff.spotshift.io/batch"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


@dataclass
class Decision:
    """kube-scheduler's answer for one pod: the node it was bound to, or the message it was refused with."""

    node: str | None
    message: str


@dataclass
class Disagreement:
    case: Case
    decision: Decision
    fits_says: str


def first_check(reasons: list[Reason]) -> list[Reason]:
    """The reasons kube-scheduler reports for a node: its first failing plugin's (every resource short)."""
    if not reasons:
        return []
    if isinstance(reasons[0], InsufficientResource):
        return [r for r in reasons if isinstance(r, InsufficientResource)]
    return reasons[:1]


def judged(probe: Pod, node: str, snapshot: ClusterSnapshot, switches: Switches) -> list[Reason]:
    """``fits()`` as kube-scheduler filters: no readiness check of its own (the not-ready taint is the scheduler's)."""
    return fits(probe, snapshot[node], snapshot, check_node_ready=False, switches=switches)


def fits_counts(probe: Pod, snapshot: ClusterSnapshot, switches: Switches) -> Counter[str]:
    out: Counter[str] = Counter()
    for node in snapshot.nodes:
        for r in first_check(judged(probe, node, snapshot, switches)):
            out[r.message] += 1
    return out


# --- the batch on the control plane ----------------------------------------------------------------------------


class Batch:
    """One batch of cases on the control plane: created, decided, read, then removed."""

    def __init__(self, plane: ControlPlane, cases: list[Case], tag: str) -> None:
        self.plane, self.cases, self.tag = plane, cases, tag
        self.ns = f"diff-{tag}"
        self.witness_ns = f"diff-{tag}-w"
        self.nodes = [name for c in cases for name in c.nodes]
        self.pvs: list[str] = []
        self.pvcs: list[str] = []

    def create(self) -> None:
        self.plane.create_namespace(self.ns)
        self.plane.create_namespace(self.witness_ns)
        for case in self.cases:
            for name, spec in case.nodes.items():
                labels = {**spec["labels"], BATCH_LABEL: self.tag}
                self.plane.create_node(
                    name,
                    labels=labels,
                    taints=spec["taints"],
                    allocatable=spec["allocatable"],
                    unschedulable=spec["unschedulable"],
                    wait=False,
                )
        wait_for(self._nodes_ready, timeout=120, what=f"the {len(self.nodes)} nodes of batch {self.tag} to be Ready")
        witnesses = [self._post(self.witness_ns, self._witness(i, name)) for i, name in enumerate(self.nodes)]
        decided = self.decide(self.witness_ns, witnesses)
        assert all(d.node for d in decided.values()), {k: d.message for k, d in decided.items() if not d.node}
        placed = [self._post(self.ns, p) for c in self.cases for p in c.existing]
        for name, decision in self.decide(self.ns, placed).items():
            if decision.node is None:  # an existing pod the scheduler refused (its own anti-affinity, say)
                self.plane.delete_pod(self.ns, name)
        self._bind_volumes()

    def _nodes_ready(self) -> bool:
        items = self.plane.api.get(f"/api/v1/nodes?labelSelector={BATCH_LABEL}%3D{self.tag}")["items"]
        ready = 0
        for node in items:
            conditions = {c["type"]: c["status"] for c in (node.get("status") or {}).get("conditions") or []}
            taints = {t["key"] for t in (node.get("spec") or {}).get("taints") or []}
            ready += conditions.get("Ready") == "True" and "node.kubernetes.io/not-ready" not in taints
        return ready == len(self.nodes)

    def _witness(self, i: int, node: str) -> dict[str, Any]:
        taints = {t["key"] for c in self.cases for t in c.nodes.get(node, {}).get("taints", [])}
        tolerations = [{"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
        tolerations += [{"key": key, "operator": "Exists"} for key in sorted(taints)]
        spec = {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": tolerations,
            "containers": [{"name": "w", "image": "registry.example/witness:1"}],
        }
        return {"metadata": {"name": f"witness-{i}"}, "spec": spec}

    def _post(self, namespace: str, pod: dict[str, Any]) -> str:
        body = {"apiVersion": "v1", "kind": "Pod", **pod}
        body["spec"] = {"terminationGracePeriodSeconds": 0, **pod["spec"]}
        self.plane.api.post(f"/api/v1/namespaces/{namespace}/pods", body)
        return str(pod["metadata"]["name"])

    def _bind_volumes(self) -> None:
        for case in self.cases:
            for pv, pvc in case.volumes:
                pv = {**pv, "spec": {**pv["spec"], "claimRef": {**pv["spec"]["claimRef"], "namespace": self.ns}}}
                self.plane.api.post("/api/v1/persistentvolumes", pv)
                self.pvs.append(pv["metadata"]["name"])
                self.plane.api.post(f"/api/v1/namespaces/{self.ns}/persistentvolumeclaims", pvc)
                self.pvcs.append(pvc["metadata"]["name"])

    def decide(self, namespace: str, names: list[str]) -> dict[str, Decision]:
        """Wait until kube-scheduler bound or refused every pod of ``names``."""
        out: dict[str, Decision] = {}

        def done() -> bool:
            for pod in self.plane.api.get(f"/api/v1/namespaces/{namespace}/pods")["items"]:
                name = pod["metadata"]["name"]
                if name not in names or name in out:
                    continue
                if pod["spec"].get("nodeName"):
                    out[name] = Decision(pod["spec"]["nodeName"], "")
                    continue
                for c in (pod.get("status") or {}).get("conditions") or []:
                    if (
                        c.get("type") == "PodScheduled"
                        and c.get("status") == "False"
                        and c.get("reason") == "Unschedulable"
                    ):
                        out[name] = Decision(None, str(c.get("message") or ""))
            return len(out) == len(names)

        wait_for(done, timeout=180, what=f"kube-scheduler to decide {len(names)} pods in {namespace}")
        return out

    def probe(self) -> dict[str, Decision]:
        names = [self._post(self.ns, c.probe) for c in self.cases]
        return self.decide(self.ns, names)

    def remove(self) -> None:
        """Nodes first (their pods are force-deleted with them), then the namespaces, waited for: no pod of the
        batch is left for a later test's cluster-wide read."""
        self.plane.delete_nodes(self.nodes)
        for name in self.pvcs:  # no protection controller runs here to lift the claim's finalizer
            path = f"/api/v1/namespaces/{self.ns}/persistentvolumeclaims/{name}"
            self.plane.api.patch(path, {"metadata": {"finalizers": None}})
        for namespace in (self.ns, self.witness_ns):
            self.plane.delete_namespace(namespace, wait=True, timeout=120)
        for name in self.pvs:
            self.plane.api.delete_if_exists(f"/api/v1/persistentvolumes/{name}")


def judge(batch: Batch, decisions: dict[str, Decision], switches: Switches) -> Iterator[Disagreement]:
    snapshot = load_cluster(str(batch.plane.kubeconfig))
    pending = {p.key: p for p in snapshot.pending}
    for case in batch.cases:
        name = case.probe["metadata"]["name"]
        decision = decisions[name]
        key = f"{batch.ns}/{name}"
        if decision.node is not None:
            probe = next(p for p in snapshot[decision.node].pods if p.key == key)
            snapshot.remove_pod(probe)
            reasons = judged(probe, decision.node, snapshot, switches)
            snapshot.add_pod(probe)
            if reasons:
                yield Disagreement(case, decision, f"{decision.node}: {[r.message for r in reasons]}")
            continue
        expected = fit_error_counts(decision.message)
        got = fits_counts(pending[key], snapshot, switches)
        if got != expected:
            mine = {n: [r.message for r in judged(pending[key], n, snapshot, switches)] for n in case.nodes}
            yield Disagreement(case, decision, f"counts {dict(got)}; on the case's nodes {mine}")


# --- the test ----------------------------------------------------------------------------------------------------


def _cases_for_this_release(config: pytest.Config) -> int:
    asked = config.getoption("--differential-cases")
    if asked:
        return int(asked)
    return DEFAULT_CASES if k8s_version() == releases()["SPOTSHIFT_K8S_DEFAULT"] else COMPAT_CASES


def test_kube_scheduler_and_fits_decide_random_cases_alike(
    control_plane: ControlPlane, request: pytest.FixtureRequest
) -> None:
    total = _cases_for_this_release(request.config)
    seed = int(request.config.getoption("--differential-seed") or DEFAULT_SEED)
    rng = random.Random(seed)
    switches = for_version_info(control_plane.api.get("/version"))
    run = uuid.uuid4().hex[:6]
    bound = refused = 0
    disagreements: list[Disagreement] = []
    for start in range(0, total, BATCH):
        cases = [generate(rng, i, run) for i in range(start, min(total, start + BATCH))]
        batch = Batch(control_plane, cases, f"{run}-{start // BATCH}")
        try:
            batch.create()
            decisions = batch.probe()
            disagreements += judge(batch, decisions, switches)
        finally:
            batch.remove()
        bound += sum(1 for d in decisions.values() if d.node)
        refused += sum(1 for d in decisions.values() if not d.node)
    print(f"differential: seed {seed}, {total} cases on {k8s_version()}: {bound} bound, {refused} refused")
    shown = "\n\n".join(
        f"case {d.case.index} (seed {seed}): probe {d.case.probe}\nnodes {d.case.nodes}\nexisting {d.case.existing}\n"
        f"kube-scheduler: {d.decision.node or d.decision.message}\nfits(): {d.fits_says}"
        for d in disagreements[:5]
    )
    assert not disagreements, f"{len(disagreements)} of {total} cases disagree (seed {seed}):\n{shown}"
    assert bound >= total // 5 and refused >= total // 5, (bound, refused)
