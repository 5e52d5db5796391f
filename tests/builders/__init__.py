"""Tiny builders for the Kubernetes objects unit tests feed to spotshift, in one place.

In the style of kube-scheduler's ``pkg/scheduler/testing`` wrappers (``st.MakePod().Name(..).Node(..)``) and
descheduler's ``test.BuildTestNode(name, ...)``: one function per object, every field a keyword, and a field
appears in the object only when a test gives it (so a test shows exactly what its case depends on).

Two layers:

* ``*_json`` builders return API JSON as the API server (or ``kubectl get -o json``) returns it, with ``kind``
  and ``apiVersion`` set, for tests that exercise parsing, snapshot files or informers;
* ``node``, ``pod``, ``pdb``, ``pv``, ``pvc``, ``namespace`` parse that JSON with the model's own ``from_api``
  (so parsing is exercised too) and ``snapshot`` builds a :class:`ClusterSnapshot` from either layer.

Small helpers build the nested parts the way the API spells them: taints, tolerations, owner references,
selector requirements, node-selector terms, pod (anti-)affinity terms and topology spread constraints.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from shared.model import PDB, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod
from shared.snapshot import ClusterSnapshot

Json = dict[str, Any]

DELETED_AT = "2024-01-01T00:00:00Z"
"""The ``deletionTimestamp`` of a terminating pod (``terminating=True``)."""

# --- nested parts --------------------------------------------------------------------------------------------


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> dict[str, str]:
    """A node taint; an empty ``value`` is left out, as the API leaves it out."""
    out = {"key": key, "effect": effect}
    if value:
        out["value"] = value
    return out


def toleration(
    key: str = "", operator: str | None = None, value: str = "", effect: str = "", *, seconds: int | None = None
) -> Json:
    """A pod toleration with only the given fields (an empty key with ``Exists`` tolerates everything);
    ``seconds`` is ``tolerationSeconds``, as the API server's DefaultTolerationSeconds plugin writes it."""
    out: Json = {}
    if key:
        out["key"] = key
    if operator is not None:
        out["operator"] = operator
    if value:
        out["value"] = value
    if effect:
        out["effect"] = effect
    if seconds is not None:
        out["tolerationSeconds"] = seconds
    return out


def owner(kind: str, name: str, *, controller: bool = True, uid: str = "", api_version: str = "") -> Json:
    """An ``ownerReferences`` entry, the controlling one unless ``controller=False``."""
    out: Json = {"kind": kind, "name": name, "controller": controller}
    if uid:
        out["uid"] = uid
    if api_version:
        out["apiVersion"] = api_version
    return out


def expr(key: str, op: str, *values: str) -> Json:
    """A selector requirement (label or node selector); no values leaves ``values`` out (``Exists``)."""
    out: Json = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


def node_selector_term(exprs: list[Json] | None = None, fields: list[Json] | None = None) -> Json:
    """A ``NodeSelectorTerm``; ``None`` leaves ``matchExpressions`` / ``matchFields`` out."""
    out: Json = {}
    if exprs is not None:
        out["matchExpressions"] = exprs
    if fields is not None:
        out["matchFields"] = fields
    return out


def node_selector(*terms: Json | None) -> Json:
    """A ``NodeSelector``: its terms are ORed."""
    return {"nodeSelectorTerms": list(terms)}


def pod_affinity_term(
    selector: Json | None,
    topology_key: str,
    *,
    namespaces: list[str] | None = None,
    namespace_selector: Json | None = None,
) -> Json:
    """A ``PodAffinityTerm``; ``selector=None`` leaves ``labelSelector`` out (nil: matches no pod)."""
    out: Json = {"topologyKey": topology_key}
    if selector is not None:
        out["labelSelector"] = selector
    if namespaces is not None:
        out["namespaces"] = namespaces
    if namespace_selector is not None:
        out["namespaceSelector"] = namespace_selector
    return out


def weighted(weight: int, term: Json) -> Json:
    """A ``WeightedPodAffinityTerm``."""
    return {"weight": weight, "podAffinityTerm": term}


