"""A small in-memory API server behind the project's own :class:`shared.kube.api.Transport` boundary.

The unit tests mock nothing inside a library: they hand the rescheduler this fake, which speaks the same raw
JSON as a real API server for the handful of endpoints the rescheduler uses (list with pagination, a list at
exactly a resourceVersion served for the present one only and 410 Gone for any other, watch from
a resourceVersion with 410 Gone after compaction, merge patches with a resourceVersion precondition, Leases
with optimistic concurrency, Events, and the Eviction subresource with PodDisruptionBudget checks). The e2e
tier then proves the same code against a real control plane.

Hooks let a test play the other actors: ``on_evict(pod)`` is called after an accepted eviction (a
ReplicaSet creating the replacement, say), ``fail(method, pattern, *statuses)`` queues error answers (status 0:
no answer, as from an API server that is down), ``unreachable(pattern, status)`` answers every request to the
matching paths so until it is called with ``None`` (an outage).
"""

from __future__ import annotations

import copy
import itertools
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import orjson

from shared.kube.api import ApiError, Unavailable, error_for

Obj = dict[str, Any]


def _status(code: int, reason: str, message: str) -> bytes:
    return orjson.dumps(
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message}
    )


def _injected(code: int, method: str, path: str) -> ApiError:
    """The error a test asked for: an HTTP answer with ``code``, or none at all (0: a connection refused)."""
    if code == 0:
        return Unavailable("connection refused (injected)", method=method, path=path)
    return error_for(code, _status(code, "Injected", f"injected {code}"), method=method, path=path)


