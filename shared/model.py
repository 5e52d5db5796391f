"""Lean, immutable views of Nodes, Pods, PDBs, PVs, PVCs and Namespaces, parsed once from API JSON.

Input is what the API server sends (``dict`` trees, e.g. from ``orjson.loads``), never client model
objects. Everything a predicate needs is computed here once per object (effective requests,
parsed selectors, host ports), so a fit check is only comparisons. The effective request of a pod is
:mod:`shared.podrequests`, re-exported here with :class:`ParseError`. Raw dicts are not kept: a
150,000-pod snapshot must not hold the full JSON in memory twice.

A malformed object raises :class:`ParseError` naming the object and the field
(``pod default/web-1: spec.containers[0].resources.requests.cpu: quantity 'x' ...``).
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import orjson

from shared.podrequests import (
    ParseError,
    parse_resources,
    pod_requests,
    pod_requests_and_non_zero,
    status_requests,
)
from shared.selectors import (
    LabelSelector,
    NodeSelector,
    NodeSelectorTerm,
    SelectorError,
    parse_label_selector,
    parse_node_selector,
    parse_node_selector_term,
)

__all__ = [
    "ParseError",
    "Resources",
    "Taint",
    "Toleration",
    "HostPort",
    "Volume",
    "OwnerRef",
    "PodAffinityTerm",
    "WeightedPodAffinityTerm",
    "TopologySpreadConstraint",
    "Node",
    "Pod",
    "PDB",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Namespace",
    "parse_resources",
    "parse_resource_claims",
    "parse_scheduling_gates",
    "pod_requests",
    "pod_requests_and_non_zero",
    "status_requests",
    "start_up_seconds",
    "EMPTY",
]

Resources = Mapping[str, int]
"""Resource name → integer: ``cpu`` in millicores, everything else as ``Quantity.Value()``."""

EMPTY: Mapping[str, str] = MappingProxyType({})
"""The shared empty label/annotation map (read-only, so sharing it is safe)."""

NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE = "NoSchedule", "PreferNoSchedule", "NoExecute"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def _strmap(raw: Any, where: str) -> Mapping[str, str]:
    if not raw:
        return EMPTY
    if not isinstance(raw, Mapping):
        raise ParseError(f"{where}: expected an object of strings")
    return raw


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = ""

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> Taint:
        return cls(raw.get("key") or "", raw.get("value") or "", raw.get("effect") or "")

    def to_api(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out


@dataclass(frozen=True, slots=True)
class Toleration:
    """``operator`` is ``Equal`` (also for an empty operator) or ``Exists``."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> Toleration:
        return cls(
            raw.get("key") or "",
            raw.get("operator") or "Equal",
            raw.get("value") or "",
            raw.get("effect") or "",
            raw.get("tolerationSeconds"),
        )

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.key:
            out["key"] = self.key
        out["operator"] = self.operator
        if self.value:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


@dataclass(frozen=True, slots=True)
class HostPort:
    """A container port with ``hostPort`` set. ``ip`` defaults to ``0.0.0.0`` (all addresses)."""

    ip: str
    protocol: str
    port: int


@dataclass(frozen=True, slots=True)
class Volume:
    """The scheduling-relevant part of a pod volume. ``kind`` is the volume source key."""

    name: str
    kind: str
    claim_name: str = ""
    medium: str = ""