def affinity(
    *,
    node_required: Json | None = None,
    node_preferred: Sequence[tuple[int, Json]] | None = None,
    pod_required: Sequence[Json] | None = None,
    pod_preferred: Sequence[Json] | None = None,
    anti_required: Sequence[Json] | None = None,
    anti_preferred: Sequence[Json] | None = None,
) -> Json:
    """``spec.affinity`` with only the given sections; ``node_preferred`` is ``(weight, term)`` pairs."""
    out: Json = {}
    node: Json = {}
    if node_required is not None:
        node["requiredDuringSchedulingIgnoredDuringExecution"] = node_required
    if node_preferred is not None:
        node["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": w, "preference": t} for w, t in node_preferred
        ]
    if node:
        out["nodeAffinity"] = node
    for section, required, preferred in (
        ("podAffinity", pod_required, pod_preferred),
        ("podAntiAffinity", anti_required, anti_preferred),
    ):
        if required is not None or preferred is not None:
            out[section] = {
                "requiredDuringSchedulingIgnoredDuringExecution": list(required or ()),
                "preferredDuringSchedulingIgnoredDuringExecution": list(preferred or ()),
            }
    return out


def spread_constraint(
    max_skew: int,
    topology_key: str,
    selector: Json | None,
    *,
    when: str = "DoNotSchedule",
    min_domains: int | None = None,
    node_affinity_policy: str | None = None,
    node_taints_policy: str | None = None,
    match_label_keys: list[str] | None = None,
) -> Json:
    """A ``TopologySpreadConstraint``; ``selector=None`` leaves ``labelSelector`` out."""
    out: Json = {"maxSkew": max_skew, "topologyKey": topology_key, "whenUnsatisfiable": when}
    if match_label_keys is not None:
        out["matchLabelKeys"] = match_label_keys
    if selector is not None:
        out["labelSelector"] = selector
    if min_domains is not None:
        out["minDomains"] = min_domains
    if node_affinity_policy is not None:
        out["nodeAffinityPolicy"] = node_affinity_policy
    if node_taints_policy is not None:
        out["nodeTaintsPolicy"] = node_taints_policy
    return out


def container(
    name: str = "c",
    *,
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    ports: list[Json] | None = None,
    image: str | None = None,
    restart_policy: str | None = None,
) -> Json:
    """A container; ``requests={}`` writes an empty ``resources`` object, ``None`` none at all."""
    out: Json = {"name": name}
    if image is not None:
        out["image"] = image
    if requests is not None or limits is not None:
        resources: Json = {}
        if requests:
            resources["requests"] = dict(requests)
        if limits:
            resources["limits"] = dict(limits)
        out["resources"] = resources
    if ports is not None:
        out["ports"] = ports
    if restart_policy is not None:
        out["restartPolicy"] = restart_policy
    return out


# --- API JSON ------------------------------------------------------------------------------------------------


def node_json(
    name: str = "n1",
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool | None = None,
    allocatable: Mapping[str, str] | None = None,
    capacity: Mapping[str, str] | None = None,
    ready: bool | None = True,
    conditions: list[dict[str, str]] | None = None,
    uid: str = "",
    resource_version: str = "",
) -> Json:
    """A node; ``ready=None`` writes no ``Ready`` condition, ``conditions`` replaces them all."""
    meta: Json = {"name": name}
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    if uid:
        meta["uid"] = uid
    if resource_version:
        meta["resourceVersion"] = resource_version
    spec: Json = {}
    if taints is not None:
        spec["taints"] = taints
    if unschedulable is not None:
        spec["unschedulable"] = unschedulable
    status: Json = {}
    if allocatable is not None:
        status["allocatable"] = dict(allocatable)
    if capacity is not None:
        status["capacity"] = dict(capacity)
    if conditions is not None:
        status["conditions"] = conditions
    elif ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"kind": "Node", "apiVersion": "v1", "metadata": meta, "spec": spec, "status": status}


