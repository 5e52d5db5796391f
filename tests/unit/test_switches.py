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


def test_current_releases_get_the_predicates_defaults() -> None:
    assert dataclasses.replace(for_version("v1.27.0"), kubernetes_version=None) == CURRENT == Switches()


@pytest.mark.parametrize("text", [None, "", "garbage", "v2.0.0", "0.9"])
def test_unknown_or_unparsable_versions_get_the_strictest_rules(text: str | None) -> None:
    s = for_version(text)
    assert s == STRICTEST
    assert s.resources_fit_ignores_unrequested_overcommit is False
    assert s.resources_fit_skips_zero_scalar_requests is False
    assert s.spread_counts_only_eligible_nodes is None  # both counting rules must pass
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
    assert for_version("v1.30.1").describe() == "kube-scheduler rules of Kubernetes 1.30 (current)"
    assert for_version("v1.26.0").describe() == (
        "kube-scheduler rules of Kubernetes 1.26 (resources_fit_ignores_unrequested_overcommit=false)"
    )
    assert for_version("v1.20.2").describe() == (
        "kube-scheduler rules of Kubernetes 1.20 (spread_counts_only_eligible_nodes=false, "
        "resources_fit_skips_zero_scalar_requests=false, resources_fit_ignores_unrequested_overcommit=false)"
    )
    assert STRICTEST.describe() == (
        "the strictest kube-scheduler rules (version unknown: spread_counts_only_eligible_nodes=both, "
        "resources_fit_skips_zero_scalar_requests=false, resources_fit_ignores_unrequested_overcommit=false)"
    )


def test_switches_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        CURRENT.spread_counts_only_eligible_nodes = False  # type: ignore[misc]
