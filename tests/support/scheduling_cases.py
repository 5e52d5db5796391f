"""Random scheduling cases for the differential test (``tests/e2e/test_scheduler_differential_e2e.py``).

A case is a few nodes, the pods already on them, and one probe pod, as API objects: what kube-scheduler and
``shared.fit.fits()`` are both asked about. It is generated from a ``random.Random`` alone, so a seed gives the
same cases on every run. Every rule a pod can be refused by is drawn often enough to decide some cases: node
labels and ``nodeSelector``, required node affinity (every operator), taints and tolerations (every effect), a
cordon, host ports, cpu/memory/pods/ephemeral-storage/extended resources, sidecar and plain init containers,
pod-level resources, required pod affinity and anti-affinity (the probe's and the existing pods'), topology
spread with every selector shape (``matchLabels``, ``matchExpressions``, empty ``{}``, none), ``matchLabelKeys``,
``minDomains`` and both inclusion policies, and volumes bound to a PersistentVolume with node affinity.

Cases never reach into each other: every label value, pod label and zone is the case's own (``c<index>-...``),
and the probe selects its case's nodes with ``nodeSelector``. All pods have the same priority, so kube-scheduler
never preempts one for another.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CASE_LABEL", "ZONE", "Case", "generate", "fit_error_counts"]

Json = dict[str, Any]

CASE_LABEL = "diff.spotshift.io/case"
ZONE = "diff.spotshift.io/zone"
POOL = "diff.spotshift.io/pool"
GEN = "diff.spotshift.io/gen"
HOSTNAME = "kubernetes.io/hostname"
DEDICATED = "diff.spotshift.io/dedicated"
GPU_TAINT = "diff.spotshift.io/gpu"
GPU = "example.com/gpu"
IMAGE = "registry.example/app:1"
EFFECTS = ("NoSchedule", "NoExecute", "PreferNoSchedule")
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
_COUNT = re.compile(r"(\d+) (.+)")


@dataclass
class Case:
    """One case: ``nodes`` (name → Node body), ``existing`` (pod bodies, each pinned to a node), ``volumes``
    ((PersistentVolume, PersistentVolumeClaim) pairs, bound to each other) and the ``probe``."""

    index: int
    tag: str
    nodes: dict[str, Json] = field(default_factory=dict)
    existing: list[Json] = field(default_factory=list)
    volumes: list[tuple[Json, Json]] = field(default_factory=list)
    probe: Json = field(default_factory=dict)

    @property
    def value(self) -> str:
        """The case's value of :data:`CASE_LABEL` (on its nodes, in the probe's ``nodeSelector``)."""
        return f"c{self.index}-{self.tag}"

    def app(self, which: str) -> str:
        return f"c{self.index}-{which}"

    def zone(self, which: int) -> str:
        return f"c{self.index}-z{which}"


def _pick(rng: random.Random, p: float) -> bool:
    return rng.random() < p


def _container(name: str, requests: dict[str, str], ports: list[Json] | None = None, **extra: Any) -> Json:
    c: Json = {"name": name, "image": IMAGE, **extra}
    if requests:
        c["resources"] = {"requests": requests}
        if GPU in requests:  # an extended resource cannot be over-committed: its limit must equal its request
            c["resources"]["limits"] = {GPU: requests[GPU]}
    if ports:
        c["ports"] = ports
    return c


def _requests(rng: random.Random, scale: float = 1.0) -> dict[str, str]:
    out: dict[str, str] = {}
    if _pick(rng, 0.8):
        out["cpu"] = f"{int(rng.choice([100, 250, 500, 1000, 1500, 2500]) * scale)}m"
    if _pick(rng, 0.6):
        out["memory"] = f"{int(rng.choice([64, 256, 1024, 2048]) * scale)}Mi"
    if _pick(rng, 0.05):
        out["ephemeral-storage"] = "1Gi"
    if _pick(rng, 0.1):
        out[GPU] = "1"
    return out


def _node(rng: random.Random, case: Case, i: int) -> tuple[str, Json]:
    name = f"diff-{case.value}-n{i}"
    labels = {CASE_LABEL: case.value, HOSTNAME: name, ZONE: case.zone(rng.randrange(3))}
    if _pick(rng, 0.7):
        labels[POOL] = rng.choice(["spot", "on-demand"])
    if _pick(rng, 0.6):
        labels[GEN] = str(rng.randint(1, 5))
    taints: list[Json] = []
    if _pick(rng, 0.35):
        taints.append({"key": DEDICATED, "value": rng.choice(["a", "b"]), "effect": rng.choice(EFFECTS)})
    if _pick(rng, 0.15):
        taints.append({"key": GPU_TAINT, "effect": rng.choice(EFFECTS)})
    allocatable = {"cpu": rng.choice(["1", "2", "4"]), "memory": rng.choice(["1Gi", "2Gi", "4Gi"])}
    allocatable["pods"] = rng.choice(["110", "110", "110", "2"])
    if _pick(rng, 0.2):
        allocatable[GPU] = rng.choice(["1", "2"])
    node = {"labels": labels, "taints": taints, "allocatable": allocatable, "unschedulable": _pick(rng, 0.05)}
    return name, node


def _selector(rng: random.Random, case: Case) -> Json | None:
    """A label selector over the case's pods, in every shape (``None`` is no selector at all)."""
    app = case.app(rng.choice(["web", "db"]))
    shape = rng.randrange(6)
    if shape == 0:
        return None
    if shape == 1:
        return {}
    if shape == 2:
        return {"matchExpressions": [{"key": "app", "operator": "In", "values": [app]}]}
    if shape == 3:
        return {"matchExpressions": [{"key": "tier", "operator": rng.choice(["Exists", "DoesNotExist"])}]}
    return {"matchLabels": {"app": app}}


