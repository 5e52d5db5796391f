"""Incremental planning: the plan made with a :class:`PlanCache` kept from cycle to cycle is, byte for byte, the plan
made from scratch on the same state, whatever changed between the cycles.

The state is the run loop's (:class:`ClusterState`, fed watch events); between two plans a random sequence of
changes goes through it: pods added, removed, relabelled and replaced by their controller (among them the pods the
last plan moves, whose steps a replayed pass must search anew, and the pods those pods' terms select); new pods with
required and preferred pod affinity and anti-affinity and hard and soft topology spread constraints (some honoring
nodes' taints), some of them beside the target of a pod the last plan moves and selecting its workload; nodes added,
removed, cordoned, tainted, made NotReady, resized and relabelled (a label the filters read, or one only some new
pods' terms read, set and taken off, among them on the targets of the last plan); pods starting to wait for a node
and going away; PodDisruptionBudgets' status and selector changed and budgets deleted; and cycles where nothing
changed. Each cycle's plan, planned as the loop plans it (the gate's exclusions, a time), is rendered as JSON and
compared with a plan from scratch. The examples are derandomized: every run checks the same sequences.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rescheduler.cluster.watch_cache import NAMESPACES, NODES, PDBS, PODS, PVCS, PVS, ClusterState
from rescheduler.plan.cycle import gate
from rescheduler.plan.planner import PlanCache, plan
from rescheduler.plan.strategies import NodeOrder, PodOrder, Strategy, TargetRule
from rescheduler.plan.waiting import EmptiedCache
from shared.config import Config, MovabilityConfig, WorthConfig
from shared.model import PDB
from shared.snapshot import ClusterSnapshot, NodeInfo
from shared.switches import CURRENT
from tests.support import fake_api
from tests.support.cluster_gen import generate

_KINDS = {
    "Node": NODES,
    "Pod": PODS,
    "PodDisruptionBudget": PDBS,
    "Namespace": NAMESPACES,
    "PersistentVolume": PVS,
    "PersistentVolumeClaim": PVCS,
}
NOW = 1_715_680_000.0
"""2024-05-14, a day after the generated objects were made."""

OPS = (
    "replace-pod",
    "replace-moved",
    "remove-pod",
    "remove-moved",
    "add-pod",
    "relabel-pod",
    "relabel-moved",
    "remove-selected",
    "relabel-selected",
    "add-selected",
    "anti-pod",
    "anti-moved",
    "affine-moved",
    "affinity-moved",
    "spread-moved",
    "remove-affine",
    "affinity-pod",
    "spread-pod",
    "add-node",
    "remove-node",
    "cordon",
    "not-ready",
    "relabel-node",
    "label-node",
    "label-target",
    "unlabel-node",
    "taint-node",
    "resize-node",
    "pending-pod",
    "pending-gone",
    "pdb-status",
    "pdb-selector",
    "pdb-delete",
    "nothing",
)


ZONE, HOST, TEAM = "topology.kubernetes.io/zone", "kubernetes.io/hostname", "example.com/team"
"""Topology keys; ``TEAM`` is a node label only the changes set (and a few new pods read)."""
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _term(app: str, key: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}


def _key(item: dict[str, Any]) -> str:
    meta = item["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


class _Cluster:
    """A ClusterState fed watch events, with the raw objects kept to derive the next events from."""

    def __init__(self, seed: int, nodes: int, pods: int) -> None:
        self.state = ClusterState()
        self.raw: dict[str, dict[str, dict[str, Any]]] = {k.name: {} for k in _KINDS.values()}
        self.made = 0
        self.moved: list[str] = []
        self.to: dict[str, str] = {}
        """Pod the last plan moves -> its target."""
        """The pods the last plan moves (the changes that reach a pass's steps most)."""
        for item in generate(seed, nodes, pods):
            kind = _KINDS.get(item.get("kind", ""))
            if kind is None or (kind is PODS and item["status"].get("phase") in ("Succeeded", "Failed")):
                continue
            self.raw[kind.name][_key(item)] = item
            self.state.apply(kind, "ADDED", item)
        self.state.synced.update(k.name for k in _KINDS.values())

    def _pick(self, kind: Any, at: int, bound: bool | None = None) -> dict[str, Any] | None:
        items = self.raw[kind.name]
        keys = sorted(k for k, v in items.items() if bound is None or bool(v["spec"].get("nodeName")) == bound)
        return items[keys[at % len(keys)]] if keys else None

    def _put(self, kind: Any, item: dict[str, Any], event: str = "MODIFIED") -> None:
        self.raw[kind.name][_key(item)] = item
        self.state.apply(kind, event, item)

    def _delete(self, kind: Any, item: dict[str, Any]) -> None:
        del self.raw[kind.name][_key(item)]
        self.state.apply(kind, "DELETED", item)

    def _copy(self, item: dict[str, Any]) -> dict[str, Any]:
        self.made += 1
        new = copy.deepcopy(item)
        new["metadata"]["name"] += f"-c{self.made}"
        new["metadata"]["uid"] = f"uid-copy-{self.made}"
        return new

    def change(self, op: str, at: int) -> None:
        """One change of kind ``op`` (:data:`OPS`) to the ``at``-th object it can apply to (modulo their number)."""
        if op.endswith(("-pod", "-moved")):
            self._pod_change(op, at)
        elif op.endswith(("-node", "-target")) or op in ("cordon", "not-ready"):
            self._node_change(op, at)
        elif op == "remove-affine":
            self._remove_affine(at)
        elif op == "pending-gone":
            pod = self._pick(PODS, at, bound=False)
            if pod is not None:
                self._delete(PODS, pod)
        elif op.startswith("pdb-"):
            self._pdb_change(op, at)

    def _pod_change(self, op: str, at: int) -> None:
        moved = [key for key in self.moved if key in self.raw[PODS.name]]
        other = None
        if op.endswith("-moved") and moved:
            pod: dict[str, Any] | None = self.raw[PODS.name][moved[at % len(moved)]]
            other = (pod or {})["metadata"].get("labels", {}).get("app", "none")  # the terms select the moved pod
        elif op.endswith("-selected"):
            pod = self._selected(moved, at)
        else:
            pod = self._pick(PODS, at, bound=True)
        op = op.replace("-moved", "-pod").replace("-selected", "-pod")
        if pod is None:
            return
        if op == "remove-pod":
            self._delete(PODS, pod)
            return
        if op == "relabel-pod":  # now one of another workload's pods for the selectors
            new = copy.deepcopy(pod)
            new["metadata"].setdefault("labels", {})["app"] = self._app(pod, at * 31 + 7)
            self._put(PODS, new)
            return
        new = self._copy(pod)
        if op in ("replace-pod", "affine-pod"):  # its controller's replacement, on the same node
            self._delete(PODS, pod)
            if op == "affine-pod":  # now with a required pod affinity to another workload's zones
                terms = {REQUIRED: [_term(self._app(pod, at * 13 + 5), ZONE)]}
                new["spec"].setdefault("affinity", {})["podAffinity"] = terms
        elif op == "pending-pod":  # waiting for a node
            del new["spec"]["nodeName"]
            new["status"] = {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
            }
        else:
            new["spec"]["nodeName"] = _key(self._pick(NODES, at * 7 + 3) or {"metadata": {"name": ""}})
            if op != "add-pod":
                key = self._terms(op, new, at, other)
                if other is not None:  # beside the moved pod's target: in its domain
                    new["spec"]["nodeName"] = self._beside(self.to.get(_key(pod), ""), key, at)
        self._put(PODS, new, "ADDED")

    def _beside(self, target: str, key: str, at: int) -> str:
        """The ``at``-th node in ``target``'s domain of topology ``key`` (the target itself for the hostname)."""
        nodes = self.raw[NODES.name]
        value = nodes[target]["metadata"]["labels"].get(key) if target in nodes else None
        same = sorted(k for k, v in nodes.items() if value is not None and v["metadata"]["labels"].get(key) == value)
        return same[at % len(same)] if same and key != HOST else target

    def _remove_affine(self, at: int) -> None:
        """Every bound pod the first required pod affinity term of a pod the last plan moves selects, but it."""
        pods = self.raw[PODS.name]
        affine = [k for k in self.moved if k in pods and (pods[k]["spec"].get("affinity") or {}).get("podAffinity")]
        if not affine:
            return
        key = affine[at % len(affine)]
        term = pods[key]["spec"]["affinity"]["podAffinity"][REQUIRED][0]
        labels = term["labelSelector"].get("matchLabels", {})
        ns = pods[key]["metadata"]["namespace"]
        for k, v in sorted(pods.items()):
            own = v["metadata"].get("labels", {})
            chosen = labels and all(own.get(a) == b for a, b in labels.items())
            if chosen and k != key and k.startswith(f"{ns}/") and v["spec"].get("nodeName"):
                self._delete(PODS, v)

    def _selected(self, moved: list[str], at: int) -> dict[str, Any] | None:
        """A bound pod that a required inter-pod term or a spread constraint of a pod the last plan moves selects."""
        pods = self.raw[PODS.name]
        selectors = []
        for key in moved:
            spec = pods[key]["spec"]
            terms = list(spec.get("topologySpreadConstraints") or ())
            for kind in ("podAffinity", "podAntiAffinity"):
                terms += (spec.get("affinity") or {}).get(kind, {}).get(REQUIRED, [])
            ns = pods[key]["metadata"]["namespace"]
            selectors += [(ns, t["labelSelector"]["matchLabels"]) for t in terms if "matchLabels" in t["labelSelector"]]
        if not selectors:
            return None
        ns, labels = selectors[at % len(selectors)]
        keys = [
            k
            for k, v in sorted(pods.items())
            if k.startswith(f"{ns}/")
            and v["spec"].get("nodeName")
            and all(v["metadata"].get("labels", {}).get(a) == b for a, b in labels.items())
        ]
        return pods[keys[at // len(selectors) % len(keys)]] if keys else None

    def _app(self, pod: dict[str, Any], at: int) -> str:
        """The ``app`` label of the ``at``-th bound pod of ``pod``'s namespace."""
        ns = pod["metadata"]["namespace"]
        keys = sorted(k for k, v in self.raw[PODS.name].items() if k.startswith(f"{ns}/") and v["spec"].get("nodeName"))
        labels = self.raw[PODS.name][keys[at % len(keys)]]["metadata"].get("labels") or {} if keys else {}
        return str(labels.get("app", "none"))

    def _terms(self, op: str, new: dict[str, Any], at: int, other: str | None) -> str:
        """Inter-pod terms or spread constraints for a new pod (``anti-pod``, ``affinity-pod``, ``spread-pod``),
        required and preferred, hard and soft, selecting the ``app`` ``other`` (default: another workload's pods of
        its namespace)."""
        own = new["metadata"].get("labels", {}).get("app", "none")
        other = other if other is not None else self._app(new, at * 13 + 5)
        key = ZONE if op == "affinity-pod" else (ZONE, HOST, TEAM)[at % 3]
        affinity = new["spec"].setdefault("affinity", {})
        if op == "anti-pod":  # one way: its own label selected by nothing
            new["metadata"].setdefault("labels", {})["app"] = f"guard-{self.made}"
            affinity["podAntiAffinity"] = {
                REQUIRED: [_term(other, key)],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 50, "podAffinityTerm": _term(own, HOST)}
                ],
            }
        elif op == "affinity-pod":
            affinity["podAffinity"] = {
                REQUIRED: [_term(other, key)],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 20, "podAffinityTerm": _term(own, HOST)}
                ],
            }
        else:
            new["spec"]["topologySpreadConstraints"] = [
                {
                    **_term(other, key),
                    "maxSkew": 1 + at % 2,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "nodeTaintsPolicy": ("Ignore", "Honor")[at // 3 % 2],  # Honor: tainted nodes are not counted
                },
                {**_term(own, HOST), "maxSkew": 1, "whenUnsatisfiable": "ScheduleAnyway"},
            ]
        return key

    def _node_change(self, op: str, at: int) -> None:
        node = self._pick(NODES, at)
        if op == "unlabel-node":  # the label only the new pods' terms may read taken off again
            labelled = sorted(k for k, v in self.raw[NODES.name].items() if TEAM in v["metadata"]["labels"])
            node = self.raw[NODES.name][labelled[at % len(labelled)]] if labelled else None
        targets = sorted({self.to[key] for key in self.moved} & self.raw[NODES.name].keys())
        if op == "label-target" and targets:  # a target of the last plan
            node, op = self.raw[NODES.name][targets[at % len(targets)]], "label-node"
        if node is None:
            return
        if op == "add-node":
            new = self._copy(node)
            new["metadata"]["labels"]["kubernetes.io/hostname"] = new["metadata"]["name"]
            self._put(NODES, new, "ADDED")
            return
        if op == "remove-node":
            self._delete(NODES, node)
            return
        new = copy.deepcopy(node)
        if op == "cordon":
            new["spec"]["unschedulable"] = not new["spec"].get("unschedulable")
        elif op == "not-ready":
            for c in new["status"].get("conditions") or ():
                if c["type"] == "Ready":
                    c["status"] = "False" if c["status"] == "True" else "True"
        elif op == "relabel-node":  # a label inter-pod terms and spread constraints read
            new["metadata"]["labels"][ZONE] = f"eu-west-1{'abc'[at % 3]}"
        elif op == "label-node":  # a label only the new pods' terms may read
            new["metadata"]["labels"][TEAM] = "abc"[at % 3]
        elif op == "unlabel-node":
            del new["metadata"]["labels"][TEAM]
        elif op == "taint-node":
            taints = new["spec"].setdefault("taints", [])
            mine = {"key": "example.com/dedicated", "value": "x", "effect": "NoSchedule"}
            if mine in taints:
                taints.remove(mine)
            else:
                taints.append(mine)
        else:  # resized: a different allocatable
            alloc = new["status"]["allocatable"]
            alloc["cpu"] = str(1 + at % 16)
            alloc["pods"] = str(5 + at % 40)
        self._put(NODES, new)

    def _pdb_change(self, op: str, at: int) -> None:
        pdb = self._pick(PDBS, at)
        if pdb is None:
            return
        if op == "pdb-delete":
            self._delete(PDBS, pdb)
            return
        new = copy.deepcopy(pdb)
        if op == "pdb-status":
            new.setdefault("status", {})["disruptionsAllowed"] = at % 3
        else:
            new["spec"]["selector"] = {"matchLabels": {"app": f"x{at % 3}"}}
        self._put(PDBS, new)


def _planned(
    snapshot: ClusterSnapshot, config: Config, cache: PlanCache | None, strategies: tuple[Strategy, ...] | None = None
) -> str:
    g = gate(snapshot, config, now=NOW)
    return json.dumps(plan(snapshot, config, cache=cache, exclude=g.excluded, now=NOW, strategies=strategies).to_json())


def _agree(cluster: _Cluster, config: Config, cache: PlanCache) -> str:
    cached = _planned(cluster.state.snapshot(), config, cache)
    fresh = _planned(cluster.state.snapshot(), config, None)
    assert cached == fresh
    moves = json.loads(cached)["moves"]
    cluster.moved, cluster.to = [m["pod"] for m in moves], {m["pod"]: m["to"] for m in moves}
    return cached


_STEPS = st.lists(
    st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 10_000)), min_size=1, max_size=3),
    min_size=1,
    max_size=5,
)


