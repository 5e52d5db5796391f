"""rescheduler.plan.planner.PlanCache: a plan made with the cache kept between cycles is the plan made without it.

The run loop keeps one :class:`PlanCache` across cycles, over snapshots of a watch-backed
:class:`ClusterState` whose pods are the same objects until an event replaces them. These tests drive such
a state through random watch events between cycles (pods relabelled, re-annotated, made terminating,
deleted, added; nodes made NotReady or relabelled; PDB statuses and selectors changed, PDBs deleted; the
configuration swapped) and compare each cycle's plan with the cache to a plan made from scratch, and the
topology index built with its memo to one built without.
"""

from __future__ import annotations

import copy
import operator
import random
from dataclasses import replace
from typing import Any

import pytest

from rescheduler.cluster.watch_cache import NAMESPACES, NODES, PDBS, PODS, ClusterState
from rescheduler.plan.cycle import plan_nodes
from rescheduler.plan.planner import PlanCache, plan
from rescheduler.plan.simulation import Preemptions, Simulation
from rescheduler.plan.topology import TopologyIndex
from rescheduler.plan.topology_memo import TopologyMemo
from rescheduler.plan.waiting import reserve
from shared.classes import node_class
from shared.config import Config, SpotCeilingConfig
from shared.model import Pod
from shared.movable import is_expendable
from shared.snapshot import ClusterSnapshot
from shared.workloads import workload_counts, workload_key
from tests.support.cluster_gen import DRAINABLE, generate

_KINDS = {"Node": NODES, "Pod": PODS, "PodDisruptionBudget": PDBS, "Namespace": NAMESPACES}
_TIER_ANTI_AFFINITY = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"tier": "t1"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}
CEILINGS = replace(DRAINABLE, ceiling=0.5, spread=0.2, pod_affinity=0.1)


