"""Movability policy: may the rescheduler move this pod off an on-demand node, and does it block the drain?

A list of small checks, each returning its own reason constant, in the style of cluster-autoscaler's
drainability rules (``simulator/drainability/rules/*/rule.go``, order from ``rules.go``) and the
descheduler's ``defaultevictor/constraints.go``. The first check with an answer wins:

====================== ======= ===========================================================================
check                  answer  why
====================== ======= ===========================================================================
mirror / static pod    SKIP    the kubelet owns it (``kubernetes.io/config.mirror``, a non-``api``
                               ``kubernetes.io/config.source``, or a ``Node`` controller); it dies with the node
DaemonSet pod          SKIP    one per node by design (controller kind ``DaemonSet``, or CA's
                               ``cluster-autoscaler.kubernetes.io/daemonset-pod: "true"``)
terminal pod           SKIP    phase ``Succeeded``/``Failed`` holds no resources and needs no new home
expendable pod         SKIP    priority below ``movability.expendable_priority_cutoff`` (default -10): the
                               scheduler preempts it, so it neither blocks nor needs room
terminating pod        BLOCK   already going away; the node is not empty until it is gone
opted out              BLOCK   label or annotation ``movability.opt_out_key`` (``spotshift.io/exclude``) is ``"true"``
out of scope           BLOCK   namespace not in ``disruption.namespaces`` (when set) or in
                               ``disruption.excluded_namespaces``, or labels not matching ``disruption.pod_selector``
not safe to evict      BLOCK   ``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"``
do not disrupt         BLOCK   another tool's marker set to ``"true"``: an annotation listed in
                               ``movability.do_not_disrupt_pod_annotations`` (Karpenter's
                               ``karpenter.sh/do-not-disrupt``, and ``karpenter.sh/do-not-evict`` before v0.32)
pinned to on-demand    BLOCK   no spot node can satisfy its nodeSelector / required affinity (see
                               :func:`pinned_to_on_demand`)
dynamic resources      BLOCK   an entry in ``spec.resourceClaims`` (DRA, ``resource.k8s.io``): see below
safe to evict          MOVE    ``safe-to-evict: "true"`` overrides the checks below, as in cluster-autoscaler
Job pod                BLOCK   an ``ownerReference`` of kind ``Job`` (``batch/*``) and not finished: by default
                               (``disruption.jobs: block``) it keeps its node; ``wait``: SKIP, the drain waits for
                               it to finish (:mod:`rescheduler.cluster.drain`); ``evict``: the checks below decide
bare pod               BLOCK   no controller owner: not recreated (unless ``delete_non_replicated_pods``)
kube-system without    BLOCK   cluster-autoscaler's rule (unless ``kube_system_without_pdb_blocks`` is off);
PDB                            a PDB in kube-system selecting the pod lifts it
local storage          BLOCK   a ``hostPath`` or disk-backed ``emptyDir`` volume (``medium: Memory`` does not
                               count) not listed in ``cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes``
                               (unless ``allow_local_storage``)
otherwise              MOVE
====================== ======= ===========================================================================

Opt-out, pinning and dynamic resources come before ``safe-to-evict: "true"`` on purpose: that annotation says
the pod may be evicted, not that it can run on spot or that the owner wants it moved. Whether a moved pod fits a
spot node, and whether its PDB allows the eviction now, is the planner's job with the full predicates.

A pod with dynamic resource claims cannot be judged by them. kube-scheduler's ``DynamicResources`` plugin
(``pkg/scheduler/framework/plugins/dynamicresources``) filters nodes by the pod's ResourceClaims against the
devices the drivers publish in ResourceSlices, selected by DeviceClasses and CEL expressions; spotshift holds
none of those objects. A claim allocated on this node's devices cannot follow the pod, and a claim made from a
template is made again for the replacement and must find devices on the target. So any entry blocks, whatever
it names; the scheduler ignores an entry that resolved to no claim at all, but whether the replacement's
entries would resolve alike is not known here either.

The webhook uses the same checks (:func:`is_mirror_pod`, :func:`is_daemonset_pod`, :func:`is_opted_out`,
:func:`pinned_to_on_demand`) to decide which pods it leaves alone, so admission and rescheduling agree.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from shared.classes import classifier
from shared.config import JOBS_EVICT, JOBS_WAIT, Config, NodeClasses
from shared.model import PDB, Node, Pod
from shared.selectors import GT, IN, LT, Requirement

__all__ = [
    "Outcome",
    "Movability",
    "MOVE",
    "movability",
    "RULES",
    "Rule",
    "SKIP_MIRROR",
    "SKIP_DAEMONSET",
    "SKIP_TERMINAL",
    "SKIP_EXPENDABLE",
    "BLOCK_TERMINATING",
    "BLOCK_OPTED_OUT",
    "BLOCK_NOT_SAFE_TO_EVICT",
    "BLOCK_DO_NOT_DISRUPT",
    "BLOCK_PINNED_ON_DEMAND",
    "BLOCK_NOT_REPLICATED",
    "BLOCK_KUBE_SYSTEM_NO_PDB",
    "BLOCK_LOCAL_STORAGE",
    "BLOCK_RESOURCE_CLAIMS",
    "MOVE_SAFE_TO_EVICT",
    "BLOCK_NAMESPACE_SCOPE",
    "BLOCK_SELECTOR_SCOPE",
    "BLOCK_JOB",
    "SKIP_JOB_WAIT",
    "is_job_pod",
    "in_scope",
    "SAFE_TO_EVICT_KEY",
    "SAFE_TO_EVICT_LOCAL_VOLUMES_KEY",
    "DAEMONSET_POD_KEY",
    "MIRROR_KEY",
    "CONFIG_SOURCE_KEY",
    "do_not_disrupt",
    "is_mirror_pod",
    "is_daemonset_pod",
    "is_expendable",
    "is_opted_out",
    "has_blocking_local_storage",
    "pinned_to_on_demand",
    "node_do_not_disrupt",
]

# Annotation keys, as upstream spells them.
SAFE_TO_EVICT_KEY = "cluster-autoscaler.kubernetes.io/safe-to-evict"  # utils/drain/drain.go PodSafeToEvictKey
SAFE_TO_EVICT_LOCAL_VOLUMES_KEY = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
DAEMONSET_POD_KEY = "cluster-autoscaler.kubernetes.io/daemonset-pod"  # utils/pod/pod.go
MIRROR_KEY = "kubernetes.io/config.mirror"  # kubelet/types ConfigMirrorAnnotationKey
CONFIG_SOURCE_KEY = "kubernetes.io/config.source"  # kubelet/types ConfigSourceAnnotationKey
KUBE_SYSTEM = "kube-system"

# Reasons. SKIP: stays put and does not block; BLOCK: stays put and keeps its node from being drained.
SKIP_MIRROR = "pod is a mirror or static pod"
SKIP_DAEMONSET = "pod is managed by a DaemonSet"
SKIP_TERMINAL = "pod has finished (phase Succeeded or Failed)"
SKIP_EXPENDABLE = "pod is expendable (priority below the cutoff)"
BLOCK_TERMINATING = "pod is terminating"
BLOCK_OPTED_OUT = "pod opted out of spotshift"
BLOCK_NOT_SAFE_TO_EVICT = 'pod is annotated cluster-autoscaler.kubernetes.io/safe-to-evict: "false"'
BLOCK_DO_NOT_DISRUPT = 'pod is annotated {key}: "true"'
"""A template: the reason names the annotation found (one constant per configured key, see :func:`do_not_disrupt`)."""
BLOCK_PINNED_ON_DEMAND = "pod is pinned to on-demand nodes by its node selector or affinity"
BLOCK_NOT_REPLICATED = "pod is not managed by a controller"
BLOCK_KUBE_SYSTEM_NO_PDB = "kube-system pod has no PodDisruptionBudget"
BLOCK_LOCAL_STORAGE = "pod uses local storage"
BLOCK_RESOURCE_CLAIMS = "pod uses dynamic resource claims (DRA): its devices cannot be checked on a spot node"
MOVE_SAFE_TO_EVICT = 'pod is annotated cluster-autoscaler.kubernetes.io/safe-to-evict: "true"'
BLOCK_NAMESPACE_SCOPE = "pod's namespace is outside the disruption scope (disruption.namespaces)"
BLOCK_SELECTOR_SCOPE = "pod does not match disruption.pod_selector"
BLOCK_JOB = "pod belongs to a running Job"
SKIP_JOB_WAIT = "pod belongs to a running Job: the drain waits for it to finish"


class Outcome(enum.Enum):
    MOVE = "move"
    """Evict it; its replacement must fit on spot."""
    SKIP = "skip"
    """Leave it; it does not keep the node from being drained."""
    BLOCK = "block"
    """Leave it; the node cannot be drained while it is there."""


@dataclass(frozen=True, slots=True)
class Movability:
    """The answer for one pod: an outcome and the reason constant (empty for a plain MOVE)."""

    outcome: Outcome
    reason: str = ""

    @property
    def moves(self) -> bool:
        return self.outcome is Outcome.MOVE

    @property
    def blocks(self) -> bool:
        return self.outcome is Outcome.BLOCK

    def __str__(self) -> str:
        return f"{self.outcome.value}: {self.reason}" if self.reason else self.outcome.value


MOVE = Movability(Outcome.MOVE)
_SKIP_MIRROR = Movability(Outcome.SKIP, SKIP_MIRROR)
_SKIP_DAEMONSET = Movability(Outcome.SKIP, SKIP_DAEMONSET)
_SKIP_TERMINAL = Movability(Outcome.SKIP, SKIP_TERMINAL)
_SKIP_EXPENDABLE = Movability(Outcome.SKIP, SKIP_EXPENDABLE)
_BLOCK_TERMINATING = Movability(Outcome.BLOCK, BLOCK_TERMINATING)
_BLOCK_OPTED_OUT = Movability(Outcome.BLOCK, BLOCK_OPTED_OUT)
_BLOCK_NOT_SAFE_TO_EVICT = Movability(Outcome.BLOCK, BLOCK_NOT_SAFE_TO_EVICT)
_BLOCK_PINNED = Movability(Outcome.BLOCK, BLOCK_PINNED_ON_DEMAND)
_BLOCK_NOT_REPLICATED = Movability(Outcome.BLOCK, BLOCK_NOT_REPLICATED)
_BLOCK_KUBE_SYSTEM = Movability(Outcome.BLOCK, BLOCK_KUBE_SYSTEM_NO_PDB)
_BLOCK_LOCAL_STORAGE = Movability(Outcome.BLOCK, BLOCK_LOCAL_STORAGE)
_BLOCK_RESOURCE_CLAIMS = Movability(Outcome.BLOCK, BLOCK_RESOURCE_CLAIMS)
_MOVE_SAFE_TO_EVICT = Movability(Outcome.MOVE, MOVE_SAFE_TO_EVICT)
_BLOCK_NAMESPACE_SCOPE = Movability(Outcome.BLOCK, BLOCK_NAMESPACE_SCOPE)
_BLOCK_SELECTOR_SCOPE = Movability(Outcome.BLOCK, BLOCK_SELECTOR_SCOPE)
_BLOCK_JOB = Movability(Outcome.BLOCK, BLOCK_JOB)
_SKIP_JOB_WAIT = Movability(Outcome.SKIP, SKIP_JOB_WAIT)

# --- predicates shared with the webhook -----------------------------------------------------------


def is_mirror_pod(pod: Pod) -> bool:
    """A kubelet-managed pod: mirror annotation, a non-``api`` config source, or a ``Node`` controller."""
    ann = pod.annotations
    if MIRROR_KEY in ann or ann.get(CONFIG_SOURCE_KEY, "api") != "api":
        return True
    ctrl = pod.controller
    return ctrl is not None and ctrl.kind == "Node"


def is_daemonset_pod(pod: Pod) -> bool:
    """``pod_util.IsDaemonSetPod``: controller kind ``DaemonSet``, or CA's daemonset-pod annotation."""
    ctrl = pod.controller
    if ctrl is not None and ctrl.kind == "DaemonSet":
        return True
    return pod.annotations.get(DAEMONSET_POD_KEY) == "true"