@settings(max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from([3, 7, 8, 15]), steps=_STEPS)
@example(seed=7, steps=[[("replace-pod", 552), ("not-ready", 7861), ("replace-pod", 365)]])  # a drained node blocked
@example(seed=3, steps=[[("pending-pod", 386)]])  # a waiting pod placed on a target a spread constraint counts
@example(seed=3, steps=[[("anti-moved", 9)]])  # a new pod's anti-affinity shuts a moved pod out of its target's zone
@example(seed=3, steps=[[("affine-moved", 0)], [("remove-affine", 1)]])  # the pods a moved pod's affinity needs gone
@example(seed=3, steps=[[("relabel-node", 4)]])  # a node's zone changed: the domains of spread and affinity
@example(seed=7, steps=[[("anti-moved", 5)], [("label-target", 4)]])  # a label only a new pod's anti-affinity reads
@example(seed=7, steps=[[("relabel-node", 5)]])  # the zone of a node that is not a target: spread's domains
@example(seed=7, steps=[[("remove-moved", 4179), ("remove-moved", 8117), ("relabel-moved", 7737)]])  # room for a misfit
@example(seed=7, steps=[[("label-node", 8)], [("anti-moved", 5)], [("label-target", 4)]])  # the keys a node's pods read
@example(seed=8, steps=[[("cordon", 5966), ("pdb-status", 2012)]])  # the contention for the groups of targets
@example(seed=3, steps=[[("label-target", 0)], [("unlabel-node", 0), ("label-target", 4)]])  # two targets trade groups
@example(seed=15, steps=[[("spread-moved", 3)], [("taint-node", 16)]])  # a taint a spread constraint honors
def test_incremental_plans_equal_plans_from_scratch(seed: int, steps: list[list[tuple[str, int]]]) -> None:
    cluster = _Cluster(seed, 24, 480)
    config = Config()
    cache = PlanCache()
    _agree(cluster, config, cache)
    for changes in steps:
        for op, at in changes:
            cluster.change(op, at)
        _agree(cluster, config, cache)


