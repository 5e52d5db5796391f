"""The real kube-scheduler and ``shared.fit.fits()`` agree, rule by rule.

Each test builds a small situation of real objects in which one rule alone decides whether a probe pod can go
onto one node of the test, and asks that question twice, with two probes that differ only in what the rule reads
(the field itself, or for the resource rules the one field that makes the rule apply). The two answers are
opposite, so neither can pass by accident: one probe binds, the other stays Pending. For each probe
(:func:`agree`):

1. kube-scheduler decides: the probe is bound to that node, or it stays Pending with ``PodScheduled=False``,
   reason ``Unschedulable``, and a message holding the scheduler's own reason text;
2. ``fits()`` judges the same live objects: nodes, pods and namespaces are listed from the API server into a
   ``ClusterSnapshot`` exactly as ``spot-rescheduler plan`` reads a live cluster
   (``rescheduler.cluster.listing.load_cluster``), with the rules of the API server's release
   (``shared.switches.for_version_info``), and ``fits(probe, snapshot[node], snapshot)`` must give no reason
   when the scheduler bound the probe (judged without the probe itself on the node), else exactly the reason
   the test names, whose text is in the scheduler's message;
3. when refused, the node's status is resolvable by preemption or not (``UnschedulableAndUnresolvable``) alike:
   the scheduler's message counts the test's nodes where preemption was tried (``N No preemption victims found
   for incoming pod``; every other node of the cluster fails the probe's node selector, which is unresolvable),
   and ``fits()`` must find the same number of the test's nodes whose first reason is resolvable.

No sleeps, and the scheduler is known to have seen the whole situation before a probe exists: every pod of the
situation is placed by kube-scheduler itself (pinned with a hostname nodeSelector), so it is in the scheduler's
cache once bound; and every node gets a "witness" pod, scheduled likewise, which tolerates the node's own cordon
and taints but not ``node.kubernetes.io/not-ready``: once bound, the scheduler has seen the node with its labels,
taints, cordon and allocatable (all set when the node is created) and without the not-ready taint. Witnesses
request nothing and carry no label a probe selects.

The rules are on by default in 1.34 as in 1.37, so the tests also run in the compatibility run (1.34.4).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from rescheduler.cluster.listing import load_cluster
from shared.fit import fits
from shared.fit_reasons import ERR_ANTI_AFFINITY, ERR_EXISTING_ANTI_AFFINITY, ERR_INSUFFICIENT, ERR_SPREAD, Reason
from shared.snapshot import ClusterSnapshot
from shared.switches import for_version_info
from tests.support.controlplane import ControlPlane, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.compat]

IMAGE = "registry.example/app:1"
HOSTNAME = "kubernetes.io/hostname"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NodeFactory = Callable[..., dict[str, Any]]
INSUFFICIENT_CPU = ERR_INSUFFICIENT.format(resource="cpu")
VICTIMS = re.compile(r"(\d+) No preemption victims found for incoming pod")


# --- the situation and the helper ---------------------------------------------------------------------------------


@dataclass
class Scene:
    """One test's nodes and pods. ``zone``/``pool`` are label keys of this test alone."""

    plane: ControlPlane
    ns: str
    make_node: NodeFactory
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    nodes: dict[str, list[dict[str, str]]] = field(default_factory=dict)  # name -> taints

    @property
    def zone(self) -> str:
        return f"e2e.spotshift.io/zone-{self.tag}"

    @property
    def pool(self) -> str:
        return f"e2e.spotshift.io/pool-{self.tag}"

    def node(self, prefix: str, *, labels: dict[str, str] | None = None, **kwargs: Any) -> str:
        """A node labelled ``e2e.spotshift.io/test=<tag>`` (and ``labels``); ``kwargs`` go to ``create_node``."""
        created = self.make_node(prefix, labels={"e2e.spotshift.io/test": self.tag, **(labels or {})}, **kwargs)
        name = created["metadata"]["name"]
        self.nodes[name] = list(kwargs.get("taints") or [])
        return name

    def post(self, name: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": dict(labels or {})},
            "spec": {"terminationGracePeriodSeconds": 0, **spec},
        }
        self.plane.api.post(f"/api/v1/namespaces/{self.ns}/pods", body)

    def place(self, name: str, node: str, labels: dict[str, str], **spec: Any) -> None:
        """A pod of the situation, scheduled by kube-scheduler onto ``node``; returns once it is bound there."""
        self.post(name, {"nodeSelector": {HOSTNAME: node}, "containers": [container()], **spec}, labels)
        self._bound(name, node)

    def settle(self) -> None:
        """A witness pod on every node (see the module docstring); returns once kube-scheduler bound them all."""
        for i, (node, taints) in enumerate(self.nodes.items()):
            tolerations = [{"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
            tolerations += [{"key": t["key"], "operator": "Exists"} for t in taints]
            spec = {"nodeSelector": {HOSTNAME: node}, "tolerations": tolerations, "containers": [container()]}
            self.post(f"witness-{i}", spec, {"e2e.spotshift.io/role": "witness"})
        for i, node in enumerate(self.nodes):
            self._bound(f"witness-{i}", node)

    def _bound(self, name: str, node: str) -> None:
        path = f"/api/v1/namespaces/{self.ns}/pods/{name}"
        bound = wait_for(
            lambda: self.plane.api.get(path)["spec"].get("nodeName"), timeout=60, what=f"kube-scheduler to bind {name}"
        )
        assert bound == node, f"{name} bound to {bound}, not {node}"

    def delete(self, name: str) -> None:
        self.plane.delete_pod(self.ns, name)


@pytest.fixture
def scene(control_plane: ControlPlane, namespace: str, make_node: NodeFactory) -> Scene:
    return Scene(control_plane, namespace, make_node)


def container(name: str = "app", **requests: str) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": IMAGE}
    if requests:
        c["resources"] = {"requests": dict(requests)}
    return c


def _scheduler_outcome(scene: Scene, name: str) -> tuple[str | None, str]:
    """Wait for kube-scheduler to decide on pod ``name``: ``(node, "")`` if bound, ``(None, message)`` if refused."""
    path = f"/api/v1/namespaces/{scene.ns}/pods/{name}"

    def decided() -> tuple[str | None, str] | None:
        pod = scene.plane.api.get(path)
        if pod["spec"].get("nodeName"):
            return pod["spec"]["nodeName"], ""
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable":
                return None, str(c.get("message") or "")
        return None

    return wait_for(decided, timeout=60, what=f"kube-scheduler to bind or refuse {name}")


def _live_snapshot(plane: ControlPlane) -> ClusterSnapshot:
    """The cluster as ``spot-rescheduler plan`` reads it from the API server."""
    return load_cluster(str(plane.kubeconfig))


def agree(
    scene: Scene,
    name: str,
    spec: dict[str, Any],
    node: str,
    *,
    labels: dict[str, str] | None = None,
    refused: str | None = None,
) -> str:
    """Create probe ``name``; kube-scheduler must bind it to ``node`` (``refused=None``) or refuse it with a message
    holding ``refused``, and ``fits()`` on the live objects must say the same of ``node``. Returns the scheduler's
    message ("" when bound). A refused probe is deleted afterwards; a bound one stays."""
    scene.post(name, {"containers": [container()], **spec}, labels)
    bound, message = _scheduler_outcome(scene, name)
    snapshot = _live_snapshot(scene.plane)
    switches = for_version_info(scene.plane.api.get("/version"))
    key = f"{scene.ns}/{name}"
    if refused is None:
        assert bound == node, f"kube-scheduler did not bind {name} to {node}: {bound or message}"
        probe = next(p for p in snapshot[node].pods if p.key == key)
        snapshot.remove_pod(probe)  # judged as the scheduler judged it: without itself on the node
        reasons = fits(probe, snapshot[node], snapshot, switches=switches)
        assert reasons == [], f"kube-scheduler bound {name} to {node}; fits() says {_texts(reasons)}"
        return message

    assert bound is None, f"kube-scheduler bound {name} to {bound}; expected it refused with {refused!r}"
    assert refused in message, f"kube-scheduler's message lacks {refused!r}: {message}"
    probe = next(p for p in snapshot.pending if p.key == key)
    reasons = fits(probe, snapshot[node], snapshot, switches=switches)
    assert _texts(reasons) == [refused], f"kube-scheduler: {message!r}; fits() on {node}: {_texts(reasons)}"
    assert all(r.message in message for r in reasons), message

    victims = VICTIMS.search(message)
    tried = int(victims.group(1)) if victims else 0
    firsts = [fits(probe, snapshot[n], snapshot, first_only=True, switches=switches) for n in scene.nodes]
    resolvable = sum(1 for r in firsts if r and not r[0].unresolvable)
    assert tried == resolvable, (
        f"kube-scheduler tried preemption on {tried} node(s); fits() finds {resolvable} of the test's nodes "
        f"resolvable ({_first_reasons(scene, firsts)}): {message}"
    )
    scene.delete(name)
    return message


def _texts(reasons: list[Reason]) -> list[str]:
    return [r.message for r in reasons]


def _first_reasons(scene: Scene, firsts: list[list[Reason]]) -> str:
    return ", ".join(
        f"{n}: {r[0].message} ({'unresolvable' if r[0].unresolvable else 'resolvable'})" if r else f"{n}: fits"
        for n, r in zip(scene.nodes, firsts, strict=True)
    )


def spread(scene: Scene, app: str, **extra: Any) -> dict[str, Any]:
    """A DoNotSchedule zone spread constraint, maxSkew 1, over pods ``app=<app>``."""
    return {
        "maxSkew": 1,
        "topologyKey": scene.zone,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": app}},
        **extra,
    }


# --- the rules ------------------------------------------------------------------------------------------------


def test_restartable_init_containers_add_to_the_running_sum(scene: Scene) -> None:
    """Sidecars (restartable init containers): ``pkg/scheduler/framework/plugins/noderesources/fit.go`` with the
    pod's request from ``resource.PodRequests`` (``staging/src/k8s.io/component-helpers/resource/helpers.go``).

    A 1.5-cpu node; the probe has a sidecar asking 1 cpu and a container asking 1 cpu. A sidecar keeps running
    next to the containers, so the pod asks 2 cpu: Insufficient cpu. Under the older rule (the pod asks the
    larger of its init containers and the sum of its containers: 1 cpu) it would fit, and it does fit when the
    same init container is an ordinary one (no ``restartPolicy``): the second probe binds. 2 cpu is more than the
    node's whole allocatable, so the refusal is UnschedulableAndUnresolvable ("Preemption is not helpful").
    """
    node = scene.node("sidecar", allocatable={"cpu": "1500m"})
    scene.settle()
    pinned = {"nodeSelector": {HOSTNAME: node}, "containers": [container(cpu="1")]}
    sidecar = {**container("sidecar", cpu="1"), "restartPolicy": "Always"}
    agree(scene, "with-sidecar", {**pinned, "initContainers": [sidecar]}, node, refused=INSUFFICIENT_CPU)
    agree(scene, "with-init-container", {**pinned, "initContainers": [container("init", cpu="1")]}, node)


def test_pod_level_resources_replace_the_containers_sum(scene: Scene) -> None:
    """Pod-level resources (``spec.resources``, PodLevelResources): ``pkg/scheduler/framework/plugins/noderesources/
    fit.go`` with ``resource.PodRequests`` (``staging/src/k8s.io/component-helpers/resource/helpers.go``).

    A 1.5-cpu node; the probe's container asks 100m and the pod asks 2 cpu at pod level: Insufficient cpu.
    Without the rule the scheduler sums the containers (100m) and it fits, as the second probe, the same pod
    without ``spec.resources``, does. As above, the refusal is UnschedulableAndUnresolvable.
    """
    node = scene.node("podlevel", allocatable={"cpu": "1500m"})
    scene.settle()
    pinned = {"nodeSelector": {HOSTNAME: node}, "containers": [container(cpu="100m")]}
    agree(scene, "pod-level", {**pinned, "resources": {"requests": {"cpu": "2"}}}, node, refused=INSUFFICIENT_CPU)
    agree(scene, "containers-only", pinned, node)


def test_match_label_keys_in_topology_spread(scene: Scene) -> None:
    """``matchLabelKeys`` of a topology spread constraint: ``pkg/scheduler/framework/plugins/podtopologyspread/
    common.go`` (``filterTopologySpreadConstraints`` merges the keys into the selector) and ``filtering.go``.

    Zone a: node ``a`` with two pods ``app=web,rev=old``; zone b: node ``b``, cordoned, no pod (it still counts as
    a domain: a cordon is no node inclusion policy). The probes are ``app=web,rev=new`` with a zone constraint,
    maxSkew 1, on ``app=web``; only ``a`` can take them. Without ``matchLabelKeys`` zone a counts 2 and zone b 0:
    2 + 1 - 0 > 1, refused. With ``matchLabelKeys: [rev]`` only ``rev=new`` pods count, 0 and 0: 0 + 1 - 0 = 1,
    it binds.

    On this release the API server has already merged ``rev in (new)`` into the stored ``labelSelector``
    (``pkg/registry/core/pod/strategy.go`` ``mutateTopologySpreadConstraints``), so ``fits()`` would agree here
    even without merging the keys itself; ``tests/unit/test_spread_upstream.py`` covers its own merge.
    """
    a = scene.node("a", labels={scene.zone: "a", scene.pool: "yes"})
    scene.node("b", labels={scene.zone: "b", scene.pool: "yes"}, unschedulable=True)
    for i in range(2):
        scene.place(f"old-{i}", a, {"app": "web", "rev": "old"})
    scene.settle()
    labels = {"app": "web", "rev": "new"}
    pool = {"nodeSelector": {scene.pool: "yes"}}
    plain = {**pool, "topologySpreadConstraints": [spread(scene, "web")]}
    keyed = {**pool, "topologySpreadConstraints": [spread(scene, "web", matchLabelKeys=["rev"])]}
    agree(scene, "plain", plain, a, labels=labels, refused=ERR_SPREAD)
    agree(scene, "keyed", keyed, a, labels=labels)


def test_match_label_keys_in_required_pod_anti_affinity(scene: Scene) -> None:
    """``matchLabelKeys`` of a required pod anti-affinity term (MatchLabelKeysInPodAffinity): the API server merges
    the keys into the term's ``labelSelector`` when the pod is created (``pkg/registry/core/pod/strategy.go``
    ``mutatePodAffinity``), and ``pkg/scheduler/framework/plugins/interpodaffinity/filtering.go`` matches it.

    Node ``a`` runs a pod ``app=web,rev=old``. The probes are ``app=web,rev=new``, pinned to ``a``, with required
    anti-affinity to ``app=web`` per hostname. Without ``matchLabelKeys`` the old pod matches: refused. With
    ``matchLabelKeys: [rev]`` the term asks for ``app=web,rev=new`` and nothing on ``a`` matches: it binds.
    """
    a = scene.node("a")
    scene.place("old", a, {"app": "web", "rev": "old"})
    scene.settle()
    labels = {"app": "web", "rev": "new"}
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOSTNAME}

    def anti(t: dict[str, Any]) -> dict[str, Any]:
        affinity = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [t]}}
        return {"nodeSelector": {HOSTNAME: a}, "affinity": affinity}

    agree(scene, "plain", anti(term), a, labels=labels, refused=ERR_ANTI_AFFINITY)
    agree(scene, "keyed", anti({**term, "matchLabelKeys": ["rev"]}), a, labels=labels)