def _key(item: dict[str, Any]) -> str:
    meta = item["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


class _Cluster:
    """A ClusterState fed watch events, with the raw objects kept to derive the next events from."""

    def __init__(self, seed: int, nodes: int, pods: int) -> None:
        self.state = ClusterState()
        self.raw: dict[str, dict[str, dict[str, Any]]] = {k.name: {} for k in _KINDS.values()}
        self.rng = random.Random(seed)
        for item in generate(seed, nodes, pods, CEILINGS):
            kind = _KINDS.get(item.get("kind", ""))
            if kind is None or (kind is PODS and item["status"].get("phase") in ("Succeeded", "Failed")):
                continue
            self.raw[kind.name][_key(item)] = item
            self.state.apply(kind, "ADDED", item)

    def _modify(self, kind: Any, change: Any) -> None:
        key = self.rng.choice(sorted(self.raw[kind.name]))
        item = copy.deepcopy(self.raw[kind.name][key])
        change(item)
        self.raw[kind.name][key] = item
        self.state.apply(kind, "MODIFIED", item)

    def _delete(self, kind: Any) -> None:
        key = self.rng.choice(sorted(self.raw[kind.name]))
        item = self.raw[kind.name].pop(key)
        self.state.apply(kind, "DELETED", item)

    def churn(self, events: int, *, pdb_selection: bool = False, new_key: bool = False) -> None:
        """Random watch events; with ``pdb_selection``, PDB selectors changed and PDBs deleted too; with
        ``new_key``, anti-affinity terms on a label that only pods labelled earlier carry."""
        rng = self.rng
        for _ in range(events):
            what = rng.randrange(13)
            if what in (8, 9) and not pdb_selection:
                what = 7
            if what == 12 and not new_key:
                what = 11
            if what == 0:
                self._modify(PODS, lambda p: p["metadata"].setdefault("labels", {}).update(app=f"x{rng.randrange(3)}"))
            elif what == 1:
                self._modify(
                    PODS,
                    lambda p: (
                        p["metadata"]
                        .setdefault("annotations", {})
                        .update({"spotshift.io/max-spot-percent": str(rng.choice((0, 30, 50, 100)))})
                    ),
                )
            elif what == 2:
                self._modify(PODS, lambda p: p["metadata"].update(deletionTimestamp="2024-05-14T10:00:00Z"))
            elif what == 3:
                self._delete(PODS)
            elif what == 4:  # a new pod: a copy of another one under a new name, maybe on another node
                src = copy.deepcopy(self.raw[PODS.name][rng.choice(sorted(self.raw[PODS.name]))])
                src["metadata"]["name"] += f"-n{rng.randrange(10**6)}"
                src["metadata"]["uid"] = f"uid-new-{rng.randrange(10**9)}"
                if src["spec"].get("nodeName"):
                    src["spec"]["nodeName"] = rng.choice(sorted(self.raw[NODES.name]))
                self.raw[PODS.name][_key(src)] = src
                self.state.apply(PODS, "ADDED", src)
            elif what == 5:

                def ready(n: dict[str, Any]) -> None:
                    for c in n["status"].get("conditions") or ():
                        if c["type"] == "Ready":
                            c["status"] = rng.choice(("True", "False"))

                self._modify(NODES, ready)
            elif what == 6:
                self._modify(NODES, lambda n: n["metadata"]["labels"].update(extra=str(rng.randrange(2))))
            elif what == 7 and self.raw[PDBS.name]:
                self._modify(PDBS, lambda d: d.setdefault("status", {}).update(disruptionsAllowed=rng.randrange(3)))
            elif what == 8 and self.raw[PDBS.name]:

                def selector(d: dict[str, Any]) -> None:
                    d["spec"]["selector"] = {"matchLabels": {"app": f"x{rng.randrange(3)}"}}

                self._modify(PDBS, selector)
            elif what == 9 and self.raw[PDBS.name]:
                self._delete(PDBS)
            elif what == 10:  # a pod relabelled so that it leaves, or joins, a Deployment's workload
                self._modify(PODS, lambda p: p["metadata"].setdefault("labels", {}).pop("pod-template-hash", None))
            elif what == 11:  # a label no selector uses (yet)
                self._modify(PODS, lambda p: p["metadata"].setdefault("labels", {}).update(tier="t1"))
            else:  # anti-affinity on that label: the index now covers one more key, on unchanged nodes too
                self._modify(PODS, lambda p: p["spec"].update(affinity=copy.deepcopy(_TIER_ANTI_AFFINITY)))


def _reserved(cluster: _Cluster) -> set[str]:
    """The nodes a waiting pod is placed on first (their pods differ between the plan's two passes)."""
    snap = cluster.state.snapshot()
    waiting = reserve(snap, Config())
    return {p.node_name for p in waiting.placed}


def _plans_agree(cluster: _Cluster, cache: PlanCache, config: Config) -> dict[str, Any]:
    cached = plan(cluster.state.snapshot(), config, cache=cache).to_json()
    fresh = plan(cluster.state.snapshot(), config).to_json()
    assert cached == fresh
    return cached


# Seeds whose clusters start with nothing pending: pods waiting for a node hold every on-demand node they could use
# once emptied, and a plan that drains nothing would compare nothing.
@pytest.mark.parametrize("seed", [3, 7])
def test_cached_plans_equal_fresh_plans_across_cycles_and_watch_events(seed: int) -> None:
    cluster = _Cluster(seed, 60, 1200)
    cache = PlanCache()
    config = Config()
    other = replace(config, spot_ceiling=SpotCeilingConfig(default_max_spot_percent=60))
    drained = 0
    for cycle in range(6):
        cfg = other if cycle == 3 else (Config() if cycle == 4 else config)
        result = _plans_agree(cluster, cache, cfg)
        drained += len(result["drained"])
        if cycle % 2 == 0:  # nothing changed since: every node's memo is reused but where a waiting pod is placed
            memos = dict(cache._nodes)
            assert plan(cluster.state.snapshot(), cfg, cache=cache).to_json() == result
            assert all(cache._nodes[name] is memo for name, memo in memos.items() if name not in _reserved(cluster))
        cluster.churn(25, pdb_selection=cycle == 1, new_key=cycle == 3)
    assert drained > 0  # the comparison covers plans that move pods, not only empty ones


def test_plan_nodes_passes_the_cache_through() -> None:
    cluster = _Cluster(4, 30, 700)
    cache = PlanCache()
    first = plan_nodes(cluster.state.snapshot(), Config(), cache=cache)
    again = plan_nodes(cluster.state.snapshot(), Config(), cache=cache)
    assert first == again == plan_nodes(cluster.state.snapshot(), Config())


def _meaning(index: TopologyIndex) -> tuple[object, ...]:
    """What an index says, whatever pids it gave: per posting and anti-affinity key the pods (and terms) listed, the
    terms without an anchor, and where each pod listed is."""
    pods, loc = index.pods, index.loc
    postings = {key: sorted(id(pods[pid]) for pid in pids) for key, pids in index.postings.items()}
    anti = {key: sorted((id(pods[pid]), id(t)) for pid, t in entries) for key, entries in index.anti_terms.items()}
    general = sorted((id(pods[pid]), id(t)) for pid, t in index.anti_general)
    listed = {pid for pids in index.postings.values() for pid in pids}
    listed |= {pid for entries in index.anti_terms.values() for pid, _ in entries}
    where = sorted((id(pods[pid]), id(loc[pid])) for pid in listed)
    return index.keys, postings, anti, general, where


def _move_some(index: TopologyIndex, snap: Any, rng: random.Random) -> None:
    """Moves a few pods in ``index`` alone, not undone: what a plan that failed half-way leaves behind."""
    infos = [info for info in snap if info.pods]
    for _ in range(5):
        source, target = rng.choice(infos), rng.choice(infos)
        pod = rng.choice(source.pods)
        index.move(index.pid(pod), replace(pod, node_name=target.name), target)


@pytest.mark.parametrize("seed", [5, 6])
def test_topology_index_with_a_memo_is_the_index_without(seed: int) -> None:
    # The index taken over from the last one (only the nodes whose pods changed indexed anew, their old pids
    # retired) lists the same pods under the same keys, on their nodes, as an index built from scratch.
    cluster = _Cluster(seed, 30, 800)
    memo = TopologyMemo()
    rng = random.Random(seed)
    took_over = 0
    for rnd in range(8):
        snap = cluster.state.snapshot()
        kept = memo.index
        a, b = TopologyIndex(snap, memo), TopologyIndex(snap)
        took_over += kept is not None and a.pods is not b.pods and a.dead > 0
        assert _meaning(a) == _meaning(b)
        for info in snap:
            for p in info.pods:
                assert a.pods[a.pid(p)] is p and a.loc[a.pid(p)] is info
                assert b.pods[b.pid(p)] is p
        _move_some(a, snap, rng)
        cluster.churn(30 if rnd % 3 else 3, pdb_selection=rnd == 2, new_key=rnd == 5)
    assert took_over >= 3  # most rounds took the last index over, with pids retired


def test_an_index_with_too_many_retired_pids_is_built_anew() -> None:
    # Retired pids hold nothing, but the lists keep their slots: once they are a quarter of them, the next index
    # starts from scratch.
    cluster = _Cluster(9, 20, 500)
    memo = TopologyMemo()
    pods = TopologyIndex(cluster.state.snapshot(), memo).pods
    for _ in range(50):
        cluster.churn(40)
        snap = cluster.state.snapshot()
        index = TopologyIndex(snap, memo)
        assert _meaning(index) == _meaning(TopologyIndex(snap))
        if index.pods is not pods:
            break
        assert index.dead > 0 and index.dead * 4 <= len(index.pods) + 40 * 30
    assert index.pods is not pods and index.dead == 0


def test_workload_counts_group_pods_like_workload_key() -> None:
    cluster = _Cluster(7, 20, 500)
    pods = list(cluster.state.pods.values())
    want: dict[str, int] = {}
    for p in pods:
        wk = workload_key(p)
        if wk is not None:
            want[wk] = want.get(wk, 0) + 1
    assert workload_counts(pods) == want
    assert any("/Deployment/" in wk for wk in want)


def test_a_pdb_status_update_keeps_the_analyses_and_a_selector_change_drops_them() -> None:
    cluster = _Cluster(8, 30, 700)
    cache = PlanCache()
    _plans_agree(cluster, cache, Config())
    epoch = cache.epoch
    cluster._modify(PDBS, lambda d: d.setdefault("status", {}).update(disruptionsAllowed=0))
    _plans_agree(cluster, cache, Config())  # an equal configuration, another object
    assert cache.epoch == epoch
    cluster._modify(PDBS, lambda d: d["spec"].update(selector={"matchLabels": {"app": "other"}}))
    _plans_agree(cluster, cache, Config())
    assert cache.epoch == epoch + 1


def _spot_nodes(snapshot: ClusterSnapshot) -> dict[str, tuple[int, list[Pod]]]:
    """Each spot node's stamp and pods (the very list's items, in order)."""
    classes = Config().node_classes
    return {i.name: (i.stamp, list(i.pods)) for i in snapshot if node_class(i.node, classes) == "spot"}


def _expendable_on_spot(snapshot: ClusterSnapshot) -> int:
    cutoff = Config().movability.expendable_priority_cutoff
    spot = _spot_nodes(snapshot)
    return sum(1 for name in spot for p in snapshot[name].pods if is_expendable(p, cutoff))


def _nodes(snapshot: ClusterSnapshot) -> dict[str, tuple[int, list[Pod]]]:
    """Each node's stamp and pods (the very list's items, in order)."""
    return {i.name: (i.stamp, list(i.pods)) for i in snapshot}


def test_a_plan_puts_each_nodes_pods_back_in_their_order_and_with_their_stamp() -> None:
    # The simulation takes the expendable pods out of the targets and tries moves from the on-demand nodes onto
    # the targets; once it is done, each node holds its pods as before, in their order, with its stamp, so the memos
    # kept by stamp know it unchanged in the next plan.
    cluster = _Cluster(3, 60, 1200)
    snapshot = cluster.state.snapshot()
    assert _expendable_on_spot(snapshot) > 0  # the case this is about
    before = _nodes(snapshot)
    result = plan(snapshot, Config(), cache=PlanCache())
    assert result.moves  # moves were tried and undone
    after = _nodes(snapshot)
    assert after.keys() == before.keys()
    for name, (stamp, pods) in before.items():
        assert after[name][0] == stamp, name
        assert len(after[name][1]) == len(pods) and all(map(operator.is_, after[name][1], pods)), name


def test_taking_the_same_pods_out_of_the_same_stamp_gives_the_stamp_it_gave_then() -> None:
    cluster = _Cluster(3, 60, 1200)
    config = Config()
    memo = PlanCache()
    preemptions = Preemptions()

    def taken_out(snapshot: ClusterSnapshot, kept: Preemptions) -> dict[str, int]:
        sim = Simulation(snapshot, config, verify=False, topology_memo=memo.topology, preemptions=kept)
        try:
            return {info.name: info.stamp for info in sim.targets}
        finally:
            sim.restore()

    first = taken_out(cluster.state.snapshot(), preemptions)
    again = taken_out(cluster.state.snapshot(), preemptions)  # another copy of the same state: the same stamps
    assert again == first
    fresh = taken_out(cluster.state.snapshot(), Preemptions())  # no memory of them: stamps of their own
    changed = {name for name in first if fresh[name] != first[name]}
    assert changed and all(name in _spot_nodes(cluster.state.snapshot()) for name in changed)
    snapshot = cluster.state.snapshot()
    name = next(iter(changed))
    snapshot.remove_pod(snapshot[name].pods[0])  # another start: a stamp of its own, not the one of then
    assert taken_out(snapshot, preemptions)[name] != first[name]


def test_the_pods_chosen_to_take_out_are_chosen_again_under_other_settings_or_another_stamp() -> None:
    cluster = _Cluster(3, 60, 1200)
    snapshot = cluster.state.snapshot()
    info = next(i for i in snapshot if len(i.pods) > 1)
    first, second = info.pods[0], info.pods[-1]
    preemptions = Preemptions()
    saved = info.saved()
    out = preemptions.chosen(info, "a", lambda p: p is first)
    assert out == (first,)
    preemptions.take_out(snapshot, info, out, "a")
    snapshot.add_pod(first)
    snapshot.put_back(info, saved)  # as the simulation puts it back: the same pods, order and stamp
    preemptions.done()
    # The same stamp and settings: the choice of then, whatever ``pick`` would say now.
    assert preemptions.chosen(info, "a", lambda p: p is second) == (first,)
    assert preemptions.chosen(info, "b", lambda p: p is second) == (second,)  # other settings: chosen anew
    info.remove_pod(second)  # another stamp: chosen anew
    assert preemptions.chosen(info, "a", lambda p: False) == ()