def test_a_strategy_of_its_own_by_free_memory_plans_as_from_scratch() -> None:
    """A caller's strategy choosing the target with the least free memory that fits: after a pod is added, the plan
    is the plan from scratch (which target such a rule looks at first is ordered by memory, not by CPU)."""
    by_memory = (Strategy("by-memory", NodeOrder.SIZE, PodOrder.MEMORY, TargetRule.BEST_FIT_MEMORY, retry=False),)
    cluster = _Cluster(15, 24, 480)
    config = Config()
    cache = PlanCache()
    assert _planned(cluster.state.snapshot(), config, cache, by_memory)
    cluster.change("add-pod", 3319)
    snapshot = cluster.state.snapshot()
    assert _planned(snapshot, config, cache, by_memory) == _planned(snapshot, config, None, by_memory)


def test_an_unchanged_state_gets_the_last_plan_again_and_a_change_a_new_one() -> None:
    cluster = _Cluster(3, 40, 800)
    config = Config()
    cache = PlanCache()
    first = plan(cluster.state.snapshot(), config, cache=cache, now=NOW)
    assert plan(cluster.state.snapshot(), config, cache=cache, now=NOW) is first
    assert plan(cluster.state.snapshot(), config, cache=cache, now=NOW + 60) is first  # no control reads the time
    assert plan(cluster.state.snapshot(), Config(), cache=cache, now=NOW) is first  # an equal configuration
    cluster.change("resize-node", 5)
    again = plan(cluster.state.snapshot(), config, cache=cache, now=NOW)
    assert again is not first
    assert again.to_json() == plan(cluster.state.snapshot(), config, now=NOW).to_json()