def test_match_label_keys_in_pod_anti_affinity_take_the_labels_the_pod_was_created_with(scene: Scene) -> None:
    """``matchLabelKeys`` of an existing pod's required anti-affinity term are merged into its ``labelSelector`` once,
    when that pod is created (``pkg/registry/core/pod/strategy.go`` ``mutatePodAffinity``); kube-scheduler
    (``pkg/scheduler/framework/plugins/interpodaffinity/filtering.go``) reads the stored selector and never merges
    again, so relabelling the pod later does not change whom it repels.

    Node ``a`` runs ``guard``, created ``app=web,rev=old`` with required anti-affinity to ``app=web`` per hostname
    and ``matchLabelKeys: [rev]`` (stored: ``app=web, rev in (old)``), then relabelled ``rev=new``. A ``sentinel``
    pod with required affinity to ``app=web,rev=new`` pods on ``a`` can only be placed once kube-scheduler has seen
    the new label. A probe ``app=web,rev=old`` pinned to ``a`` is refused (the stored selector matches it); had the
    keys been merged from the current labels it would fit (nothing is ``rev=new`` and ``rev=old`` at once). A probe
    ``app=web,rev=new`` binds (the stored selector does not match it); merged from the current labels it would be
    refused.
    """
    a = scene.node("a")
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["rev"], "topologyKey": HOSTNAME}
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    scene.place("guard", a, {"app": "web", "rev": "old"}, affinity=anti)
    scene.plane.api.patch(f"/api/v1/namespaces/{scene.ns}/pods/guard", {"metadata": {"labels": {"rev": "new"}}})
    seen = {"labelSelector": {"matchLabels": {"app": "web", "rev": "new"}}, "topologyKey": HOSTNAME}
    scene.place("sentinel", a, {}, affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [seen]}})
    scene.settle()
    pinned = {"nodeSelector": {HOSTNAME: a}}
    agree(scene, "rev-old", pinned, a, labels={"app": "web", "rev": "old"}, refused=ERR_EXISTING_ANTI_AFFINITY)
    agree(scene, "rev-new", pinned, a, labels={"app": "web", "rev": "new"})