def _pod_term(rng: random.Random, case: Case) -> Json:
    term: Json = {"topologyKey": rng.choice([HOSTNAME, ZONE])}
    selector = _selector(rng, case)
    if selector is not None:
        term["labelSelector"] = selector
    return term


def _labels(rng: random.Random, case: Case) -> dict[str, str]:
    labels = {"app": case.app(rng.choice(["web", "db"]))}
    if _pick(rng, 0.5):
        labels["tier"] = rng.choice(["front", "back"])
    return labels


def _existing(rng: random.Random, case: Case, j: int, node: str) -> Json:
    ports = [{"containerPort": 80, "hostPort": 8080, "protocol": rng.choice(["TCP", "UDP"])}] if _pick(rng, 0.2) else []
    spec: Json = {
        "nodeSelector": {HOSTNAME: node},
        "tolerations": [{"operator": "Exists"}],
        "containers": [_container("app", _requests(rng, 0.5), ports)],
    }
    if _pick(rng, 0.2):
        spec["affinity"] = {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [_pod_term(rng, case)]}
        }
    return {"metadata": {"name": f"c{case.index}-e{j}", "labels": _labels(rng, case)}, "spec": spec}


def _node_affinity(rng: random.Random, case: Case) -> Json:
    def expression() -> Json:
        op = rng.choice(OPERATORS)
        key = GEN if op in ("Gt", "Lt") else rng.choice([POOL, GEN, ZONE])
        e: Json = {"key": key, "operator": op}
        if op in ("In", "NotIn"):
            e["values"] = [rng.choice(["spot", "on-demand", case.zone(0), case.zone(1), "3"])]
        elif op in ("Gt", "Lt"):
            e["values"] = [str(rng.randint(1, 5))]
        return e

    terms = [{"matchExpressions": [expression() for _ in range(rng.randint(1, 2))]} for _ in range(rng.randint(1, 2))]
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}


def _spread(rng: random.Random, case: Case) -> Json:
    c: Json = {
        "maxSkew": rng.choice([1, 1, 2]),
        "topologyKey": rng.choice([ZONE, ZONE, HOSTNAME]),
        "whenUnsatisfiable": rng.choice(["DoNotSchedule", "DoNotSchedule", "ScheduleAnyway"]),
    }
    selector = _selector(rng, case)
    if selector is not None:
        c["labelSelector"] = selector
    if _pick(rng, 0.15) and selector is not None and "tier" not in str(selector):
        c["matchLabelKeys"] = ["tier"]  # the API server refuses a key the selector names too
    if _pick(rng, 0.2) and c["whenUnsatisfiable"] == "DoNotSchedule":
        c["minDomains"] = rng.randint(1, 4)
    if _pick(rng, 0.2):
        c["nodeAffinityPolicy"] = rng.choice(["Honor", "Ignore"])
    if _pick(rng, 0.2):
        c["nodeTaintsPolicy"] = rng.choice(["Honor", "Ignore"])
    return c


def _tolerations(rng: random.Random) -> list[Json]:
    out: list[Json] = []
    if _pick(rng, 0.4):
        t: Json = {"key": DEDICATED, "operator": rng.choice(["Equal", "Exists"]), "effect": rng.choice(["", *EFFECTS])}
        if t["operator"] == "Equal":
            t["value"] = rng.choice(["a", "b"])
        out.append({k: v for k, v in t.items() if v != ""})
    if _pick(rng, 0.2):
        out.append({"key": GPU_TAINT, "operator": "Exists"})
    return out


def _volume(rng: random.Random, case: Case, nodes: list[str]) -> tuple[Json, Json]:
    pv_name = f"diff-{case.value}-pv"
    claim = f"c{case.index}-data"
    if _pick(rng, 0.5):
        where = {"key": HOSTNAME, "operator": "In", "values": [rng.choice(nodes)]}
    else:
        where = {"key": ZONE, "operator": "In", "values": [case.zone(rng.randrange(3))]}
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": pv_name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "local": {"path": "/mnt/data"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [where]}]}},
            "claimRef": {"name": claim},  # the namespace is filled in when the case is created
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        # Bound as the PersistentVolume controller leaves a claim (the e2e control plane runs no such controller):
        # kube-scheduler takes a claim as bound only with this annotation beside spec.volumeName.
        "metadata": {"name": claim, "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": pv_name,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }
    return pv, pvc