def is_expendable(pod: Pod, cutoff: int) -> bool:
    """``IsExpendablePod``: priority strictly below the cutoff (a pod without priority counts as 0)."""
    return pod.priority < cutoff


def is_opted_out(pod: Pod, key: str) -> bool:
    """The project's opt-out: label or annotation ``key`` set to ``"true"``."""
    return pod.labels.get(key) == "true" or pod.annotations.get(key) == "true"


def is_job_pod(pod: Pod) -> bool:
    """Owned by a Job: an ``ownerReference`` of kind ``Job`` in the ``batch`` API group (CronJobs' pods too,
    through their Job)."""
    return any(o.kind == "Job" and o.api_version.startswith("batch/") for o in pod.owners)


def in_scope(pod: Pod, config: Config) -> str | None:
    """``None`` when ``disruption`` scoping lets the pod move, else the reason constant."""
    d = config.disruption
    if (d.namespaces and pod.namespace not in d.namespaces) or pod.namespace in d.excluded_namespaces:
        return BLOCK_NAMESPACE_SCOPE
    if d.pod_selector is not None and not d.pod_selector.matches(pod.labels):
        return BLOCK_SELECTOR_SCOPE
    return None


def has_blocking_local_storage(pod: Pod) -> bool:
    """``drain.HasBlockingLocalStorage``: a local volume not named in safe-to-evict-local-volumes.

    Local means ``hostPath`` or an ``emptyDir`` whose medium is not ``Memory``. The annotation is a
    comma-separated list of volume names, split without trimming, exactly as upstream does.
    """
    listed = pod.annotations.get(SAFE_TO_EVICT_LOCAL_VOLUMES_KEY, "")
    non_blocking = frozenset(listed.split(",")) if listed else frozenset()
    for v in pod.volumes:
        if (v.kind == "hostPath" or (v.kind == "emptyDir" and v.medium != "Memory")) and v.name not in non_blocking:
            return True
    return False