def test_node_taints_policy_honor_in_topology_spread(scene: Scene) -> None:
    """``nodeTaintsPolicy: Honor`` (NodeInclusionPolicyInPodTopologySpread): ``pkg/scheduler/framework/plugins/
    podtopologyspread/common.go`` ``matchNodeInclusionPolicies``, used by ``filtering.go``'s PreFilter.

    Zone a: node ``a`` with one pod ``app=web``; zone t: node ``t``, tainted NoSchedule (the probes do not
    tolerate it), no pod. Both are in the probes' pool, so only ``a`` can take them. With the default
    (``Ignore``) zone t counts as a domain with 0 pods: 1 + 1 - 0 > 1, refused. With ``Honor`` the tainted node
    is no domain, zone a is the only one and the minimum: 1 + 1 - 1 = 1, it binds.
    """
    a = scene.node("a", labels={scene.zone: "a", scene.pool: "yes"})
    taint = {"key": f"e2e.spotshift.io/dedicated-{scene.tag}", "value": "other", "effect": "NoSchedule"}
    scene.node("t", labels={scene.zone: "t", scene.pool: "yes"}, taints=[taint])
    scene.place("web", a, {"app": "web"})
    scene.settle()
    pool = {"nodeSelector": {scene.pool: "yes"}}
    ignore = {**pool, "topologySpreadConstraints": [spread(scene, "web")]}
    honor = {**pool, "topologySpreadConstraints": [spread(scene, "web", nodeTaintsPolicy="Honor")]}
    agree(scene, "taints-ignored", ignore, a, labels={"app": "web"}, refused=ERR_SPREAD)
    agree(scene, "taints-honored", honor, a, labels={"app": "web"})


