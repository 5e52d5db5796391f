"""Inter-pod (anti-)affinity beyond upstream's tables: edge cases, memoisation and purity.

The edge cases spell out what kube-scheduler's ``interpodaffinity`` plugin does (nil vs empty selectors,
namespaces ORed with a namespace selector, terminating pods, a pod never matching itself); the memo tests
keep :class:`shared.memo.SnapshotMemo` in step with the snapshot's changes.
"""

from __future__ import annotations

import copy
import gc
from typing import Any

from shared.fit_reasons import ERR_AFFINITY, ERR_ANTI_AFFINITY, ERR_EXISTING_ANTI_AFFINITY
from shared.interpod import check_inter_pod_affinity, preferred_inter_pod_affinity_score
from shared.memo import SnapshotMemo
from shared.model import Pod
from shared.snapshot import ClusterSnapshot
from tests.builders.interpod import (
    AA,
    EA,
    NAMESPACES,
    ZONES,
    A,
    exists,
    in_,
    namespace,
    node,
    pod,
    sel,
    term,
    weighted,
)

# --- beyond upstream's tables ------------------------------------------------------------------------


def test_reasons_carry_upstream_resolvability() -> None:
    # ErrReasonAffinityRulesNotMatch is UnschedulableAndUnresolvable; the anti-affinity ones are Unschedulable.
    snapshot = ClusterSnapshot(ZONES, [pod(labels={"app": "x"}, node="a1", anti=[exists("app", "zone")])])
    aff = check_inter_pod_affinity(pod(affinity=[in_("app", "nope", ["x"])]), snapshot["a1"], snapshot)
    anti = check_inter_pod_affinity(pod(anti=[exists("app", "zone")]), snapshot["a1"], snapshot)
    existing_anti = check_inter_pod_affinity(pod(labels={"app": "y"}), snapshot["a1"], snapshot)
    assert aff is not None and aff.code == ERR_AFFINITY and aff.unresolvable
    assert anti is not None and anti.code == ERR_ANTI_AFFINITY and not anti.unresolvable
    assert existing_anti is not None and existing_anti.code == ERR_EXISTING_ANTI_AFFINITY
    assert not existing_anti.unresolvable
    assert aff.message == "node(s) didn't match pod affinity rules"


def test_nil_label_selector_matches_no_pod() -> None:
    incoming = pod(labels={"app": "x"}, affinity=[term(None, "zone")], anti=[term(None, "hostname")])
    snapshot = ClusterSnapshot(ZONES, [pod(labels={"app": "x"}, node="a1")])
    # Affinity: nothing matches the nil selector, and the pod does not match it itself either.
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot).code == ERR_AFFINITY  # type: ignore[union-attr]
    only_anti = pod(labels={"app": "x"}, anti=[term(None, "zone")])
    assert check_inter_pod_affinity(only_anti, snapshot["a1"], snapshot) is None


def test_empty_label_selector_matches_every_pod_in_the_namespace() -> None:
    snapshot = ClusterSnapshot(ZONES, [pod(labels={"anything": "1"}, node="a1"), pod(ns="other", node="b1")])
    incoming = pod(anti=[term({}, "zone")])
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot).code == ERR_ANTI_AFFINITY  # type: ignore[union-attr]
    assert check_inter_pod_affinity(incoming, snapshot["b1"], snapshot) is None


def test_node_without_the_topology_key_fails_affinity_but_not_anti_affinity() -> None:
    nodes = [*ZONES, node("bare")]
    snapshot = ClusterSnapshot(nodes, [pod(labels={"app": "x"}, node="a1")])
    assert check_inter_pod_affinity(pod(affinity=[exists("app", "zone")]), snapshot["bare"], snapshot).code == (  # type: ignore[union-attr]
        ERR_AFFINITY
    )
    assert check_inter_pod_affinity(pod(anti=[exists("app", "zone")]), snapshot["bare"], snapshot) is None