def pod_json(
    name: str = "p",
    *,
    generate_name: str = "",
    namespace: str | None = "default",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    uid: str = "",
    owners: Sequence[Json] | None = None,
    terminating: bool = False,
    node_name: str = "",
    phase: str | None = None,
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    ports: list[Json] | None = None,
    image: str | None = None,
    containers: Sequence[Json] | None = None,
    init_containers: Sequence[Json] | None = None,
    tolerations: list[Json] | None = None,
    node_selector: Mapping[str, str] | None = None,
    affinity: Json | None = None,
    spread: list[Json] | None = None,
    volumes: list[Json] | None = None,
    priority: int | None = None,
    conditions: list[dict[str, str]] | None = None,
    spec: Mapping[str, Any] | None = None,
) -> Json:
    """A pod with one container ``c`` (or ``containers``); ``requests``/``limits``/``ports``/``image`` go to that
    container. ``phase`` defaults to ``Running`` when bound, ``Pending`` when not; ``spec`` adds any other spec
    fields as the API spells them. ``generate_name`` with an empty ``name`` is a pod that has no name yet, as
    one a controller creates reaches admission."""
    meta: Json = {"name": name} if name or not generate_name else {}
    if generate_name:
        meta["generateName"] = generate_name
    if namespace is not None:
        meta["namespace"] = namespace
    if labels is not None:
        meta["labels"] = dict(labels)
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    if uid:
        meta["uid"] = uid
    if owners is not None:
        meta["ownerReferences"] = list(owners)
    if terminating:
        meta["deletionTimestamp"] = DELETED_AT
    if containers is None:
        containers = [container(requests=requests, limits=limits, ports=ports, image=image)]
    body: Json = {"containers": list(containers)}
    if init_containers is not None:
        body["initContainers"] = list(init_containers)
    if node_name:
        body["nodeName"] = node_name
    if tolerations is not None:
        body["tolerations"] = tolerations
    if node_selector is not None:
        body["nodeSelector"] = dict(node_selector)
    if affinity is not None:
        body["affinity"] = affinity
    if spread is not None:
        body["topologySpreadConstraints"] = spread
    if volumes is not None:
        body["volumes"] = volumes
    if priority is not None:
        body["priority"] = priority
    body.update(spec or {})
    status: Json = {"phase": phase if phase is not None else ("Running" if node_name else "Pending")}
    if conditions is not None:
        status["conditions"] = conditions
    return {"kind": "Pod", "apiVersion": "v1", "metadata": meta, "spec": body, "status": status}