def test_node_affinity_policy_ignore_in_topology_spread(scene: Scene) -> None:
    """``nodeAffinityPolicy: Ignore`` (NodeInclusionPolicyInPodTopologySpread): ``pkg/scheduler/framework/plugins/
    podtopologyspread/common.go`` ``matchNodeInclusionPolicies``, used by ``filtering.go``'s PreFilter.

    Zone a: node ``a``, in the probes' pool, with one pod ``app=web``; zone x: node ``x``, outside the pool, no
    pod. With the default (``Honor``) ``x`` fails the probes' nodeSelector and zone x is no domain: 1 + 1 - 1 = 1,
    it binds. With ``Ignore`` zone x is a domain with 0 pods: 1 + 1 - 0 > 1, refused.
    """
    a = scene.node("a", labels={scene.zone: "a", scene.pool: "yes"})
    scene.node("x", labels={scene.zone: "x"})
    scene.place("web", a, {"app": "web"})
    scene.settle()
    pool = {"nodeSelector": {scene.pool: "yes"}}
    ignore = {**pool, "topologySpreadConstraints": [spread(scene, "web", nodeAffinityPolicy="Ignore")]}
    honor = {**pool, "topologySpreadConstraints": [spread(scene, "web")]}
    agree(scene, "affinity-ignored", ignore, a, labels={"app": "web"}, refused=ERR_SPREAD)
    agree(scene, "affinity-honored", honor, a, labels={"app": "web"})


def test_min_domains_in_topology_spread(scene: Scene) -> None:
    """``minDomains``: ``pkg/scheduler/framework/plugins/podtopologyspread/filtering.go`` (``minMatchNum``: with
    fewer eligible domains than ``minDomains`` the global minimum is 0).

    Node ``a``, zone a, runs one pod ``app=web``; the probes, ``app=web``, are pinned to ``a``, so zone a is the
    only eligible domain. With ``minDomains: 2`` there are fewer domains than that, the minimum is 0:
    1 + 1 - 0 > 1, refused. Without it the minimum is zone a's own 1: 1 + 1 - 1 = 1, it binds.
    """
    a = scene.node("a", labels={scene.zone: "a"})
    scene.place("web", a, {"app": "web"})
    scene.settle()
    pinned = {"nodeSelector": {HOSTNAME: a}}
    two = {**pinned, "topologySpreadConstraints": [spread(scene, "web", minDomains=2)]}
    unset = {**pinned, "topologySpreadConstraints": [spread(scene, "web")]}
    agree(scene, "min-domains-2", two, a, labels={"app": "web"}, refused=ERR_SPREAD)
    agree(scene, "min-domains-unset", unset, a, labels={"app": "web"})