class _Error(Exception):
    def __init__(self, code: int, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.retry_after = code, reason, message, retry_after


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _labels_match(selector: Mapping[str, Any] | None, labels: Mapping[str, str], *, v1beta1: bool) -> bool:
    if selector is None:
        return False
    match_labels = selector.get("matchLabels") or {}
    exprs = selector.get("matchExpressions") or []
    if not match_labels and not exprs:
        return not v1beta1
    if any(labels.get(k) != v for k, v in match_labels.items()):
        return False
    for e in exprs:
        op, key, values = e["operator"], e["key"], e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


class _Stream:
    def __init__(self, server: FakeApiServer, kind: str, since: int, timeout: float) -> None:
        self.server = server
        self.kind = kind
        self.since = since
        self.deadline = time.monotonic() + timeout
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        s = self.server
        pos = self.since
        with s.cond:
            s.open_watches += 1
        try:
            while True:
                with s.cond:
                    if s.compacted.get(self.kind, 0) > pos:
                        yield orjson.dumps(
                            {
                                "type": "ERROR",
                                "object": {
                                    "kind": "Status",
                                    "code": 410,
                                    "reason": "Expired",
                                    "message": "too old resource version",
                                },
                            }
                        )
                        return
                    pending = [e for e in s.log[self.kind] if e[0] > pos]
                    if not pending:
                        if self.closed or time.monotonic() > self.deadline or s.closed:
                            return
                        s.cond.wait(0.05)
                        continue
                for rv, etype, obj in pending:
                    pos = rv
                    yield orjson.dumps({"type": etype, "object": obj})
                if self.closed:
                    return
        finally:
            with s.cond:
                s.open_watches -= 1

    def close(self) -> None:
        self.closed = True
        with self.server.cond:
            self.server.cond.notify_all()


class FakeApiServer:
    """Nodes, pods, PDBs, namespaces, PersistentVolumes and claims, Leases and Events in memory; see the module
    docstring."""

    def __init__(
        self, *, eviction_version: str = "v1", pdb_version: str = "v1", git_version: str | None = "v1.30.2"
    ) -> None:
        self.cond = threading.Condition()
        self.git_version = git_version
        self.rv = itertools.count(100)
        self.last_rv = 100
        self.eviction_version = eviction_version
        self.pdb_version = pdb_version
        self.store: dict[str, dict[str, Obj]] = {
            k: {}
            for k in (
                "nodes",
                "pods",
                "pdbs",
                "namespaces",
                "persistentvolumes",
                "persistentvolumeclaims",
                "storageclasses",
                "leases",
                "events",
            )
        }
        self.log: dict[str, list[tuple[int, str, Obj]]] = {k: [] for k in self.store}
        self.compacted: dict[str, int] = {}
        self.requests: list[tuple[str, str, Any]] = []
        self.evictions: list[tuple[str, Any]] = []
        self.on_evict: Callable[[Obj], None] | None = None
        self.delete_on_evict = True
        self.open_watches = 0
        self.closed = False
        self._failures: list[tuple[str, re.Pattern[str], list[int]]] = []
        self._unreachable: tuple[re.Pattern[str], int] | None = None
        self._uid = itertools.count(1)

    # ---- test helpers ----------------------------------------------------------------------------------

    def fail(self, method: str, pattern: str, *statuses: int) -> None:
        """The next requests of ``method`` whose path matches ``pattern`` answer with these statuses, in order."""
        with self.cond:
            self._failures.append((method, re.compile(pattern), list(statuses)))

    def unreachable(self, pattern: str | None, status: int = 0) -> None:
        """Every request whose path matches ``pattern`` answers ``status`` (0: no answer) until ``None`` is given."""
        with self.cond:
            self._unreachable = None if pattern is None else (re.compile(pattern), status)

    def compact(self, kind: str) -> None:
        """Forget the watch history of ``kind``: watches from an older version get 410 Gone."""
        with self.cond:
            self.compacted[kind] = self.last_rv + 1
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def _key(self, obj: Obj, kind: str) -> str:
        meta = obj["metadata"]
        if kind in ("nodes", "namespaces", "persistentvolumes", "storageclasses"):
            return meta["name"]
        return f"{meta.get('namespace') or 'default'}/{meta['name']}"

    def put(self, kind: str, obj: Obj, event: str | None = None) -> Obj:
        """Create or replace an object (as another actor would), bumping its resourceVersion."""
        with self.cond:
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            meta.setdefault("uid", f"uid-{next(self._uid)}")
            meta.setdefault("creationTimestamp", "2024-01-01T00:00:00Z")
            meta.setdefault("generation", 1)
            rv = next(self.rv)
            self.last_rv = rv
            meta["resourceVersion"] = str(rv)
            key = self._key(obj, kind)
            etype = event or ("MODIFIED" if key in self.store[kind] else "ADDED")
            self.store[kind][key] = obj
            self.log[kind].append((rv, etype, copy.deepcopy(obj)))
            self.cond.notify_all()
            return copy.deepcopy(obj)

    def remove(self, kind: str, key: str) -> None:
        with self.cond:
            obj = self.store[kind].pop(key, None)
            if obj is None:
                return
            rv = next(self.rv)
            self.last_rv = rv
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = str(rv)
            self.log[kind].append((rv, "DELETED", obj))
            self.cond.notify_all()

    def get_obj(self, kind: str, key: str) -> Obj | None:
        with self.cond:
            obj = self.store[kind].get(key)
            return copy.deepcopy(obj) if obj is not None else None

    # ---- Transport -------------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> bytes:
        q = {k: v for k, v in query}
        with self.cond:
            self.requests.append((method, path, self._copy(body)))
            if self._unreachable is not None and self._unreachable[0].search(path):
                raise _injected(self._unreachable[1], method, path)
            for i, (m, pattern, statuses) in enumerate(self._failures):
                if m == method and pattern.search(path) and statuses:
                    code = statuses.pop(0)
                    if not statuses:
                        del self._failures[i]
                    raise _injected(code, method, path)
        try:
            return orjson.dumps(self._route(method, path, q, body))
        except _Error as e:
            raise error_for(
                e.code, _status(e.code, e.reason, e.message), method=method, path=path, retry_after=e.retry_after
            ) from None

    def stream(self, path: str, *, query: Sequence[tuple[str, Any]] = (), timeout: float = 300.0) -> _Stream:
        q = {k: v for k, v in query}
        kind = self._collection_kind(path)
        since = int(q.get("resourceVersion") or 0)
        with self.cond:
            if self.compacted.get(kind, 0) > since:
                raise error_for(410, _status(410, "Expired", "too old resource version"), method="GET", path=path)
        return _Stream(self, kind, since, min(timeout, float(q.get("timeoutSeconds") or timeout)))

    def _collection_kind(self, path: str) -> str:
        if path.endswith("/nodes"):
            return "nodes"
        if path.endswith("/pods"):
            return "pods"
        if path.endswith("/poddisruptionbudgets"):
            return "pdbs"
        if path.endswith("/namespaces"):
            return "namespaces"
        if path.endswith("/persistentvolumes"):
            return "persistentvolumes"
        if path.endswith("/persistentvolumeclaims"):
            return "persistentvolumeclaims"
        if path == "/apis/storage.k8s.io/v1/storageclasses":
            return "storageclasses"
        raise _Error(404, "NotFound", f"no collection at {path}")

    # ---- routing ---------------------------------------------------------------------------------------

    def _route(self, method: str, path: str, q: Mapping[str, Any], body: Any) -> Any:
        if method == "GET" and path == "/api/v1":
            return {
                "kind": "APIResourceList",
                "groupVersion": "v1",
                "resources": [
                    {"name": "pods", "namespaced": True, "kind": "Pod"},
                    {
                        "name": "pods/eviction",
                        "namespaced": True,
                        "group": "policy",
                        "version": self.eviction_version,
                        "kind": "Eviction",
                    },
                ],
            }
        if method == "GET" and path == "/version" and self.git_version is not None:
            major, minor = [*self.git_version.lstrip("v").split("."), "", ""][:2]
            return {"major": major, "minor": minor, "gitVersion": self.git_version, "platform": "linux/amd64"}
        if method == "GET" and path == "/apis/policy":
            versions = [{"groupVersion": "policy/v1beta1", "version": "v1beta1"}]
            if self.pdb_version == "v1":
                versions.insert(0, {"groupVersion": "policy/v1", "version": "v1"})
            return {"kind": "APIGroup", "name": "policy", "versions": versions}
        m = re.fullmatch(r"/api/v1/(nodes|pods|namespaces|persistentvolumes|persistentvolumeclaims)", path)
        if m and method == "GET":
            return self._list(m[1], q)
        if method == "GET" and path == "/apis/storage.k8s.io/v1/storageclasses":
            return self._list("storageclasses", q)
        m = re.fullmatch(r"/apis/policy/(v1|v1beta1)/poddisruptionbudgets", path)
        if m and method == "GET":
            self._check_pdb_version(m[1])
            return self._list("pdbs", q)
        m = re.fullmatch(r"/apis/policy/(v1|v1beta1)/namespaces/([^/]+)/poddisruptionbudgets", path)
        if m and method == "GET":
            self._check_pdb_version(m[1])
            return self._list("pdbs", q, namespace=m[2])
        m = re.fullmatch(r"/api/v1/nodes/([^/]+)", path)
        if m:
            return self._object("nodes", m[1], method, body)
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/eviction", path)
        if m and method == "POST":
            return self._evict(m[1], m[2], body)
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods", path)
        if m and method == "GET":
            return self._list("pods", q, namespace=m[1])
        if m and method == "POST":  # create, with generateName as the API server does it
            meta = dict(body.get("metadata") or {})
            meta["namespace"] = m[1]
            if not meta.get("name"):
                meta["name"] = f"{meta.get('generateName', 'pod-')}{next(self._uid):05d}"
            with self.cond:
                if f"{m[1]}/{meta['name']}" in self.store["pods"]:
                    raise _Error(409, "AlreadyExists", f"pod {meta['name']} already exists")
            return self.put("pods", {**body, "metadata": meta, "status": {"phase": "Pending"}})
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)", path)
        if m and method == "DELETE":
            with self.cond:
                obj = self.store["pods"].get(f"{m[1]}/{m[2]}")
            if obj is None:
                raise _Error(404, "NotFound", f"pods {m[1]}/{m[2]} not found")
            self.remove("pods", f"{m[1]}/{m[2]}")
            return obj
        if m:
            return self._object("pods", f"{m[1]}/{m[2]}", method, body)
        m = re.fullmatch(r"/apis/coordination.k8s.io/v1/namespaces/([^/]+)/leases(?:/([^/]+))?", path)
        if m:
            return self._lease(m[1], m[2], method, body)
        m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/events(?:/([^/]+))?", path)
        if m:
            if method == "POST":
                return self.put("events", {**body, "metadata": {**body["metadata"], "namespace": m[1]}})
            if method == "PATCH" and m[2]:
                return self._object("events", f"{m[1]}/{m[2]}", method, body)
        raise _Error(404, "NotFound", f"{method} {path} is not served")

    def _check_pdb_version(self, version: str) -> None:
        if version == "v1" and self.pdb_version != "v1":
            raise _Error(404, "NotFound", "policy/v1 is not served")

    def _list(self, kind: str, q: Mapping[str, Any], namespace: str | None = None) -> Obj:
        with self.cond:
            items = [copy.deepcopy(o) for k, o in sorted(self.store[kind].items())]
            rv = self.last_rv
        if q.get("resourceVersionMatch") and q.get("continue"):
            raise _Error(422, "Invalid", "resourceVersionMatch is forbidden when continue is provided")
        if q.get("resourceVersionMatch") == "Exact" and q.get("resourceVersion") != str(rv):
            # Only the present is kept: a list at any other version is one compacted away.
            raise _Error(410, "Expired", "too old resource version")
        if namespace is not None:
            items = [o for o in items if o["metadata"].get("namespace") == namespace]
        selector = q.get("fieldSelector") or ""
        if "status.phase!=Succeeded" in selector:
            items = [o for o in items if (o.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        limit = int(q.get("limit") or 0)
        start = int(q.get("continue") or 0)
        meta: Obj = {"resourceVersion": str(rv)}
        if limit:
            page = items[start : start + limit]
            if start + limit < len(items):
                meta["continue"] = str(start + limit)
            items = page
        return {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": items}

    def _object(self, kind: str, key: str, method: str, body: Any) -> Obj:
        with self.cond:
            obj = self.store[kind].get(key)
            if obj is None:
                raise _Error(404, "NotFound", f"{kind} {key} not found")
            if method == "GET":
                return copy.deepcopy(obj)
            if method == "PATCH":
                want = ((body or {}).get("metadata") or {}).get("resourceVersion")
                if want is not None and want != obj["metadata"]["resourceVersion"]:
                    raise _Error(409, "Conflict", "the object has been modified")
                patched = merge_patch(obj, body)
                patched["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"]
                return self.put(kind, patched)
        raise _Error(405, "MethodNotAllowed", method)

    def _copy(self, obj: Any) -> Any:
        """A copy of a request body or a stored object that the server keeps or hands to a hook (deep: the
        caller may change its own afterwards)."""
        return copy.deepcopy(obj)

    def _pdbs_for(self, pod: Obj) -> list[Obj]:
        ns = pod["metadata"].get("namespace") or "default"
        labels = pod["metadata"].get("labels") or {}
        out = []
        for pdb in self.store["pdbs"].values():
            if pdb["metadata"].get("namespace") != ns:
                continue
            if _labels_match((pdb.get("spec") or {}).get("selector"), labels, v1beta1=self.pdb_version != "v1"):
                out.append(pdb)
        return out

    def _evict(self, namespace: str, name: str, body: Any) -> Obj:
        key = f"{namespace}/{name}"
        with self.cond:
            pod = self.store["pods"].get(key)
            if pod is None:
                raise _Error(404, "NotFound", f"pods {name} not found")
            want_uid = (((body or {}).get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
            if want_uid and want_uid != pod["metadata"]["uid"]:
                raise _Error(409, "Conflict", "Precondition failed: UID in precondition does not match")
            status_of_pod = pod.get("status") or {}
            # eviction.go canIgnorePDB: a Pending, finished or deleting pod is deleted without reading any budget.
            ignore_pdbs = status_of_pod.get("phase") in ("Pending", "Succeeded", "Failed")
            pdbs = [] if ignore_pdbs or pod["metadata"].get("deletionTimestamp") else self._pdbs_for(pod)
            if len(pdbs) > 1:
                raise _Error(
                    500,
                    "InternalError",
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                )
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in status_of_pod.get("conditions") or ()
            )
            if pdbs and not ready:
                # eviction.go: a not-Ready pod is deleted without touching the budget under AlwaysAllow, and under
                # any other policy while currentHealthy >= desiredHealthy > 0.
                status = pdbs[0].get("status") or {}
                desired = status.get("desiredHealthy") or 0
                healthy = (status.get("currentHealthy") or 0) >= desired > 0
                if (pdbs[0].get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow" or healthy:
                    pdbs = []
            if pdbs:
                pdb = pdbs[0]
                status = pdb.get("status") or {}
                if (status.get("observedGeneration") or 0) < (pdb["metadata"].get("generation") or 0):
                    # pkg/registry/core/pod/storage/eviction.go checkAndDecrement: a status not computed for
                    # the budget's spec refuses every eviction until the disruption controller catches up.
                    raise _Error(
                        429,
                        "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        retry_after=0.01,
                    )
                allowed = status.get("disruptionsAllowed") or 0
                if allowed <= 0:
                    raise _Error(
                        429,
                        "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        retry_after=0.01,
                    )
                self.put("pdbs", {**pdb, "status": {**status, "disruptionsAllowed": allowed - 1}})
            self.evictions.append((key, self._copy(body)))
            evicted = self._copy(pod)
            if self.delete_on_evict:
                self.remove("pods", key)
            else:
                pod = copy.deepcopy(pod)
                pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
                self.put("pods", pod)
        if self.on_evict is not None:
            self.on_evict(evicted)
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}

    def _lease(self, namespace: str, name: str | None, method: str, body: Any) -> Obj:
        with self.cond:
            if method == "POST":
                if namespace not in self.store["namespaces"]:
                    raise _Error(404, "NotFound", f'namespaces "{namespace}" not found')
                key = f"{namespace}/{body['metadata']['name']}"
                if key in self.store["leases"]:
                    raise _Error(409, "AlreadyExists", "lease already exists")
                return self.put("leases", {**body, "metadata": {**body["metadata"], "namespace": namespace}})
            key = f"{namespace}/{name}"
            current = self.store["leases"].get(key)
            if current is None:
                raise _Error(404, "NotFound", f"lease {key} not found")
            if method == "GET":
                return copy.deepcopy(current)
            if method == "PUT":
                if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                    raise _Error(409, "Conflict", "the object has been modified; please apply your changes")
                return self.put("leases", body)
        raise _Error(405, "MethodNotAllowed", method)


# ---- tiny builders ------------------------------------------------------------------------------------------


def node(name: str, *, spot: bool = False, cpu: str = "4", labels: Mapping[str, str] | None = None, **spec: Any) -> Obj:
    lab = {"kubernetes.io/hostname": name, **(labels or {})}
    if spot:
        lab["karpenter.sh/capacity-type"] = "spot"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": lab},
        "spec": dict(spec),
        "status": {
            "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(
    name: str,
    node_name: str = "",
    *,
    namespace: str = "default",
    app: str = "web",
    owner: str | None = "rs-web",
    owner_uid: str | None = None,
    phase: str = "Running",
    ready: bool = True,
    cpu: str = "100m",
    **spec: Any,
) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace, "labels": {"app": app}}
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": owner,
                "uid": owner_uid or f"uid-{owner}",
                "controller": True,
            }
        ]
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if phase == "Pending" and not node_name:
        conditions = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            **({"nodeName": node_name} if node_name else {}),
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
            **spec,
        },
        "status": {"phase": phase, "conditions": conditions},
    }


def pdb(name: str, app: str, *, allowed: int, namespace: str = "default", healthy: int = 2, desired: int = 1) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace, "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": app}}, "maxUnavailable": 1},
        "status": {
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": healthy,
            "observedGeneration": 1,
        },
    }


def namespace(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