def test_the_waiting_pods_answers_follow_the_node_object() -> None:
    """A node whose pods are the same objects but whose own fields changed (resized) is emptied anew."""
    cluster = _Cluster(3, 40, 800)
    cache = EmptiedCache()
    snapshot = cluster.state.snapshot()
    config = Config()
    cache.begin(config, snapshot.pdbs, CURRENT, snapshot.nodes)
    info = next(info for info in snapshot if cache.emptied(info, config, snapshot.pdbs) is not None)
    before = cache.emptied(info, config, snapshot.pdbs)
    cluster.change("resize-node", sorted(cluster.raw[NODES.name]).index(info.name))
    resized = cluster.state.snapshot()[info.name]
    assert resized.pods == info.pods and resized.node is not info.node
    cache.begin(config, snapshot.pdbs, CURRENT, snapshot.nodes)
    after = cache.emptied(resized, config, snapshot.pdbs)
    assert before is not None and before.node is info.node
    assert after is not None and after.node is resized.node


def test_a_pass_without_a_record_is_expected_to_cost_what_it_cost_alone() -> None:
    """Under a time budget, a pass that has no record to replay is judged by what it took when it last had none."""
    cluster = _Cluster(3, 24, 480)
    cache = PlanCache()
    plan(cluster.state.snapshot(), Config(), cache=cache, now=NOW)
    replays = cache.replays
    assert replays.alone("pusher") is None  # recorded on this start: it replays
    assert replays.alone("no-such-pass") == 0.0  # never timed
    replays.took["no-such-pass"] = 0.3
    assert replays.alone("no-such-pass") == 0.3


