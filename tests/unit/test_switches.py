"""Which kube-scheduler rules a Kubernetes version string selects (``shared/switches.py``)."""

from __future__ import annotations

import dataclasses

import pytest

from shared.switches import CURRENT, STRICTEST, Switches, for_version, for_version_info, parse_version


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("v1.20.2", (1, 20), id="upstream"),
        pytest.param("1.27.3-eks-abc", (1, 27), id="eks-without-v"),
        pytest.param("v1.27.3-eks-2d98532", (1, 27), id="eks"),
        pytest.param("v1.29.0+k3s1", (1, 29), id="k3s"),
        pytest.param("v1.27.3-gke.1001000", (1, 27), id="gke"),
        pytest.param("v1.30.0-rc.1", (1, 30), id="release-candidate"),
        pytest.param("1.28", (1, 28), id="major-minor"),
        pytest.param("  v1.24.0\n", (1, 24), id="surrounding-blanks"),
        pytest.param("", None, id="empty"),
        pytest.param("latest", None, id="word"),
        pytest.param("v1", None, id="major-only"),
        pytest.param("1.x", None, id="minor-not-a-number"),
        pytest.param("1.27abc", None, id="glued-suffix"),
    ],
)
def test_parse_version(text: str, want: tuple[int, int] | None) -> None:
    assert parse_version(text) == want


@pytest.mark.parametrize(
    ("version", "eligible_only", "zero_scalars_skipped", "unrequested_ignored"),
    [
        pytest.param("v1.20.2", False, False, False, id="v1.20"),
        pytest.param("v1.23.17", False, False, False, id="v1.23"),
        pytest.param("v1.24.0", True, False, False, id="v1.24-kubernetes#107009"),
        pytest.param("v1.25.16", True, False, False, id="v1.25"),
        pytest.param("v1.26.0", True, True, False, id="v1.26-kubernetes#111544"),
        pytest.param("v1.27.0", True, True, True, id="v1.27-kubernetes#116408"),
        pytest.param("v1.34.1", True, True, True, id="v1.34"),
    ],
)
def test_each_switch_turns_on_at_its_release(
    version: str, eligible_only: bool, zero_scalars_skipped: bool, unrequested_ignored: bool
) -> None:
    s = for_version(version)
    assert s.spread_counts_only_eligible_nodes is eligible_only
    assert s.resources_fit_skips_zero_scalar_requests is zero_scalars_skipped
    assert s.resources_fit_ignores_unrequested_overcommit is unrequested_ignored
    assert s.kubernetes_version == version.lstrip("v").rsplit(".", 1)[0]


# Each release read at its tag (pkg/scheduler/framework/plugins/...): podtopologyspread/common.go
# countPodsMatchSelector, tainttoleration/taint_toleration.go Filter, volumebinding/binder.go ErrReasonNodeConflict.
@pytest.mark.parametrize(
    ("version", "empty_selector_counts_none", "taint_omitted", "volume_names_pv"),
    [
        pytest.param("v1.28.15", False, False, False, id="v1.28-not-read-so-an-empty-selector-counts-every-pod"),
        pytest.param("v1.29.6", True, False, False, id="v1.29.6-common.go-152-empty-selector-counts-no-pod"),
        pytest.param("v1.32.13", True, False, False, id="v1.32.13-binder.go-volume-node-affinity-conflict"),
        pytest.param("v1.33.13", True, False, True, id="v1.33.13-binder.go-didnt-match-PersistentVolumes-affinity"),
        pytest.param("v1.34.4", True, True, True, id="v1.34.4-taint_toleration.go-120-untolerated-taint(s)"),
        pytest.param("v1.35.4", True, True, True, id="v1.35.4-taint_toleration.go-131-common.go-146"),
        pytest.param("v1.36.3", True, True, True, id="v1.36.3-taint_toleration.go-131-common.go-146"),
        pytest.param("v1.37.2", True, True, True, id="v1.37.2-taint_toleration.go-133-common.go-146"),
        pytest.param("v1.38.0", False, True, True, id="v1.38-not-read-so-an-empty-selector-counts-every-pod"),
    ],
)
def test_the_rules_read_at_each_releases_tag(
    version: str, empty_selector_counts_none: bool, taint_omitted: bool, volume_names_pv: bool
) -> None:
    s = for_version(version)
    assert s.spread_empty_selector_counts_no_pods is empty_selector_counts_none
    assert s.taint_reason_omits_taint is taint_omitted
    assert s.volume_reason_names_persistent_volume is volume_names_pv


