"""Behaviour switches: the filter rules kube-scheduler changed between releases, chosen by Kubernetes version.

:func:`shared.fit.fits` follows the current kube-scheduler. A few of its rules changed on the way, and a plan
made with a newer rule than the cluster's scheduler applies could move a pod to a node the scheduler then
refuses (the evicted pod waits for room). "Current" is v1.37.2. :class:`Switches` names each change after the
upstream pull request, or after the file it was read in at each release's tag; :func:`for_version` builds the
record for a cluster's version string.

=============================================  =================  =========================================
switch                                         first release      before it, kube-scheduler ...
=============================================  =================  =========================================
``spread_counts_only_eligible_nodes``          v1.24              counted matching pods on *every* node of
(kubernetes#107009, fixing #106971)                               an eligible domain, also nodes the pod's
                                                                  nodeSelector/affinity excludes and nodes
                                                                  missing another constraint's key
``resources_fit_skips_zero_scalar_requests``   v1.26 (see below)  checked an extended resource requested
(kubernetes#111544)                                               with quantity 0 (fails on a node whose
                                                                  pods over-commit it)
``resources_fit_ignores_unrequested_overcommit``  v1.27           checked cpu, memory and ephemeral-storage
(kubernetes#116408)                                               even when the pod requests none of it (a
                                                                  node over-committed on cpu refused a pod
                                                                  asking only for memory), unless the pod
                                                                  requests nothing at all
``volume_reason_names_persistent_volume``      v1.33              said ``node(s) had volume node affinity
(volumebinding/binder.go                                          conflict`` for a bound PersistentVolume
``ErrReasonNodeConflict``)                                        whose node affinity excludes the node
``taint_reason_omits_taint``                   v1.34              named the first untolerated taint:
(tainttoleration/taint_toleration.go                              ``node(s) had untolerated taint {key:
``Filter``)                                                       value}``
=============================================  =================  =========================================

The two reason switches change only the text a failure is reported with, never whether a node fits. Their
releases were read at the tags v1.29.6, v1.30.14, v1.31.14, v1.32.13, v1.33.13, v1.34.4, v1.35.4, v1.36.3 and
v1.37.2 (``pkg/scheduler/framework/plugins/...`` of each); releases before v1.29 were not read and are given
the v1.29 text.

One rule holds in every release read but not necessarily outside them: ``countPodsMatchSelector``
(``pkg/scheduler/framework/plugins/podtopologyspread/common.go``: ``if selector.Empty() { return 0 }``, line
152 at v1.29.6, 145 at v1.34.4, 146 at v1.35.4 to v1.37.2) counts no pod when the constraint's selector,
after ``matchLabelKeys`` are merged into it, is empty (``labelSelector: {}``), so such a constraint never fails
on skew (a node without its topology key still fails). ``spread_empty_selector_counts_no_pods`` is ``True``
for v1.29 to v1.37, the releases read; any other release is given the stricter reading, which counts every
pod of the namespace (counting can only add failures: without it the constraint fails on skew nowhere).

kubernetes#111544 was opened in July 2022 and still under review on 2 August 2022, v1.25's code freeze; it is
taken as first shipped in v1.26, so a v1.25 cluster is judged by the stricter rule whichever release it made.

The node inclusion policies of topology spread (``nodeAffinityPolicy``/``nodeTaintsPolicy``, KEP-3094: alpha
in v1.25, on by default from v1.26) build on kubernetes#107009: their default (``Honor`` affinity, ``Ignore``
taints) *is* its rule. They are no switch of their own: a cluster older than v1.25 has no such fields, and
one whose feature gate is off drops them from pods created while it is off, so a pod that carries them is
taken to be on a cluster that honours them (one whose gate was turned off after the pod was created would
not). Before v1.24 they are ignored, as the scheduler of the time did (and ``minDomains``, new in v1.24,
likewise).

Unknown or unparsable versions get :data:`STRICTEST`: the stricter rule of each pair, so a plan is never more
permissive than the cluster. For the two resource switches the older rule is the stricter one in every case,
and for an empty spread selector counting is. For which nodes topology spread counts neither is (counting
more pods can also raise the smallest domain count), so ``spread_counts_only_eligible_nodes=None`` asks a
node to pass under both rules. The reason texts are today's.

The version is the API server's (``/version``). kube-scheduler may lag the API server by one minor release
during an upgrade (the version skew policy); a cluster that runs its own scheduler build can say which with
``--kubernetes-version``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Switches", "CURRENT", "STRICTEST", "for_version", "for_version_info", "parse_version"]

# Releases that first shipped each change (minor versions of Kubernetes 1.x).
_SPREAD_ELIGIBLE_NODES = 24  # kubernetes#107009
_ZERO_SCALAR_SKIP = 26  # kubernetes#111544
_UNREQUESTED_OVERCOMMIT = 27  # kubernetes#116408
_VOLUME_REASON_NAMES_PV = 33  # binder.go ErrReasonNodeConflict: v1.32.13 the old text, v1.33.13 the new
_TAINT_REASON_OMITS_TAINT = 34  # taint_toleration.go Filter: v1.33.13 names the taint, v1.34.4 does not
# common.go countPodsMatchSelector returns 0 for an empty selector at every tag read (v1.29.6 ... v1.37.2).
_EMPTY_SELECTOR_COUNTS_NONE = range(29, 38)

# "v1.20.2", "1.27.3-eks-2d98532", "v1.29.0+k3s1", "v1.27.3-gke.1001000", "1.28"; leading/trailing blanks ok.
_VERSION = re.compile(r"[vV]?(\d+)\.(\d+)(?:\.\d+)?(?:[-+.][0-9A-Za-z.+_-]*)?")


@dataclass(frozen=True, slots=True)
class Switches:
    """Which side of each upstream change the predicates follow; the defaults are today's kube-scheduler.

    ``kubernetes_version`` is the ``1.MINOR`` the record was built for (``None``: not known), for logs.
    """

    resources_fit_ignores_unrequested_overcommit: bool = True
    """kubernetes#116408 (v1.27): cpu, memory and ephemeral-storage are checked only when the pod requests them."""
    resources_fit_skips_zero_scalar_requests: bool = True
    """kubernetes#111544 (v1.26): an extended or other scalar resource requested with quantity 0 is not checked."""
    spread_counts_only_eligible_nodes: bool | None = True
    """kubernetes#107009 (v1.24): topology spread counts pods only on the nodes it takes domains from. ``False``:
    on every node whose value is an eligible domain. ``None`` (version unknown): a node must pass both ways."""
    spread_empty_selector_counts_no_pods: bool = True
    """podtopologyspread/common.go ``countPodsMatchSelector`` (v1.29 to v1.37, the releases read): a spread
    constraint whose selector is empty after ``matchLabelKeys`` are merged counts no pod, so it never fails on
    skew. ``False``, for every other release: it counts every pod of the namespace (the stricter reading)."""
    taint_reason_omits_taint: bool = True
    """tainttoleration/taint_toleration.go (v1.34): an untolerated taint is reported as ``node(s) had
    untolerated taint(s)``. ``False``: ``node(s) had untolerated taint {key: value}``, naming the first one."""
    volume_reason_names_persistent_volume: bool = True
    """volumebinding/binder.go ``ErrReasonNodeConflict`` (v1.33): ``node(s) didn't match PersistentVolume's node
    affinity``. ``False``: ``node(s) had volume node affinity conflict``."""
    kubernetes_version: str | None = None

    def describe(self) -> str:
        """For logs: ``kube-scheduler rules of Kubernetes 1.20 (spread_counts_only_eligible_nodes=false, ...)``,
        naming every switch that differs from today's scheduler."""
        names = (
            "spread_counts_only_eligible_nodes",
            "resources_fit_skips_zero_scalar_requests",
            "resources_fit_ignores_unrequested_overcommit",
            "spread_empty_selector_counts_no_pods",
            "volume_reason_names_persistent_volume",
            "taint_reason_omits_taint",
        )
        older = [
            f"{n}={'both' if getattr(self, n) is None else 'false'}" for n in names if getattr(self, n) is not True
        ]
        if self.kubernetes_version is None:
            what = "the strictest kube-scheduler rules (version unknown"
            return f"{what}: {', '.join(older)})" if older else f"{what})"
        return f"kube-scheduler rules of Kubernetes {self.kubernetes_version} ({', '.join(older) or 'current'})"