def _emptied_pods(cache: EmptiedCache, info: NodeInfo, config: Config, pdbs: Sequence[PDB]) -> list[str] | None:
    emptied = cache.emptied(info, config, pdbs)
    return None if emptied is None else [p.key for p in emptied.pods]


def test_the_waiting_pods_answers_follow_the_nodes_pods() -> None:
    """A node that is the same object but lost a pod that stays is emptied anew: the pod is not in its answer."""
    cluster = _Cluster(3, 40, 800)
    cache = EmptiedCache()
    snapshot = cluster.state.snapshot()
    config = Config()
    cache.begin(config, snapshot.pdbs, CURRENT, snapshot.nodes)
    info = next(info for info in snapshot if cache.emptied(info, config, snapshot.pdbs) is not None)
    staying = (cache.emptied(info, config, snapshot.pdbs) or info).pods[0]
    cluster._delete(PODS, cluster.raw[PODS.name][staying.key])
    after = cluster.state.snapshot()
    assert after[info.name].node is info.node
    cache.begin(config, after.pdbs, CURRENT, after.nodes)
    kept = _emptied_pods(cache, after[info.name], config, after.pdbs)
    assert staying.key not in (kept or [])
    assert kept == _emptied_pods(EmptiedCache(), after[info.name], config, after.pdbs)