def test_first_pod_of_a_series_needs_no_match_anywhere() -> None:
    # A pod matching no term elsewhere but matching its own terms may go anywhere that has the keys ...
    incoming = pod(labels={"app": "web"}, affinity=[in_("app", "zone", ["web"])])
    snapshot = ClusterSnapshot(ZONES, [pod(labels={"app": "db"}, node="a1")])
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot) is None
    assert check_inter_pod_affinity(incoming, snapshot["b1"], snapshot) is None
    # ... but once one pod of the series runs somewhere, only that domain is left.
    snapshot.add_pod(pod(labels={"app": "web"}), "b1")
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot).code == ERR_AFFINITY  # type: ignore[union-attr]
    assert check_inter_pod_affinity(incoming, snapshot["b1"], snapshot) is None


def test_existing_anti_affinity_namespace_selector_reads_the_incoming_pods_namespace_labels() -> None:
    namespaces = [namespace("prod", {"env": "prod"}), namespace("dev", {"env": "dev"})]
    guard = pod(ns="guard", node="a1", anti=[term({}, "zone", namespace_selector=sel("env", "In", ["prod"]))])
    snapshot = ClusterSnapshot(ZONES, [guard], namespaces=namespaces)
    assert check_inter_pod_affinity(pod(ns="prod"), snapshot["a1"], snapshot).code == EA  # type: ignore[union-attr]
    assert check_inter_pod_affinity(pod(ns="dev"), snapshot["a1"], snapshot) is None
    assert check_inter_pod_affinity(pod(ns="prod"), snapshot["b1"], snapshot) is None


def test_namespaces_and_namespace_selector_are_ORed() -> None:
    namespaces = [namespace("team-a", {"team": "a"}), namespace("team-b", {"team": "b"})]
    t = term(sel("app", "Exists"), "zone", namespaces=["listed"], namespace_selector=sel("team", "In", ["a"]))
    snapshot = ClusterSnapshot(
        ZONES,
        [pod(ns="listed", labels={"app": "1"}, node="a1"), pod(ns="team-a", labels={"app": "1"}, node="b1")],
        namespaces=namespaces,
    )
    incoming = pod(ns="team-b", anti=[t])
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot).code == AA  # type: ignore[union-attr]
    assert check_inter_pod_affinity(incoming, snapshot["b1"], snapshot).code == AA  # type: ignore[union-attr]


def test_terminating_pods_still_count_like_upstream() -> None:
    snapshot = ClusterSnapshot(ZONES, [pod(labels={"app": "x"}, node="a1", terminating=True)])
    assert check_inter_pod_affinity(pod(anti=[exists("app", "zone")]), snapshot["a1"], snapshot).code == AA  # type: ignore[union-attr]


def test_pod_is_never_counted_against_itself() -> None:
    # The rescheduler asks where a bound pod could go; its own anti-affinity must not repel it.
    me = pod(labels={"app": "x"}, node="a1", anti=[exists("app", "zone")], uid="u-1")
    snapshot = ClusterSnapshot(ZONES, [me])
    assert check_inter_pod_affinity(me, snapshot["a1"], snapshot) is None
    # A copy with the same uid (e.g. the pod re-parsed) is the same pod too.
    again = pod(labels={"app": "x"}, anti=[exists("app", "zone")], uid="u-1")
    assert check_inter_pod_affinity(again, snapshot["a1"], snapshot) is None
    # A sibling with another uid is a different pod.
    sibling = pod(labels={"app": "x"}, anti=[exists("app", "zone")], uid="u-2")
    assert check_inter_pod_affinity(sibling, snapshot["a1"], snapshot).code == AA  # type: ignore[union-attr]


def test_pods_on_nodes_outside_the_snapshot_are_ignored() -> None:
    snapshot = ClusterSnapshot(ZONES, [pod(labels={"app": "x"}, node="ghost", anti=[exists("app", "zone")])])
    assert check_inter_pod_affinity(pod(labels={"app": "x"}), snapshot["a1"], snapshot) is None


# --- memoisation -------------------------------------------------------------------------------------


def test_memo_invalidates_on_add_pod() -> None:
    snapshot = ClusterSnapshot(ZONES)
    incoming = pod(anti=[in_("app", "zone", ["db"])])
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot) is None
    snapshot.add_pod(pod(labels={"app": "db"}), "a1")
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot).code == AA  # type: ignore[union-attr]
    assert check_inter_pod_affinity(incoming, snapshot["b1"], snapshot) is None


