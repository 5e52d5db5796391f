"""The workload controllers: Deployments follow the demand curve every five minutes (a scale-down deletes unbound
pods first, then the newest), StatefulSets keep their replicas (same names, the same zonal volume), CronJobs start a
Job on schedule whose pods work ``runs_for`` seconds once Running (an evicted one starts again from zero). With the
webhook (policies that have it), every pod created goes through :func:`extender.admission.mutate_pod`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from bench.churnlab.books import SPOT_LABEL, ZONE_LABEL, Books, Obj, PodBook
from bench.churnlab.scenario import SCALE_EVERY, Workload, replicas
from extender.admission import MutationPolicy, mutate_pod


class Controllers:
    """See the module docstring; ``mutation``: the webhook's policy, ``None`` without the webhook."""

    def __init__(self, books: Books, mutation: MutationPolicy | None) -> None:
        self.books = books
        self.mutation = mutation
        self.scaled_at = -math.inf
        """When the Deployments last followed the demand curve."""
        self.lost_keys: set[str] = set()
        """Pods counted lost: gone from the API server behind the world's back."""
        self.short: dict[str, int] = {}
        """Per Deployment or StatefulSet, the replicas it lacked at the last count."""
        self.next_job: dict[str, float] = {}
        """CronJob → when it next starts a Job."""
        self.wanted: dict[str, tuple[Workload, float, int]] = {}
        """Deployment → (its workload, the scale step, its replicas then)."""

    def adopt(self, w: Workload, start: float) -> None:
        """Take ``w`` on at time ``start``: a CronJob's first run is drawn, a StatefulSet's volumes are created."""
        if w.kind == "CronJob":
            self.next_job[w.name] = start + self.books.rng.uniform(0, w.every)
        if w.kind == "StatefulSet":
            for i in range(w.peak):
                self._volume(w, i)

    def step(self) -> None:
        """Every controller's turn: missing pods created, Deployments scaled, Jobs started."""
        b = self.books
        owned = b.owned
        scale = b.now - self.scaled_at >= SCALE_EVERY
        if scale:
            self.scaled_at = b.now
        for w in b.workloads.values():
            if w.kind == "Deployment":
                self._deployment(w, sorted(owned.get(w.name, ())), scale)
            elif w.kind == "StatefulSet":
                have = {k.rsplit("-", 1)[1] for k in owned.get(w.name, [])}
                for i in range(w.peak):
                    if str(i) not in have:
                        self._new_pod(w, f"{w.name}-{i}")
            else:
                self._cronjob(w, owned)

    def count_lost(self) -> None:
        """Count the pods missing once the controllers had their turn (see :attr:`Tally.lost_pods`): each pod once,
        however many ticks it stays missing (a workload's shortfall counts when it grows)."""
        b = self.books
        if not b.counting():
            return
        stored = b.server.store["pods"]
        gone = {key for key in b.pods if key not in stored} - self.lost_keys
        self.lost_keys |= gone
        lost = len(gone)
        for w in b.workloads.values():
            if w.kind == "Deployment":
                short = max(0, self._want(w) - len(b.owned.get(w.name, ())))
            elif w.kind == "StatefulSet":
                short = max(0, w.peak - len(b.owned.get(w.name, ())))
            else:
                continue
            lost += max(0, short - self.short.get(w.name, 0))
            self.short[w.name] = short
        b.tally.lost_pods += lost

    def _want(self, w: Workload) -> int:
        """A Deployment's replicas at the last scale step (computed once per workload and step)."""
        hit = self.wanted.get(w.name)
        if hit is None or hit[0] is not w or hit[1] != self.scaled_at:
            hit = self.wanted[w.name] = (w, self.scaled_at, replicas(w, self.scaled_at))
        return hit[2]

    def next_event(self) -> float:
        """The next scale step or CronJob run."""
        return min([self.scaled_at + SCALE_EVERY, *self.next_job.values()])

    def _deployment(self, w: Workload, keys: list[str], scale: bool) -> None:
        b = self.books
        want = self._want(w)
        have = len(keys)
        for _ in range(want - have):
            self._new_pod(w, f"{w.name}-{b.next_serial():06d}")
        if have > want and scale:
            store = b.server.store["pods"]

            def rank(key: str) -> tuple[int, int, float]:
                bound = 1 if store[key]["spec"].get("nodeName") else 0
                return (bound, 1 if b.pods[key].ready else 0, -b.pods[key].created)

            for key in sorted(keys, key=rank)[: have - want]:
                b.delete_pod(key)

    def _cronjob(self, w: Workload, owned: dict[str, set[str]]) -> None:
        b = self.books
        if b.now >= self.next_job[w.name]:
            self.next_job[w.name] += w.every
            job = f"{w.name}-{b.next_serial():06d}"
            b.jobs[job] = (w.name, w.parallelism, 0)
        for job, (cron, left, made) in list(b.jobs.items()):
            if cron != w.name:
                continue
            running = len(owned.get(job, ()))
            if left <= 0:
                del b.jobs[job]
                continue
            for _ in range(left - running):
                made += 1
                self._new_pod(w, f"{job}-{made:03d}", job=job)
            b.jobs[job] = (cron, left, made)

    def _volume(self, w: Workload, i: int) -> None:
        name = f"data-{w.name}-{i}"
        pv = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"pv-{w.name}-{i}"},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteOnce"],
                "claimRef": {"namespace": "default", "name": name},
                "nodeAffinity": {
                    "required": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": [w.zone]}]}
                        ]
                    }
                },
            },
            "status": {"phase": "Bound"},
        }
        pvc = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"], "volumeName": pv["metadata"]["name"]},
            "status": {"phase": "Bound"},
        }
        self.books.server.put("persistentvolumes", pv)
        self.books.server.put("persistentvolumeclaims", pvc)

    def _new_pod(self, w: Workload, name: str, *, job: str = "") -> None:
        b = self.books
        meta: Obj = {
            "name": name,
            "namespace": "default",
            "labels": {"app": w.name},
            "creationTimestamp": "2024-01-01T00:00:00Z",
        }
        owner_kind, owner = {
            "Deployment": ("ReplicaSet", f"{w.name}-rs"),
            "StatefulSet": ("StatefulSet", w.name),
            "CronJob": ("Job", job),
        }[w.kind]
        api = "batch/v1" if owner_kind == "Job" else "apps/v1"
        meta["ownerReferences"] = [
            {"apiVersion": api, "kind": owner_kind, "name": owner, "uid": f"uid-{owner}", "controller": True}
        ]
        spec: Obj = {
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": f"{w.cpu_m}m", "memory": f"{w.memory_mi}Mi"}}}
            ],
            "schedulerName": "default-scheduler",
            "priority": 0,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
            ],
        }
        if w.kind == "CronJob":
            spec["restartPolicy"] = "OnFailure"
        if w.pinned:
            spec["nodeSelector"] = {SPOT_LABEL: "on-demand"}
        if w.kind == "StatefulSet":
            ordinal = name.rsplit("-", 1)[1]
            spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{w.name}-{ordinal}"}}]
        pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
        if self.mutation is not None:
            mutation = mutate_pod(pod, "default", self.mutation)
            if mutation.ops:
                _apply_in_place(pod, mutation.ops)
        pod["status"] = {"phase": "Pending"}
        b.server.put("pods", pod)
        b.book(f"default/{name}", PodBook(w.name, b.now, job=job))
        if job:
            b.working.add(f"default/{name}")


def _apply_in_place(doc: Obj, ops: Iterable[Mapping[str, Any]]) -> None:
    """The webhook's JSON patch (``add`` and ``replace``, RFC 6902) applied to a pod this module just built."""
    for op in ops:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        parent: Any = doc
        for t in tokens[:-1]:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]
        last = tokens[-1]
        if isinstance(parent, list):
            if last == "-":
                parent.append(op["value"])
            elif op["op"] == "add":
                parent.insert(int(last), op["value"])
            else:
                parent[int(last)] = op["value"]
        else:
            parent[last] = op["value"]