# --- pinned to on-demand --------------------------------------------------------------------------

_FRESH = "\x00"  # a value no selector lists and no integer comparison accepts
_INTEGER = re.compile(r"[+-]?\d+")


def _witnesses(reqs: Iterable[Requirement]) -> list[str]:
    """Values that exercise every behaviour of requirements on one key: listed values, a fresh
    value, and integers around every bound and listed integer (enough for ``Gt``/``Lt``)."""
    values = {_FRESH}
    for r in reqs:
        values |= r.values
        numbers = [r.bound] if r.operator in (GT, LT) else []
        numbers += (int(v) for v in r.values if _INTEGER.fullmatch(v))
        for n in numbers:
            values.update(str(n + d) for d in (-2, -1, 0, 1, 2))
    return sorted(values)


def _compatible(a: Requirement, b: Requirement) -> bool:
    """Whether one node's labels can satisfy both requirements (same key)."""
    if a.matches({}) and b.matches({}):
        return True
    key = a.key
    return any(a.matches({key: v}) and b.matches({key: v}) for v in _witnesses((a, b)))


def _implies(a: Requirement, b: Requirement) -> bool:
    """Whether every label set satisfying ``a`` satisfies ``b`` (same key)."""
    if a.matches({}) and not b.matches({}):
        return False
    key = a.key
    return all(b.matches({key: v}) for v in _witnesses((a, b)) if a.matches({key: v}))


