"""rescheduler.plan.topology answers exactly like shared.interpod and shared.spread, before and after moves.

The index applies the shared rules to counts it keeps current move by move, where the shared checks count by
scanning the snapshot; this compares the two on generated clusters rich in required (anti-)affinity and
topology spread, for many (pod, node) pairs, at the start and after a series of random moves reported to the
index, so the incremental counts are checked against the direct evaluation.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

import orjson
import pytest

from rescheduler.decode.reader import load_bytes
from rescheduler.plan.topology import TopologyIndex
from rescheduler.plan.topology_memo import TopologyMemo
from shared.fit_reasons import ERR_AFFINITY, ERR_ANTI_AFFINITY, ERR_EXISTING_ANTI_AFFINITY
from shared.interpod import check_inter_pod_affinity
from shared.snapshot import ClusterSnapshot
from shared.spread import check_topology_spread
from shared.switches import CURRENT, STRICTEST, for_version
from tests.builders import (
    affinity,
    api_list,
    namespace_json,
    node_json,
    pod_affinity_term,
    pod_json,
    spread_constraint,
)
from tests.support.cluster_gen import FULL, generate

RICH = replace(FULL, anti_affinity=0.35, anti_affinity_other=0.3, spread=0.3, pod_affinity=0.15, pinned=0.02)


def _snapshot(seed: int, nodes: int, pods: int) -> ClusterSnapshot:
    return load_bytes(orjson.dumps({"kind": "List", "items": generate(seed, nodes, pods, RICH)}))


def _compare(snap: ClusterSnapshot, index: TopologyIndex, rng: random.Random, samples: int) -> tuple[int, int]:
    """Checks ``samples`` random (pod, node) pairs; returns how many each filter rejected."""
    infos = list(snap)
    pods = [p for info in infos for p in info.pods]
    interesting = [p for p in pods if p.pod_affinity or p.pod_anti_affinity or p.topology_spread] or pods
    rejected_aff = rejected_spread = 0
    seen: set[str] = set()
    for _ in range(samples):
        pod = rng.choice(interesting if rng.random() < 0.7 else pods)
        node = rng.choice(infos)
        pid = index.pid(pod)
        want_aff = check_inter_pod_affinity(pod, node, snap)
        got_aff = index.check_inter_pod_affinity(pod, pid, node)
        assert got_aff == want_aff, (pod.key, node.name)
        want_spread = check_topology_spread(pod, node, snap)
        got_spread = index.check_topology_spread(pod, pid, node)
        assert got_spread == want_spread, (pod.key, node.name)
        rejected_aff += want_aff is not None
        if want_aff is not None:
            seen.add(want_aff.message)
        rejected_spread += want_spread is not None
    REASONS_SEEN.update(seen)
    return rejected_aff, rejected_spread


REASONS_SEEN: set[str] = set()


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_index_agrees_with_shared_filters_before_and_after_moves(seed: int) -> None:
    snap = _snapshot(seed, 30, 600)
    index = TopologyIndex(snap)
    rng = random.Random(seed)
    aff, spread = _compare(snap, index, rng, 300)
    assert aff > 0 and spread > 0  # both filters are exercised, not only their pass path
    infos = list(snap)
    for _ in range(60):
        info = rng.choice(infos)
        if not info.pods:
            continue
        pod = rng.choice(info.pods)
        target = rng.choice(infos)
        if target is info:
            continue
        pid = index.pid(pod)
        moved = snap.move_pod(pod, target.name)
        index.move(pid, moved, target)
        _compare(snap, index, rng, 20)


@pytest.mark.parametrize("seed", [1, 2])
def test_an_index_taken_over_from_the_last_one_agrees_with_shared_filters(seed: int) -> None:
    # Between two indexes built with one memo: pods moved in the snapshot (their nodes are indexed anew, their old
    # pids retired) and moves reported to the last index alone (undone when the next one takes it over).
    snap = _snapshot(seed, 30, 600)
    memo = TopologyMemo()
    rng = random.Random(seed)
    infos = list(snap)
    retired = 0
    for _ in range(4):
        index = TopologyIndex(snap, memo)
        retired = max(retired, index.dead)
        _compare(snap, index, rng, 150)
        for _ in range(5):
            info, target = rng.choice(infos), rng.choice(infos)
            if info.pods and target is not info:
                pod = rng.choice(info.pods)
                index.move(index.pid(pod), replace(pod, node_name=target.name), target)
        for _ in range(15):
            info, target = rng.choice(infos), rng.choice(infos)
            if info.pods and target is not info:
                snap.move_pod(rng.choice(info.pods), target.name)
    assert retired > 0 and memo.index is index  # the indexes after the first took the last one over


def test_every_inter_pod_reason_is_exercised() -> None:
    # Guards the comparison against passing on clusters that never reject in some direction.
    REASONS_SEEN.clear()
    for seed in (1, 2):
        snap = _snapshot(seed, 30, 600)
        _compare(snap, TopologyIndex(snap), random.Random(seed), 300)
    assert {ERR_AFFINITY, ERR_ANTI_AFFINITY, ERR_EXISTING_ANTI_AFFINITY} <= REASONS_SEEN


def test_a_rejection_names_the_same_reason_as_the_scheduler() -> None:
    snap = _snapshot(7, 24, 500)
    index = TopologyIndex(snap)
    reasons = set()
    for info in snap:
        for pod in info.pods:
            for node in snap:
                r = index.check_inter_pod_affinity(pod, index.pid(pod), node)
                if r is not None:
                    reasons.add(r.message)
                    assert r == check_inter_pod_affinity(pod, node, snap)
    assert reasons  # the generated cluster exercises the rejections, not only the passes


# --- the cluster's release (shared/switches.py) and empty selectors ----------------------------------------

SWITCHES = {
    "current": CURRENT,  # v1.37.2: an empty selector counts no pod
    "v1.28": for_version("v1.28.15"),  # a release not read: an empty selector counts every pod
    "v1.20": for_version("v1.20.2"),
    "unknown": STRICTEST,
}


def _release_sensitive_cluster(seed: int) -> ClusterSnapshot:
    """Zones, a pool label some nodes lack (pods choose it by nodeSelector), racks some nodes lack, and spread
    constraints with ``{}``, missing and matchLabels selectors: where the counting rules of kubernetes#107009
    disagree, and those for an empty selector (``Switches.spread_empty_selector_counts_no_pods``)."""
    rng = random.Random(seed)
    nodes = []
    for i in range(12):
        labels = {"kubernetes.io/hostname": f"n{i}", "zone": rng.choice("abc")}
        if rng.random() < 0.6:
            labels["pool"] = "p"
        if rng.random() < 0.7:
            labels["rack"] = f"r{rng.randrange(3)}"
        nodes.append(node_json(f"n{i}", labels=labels, allocatable={"pods": "110"}, ready=None))
    selectors = [{}, None, {"matchLabels": {"app": "a"}}, {"matchLabels": {"app": "b"}}]
    pods = []
    for j in range(90):
        node_name = f"n{rng.randrange(12)}"
        constraints, node_selector = None, None
        if rng.random() < 0.5:
            keys = rng.sample(["zone", "rack", "kubernetes.io/hostname"], rng.randint(1, 2))
            constraints = [spread_constraint(rng.randint(1, 2), key, rng.choice(selectors)) for key in keys]
            if rng.random() < 0.6:
                node_selector = {"pool": "p"}
        namespace, app = rng.choice(["ns1", "ns1", "ns2"]), rng.choice("ab")
        pods.append(
            pod_json(
                f"p{j}",
                namespace=namespace,
                labels={"app": app},
                node_name=node_name,
                spread=constraints,
                node_selector=node_selector,
            )
        )
    return load_bytes(orjson.dumps(api_list(nodes + pods)))


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_index_follows_the_release_rules_like_shared_spread(seed: int) -> None:
    snap = _release_sensitive_cluster(seed)
    index = TopologyIndex(snap)
    rng = random.Random(seed)
    infos = list(snap)
    spreading = [p for info in infos for p in info.pods if p.topology_spread]
    disagreements = empty_disagreements = 0
    for step in range(40):
        for _ in range(25):
            pod = rng.choice(spreading)
            node = rng.choice(infos)
            pid = index.pid(pod)
            answers = {}
            for name, switches in SWITCHES.items():
                want = check_topology_spread(pod, node, snap, switches=switches)
                got = index.check_topology_spread(pod, pid, node, switches)
                assert got == want, (name, pod.key, node.name)
                answers[name] = want
            disagreements += answers["current"] != answers["v1.20"]
            empty_disagreements += answers["current"] != answers["v1.28"]
            if answers["current"] is not None or answers["v1.20"] is not None or answers["v1.28"] is not None:
                assert answers["unknown"] is not None  # both rules must pass, counting every pod
            if answers["current"] is not None:
                assert answers["v1.28"] is not None  # counting an empty selector's pods only adds failures
        info = rng.choice(infos)
        if info.pods and step % 2 == 0:
            pod = rng.choice(info.pods)
            target = rng.choice(infos)
            if target is not info:
                pid = index.pid(pod)
                moved = snap.move_pod(pod, target.name)
                index.move(pid, moved, target)
                if pod in spreading:
                    spreading[spreading.index(pod)] = moved
    assert disagreements > 0  # the two counting rules were really told apart
    assert empty_disagreements > 0  # and the two empty selector rules


def test_terms_sharing_a_namespace_selector_keep_their_own_namespace_lists() -> None:
    # Two terms with the same namespaceSelector and different namespace lists cover different namespaces.
    no_team = {"matchLabels": {"team": "none"}}
    db = {"matchLabels": {"app": "db"}}
    host = "kubernetes.io/hostname"

    def anti(name: str, namespace: str) -> dict[str, Any]:
        term = pod_affinity_term(db, host, namespaces=[namespace], namespace_selector=no_team)
        return pod_json(name, node_name="n2", affinity=affinity(anti_required=[term]))

    nodes = [node_json(n, labels={host: n}, ready=None) for n in ("n1", "n2")]
    pods = [pod_json("q", namespace="b", labels={"app": "db"}, node_name="n1"), anti("p1", "a"), anti("p2", "b")]
    snap = load_bytes(orjson.dumps(api_list([namespace_json("a"), namespace_json("b"), *nodes, *pods])))
    index = TopologyIndex(snap)
    n1 = snap["n1"]
    for pod in sorted((p for p in snap["n2"].pods), key=lambda p: p.name):
        assert index.check_inter_pod_affinity(pod, index.pid(pod), n1) == check_inter_pod_affinity(pod, n1, snap)
    assert check_inter_pod_affinity(pod, n1, snap) is not None  # p2's term covers q's namespace