def test_the_waiting_pods_answers_follow_the_configuration_and_the_budgets() -> None:
    """Which pods of a node would move reads the configuration and the PodDisruptionBudgets: a cache that answered
    under others answers as a new one."""
    cluster = _Cluster(3, 40, 800)
    snapshot = cluster.state.snapshot()
    config, other = Config(), Config(movability=MovabilityConfig(kube_system_without_pdb_blocks=False))
    for config_after, pdbs_after in ((other, snapshot.pdbs), (config, ())):

        def fresh(info: NodeInfo, c: Config = config_after, b: Sequence[PDB] = pdbs_after) -> list[str] | None:
            new = EmptiedCache()
            new.begin(c, b, CURRENT, snapshot.nodes)
            return _emptied_pods(new, info, c, b)

        differs = [i for i in snapshot if fresh(i) != fresh(i, config, snapshot.pdbs)]
        assert differs  # the settings change the answer of some node
        cache = EmptiedCache()
        cache.begin(config, snapshot.pdbs, CURRENT, snapshot.nodes)
        for info in differs:
            _emptied_pods(cache, info, config, snapshot.pdbs)
        cache.begin(config_after, pdbs_after, CURRENT, snapshot.nodes)
        assert [_emptied_pods(cache, i, config_after, pdbs_after) for i in differs] == [fresh(i) for i in differs]


def test_a_waiting_pods_node_level_answer_follows_the_node_object() -> None:
    """Whether a pod passes a node's own filters is asked again of a node cordoned since."""
    cluster = _Cluster(3, 40, 800)
    snapshot = cluster.state.snapshot()
    cache = EmptiedCache()
    pod = next(p for info in snapshot for p in info.pods if not p.tolerations)
    info = next(info for info in snapshot if EmptiedCache().node_level(pod, info))
    assert cache.node_level(pod, info)
    cluster.change("cordon", sorted(cluster.raw[NODES.name]).index(info.name))
    cordoned = cluster.state.snapshot()[info.name]
    assert cordoned.node.unschedulable
    assert not cache.node_level(pod, cordoned)