def _implied(conj: Iterable[Requirement], wanted: Iterable[Requirement]) -> frozenset[Requirement]:
    """The requirements of ``wanted`` that some requirement of ``conj`` (on the same key) implies."""
    by_key: dict[str, list[Requirement]] = {}
    for r in conj:
        by_key.setdefault(r.key, []).append(r)
    return frozenset(s for s in wanted if any(_implies(r, s) for r in by_key.get(s.key, ())))


class _Pinning:
    """What one AND of requirements says about spot, kept in parts so a shared part is evaluated once.

    A pod's nodeSelector is ANDed into every required term: evaluating it per term made the check
    quadratic (thousands of selector keys times thousands of terms). Here the nodeSelector is reduced
    once and each term only adds its own expressions, so the whole check is linear in the pod's size.
    """

    __slots__ = ("implied", "conflict")

    def __init__(self, conj: Sequence[Requirement], classes: NodeClasses) -> None:
        compiled = classifier(classes)
        wanted = [s for sel in (*compiled.spot_selectors, *classes.on_demand_selectors) for s in sel.requirements]
        self.implied = _implied(conj, wanted)
        self.conflict = False  # a spot-class key with a non-spot value, or DoesNotExist
        for r in conj:
            spot_reqs = compiled.spot_keys.get(r.key)
            if spot_reqs and not any(_compatible(r, s) for s in spot_reqs):
                self.conflict = True
                break

    def pinned(self, other: _Pinning | None, classes: NodeClasses) -> bool:
        """:func:`_conjunction_pinned` of the AND of this part and ``other``."""
        implied = self.implied | other.implied if other is not None else self.implied
        for s in classifier(classes).spot_selectors:
            if s.requirements and all(r in implied for r in s.requirements):
                return False  # it asks for spot outright
        if self.conflict or (other is not None and other.conflict):
            return True
        for od in classes.on_demand_selectors:
            if od.requirements and all(r in implied for r in od.requirements):
                return True  # it requires a label the configuration reserves for on-demand nodes
        return False