@dataclass(frozen=True, slots=True)
class OwnerRef:
    kind: str
    name: str
    api_version: str = ""
    uid: str = ""
    controller: bool = False


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A pod (anti-)affinity term. ``selector is None`` matches no pod.

    ``namespaces`` and ``namespace_selector`` both empty/None mean "the pod's own namespace"
    (already resolved here into ``namespaces``); an empty ``namespace_selector`` means all namespaces.
    """

    selector: LabelSelector | None
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None
    topology_key: str


@dataclass(frozen=True, slots=True)
class WeightedPodAffinityTerm:
    weight: int
    term: PodAffinityTerm


@dataclass(frozen=True, slots=True)
class TopologySpreadConstraint:
    max_skew: int
    topology_key: str
    when_unsatisfiable: str
    selector: LabelSelector | None
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"
    node_taints_policy: str = "Ignore"


def _parse_affinity_term(raw: Any, namespace: str, where: str) -> PodAffinityTerm:
    if not isinstance(raw, Mapping):
        raise ParseError(f"{where}: expected an object")
    # matchLabelKeys / mismatchLabelKeys are not read: the API server merged the pod's label values into
    # labelSelector when it created the pod (pkg/registry/core/pod/strategy.go mutatePodAffinity), and
    # kube-scheduler matches the stored selector. Merging the current labels again would differ from it once
    # the pod is relabelled.
    selector = parse_label_selector(raw.get("labelSelector"), f"{where}.labelSelector")
    ns_sel = parse_label_selector(raw.get("namespaceSelector"), f"{where}.namespaceSelector")
    namespaces = frozenset(raw.get("namespaces") or ())
    if not namespaces and ns_sel is None:
        namespaces = frozenset((namespace,))
    return PodAffinityTerm(selector, namespaces, ns_sel, raw.get("topologyKey") or "")


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    annotations: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    allocatable: Resources = field(default_factory=dict)
    uid: str = ""
    creation_timestamp: str = ""
    ready_since: str = ""
    """The ``Ready`` condition's ``lastTransitionTime`` (empty when absent)."""

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> Node:
        meta = raw.get("metadata") or {}
        name = meta.get("name") or ""
        where = f"node {name or '<unnamed>'}"
        if not name:
            raise ParseError(f"{where}: metadata.name is missing")
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        ready = False
        ready_since = ""
        for cond in status.get("conditions") or ():
            if cond.get("type") == "Ready":
                ready = cond.get("status") == "True"
                ready_since = cond.get("lastTransitionTime") or ""
        allocatable = status.get("allocatable") or status.get("capacity")
        return cls(
            name=name,
            labels=_strmap(meta.get("labels"), f"{where}: metadata.labels"),
            annotations=_strmap(meta.get("annotations"), f"{where}: metadata.annotations"),
            taints=tuple(Taint.from_api(t) for t in spec.get("taints") or ()),
            unschedulable=bool(spec.get("unschedulable")),
            ready=ready,
            allocatable=parse_resources(allocatable, f"{where}: status.allocatable"),
            uid=meta.get("uid") or "",
            creation_timestamp=meta.get("creationTimestamp") or "",
            ready_since=ready_since,
        )


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    uid: str = ""
    node_name: str = ""
    phase: str = "Pending"
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    annotations: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    owners: tuple[OwnerRef, ...] = ()
    priority: int = 0
    scheduler_name: str = "default-scheduler"
    deletion_timestamp: str | None = None
    creation_timestamp: str = ""
    requests: Resources = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    required_affinity: NodeSelector | None = None
    preferred_affinity: tuple[tuple[int, NodeSelectorTerm], ...] = ()
    pod_affinity: tuple[PodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()
    preferred_pod_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    preferred_pod_anti_affinity: tuple[WeightedPodAffinityTerm, ...] = ()
    topology_spread: tuple[TopologySpreadConstraint, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    volumes: tuple[Volume, ...] = ()
    unschedulable: bool = False
    """The ``PodScheduled`` condition is ``False`` with reason ``Unschedulable``: the scheduler tried and found no
    node. A gated pod may still carry it from before (see :attr:`gated`)."""
    ready: bool = False
    non_zero_requests: tuple[int, int] | None = None
    """Scoring requests ``(milli_cpu, memory)`` with the scheduler's defaults; None when not parsed."""
    scheduling_gates: tuple[str, ...] = ()
    """The names in ``spec.schedulingGates``, in order."""
    resource_claims: tuple[str, ...] = ()
    """The names of the entries of ``spec.resourceClaims`` (dynamic resource allocation), in order."""
    status_requests: Resources | None = None
    """What the pod counts for on its node when its status says otherwise than its spec: an in-place resize pending
    or in progress (:func:`shared.podrequests.status_requests`). ``None``: ``requests`` is what it counts for."""
    start_up: int | None = None
    """Whole seconds from ``status.startTime`` to the Ready condition's ``lastTransitionTime`` while the pod is Ready:
    how long it took to start (:func:`start_up_seconds`). ``None`` when the status does not tell."""

    @property
    def key(self) -> str:
        """``namespace/name``, the identity used in plans and logs."""
        return f"{self.namespace}/{self.name}"

    @property
    def controller(self) -> OwnerRef | None:
        for o in self.owners:
            if o.controller:
                return o
        return None

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def terminating(self) -> bool:
        return self.deletion_timestamp is not None

    @property
    def node_requests(self) -> Resources:
        """What kube-scheduler counts for the pod on the node it is bound to: its status-aware requests during an
        in-place resize, else ``requests``. A pod being placed (or moved by the planner) counts ``requests``."""
        return self.status_requests if self.status_requests is not None else self.requests

    @property
    def gated(self) -> bool:
        """Whether ``spec.schedulingGates`` holds a gate: kube-scheduler does not try to place the pod until every
        gate is removed (``schedulinggates.SchedulingGates.PreEnqueue``), so it is not waiting for room."""
        return bool(self.scheduling_gates)

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> Pod:
        meta = raw.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        name = meta.get("name") or meta.get("generateName") or ""
        where = f"pod {ns}/{name}"
        spec = raw.get("spec")
        if not isinstance(spec, Mapping):
            raise ParseError(f"{where}: spec is missing")
        status = raw.get("status") or {}
        if not isinstance(status, Mapping):
            raise ParseError(f"{where}: status: expected an object")
        labels = _strmap(meta.get("labels"), f"{where}: metadata.labels")
        try:
            requests, non_zero = pod_requests_and_non_zero(spec)
            on_node = status_requests(spec, status)
        except ParseError as e:
            raise ParseError(f"{where}: {e}") from None
        try:
            required, preferred, a_req, aa_req, a_pref, aa_pref = _affinity_of(spec.get("affinity") or {}, ns, where)
            spread = tuple(
                _parse_spread(c, labels, f"spec.topologySpreadConstraints[{i}]")
                for i, c in enumerate(spec.get("topologySpreadConstraints") or ())
            )
            gates = parse_scheduling_gates(spec.get("schedulingGates"))
            claims = parse_resource_claims(spec.get("resourceClaims"))
        except (SelectorError, ParseError, TypeError, ValueError, AttributeError) as e:
            raise ParseError(f"{where}: {e}") from None
        conditions = status.get("conditions") or ()
        unschedulable = ready = False
        ready_at = None
        for c in conditions:
            t = c.get("type")
            if t == "PodScheduled":
                unschedulable = c.get("status") == "False" and c.get("reason") == "Unschedulable"
            elif t == "Ready":
                ready = c.get("status") == "True"
                ready_at = c.get("lastTransitionTime")
        priority = spec.get("priority")
        return cls(
            namespace=ns,
            name=name,
            uid=meta.get("uid") or "",
            node_name=spec.get("nodeName") or "",
            phase=status.get("phase") or "Pending",
            labels=labels,
            annotations=_strmap(meta.get("annotations"), f"{where}: metadata.annotations"),
            owners=tuple(
                OwnerRef(
                    o.get("kind") or "",
                    o.get("name") or "",
                    o.get("apiVersion") or "",
                    o.get("uid") or "",
                    bool(o.get("controller")),
                )
                for o in meta.get("ownerReferences") or ()
            ),
            priority=int(priority) if priority is not None else 0,
            scheduler_name=spec.get("schedulerName") or "default-scheduler",
            deletion_timestamp=meta.get("deletionTimestamp"),
            creation_timestamp=meta.get("creationTimestamp") or "",
            requests=requests,
            non_zero_requests=non_zero,
            tolerations=tuple(Toleration.from_api(t) for t in spec.get("tolerations") or ()),
            node_selector=_strmap(spec.get("nodeSelector"), f"{where}: spec.nodeSelector"),
            required_affinity=required,
            preferred_affinity=preferred,
            pod_affinity=a_req,
            pod_anti_affinity=aa_req,
            preferred_pod_affinity=a_pref,
            preferred_pod_anti_affinity=aa_pref,
            topology_spread=spread,
            host_ports=_host_ports(spec, where),
            volumes=_volumes(spec),
            unschedulable=unschedulable,
            ready=ready,
            scheduling_gates=gates,
            resource_claims=claims,
            status_requests=on_node if on_node != requests else None,
            start_up=start_up_seconds(status.get("startTime"), ready_at) if ready else None,
        )


def start_up_seconds(started: Any, ready_at: Any) -> int | None:
    """Whole seconds from ``status.startTime`` to the Ready condition's ``lastTransitionTime`` (RFC 3339 as the API
    server writes them); ``None`` when either is missing or unreadable, or Ready comes first (a clock skew). A pod
    that turned not Ready and Ready again counts up to its latest transition: an upper bound of its start-up."""
    if not isinstance(started, str) or not isinstance(ready_at, str) or not started or not ready_at:
        return None
    try:
        begin = datetime.datetime.fromisoformat(started)
        end = datetime.datetime.fromisoformat(ready_at)
    except ValueError:
        return None
    if (begin.tzinfo is None) != (end.tzinfo is None):
        return None
    seconds = (end - begin).total_seconds()
    return int(seconds) if seconds >= 0 else None


def parse_scheduling_gates(raw: Any) -> tuple[str, ...]:
    """The gate names of ``spec.schedulingGates`` (``[{"name": ...}, ...]``); absent or empty is no gate.

    Raises :class:`ParseError` naming the field for anything else; :meth:`Pod.from_api` names the pod.
    """
    return _names(raw, "spec.schedulingGates")


def parse_resource_claims(raw: Any) -> tuple[str, ...]:
    """The entry names of ``spec.resourceClaims`` (``[{"name": ..., "resourceClaimName" or
    "resourceClaimTemplateName": ...}, ...]``); absent or empty is none.

    Raises :class:`ParseError` naming the field for anything else; :meth:`Pod.from_api` names the pod.
    """
    return _names(raw, "spec.resourceClaims")


def _names(raw: Any, where: str) -> tuple[str, ...]:
    """The ``name`` of each object of a list field; absent or empty is an empty tuple."""
    if not raw:
        return ()
    if not isinstance(raw, list):
        raise ParseError(f"{where}: expected a list of {{name: ...}}")
    names = []
    for i, item in enumerate(raw):
        name = item.get("name") if isinstance(item, Mapping) else None
        if not isinstance(name, str) or not name:
            raise ParseError(f"{where}[{i}].name: expected a non-empty string")
        names.append(name)
    return tuple(names)


_NO_AFFINITY: tuple[Any, ...] = (None, (), (), (), (), ())

AFFINITY_MEMO_SIZE = 4_096
"""Distinct ``spec.affinity`` values whose parse is kept: the pods of one workload, and every pod the webhook gave
the same spot preference, carry the same value, and a cluster's pods are parsed again at every watch event."""


def _affinity_of(affinity: Mapping[str, Any], ns: str, where: str) -> tuple[Any, ...]:
    """:func:`parse_affinity`, reused for an equal value in the same namespace (the result is immutable). A value
    that does not parse is parsed again with the pod's own ``where``, so the error names the pod."""
    if not affinity:
        return _NO_AFFINITY
    try:
        return _parsed_affinity(orjson.dumps(affinity), ns)
    except ParseError:
        return parse_affinity(affinity, ns, where)
    except (TypeError, ValueError, AttributeError):  # not JSON-serialisable: parse as it is
        return parse_affinity(affinity, ns, where)


@functools.lru_cache(maxsize=AFFINITY_MEMO_SIZE)
def _parsed_affinity(raw: bytes, ns: str) -> tuple[Any, ...]:
    return parse_affinity(orjson.loads(raw), ns, "")


def parse_affinity(affinity: Mapping[str, Any], ns: str, where: str) -> tuple[Any, ...]:
    """A pod's ``spec.affinity`` as the ``Pod`` fields ``required_affinity``, ``preferred_affinity``,
    ``pod_affinity``, ``pod_anti_affinity``, ``preferred_pod_affinity``, ``preferred_pod_anti_affinity`` (in
    that order). ``ns`` is the default namespace of pod affinity terms. Pod affinity terms are read as the API
    server stores them: their ``matchLabelKeys``/``mismatchLabelKeys`` were merged into ``labelSelector`` when
    the pod was created, so the pod's labels play no part. Raises what the selector parsers raise;
    :meth:`Pod.from_api` names the pod."""
    node_aff = affinity.get("nodeAffinity") or {}
    required = parse_node_selector(
        node_aff.get("requiredDuringSchedulingIgnoredDuringExecution"),
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
    )
    preferred = []
    for i, p in enumerate(node_aff.get("preferredDuringSchedulingIgnoredDuringExecution") or ()):
        term, _ = parse_node_selector_term(p.get("preference"), f"preferred[{i}]")
        preferred.append((int(p.get("weight") or 0), term))
    pod_aff = affinity.get("podAffinity") or {}
    anti_aff = affinity.get("podAntiAffinity") or {}
    return (
        required,
        tuple(preferred),
        _affinity_terms(pod_aff, "required", ns, where),
        _affinity_terms(anti_aff, "required", ns, where),
        _affinity_terms(pod_aff, "preferred", ns, where),
        _affinity_terms(anti_aff, "preferred", ns, where),
    )


def _affinity_terms(section: Mapping[str, Any], kind: str, ns: str, where: str) -> Any:
    key = f"{kind}DuringSchedulingIgnoredDuringExecution"
    out: list[Any] = []
    for i, raw in enumerate(section.get(key) or ()):
        if kind == "preferred":
            term = _parse_affinity_term(raw.get("podAffinityTerm"), ns, f"{key}[{i}].podAffinityTerm")
            out.append(WeightedPodAffinityTerm(int(raw.get("weight") or 0), term))
        else:
            out.append(_parse_affinity_term(raw, ns, f"{key}[{i}]"))
    return tuple(out)


def _parse_spread(raw: Mapping[str, Any], labels: Mapping[str, str], where: str) -> TopologySpreadConstraint:
    selector = parse_label_selector(raw.get("labelSelector"), f"{where}.labelSelector")
    # Unlike pod affinity terms, kube-scheduler merges a spread constraint's matchLabelKeys from the pod's
    # current labels (podtopologyspread/common.go filterTopologySpreadConstraints), on top of the API server's
    # merge at creation; so does this.
    keys = raw.get("matchLabelKeys") or ()
    if keys and selector is not None:
        extra = [{"key": k, "operator": "In", "values": [labels[k]]} for k in keys if k in labels]
        more = parse_label_selector({"matchExpressions": extra}, where)
        assert more is not None
        selector = LabelSelector(selector.requirements + more.requirements)
    min_domains = raw.get("minDomains")
    return TopologySpreadConstraint(
        max_skew=int(raw.get("maxSkew") or 0),
        topology_key=raw.get("topologyKey") or "",
        when_unsatisfiable=raw.get("whenUnsatisfiable") or "DoNotSchedule",
        selector=selector,
        min_domains=int(min_domains) if min_domains is not None else None,
        node_affinity_policy=raw.get("nodeAffinityPolicy") or "Honor",
        node_taints_policy=raw.get("nodeTaintsPolicy") or "Ignore",
    )


def _host_ports(spec: Mapping[str, Any], where: str) -> tuple[HostPort, ...]:
    """Host ports of the pod's containers, as ``schedutil.GetHostPorts``: containers and sidecars.

    The containers themselves were checked to be objects when the requests were read; a port that is not an
    object, or a ``hostPort`` that is not an integer, raises :class:`ParseError` naming the field.
    """
    out: list[HostPort] = []
    containers = [(f"spec.containers[{i}]", c) for i, c in enumerate(spec.get("containers") or ())]
    containers += [
        (f"spec.initContainers[{i}]", c)
        for i, c in enumerate(spec.get("initContainers") or ())
        if c.get("restartPolicy") == "Always"
    ]
    for path, c in containers:
        for j, p in enumerate(c.get("ports") or ()):
            if not isinstance(p, Mapping):
                raise ParseError(f"{where}: {path}.ports[{j}]: expected an object")
            hp = p.get("hostPort") or 0
            if isinstance(hp, bool) or not isinstance(hp, int):
                raise ParseError(f"{where}: {path}.ports[{j}].hostPort: expected an integer")
            if hp <= 0:
                continue
            out.append(HostPort(p.get("hostIP") or "0.0.0.0", p.get("protocol") or "TCP", hp))
    return tuple(out)


_VOLUME_META_KEYS = frozenset({"name"})


def _volumes(spec: Mapping[str, Any]) -> tuple[Volume, ...]:
    out: list[Volume] = []
    for v in spec.get("volumes") or ():
        kind = next((k for k in v if k not in _VOLUME_META_KEYS), "")
        src = v.get(kind) or {}
        claim = src.get("claimName", "") if kind == "persistentVolumeClaim" else ""
        medium = src.get("medium", "") if kind == "emptyDir" else ""
        out.append(Volume(v.get("name") or "", kind, claim, medium or ""))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class PDB:
    """A PodDisruptionBudget. ``selector is None`` selects no pod.

    In ``policy/v1`` an empty selector selects every pod of the namespace; in ``policy/v1beta1`` it
    selected none (the API changed meaning in 1.21), so a v1beta1 empty selector is stored as None.

    ``status_current`` is False when the disruption controller has not computed the status for the budget's
    spec: no status at all, or ``status.observedGeneration`` below ``metadata.generation`` (a new budget, an
    edited one). Its status numbers are then not to be trusted; :func:`shared.disruption.with_computed_status`
    computes them from the pods. ``disrupted_pods`` are the names in ``status.disruptedPods``: pods whose
    eviction the API server accepted and the controller has not yet seen deleted.

    ``unhealthy_pod_eviction_policy`` is ``spec.unhealthyPodEvictionPolicy`` as given (empty when unset, which
    means ``IfHealthyBudget``); a value the API does not define is kept, and :mod:`shared.eviction` decides.
    """

    namespace: str
    name: str
    selector: LabelSelector | None
    min_available: int | str | None = None
    max_unavailable: int | str | None = None
    disruptions_allowed: int = 0
    current_healthy: int = 0
    desired_healthy: int = 0
    expected_pods: int = 0
    status_current: bool = True
    disrupted_pods: frozenset[str] = frozenset()
    unhealthy_pod_eviction_policy: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> PDB:
        meta = raw.get("metadata") or {}
        ns = meta.get("namespace") or "default"
        name = meta.get("name") or ""
        spec = raw.get("spec") or {}
        status = raw.get("status") or {}
        try:
            selector = parse_label_selector(spec.get("selector"), "spec.selector")
        except SelectorError as e:
            raise ParseError(f"pdb {ns}/{name}: {e}") from None
        if selector is not None and selector.is_empty and raw.get("apiVersion") == "policy/v1beta1":
            selector = None
        policy = spec.get("unhealthyPodEvictionPolicy") or ""
        if not isinstance(policy, str):
            raise ParseError(f"pdb {ns}/{name}: spec.unhealthyPodEvictionPolicy: expected a string")
        return cls(
            namespace=ns,
            name=name,
            selector=selector,
            min_available=spec.get("minAvailable"),
            max_unavailable=spec.get("maxUnavailable"),
            disruptions_allowed=int(status.get("disruptionsAllowed") or 0),
            current_healthy=int(status.get("currentHealthy") or 0),
            desired_healthy=int(status.get("desiredHealthy") or 0),
            expected_pods=int(status.get("expectedPods") or 0),
            status_current=bool(status)
            and int(status.get("observedGeneration") or 0) >= int(meta.get("generation") or 0),
            disrupted_pods=frozenset(status.get("disruptedPods") or ()),
            unhealthy_pod_eviction_policy=policy,
        )

    def selects(self, pod: Pod) -> bool:
        return self.selector is not None and pod.namespace == self.namespace and self.selector.matches(pod.labels)


BETA_STORAGE_CLASS = "volume.beta.kubernetes.io/storage-class"
"""The annotation that names a volume's or claim's class ahead of ``spec.storageClassName``."""


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY)
    node_affinity: NodeSelector | None = None
    claim: str = ""  # "namespace/name" of the bound claim
    storage_class: str = ""  # GetPersistentVolumeClass: the beta annotation, else spec.storageClassName

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> PersistentVolume:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        na = (spec.get("nodeAffinity") or {}).get("required")
        ref = spec.get("claimRef") or {}
        storage_class = (meta.get("annotations") or {}).get(BETA_STORAGE_CLASS)
        return cls(
            name=meta.get("name") or "",
            labels=_strmap(meta.get("labels"), "pv: metadata.labels"),
            node_affinity=parse_node_selector(na, "spec.nodeAffinity.required"),
            claim=f"{ref.get('namespace', '')}/{ref.get('name', '')}" if ref else "",
            storage_class=storage_class if storage_class is not None else spec.get("storageClassName") or "",
        )


@dataclass(frozen=True, slots=True)
class PersistentVolumeClaim:
    """``storage_class`` is ``GetPersistentVolumeClaimClass``: the beta annotation, else ``spec.storageClassName``;
    ``selected_node`` the node the scheduler chose for a claim waiting for its first consumer."""

    namespace: str
    name: str
    volume_name: str = ""
    storage_class: str = ""
    selected_node: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> PersistentVolumeClaim:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        annotations = meta.get("annotations") or {}
        storage_class = annotations.get(BETA_STORAGE_CLASS)
        return cls(
            namespace=meta.get("namespace") or "default",
            name=meta.get("name") or "",
            volume_name=spec.get("volumeName") or "",
            storage_class=storage_class if storage_class is not None else spec.get("storageClassName") or "",
            selected_node=annotations.get("volume.kubernetes.io/selected-node") or "",
        )


@dataclass(frozen=True, slots=True)
class Namespace:
    name: str
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY)

    @classmethod
    def from_api(cls, raw: Mapping[str, Any]) -> Namespace:
        meta = raw.get("metadata") or {}
        name = meta.get("name") or ""
        labels = dict(meta.get("labels") or {})
        # The API server sets this label on every namespace since 1.21 (defaults.go SetDefaults_Namespace
        # overwrites any other value); older objects lack it.
        if name:
            labels["kubernetes.io/metadata.name"] = name
        return cls(name, labels)