def test_the_last_plan_is_not_handed_out_for_other_pending_pods_nodes_left_alone_or_configuration() -> None:
    """What the last plan is made from besides the nodes: a pod that starts or stops waiting, another set of nodes
    the caller leaves alone, another configuration; each gets the plan made from scratch."""
    cluster = _Cluster(3, 24, 480)
    config = Config()
    cache = PlanCache()

    def agree(config: Config, exclude: dict[str, str] | None = None) -> str:
        snapshot = cluster.state.snapshot()
        cached = plan(snapshot, config, cache=cache, exclude=exclude, now=NOW).to_json()
        assert cached == plan(snapshot, config, exclude=exclude, now=NOW).to_json()
        return json.dumps(cached)

    first = agree(config)
    cluster.change("pending-pod", 386)
    waiting = agree(config)
    assert waiting != first
    pods = cluster.raw[PODS.name]
    cluster._delete(PODS, next(pod for key, pod in pods.items() if key.endswith(f"-c{cluster.made}")))
    assert agree(config) == first
    drained = json.loads(first)["drained"]
    assert agree(config, {drained[0]: "backing off"}) != first
    assert agree(config) == first
    assert agree(Config(worth=WorthConfig(margin=1000.0))) != first  # no drain is worth it


def test_the_waiting_pods_cache_forgets_the_nodes_gone() -> None:
    """A node absent from a cycle keeps no answers in the cache (the cache holds what the cluster holds)."""
    cluster = _Cluster(3, 40, 800)
    snapshot = cluster.state.snapshot()
    config = Config()
    cache = EmptiedCache()
    cache.begin(config, snapshot.pdbs, CURRENT, snapshot.nodes)
    pod = next(p for info in snapshot for p in info.pods)
    for info in snapshot:
        cache.emptied(info, config, snapshot.pdbs)
        cache.node_level(pod, info)
    gone = sorted(snapshot.nodes)[0]
    assert gone in cache._kept and gone in cache._level
    cache.begin(config, snapshot.pdbs, CURRENT, [name for name in snapshot.nodes if name != gone])
    assert gone not in cache._kept and gone not in cache._level
    assert len(cache._kept) == len(snapshot.nodes) - 1


# --- a misfit kept although a target's room grew --------------------------------------------------------------


def _small(spot: dict[str, tuple[str, str, str]], pods: list[tuple[str, str, str, str]]) -> ClusterState:
    """A ClusterState of spot nodes (name -> cpu, memory, pod slots), one on-demand node ``od`` and ``pods`` (name,
    node, cpu, memory), each pod its own workload."""
    state = ClusterState()
    for name, (cpu, memory, slots) in spot.items():
        item = fake_api.node(name, spot=True, cpu=cpu)
        item["status"]["allocatable"].update(memory=memory, pods=slots)
        state.apply(NODES, "ADDED", item)
    state.apply(NODES, "ADDED", fake_api.node("od", cpu="8", labels={"karpenter.sh/capacity-type": "on-demand"}))
    for name, node, cpu, memory in pods:
        item = fake_api.pod(name, node, app=name, owner=f"rs-{name}", cpu=cpu)
        item["spec"]["containers"][0]["resources"]["requests"]["memory"] = memory
        state.apply(PODS, "ADDED", item)
    state.synced.update(k.name for k in _KINDS.values())
    return state