@pytest.mark.parametrize("version", ["v1.34.4", "v1.35.4", "v1.36.3", "v1.37.2"])
def test_the_served_releases_get_the_predicates_defaults(version: str) -> None:
    assert dataclasses.replace(for_version(version), kubernetes_version=None) == CURRENT == Switches()


@pytest.mark.parametrize("text", [None, "", "garbage", "v2.0.0", "0.9"])
def test_unknown_or_unparsable_versions_get_the_strictest_rules(text: str | None) -> None:
    s = for_version(text)
    assert s == STRICTEST
    assert s.resources_fit_ignores_unrequested_overcommit is False
    assert s.resources_fit_skips_zero_scalar_requests is False
    assert s.spread_counts_only_eligible_nodes is None  # both counting rules must pass
    assert s.spread_empty_selector_counts_no_pods is False  # counting is the stricter reading
    assert s.taint_reason_omits_taint is True and s.volume_reason_names_persistent_volume is True  # today's texts
    assert s.kubernetes_version is None


@pytest.mark.parametrize(
    ("info", "want"),
    [
        pytest.param({"major": "1", "minor": "20", "gitVersion": "v1.20.2"}, "1.20", id="upstream"),
        pytest.param({"major": "1", "minor": "27+", "gitVersion": "v1.27.3-eks-2d98532"}, "1.27", id="eks"),
        pytest.param({"major": "1", "minor": "26+"}, "1.26", id="no-git-version"),
        pytest.param({"major": "1", "minor": "26", "gitVersion": "not-a-version"}, "1.26", id="odd-git-version"),
        pytest.param({"gitVersion": ""}, None, id="nothing-usable"),
        pytest.param({}, None, id="empty"),
        pytest.param(None, None, id="not-an-object"),
    ],
)
def test_for_version_info_reads_the_api_servers_version(info: object, want: str | None) -> None:
    s = for_version_info(info)  # type: ignore[arg-type]
    assert s.kubernetes_version == want
    if want is None:
        assert s == STRICTEST


def test_describe_names_the_version_and_the_older_rules() -> None:
    assert for_version("v1.37.2").describe() == "kube-scheduler rules of Kubernetes 1.37 (current)"
    assert (
        for_version("v1.33.1").describe() == "kube-scheduler rules of Kubernetes 1.33 (taint_reason_omits_taint=false)"
    )
    assert for_version("v1.26.0").describe() == (
        "kube-scheduler rules of Kubernetes 1.26 (resources_fit_ignores_unrequested_overcommit=false, "
        "spread_empty_selector_counts_no_pods=false, volume_reason_names_persistent_volume=false, "
        "taint_reason_omits_taint=false)"
    )
    assert for_version("v1.20.2").describe() == (
        "kube-scheduler rules of Kubernetes 1.20 (spread_counts_only_eligible_nodes=false, "
        "resources_fit_skips_zero_scalar_requests=false, resources_fit_ignores_unrequested_overcommit=false, "
        "spread_empty_selector_counts_no_pods=false, volume_reason_names_persistent_volume=false, "
        "taint_reason_omits_taint=false)"
    )
    assert STRICTEST.describe() == (
        "the strictest kube-scheduler rules (version unknown: spread_counts_only_eligible_nodes=both, "
        "resources_fit_skips_zero_scalar_requests=false, resources_fit_ignores_unrequested_overcommit=false, "
        "spread_empty_selector_counts_no_pods=false)"
    )


def test_switches_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        CURRENT.spread_counts_only_eligible_nodes = False  # type: ignore[misc]