def _amount(quantity: str) -> int:
    """``250m`` → 250 (millicores), ``64Mi`` → 64 (MiB): the two units this module writes."""
    return int(quantity.removesuffix("m").removesuffix("Mi"))


def _pod_level(rng: random.Random, spec: Json) -> dict[str, str]:
    """Pod-level cpu and memory requests, at least what the containers ask together (the API server refuses less):
    the containers plus the sidecars, or a plain init container plus the sidecars started before it, the larger."""
    out: dict[str, str] = {}
    for resource, unit in (("cpu", "m"), ("memory", "Mi")):

        def asked(c: Json, resource: str = resource) -> int:
            return _amount(c.get("resources", {}).get("requests", {}).get(resource, "0"))

        sidecars = largest_init = 0
        for c in spec.get("initContainers", []):
            if c.get("restartPolicy") == "Always":
                sidecars += asked(c)
            else:
                largest_init = max(largest_init, asked(c) + sidecars)
        running = sum(asked(c) for c in spec["containers"]) + sidecars
        extra = rng.choice([0, 100, 2000]) if unit == "m" else rng.choice([0, 64, 3072])
        out[resource] = f"{max(running, largest_init) + extra}{unit}"
    return out


def _probe(rng: random.Random, case: Case) -> Json:
    ports = [{"containerPort": 80, "hostPort": 8080, "protocol": rng.choice(["TCP", "UDP"])}] if _pick(rng, 0.2) else []
    spec: Json = {
        "nodeSelector": {CASE_LABEL: case.value},
        "containers": [_container("app", _requests(rng), ports)],
    }
    if _pick(rng, 0.15):
        spec["nodeSelector"][ZONE] = case.zone(rng.randrange(3))
    tolerations = _tolerations(rng)
    if tolerations:
        spec["tolerations"] = tolerations
    if _pick(rng, 0.2):
        sidecar = _container("sidecar", _requests(rng, 0.5), restartPolicy="Always")
        spec["initContainers"] = [sidecar, _container("setup", _requests(rng))]
    if _pick(rng, 0.1):
        spec["resources"] = {"requests": _pod_level(rng, spec)}
    affinity: Json = {}
    if _pick(rng, 0.3):
        affinity["nodeAffinity"] = _node_affinity(rng, case)
    if _pick(rng, 0.2):
        affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [_pod_term(rng, case)]}
    if _pick(rng, 0.25):
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [_pod_term(rng, case)]}
    if affinity:
        spec["affinity"] = affinity
    if _pick(rng, 0.45):
        constraints: dict[tuple[str, str], Json] = {}
        for _ in range(rng.randint(1, 2)):  # the API server refuses two with one key and one whenUnsatisfiable
            c = _spread(rng, case)
            constraints.setdefault((c["topologyKey"], c["whenUnsatisfiable"]), c)
        spec["topologySpreadConstraints"] = list(constraints.values())
    if case.volumes:
        spec["volumes"] = [
            {"name": "data", "persistentVolumeClaim": {"claimName": case.volumes[0][1]["metadata"]["name"]}}
        ]
    return {"metadata": {"name": f"c{case.index}-probe", "labels": _labels(rng, case)}, "spec": spec}


def generate(rng: random.Random, index: int, tag: str) -> Case:
    """Case ``index`` of a run whose objects carry ``tag`` (unique per run, so runs never share names)."""
    case = Case(index, tag)
    for i in range(rng.randint(2, 4)):
        name, node = _node(rng, case, i)
        case.nodes[name] = node
    names = list(case.nodes)
    for j in range(rng.choice([0, 1, 2, 3, 4])):
        case.existing.append(_existing(rng, case, j, rng.choice(names)))
    if _pick(rng, 0.15):
        case.volumes.append(_volume(rng, case, names))
    case.probe = _probe(rng, case)
    return case


def fit_error_counts(message: str) -> Counter[str]:
    """``0/5 nodes are available: 1 Insufficient cpu, 4 node(s) ... . preemption: ...`` → reason text → count.

    The reasons end at the first ". ": what follows is the post-filter plugins' say (preemption; on 1.34 also
    ``no new claims to deallocate``)."""
    _, sep, rest = message.partition(" nodes are available: ")
    assert sep, f"not a FitError message: {message!r}"
    listed = rest.split(". ", 1)[0].strip().removesuffix(".")
    out: Counter[str] = Counter()
    for part in re.split(r", (?=\d+ )", listed):
        match = _COUNT.fullmatch(part)
        assert match is not None, f"cannot read {part!r} in {message!r}"
        out[match[2]] += int(match[1])
    return out