def _after(
    state: ClusterState, event: str, pod: dict[str, Any], strategy: Strategy
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The plan of ``strategy`` alone made with a cache kept from the plan before the watch ``event`` of ``pod``, and
    the plan from scratch, as JSON."""
    config, cache = Config(), PlanCache()
    _planned(state.snapshot(), config, cache, (strategy,))
    state.apply(PODS, event, pod)
    snapshot = state.snapshot()
    return json.loads(_planned(snapshot, config, cache, (strategy,))), json.loads(
        _planned(snapshot, config, None, (strategy,))
    )


def test_a_misfit_under_pushers_order_is_searched_again_when_a_full_target_gets_a_pod_slot() -> None:
    """Pusher's order counts a target without a pod slot as such before its CPU: ``a`` had none when ``od``'s pod
    was turned away, and is short of its CPU once a pod is gone, so the FitError's counts are not those recorded."""
    first_fit = Strategy("first-fit", NodeOrder.REQUESTED_CPU, PodOrder.CPU, TargetRule.FIRST_FIT, retry=False)
    state = _small(
        {"a": ("4", "8Gi", "2"), "b": ("4", "8Gi", "110")},
        [
            ("a1", "a", "100m", "64Mi"),
            ("a2", "a", "100m", "64Mi"),
            ("b1", "b", "3000m", "64Mi"),
            ("p", "od", "3950m", "64Mi"),
        ],
    )
    cached, fresh = _after(state, "DELETED", fake_api.pod("a1"), first_fit)
    assert cached == fresh
    assert fresh["reasons"]["od"]["detail"] == "0/2 spot nodes are available: 2 Insufficient cpu"


def test_a_misfit_under_least_free_cpu_is_searched_again_when_a_target_is_now_short_of_memory_only() -> None:
    """Least free CPU counts a target short of the pod's CPU as such first: ``a`` was, and once a pod is gone it has
    the CPU but not the memory, so the FitError's counts are not those recorded."""
    best_fit = Strategy("best-fit", NodeOrder.SIZE, PodOrder.SIZE, TargetRule.BEST_FIT, retry=False)
    state = _small(
        {"a": ("4", "8Gi", "110"), "b": ("4", "8Gi", "110")},
        [
            ("a1", "a", "3000m", "1Gi"),
            ("a2", "a", "600m", "6656Mi"),
            ("b1", "b", "3000m", "4608Mi"),
            ("p", "od", "1000m", "4Gi"),
        ],
    )
    cached, fresh = _after(state, "DELETED", fake_api.pod("a1"), best_fit)
    assert cached == fresh
    assert fresh["reasons"]["od"]["detail"] == "0/2 spot nodes are available: 2 Insufficient memory"


def test_a_misfit_is_searched_again_when_a_pod_placed_before_the_one_turned_away_would_now_go_elsewhere() -> None:
    """By memory, ``q1`` went to ``x`` first and left too little CPU there for ``q2``; once ``a`` lost a pod it comes
    before ``x`` for ``q1`` by least free CPU, and ``q2`` fits ``x``: the node is drained, though ``q2`` itself is
    still short of CPU on ``a``."""
    by_memory_order = Strategy("by-memory", NodeOrder.SIZE, PodOrder.MEMORY, TargetRule.BEST_FIT, retry=False)
    state = _small(
        {"a": ("4", "8Gi", "110"), "x": ("4", "8Gi", "110"), "y": ("4", "8Gi", "110")},
        [
            ("a1", "a", "2500m", "64Mi"),
            ("a2", "a", "1200m", "64Mi"),
            ("x1", "x", "1500m", "64Mi"),
            ("y1", "y", "3100m", "64Mi"),
            ("q1", "od", "1000m", "3Gi"),
            ("q2", "od", "2200m", "1Gi"),
        ],
    )
    cached, fresh = _after(state, "DELETED", fake_api.pod("a2"), by_memory_order)
    assert cached == fresh
    assert sorted((m["pod"], m["to"]) for m in fresh["moves"]) == [("default/q1", "a"), ("default/q2", "x")]


def test_a_misfit_is_searched_again_when_a_target_took_a_pod() -> None:
    """A target that took a pod is not one whose room only grew: ``a`` was short of ``p``'s memory and is now short of
    its CPU, so the FitError's counts are not those recorded."""
    best_fit = Strategy("best-fit", NodeOrder.SIZE, PodOrder.SIZE, TargetRule.BEST_FIT, retry=False)
    state = _small(
        {"a": ("4", "8Gi", "110"), "b": ("4", "8Gi", "110")},
        [("a1", "a", "600m", "6Gi"), ("b1", "b", "3000m", "4608Mi"), ("p", "od", "1000m", "4Gi")],
    )
    cached, fresh = _after(state, "ADDED", fake_api.pod("a2", "a", app="a2", owner="rs-a2", cpu="3000m"), best_fit)
    assert cached == fresh
    assert fresh["reasons"]["od"]["detail"] == "0/2 spot nodes are available: 1 Insufficient cpu, 1 Insufficient memory"