def _conjunction_pinned(conj: Sequence[Requirement], classes: NodeClasses) -> bool:
    """One AND of requirements (nodeSelector plus one affinity term): can it only match non-spot nodes?"""
    return bool(conj) and _Pinning(conj, classes).pinned(None, classes)


def pinned_to_on_demand(pod: Pod, classes: NodeClasses) -> bool:
    """Whether the pod's hard node constraints rule out every spot node.

    The constraints are ``nodeSelector`` AND the required node affinity (terms ORed); the pod is
    pinned when every way to satisfy them is pinned. One such way (an AND of requirements) is
    pinned when it does not itself ask for spot (imply a spot selector), and either

    * it puts a requirement on a **spot-class key** (the key of a one-requirement spot selector:
      every preset, and custom selectors like ``lifecycle=spot``) that no spot value satisfies —
      ``karpenter.sh/capacity-type: on-demand``, ``cloud.google.com/gke-spot DoesNotExist``,
      ``kubernetes.azure.com/scalesetpriority NotIn (spot)``, ``eks.amazonaws.com/capacityType: ON_DEMAND``; or
    * it implies one of ``node_classes.on_demand_selectors`` (a label only on-demand nodes carry).

    Decided on purpose: the key alone decides. Providers label consistently, so a pod that selects
    ``karpenter.sh/capacity-type: on-demand`` means on-demand even though, in theory, a node could
    carry that label and another provider's spot label. Multi-requirement spot selectors do not
    make their keys spot-class (their keys need not mean spot). ``matchFields`` (node names) and
    tolerations are not considered: the planner's full fit check covers them. An affinity whose
    every term is malformed matches no node at all, so it counts as pinned (nothing to move it to).
    """
    required = pod.required_affinity
    if not pod.node_selector and required is None:
        return False
    base = tuple(Requirement(k, IN, frozenset((v,))) for k, v in pod.node_selector.items())
    if required is None:
        return _conjunction_pinned(base, classes)
    shared = _Pinning(base, classes)  # the nodeSelector, reduced once for every term
    for term in required.terms:
        if not term.valid or not (term.expressions or term.fields):
            continue  # matches no node
        if not (base or term.expressions):
            return False  # an empty conjunction (a matchFields-only term) can match spot nodes
        if not shared.pinned(_Pinning(term.expressions, classes), classes):
            return False
    return True


# --- the rules ------------------------------------------------------------------------------------

Rule = Callable[[Pod, Config, Sequence[PDB]], Movability | None]
"""A check: an answer, or ``None`` to let the next check decide."""


def mirror_rule(pod: Pod, config: Config, pdbs: Sequence[PDB]) -> Movability | None:
    return _SKIP_MIRROR if is_mirror_pod(pod) else None


def daemonset_rule(pod: Pod, config: Config, pdbs: Sequence[PDB]) -> Movability | None:
    return _SKIP_DAEMONSET if is_daemonset_pod(pod) else None


def terminal_rule(pod: Pod, config: Config, pdbs: Sequence[PDB]) -> Movability | None:
    return _SKIP_TERMINAL if pod.terminal else None


def expendable_rule(pod: Pod, config: Config, pdbs: Sequence[PDB]) -> Movability | None:
    return _SKIP_EXPENDABLE if is_expendable(pod, config.movability.expendable_priority_cutoff) else None


def terminating_rule(pod: Pod, config: Config, pdbs: Sequence[PDB]) -> Movability | None:
    return _BLOCK_TERMINATING if pod.terminating else None


def opted_out_rule(pod: Pod, config: Config, pdbs: Sequence[PDB]) -> Movability | None:
    return _BLOCK_OPTED_OUT if is_opted_out(pod, config.movability.opt_out_key) else None


def scope_rule(pod: Pod, config: Config, pdbs: Sequence[PDB]) -> Movability | None:
    why = in_scope(pod, config)
    if why is None:
        return None
    return _BLOCK_NAMESPACE_SCOPE if why == BLOCK_NAMESPACE_SCOPE else _BLOCK_SELECTOR_SCOPE


