"""``matchLabelKeys`` / ``mismatchLabelKeys`` of pod (anti-)affinity terms (MatchLabelKeysInPodAffinity).

kube-scheduler's ``interpodaffinity`` plugin never reads the two fields: the API server merges the pod's label
values into each term's ``labelSelector`` once, when it creates the pod (``pkg/registry/core/pod/strategy.go``
``mutatePodAffinity``: ``key in (value)`` for ``matchLabelKeys``, ``key notin (value)`` for
``mismatchLabelKeys``, keys missing from the labels skipped, a nil selector left nil), and the scheduler matches
the stored selector. ``Pod.from_api`` reads pods as the API server stores them, so it takes the selector as it
is; merging the pod's current labels again would disagree with the scheduler once the pod is relabelled.

Transcribed: ``pkg/registry/core/pod/strategy_test.go`` ``Test_mutatePodAffinity``, each case's ``wantPod`` (the
pod as stored), ids the upstream case names. Beyond it: a relabelled pod, as on a real kube-scheduler 1.37
(``tests/e2e/test_scheduler_agreement_e2e.py``).
"""

from __future__ import annotations

from typing import Any

import pytest

from shared.interpod import check_inter_pod_affinity
from shared.model import Pod
from shared.selectors import parse_label_selector
from shared.snapshot import ClusterSnapshot
from tests import builders
from tests.builders.interpod import EA, node

LABELS = {"country": "Japan", "city": "Kyoto"}
ASIA = {"region": "Asia"}
MERGED = {
    "matchLabels": ASIA,
    "matchExpressions": [
        {"key": "country", "operator": "In", "values": ["Japan"]},
        {"key": "city", "operator": "NotIn", "values": ["Kyoto"]},
    ],
}
BOTH_KEYS = {"matchLabelKeys": ["country"], "mismatchLabelKeys": ["city"]}


def stored(selector: dict[str, Any] | None, **keys: list[str]) -> dict[str, Any]:
    """A PodAffinityTerm as ``wantPod`` holds it (upstream's terms have no topologyKey; one is added here)."""
    out: dict[str, Any] = {"topologyKey": "zone", **keys}
    if selector is not None:
        out["labelSelector"] = selector
    return out


def stored_pod(labels: dict[str, str], term: dict[str, Any], *, every_section: bool = False) -> Pod:
    """A pod holding ``term`` in its required pod affinity (and, with ``every_section``, in the preferred pod
    affinity and both anti-affinity sections, as the first upstream case does)."""
    preferred = [builders.weighted(1, term)] if every_section else None
    affinity = builders.affinity(
        pod_required=[term],
        pod_preferred=preferred,
        anti_required=[term] if every_section else None,
        anti_preferred=preferred,
    )
    return builders.pod("p", labels=labels, affinity=affinity)


MUTATE_POD_AFFINITY = [
    pytest.param(
        stored(MERGED, **BOTH_KEYS),
        True,
        MERGED,
        id="matchLabelKeys are merged into labelSelector with In and mismatchLabelKeys are merged with NotIn",
    ),
    pytest.param(
        stored(
            {"matchLabels": ASIA, "matchExpressions": [{"key": "city", "operator": "In", "values": ["Kyoto"]}]},
            matchLabelKeys=["city", "not-found"],
        ),
        False,
        {"matchLabels": ASIA, "matchExpressions": [{"key": "city", "operator": "In", "values": ["Kyoto"]}]},
        id="keys, which are not found in Pod labels, are ignored",
    ),
    pytest.param(stored(None, **BOTH_KEYS), False, None, id="matchLabelKeys is ignored if the labelSelector is nil"),
    pytest.param(
        stored({"matchLabels": ASIA}, **BOTH_KEYS),
        False,
        {"matchLabels": ASIA},
        id="the feature gate is disabled and matchLabelKeys is ignored",
    ),
]


@pytest.mark.parametrize(("term", "every_section", "selector"), MUTATE_POD_AFFINITY)
def test_a_stored_term_is_read_with_its_stored_selector(
    term: dict[str, Any], every_section: bool, selector: dict[str, Any] | None
) -> None:
    parsed = stored_pod(LABELS, term, every_section=every_section)
    terms = [*parsed.pod_affinity, *parsed.pod_anti_affinity]
    terms += [w.term for w in (*parsed.preferred_pod_affinity, *parsed.preferred_pod_anti_affinity)]
    assert len(terms) == (4 if every_section else 1)
    want = parse_label_selector(selector)
    assert all(t.selector == want for t in terms), [t.selector for t in terms]


def test_a_relabelled_pod_repels_the_pods_its_stored_selector_selects() -> None:
    # As on the real scheduler: "guard" was created rev=old with anti-affinity to app=web, matchLabelKeys [rev]
    # (stored: app=web, rev in (old)), then relabelled rev=new.
    rev_old = {"key": "rev", "operator": "In", "values": ["old"]}
    created_with = {"matchLabels": {"app": "web"}, "matchExpressions": [rev_old]}
    term = {"labelSelector": created_with, "matchLabelKeys": ["rev"], "topologyKey": "zone"}
    guard = builders.pod(
        "guard", labels={"app": "web", "rev": "new"}, node_name="a1", affinity=builders.affinity(anti_required=[term])
    )
    snapshot = ClusterSnapshot([node("a1", {"zone": "a"})], [guard])
    old = builders.pod("old", labels={"app": "web", "rev": "old"})
    new = builders.pod("new", labels={"app": "web", "rev": "new"})
    assert check_inter_pod_affinity(old, snapshot["a1"], snapshot).code == EA  # type: ignore[union-attr]
    assert check_inter_pod_affinity(new, snapshot["a1"], snapshot) is None


def test_a_label_added_after_creation_does_not_narrow_the_term() -> None:
    # Created without "rev": nothing was merged. Labelled rev=new later; the term still selects every app=web pod.
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "matchLabelKeys": ["rev"], "topologyKey": "zone"}
    guard = builders.pod(
        "guard", labels={"app": "web", "rev": "new"}, node_name="a1", affinity=builders.affinity(anti_required=[term])
    )
    snapshot = ClusterSnapshot([node("a1", {"zone": "a"})], [guard])
    other = builders.pod("other", labels={"app": "web", "rev": "other"})
    assert check_inter_pod_affinity(other, snapshot["a1"], snapshot).code == EA  # type: ignore[union-attr]