def pdb_json(
    name: str = "budget",
    *,
    namespace: str = "default",
    selector: Json | None = None,
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    api_version: str = "policy/v1",
    status: Json | None = None,
) -> Json:
    """A PodDisruptionBudget; ``selector=None`` leaves it out (policy/v1: selects nothing)."""
    spec: Json = {}
    if selector is not None:
        spec["selector"] = selector
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    out: Json = {
        "kind": "PodDisruptionBudget",
        "apiVersion": api_version,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    if status is not None:
        out["status"] = status
    return out


def pv_json(
    name: str, *, labels: Mapping[str, str] | None = None, node_affinity: Mapping[str, list[str]] | None = None
) -> Json:
    """A PersistentVolume; ``node_affinity`` is upstream's ``makePV(name).withNodeAffinity(map[key][]values)``:
    one required term with ``key In values`` for each key."""
    spec: Json = {}
    if node_affinity is not None:
        exprs = [expr(k, "In", *v) for k, v in node_affinity.items()]
        spec["nodeAffinity"] = {"required": node_selector(node_selector_term(exprs))}
    return {
        "kind": "PersistentVolume",
        "apiVersion": "v1",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": spec,
    }


def pvc_json(name: str, *, namespace: str = "default", volume: str = "") -> Json:
    """A PersistentVolumeClaim, bound to ``volume`` when given."""
    spec = {"volumeName": volume} if volume else {}
    return {
        "kind": "PersistentVolumeClaim",
        "apiVersion": "v1",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def namespace_json(name: str, labels: Mapping[str, str] | None = None) -> Json:
    """A Namespace (namespace selectors of pod affinity terms read its labels)."""
    meta: Json = {"name": name}
    if labels is not None:
        meta["labels"] = dict(labels)
    return {"kind": "Namespace", "apiVersion": "v1", "metadata": meta}


def api_list(items: Iterable[Json]) -> Json:
    """A ``v1 List`` as ``kubectl get ... -o json`` writes it: what snapshot files hold."""
    return {"apiVersion": "v1", "kind": "List", "items": list(items)}


def override(raw: Json, **section__field: Any) -> Json:
    """Set ``raw[section][field]`` for each ``section__field=value`` (e.g. ``status__phase="Failed"``): reach any
    field the builders have no keyword for. Returns ``raw``."""
    for key, value in section__field.items():
        section, _, field = key.partition("__")
        raw.setdefault(section, {})[field] = value
    return raw


# --- lean objects --------------------------------------------------------------------------------------------


def node(name: str = "n1", **kw: Any) -> Node:
    """``Node.from_api(node_json(name, **kw))``."""
    return Node.from_api(node_json(name, **kw))


def pod(name: str = "p", **kw: Any) -> Pod:
    """``Pod.from_api(pod_json(name, **kw))``."""
    return Pod.from_api(pod_json(name, **kw))


def pdb(name: str = "budget", **kw: Any) -> PDB:
    return PDB.from_api(pdb_json(name, **kw))


def pv(name: str, **kw: Any) -> PersistentVolume:
    return PersistentVolume.from_api(pv_json(name, **kw))


def pvc(name: str, **kw: Any) -> PersistentVolumeClaim:
    return PersistentVolumeClaim.from_api(pvc_json(name, **kw))


def namespace(name: str, labels: Mapping[str, str] | None = None) -> Namespace:
    return Namespace.from_api(namespace_json(name, labels))


def _parsed(items: Iterable[Any], parse: Any) -> list[Any]:
    return [parse(i) if isinstance(i, Mapping) else i for i in items]


def snapshot(
    nodes: Iterable[Node | Json] = (),
    pods: Iterable[Pod | Json] = (),
    *,
    pdbs: Iterable[PDB | Json] = (),
    namespaces: Iterable[Namespace | Json] = (),
    pvs: Iterable[PersistentVolume | Json] = (),
    pvcs: Iterable[PersistentVolumeClaim | Json] = (),
) -> ClusterSnapshot:
    """A :class:`ClusterSnapshot` of lean objects or API JSON (parsed with ``from_api``), mixed freely."""
    return ClusterSnapshot(
        _parsed(nodes, Node.from_api),
        _parsed(pods, Pod.from_api),
        pdbs=_parsed(pdbs, PDB.from_api),
        namespaces=_parsed(namespaces, Namespace.from_api),
        pvs=_parsed(pvs, PersistentVolume.from_api),
        pvcs=_parsed(pvcs, PersistentVolumeClaim.from_api),
    )


# --- presets -------------------------------------------------------------------------------------------------

CAPACITY_TYPE = "karpenter.sh/capacity-type"
"""The node label Karpenter writes a node's capacity type to (``spot`` or ``on-demand``)."""
SPOT = {CAPACITY_TYPE: "spot"}
ON_DEMAND = {CAPACITY_TYPE: "on-demand"}
WEB = {"app": "web"}
"""The labels of the web pods :func:`web_pod` builds."""


def spot_node(name: str = "spot-1", *, labels: Mapping[str, str] | None = None, **kw: Any) -> Node:
    """A ready Karpenter spot node (``labels`` are added to the capacity-type label)."""
    return node(name, labels={**SPOT, **(labels or {})}, **kw)


def on_demand_node(name: str = "od-1", *, labels: Mapping[str, str] | None = None, **kw: Any) -> Node:
    """A ready Karpenter on-demand node (``labels`` are added to the capacity-type label)."""
    return node(name, labels={**ON_DEMAND, **(labels or {})}, **kw)


def web_pod(name: str = "web-1", **kw: Any) -> Pod:
    """A pod of the ``web`` ReplicaSet with ``app=web`` and one container requesting 100m CPU and 128Mi."""
    kw.setdefault("labels", WEB)
    kw.setdefault("owners", [owner("ReplicaSet", "web-5d8f", uid="web-rs")])
    kw.setdefault("requests", {"cpu": "100m", "memory": "128Mi"})
    return pod(name, **kw)