def not_safe_to_evict_rule(pod: Pod, config: Config, pdbs: Sequence[PDB]) -> Movability | None:
    return _BLOCK_NOT_SAFE_TO_EVICT if pod.annotations.get(SAFE_TO_EVICT_KEY) == "false" else None


_DO_NOT_DISRUPT: dict[str, Movability] = {}


def do_not_disrupt(key: str) -> Movability:
    """The BLOCK answer naming ``key``, made once per key, so reasons stay constants callers can compare."""
    answer = _DO_NOT_DISRUPT.get(key)
    if answer is None:
        answer = _DO_NOT_DISRUPT[key] = Movability(Outcome.BLOCK, BLOCK_DO_NOT_DISRUPT.format(key=key))
    return answer


def do_not_disrupt_rule(pod: Pod, config: Config, pdbs: Sequence[PDB]) -> Movability | None:
    ann = pod.annotations
    for key in config.movability.do_not_disrupt_pod_annotations:
        if ann.get(key) == "true":
            return do_not_disrupt(key)
    return None


def pinned_rule(pod: Pod, config: Config, pdbs: Sequence[PDB]) -> Movability | None:
    return _BLOCK_PINNED if pinned_to_on_demand(pod, config.node_classes) else None


def resource_claims_rule(pod: Pod, config: Config, pdbs: Sequence[PDB]) -> Movability | None:
    return _BLOCK_RESOURCE_CLAIMS if pod.resource_claims else None


def safe_to_evict_rule(pod: Pod, config: Config, pdbs: Sequence[PDB]) -> Movability | None:
    return _MOVE_SAFE_TO_EVICT if pod.annotations.get(SAFE_TO_EVICT_KEY) == "true" else None


def job_rule(pod: Pod, config: Config, pdbs: Sequence[PDB]) -> Movability | None:
    mode = config.disruption.jobs
    if mode == JOBS_EVICT or not is_job_pod(pod):
        return None
    return _SKIP_JOB_WAIT if mode == JOBS_WAIT else _BLOCK_JOB


def bare_pod_rule(pod: Pod, config: Config, pdbs: Sequence[PDB]) -> Movability | None:
    if pod.controller is None and not config.movability.delete_non_replicated_pods:
        return _BLOCK_NOT_REPLICATED
    return None


def kube_system_rule(pod: Pod, config: Config, pdbs: Sequence[PDB]) -> Movability | None:
    if pod.namespace != KUBE_SYSTEM or not config.movability.kube_system_without_pdb_blocks:
        return None
    for pdb in pdbs:
        if pdb.selects(pod):
            return None
    return _BLOCK_KUBE_SYSTEM


def local_storage_rule(pod: Pod, config: Config, pdbs: Sequence[PDB]) -> Movability | None:
    if not config.movability.allow_local_storage and has_blocking_local_storage(pod):
        return _BLOCK_LOCAL_STORAGE
    return None


RULES: tuple[Rule, ...] = (
    mirror_rule,
    daemonset_rule,
    terminal_rule,
    expendable_rule,
    terminating_rule,
    opted_out_rule,
    scope_rule,
    not_safe_to_evict_rule,
    do_not_disrupt_rule,
    pinned_rule,
    resource_claims_rule,
    safe_to_evict_rule,
    job_rule,
    bare_pod_rule,
    kube_system_rule,
    local_storage_rule,
)
"""The checks in order; the first that answers decides."""


def node_do_not_disrupt(node: Node, config: Config) -> str | None:
    """The first of ``movability.do_not_disrupt_node_annotations`` set to ``"true"`` on ``node``, if any: other
    tools' marker that the node must not be disrupted (cluster-autoscaler's ``scale-down-disabled``,
    Karpenter's ``do-not-disrupt``). Such a node is never drained, whatever its pods."""
    ann = node.annotations
    for key in config.movability.do_not_disrupt_node_annotations:
        if ann.get(key) == "true":
            return key
    return None


def movability(pod: Pod, config: Config, pdbs: Sequence[PDB] = ()) -> Movability:
    """MOVE, SKIP or BLOCK for ``pod`` on an on-demand node, with the reason constant.

    ``pdbs`` are the cluster's PodDisruptionBudgets (only read for kube-system pods: whether any
    selects the pod, not whether it allows an eviction now, which the planner checks).
    """
    for rule in RULES:
        answer = rule(pod, config, pdbs)
        if answer is not None:
            return answer
    return MOVE