CURRENT = Switches()
"""Today's kube-scheduler (the predicates' default)."""

STRICTEST = Switches(
    resources_fit_ignores_unrequested_overcommit=False,
    resources_fit_skips_zero_scalar_requests=False,
    spread_counts_only_eligible_nodes=None,
    spread_empty_selector_counts_no_pods=False,
)
"""For a version that is not known: never more permissive than any release (and today's reason texts)."""


def parse_version(text: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a Kubernetes version string, or ``None`` if it is not one.

    Accepts what ``/version``'s ``gitVersion`` holds on upstream and vendor builds (``v1.20.2``,
    ``v1.27.3-eks-2d98532``, ``v1.29.0+k3s1``) and a bare ``1.28``.
    """
    m = _VERSION.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2))


def for_version(text: str | None) -> Switches:
    """The switches of Kubernetes ``text``; :data:`STRICTEST` when it is missing, unparsable or not 1.x."""
    parsed = parse_version(text) if text else None
    if parsed is None or parsed[0] != 1:
        return STRICTEST
    minor = parsed[1]
    return Switches(
        resources_fit_ignores_unrequested_overcommit=minor >= _UNREQUESTED_OVERCOMMIT,
        resources_fit_skips_zero_scalar_requests=minor >= _ZERO_SCALAR_SKIP,
        spread_counts_only_eligible_nodes=minor >= _SPREAD_ELIGIBLE_NODES,
        spread_empty_selector_counts_no_pods=minor in _EMPTY_SELECTOR_COUNTS_NONE,
        taint_reason_omits_taint=minor >= _TAINT_REASON_OMITS_TAINT,
        volume_reason_names_persistent_volume=minor >= _VOLUME_REASON_NAMES_PV,
        kubernetes_version=f"1.{minor}",
    )


def for_version_info(info: Mapping[str, Any] | None) -> Switches:
    """The switches for the API server's ``/version`` answer (``gitVersion``, else ``major``/``minor``).

    Managed clusters mark their builds in ``minor`` (``"27+"``) and ``gitVersion`` (``v1.27.3-eks-...``); both
    parse. Anything else gives :data:`STRICTEST`.
    """
    if not isinstance(info, Mapping):
        return STRICTEST
    git = info.get("gitVersion")
    if isinstance(git, str) and parse_version(git) is not None:
        return for_version(git)
    major, minor = info.get("major"), info.get("minor")
    if isinstance(major, str) and isinstance(minor, str):
        return for_version(f"{major}.{minor.rstrip('+')}")
    return STRICTEST