def test_memo_invalidates_on_remove_pod() -> None:
    guard = pod(labels={"app": "db"}, node="a1", anti=[exists("app", "zone")])
    snapshot = ClusterSnapshot(ZONES, [guard])
    incoming = pod(labels={"app": "web"})
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot).code == EA  # type: ignore[union-attr]
    snapshot.remove_pod(guard)
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot) is None


def test_memo_invalidates_on_move_pod() -> None:
    db = pod(labels={"app": "db"}, node="a1")
    snapshot = ClusterSnapshot(ZONES, [db])
    incoming = pod(labels={"app": "web"}, affinity=[in_("app", "zone", ["db"])])
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot) is None
    assert check_inter_pod_affinity(incoming, snapshot["b1"], snapshot).code == A  # type: ignore[union-attr]
    snapshot.move_pod(db, "b1")
    assert check_inter_pod_affinity(incoming, snapshot["a1"], snapshot).code == A  # type: ignore[union-attr]
    assert check_inter_pod_affinity(incoming, snapshot["b1"], snapshot) is None


def test_memo_keeps_snapshots_apart() -> None:
    incoming = pod(anti=[in_("app", "zone", ["db"])])
    empty = ClusterSnapshot(ZONES)
    busy = ClusterSnapshot(ZONES, [pod(labels={"app": "db"}, node="a1")])
    # Both at version 0: only the snapshot's identity tells them apart.
    assert check_inter_pod_affinity(incoming, empty["a1"], empty) is None
    assert check_inter_pod_affinity(incoming, busy["a1"], busy).code == AA  # type: ignore[union-attr]
    assert check_inter_pod_affinity(incoming, empty["a1"], empty) is None


def test_snapshot_memo_builds_once_per_version_and_forgets_dead_snapshots() -> None:
    memo: SnapshotMemo[Pod, int] = SnapshotMemo(max_keys=2)
    builds: list[str] = []

    def build(p: Pod, _: ClusterSnapshot) -> int:
        builds.append(p.name)
        return len(builds)

    snapshot = ClusterSnapshot(ZONES)
    a, b, c = pod(name="a"), pod(name="b"), pod(name="c")
    assert memo.lookup(snapshot, a, build) == memo.lookup(snapshot, a, build) == 1
    snapshot.add_pod(pod(), "a1")  # version bump: rebuilt
    assert memo.lookup(snapshot, a, build) == 2
    memo.lookup(snapshot, b, build)
    memo.lookup(snapshot, c, build)  # third key at max_keys=2: the memo starts over, no unbounded growth
    assert memo.lookup(snapshot, a, build) == 5
    assert builds == ["a", "a", "b", "c", "a"]
    del snapshot
    gc.collect()
    assert not memo._entries  # the memo never keeps a snapshot (or its entry) alive


# --- purity ------------------------------------------------------------------------------------------


def _state(snapshot: ClusterSnapshot) -> Any:
    return (
        snapshot.version,
        [(i.name, list(i.pods), dict(i.requested), list(i.pods_with_affinity)) for i in snapshot],
        copy.deepcopy({k: dict(v.labels) for k, v in snapshot.namespaces.items()}),
    )


def test_predicates_do_not_mutate_their_inputs() -> None:
    pods = [
        pod(labels={"app": "db"}, node="a1", anti=[exists("app", "zone")]),
        pod(labels={"app": "web"}, node="b1", preferred_affinity=[weighted(5, exists("app", "zone"))]),
    ]
    snapshot = ClusterSnapshot(ZONES, pods, namespaces=NAMESPACES)
    incoming = pod(
        labels={"app": "web"},
        affinity=[exists("app", "zone")],
        anti=[in_("app", "hostname", ["cache"])],
        preferred_anti=[weighted(3, exists("app", "zone"))],
    )
    before = _state(snapshot)
    incoming_before = (dict(incoming.labels), incoming.pod_affinity, incoming.pod_anti_affinity)
    for info in snapshot:
        check_inter_pod_affinity(incoming, info, snapshot)
        preferred_inter_pod_affinity_score(incoming, info, snapshot)
    assert _state(snapshot) == before
    assert (dict(incoming.labels), incoming.pod_affinity, incoming.pod_anti_affinity) == incoming_before
