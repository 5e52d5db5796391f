"""A kubelet stand-in: does a kubelet's API-visible job for fake nodes, with no containers behind it.

What it does, for each node annotated ``e2e.spotshift.io/kubelet: stand-in``:
- keeps the node Ready (Ready/MemoryPressure/DiskPressure/PIDPressure conditions, a heartbeat on Ready,
  addresses, nodeInfo) and removes the ``node.kubernetes.io/not-ready`` taint that the TaintNodesByCondition
  admission plugin puts on every new node (kube-controller-manager runs without the node lifecycle
  controller, so nothing else would). Annotate a node ``e2e.spotshift.io/ready: "false"`` to keep it NotReady
  (Ready=False and the not-ready NoSchedule taint, as the node lifecycle controller would set);
- marks pods bound to the node Running with Initialized/Ready/ContainersReady/PodScheduled conditions,
  containerStatuses, initContainerStatuses, hostIP, podIP(s) and startTime (only on Ready nodes);
- a pod annotated ``e2e.spotshift.io/ready-after: "<seconds>"`` (a number, fractions allowed) is marked Running
  with Ready=False and ContainersReady=False (its containers started, not ready: a readiness probe that has not
  passed yet) and turns Ready only once that many seconds have passed since the stand-in marked it Running, so
  a PodDisruptionBudget counts it healthy, and a Deployment available, only then. The pod's key is put back on
  the work queue at that moment (a delayed queue the worker drains while it waits for work), not polled;
- finishes graceful deletion: a pod with a deletionTimestamp is deleted with gracePeriodSeconds=0.

It is informer-shaped: list+watch of nodes and of bound pods into a local cache, a work queue of keys (with a
delayed part for keys due later), and a periodic resync from the cache that retries whatever failed. Nodes
without the annotation are left alone.
"""

from __future__ import annotations

import contextlib
import datetime
import heapq
import itertools
import json
import logging
import queue
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from .api import Api, ApiError
from .process import k8s_version

MANAGED_ANNOTATION = "e2e.spotshift.io/kubelet"
MANAGED_VALUE = "stand-in"
READY_ANNOTATION = "e2e.spotshift.io/ready"
READY_AFTER_ANNOTATION = "e2e.spotshift.io/ready-after"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"

log = logging.getLogger("spotshift.e2e.kubelet")

NodeKey = tuple[str, str]  # ("node", name)
PodKey = tuple[str, str, str]  # ("pod", namespace, name)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_managed(node: dict[str, Any]) -> bool:
    annotations = node.get("metadata", {}).get("annotations") or {}
    return annotations.get(MANAGED_ANNOTATION) == MANAGED_VALUE


def wants_ready(node: dict[str, Any]) -> bool:
    annotations = node.get("metadata", {}).get("annotations") or {}
    return annotations.get(READY_ANNOTATION, "true").lower() != "false"


def _ready_status(obj: dict[str, Any]) -> str | None:
    """The ``Ready`` condition's status of a node or a pod."""
    for condition in obj.get("status", {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status")
    return None


def ready_after(pod: dict[str, Any]) -> float | None:
    """Seconds from Running to Ready asked by ``e2e.spotshift.io/ready-after``; ``None``: Ready at once (also for a
    value that is not a non-negative number, which the stand-in logs and ignores)."""
    annotations = pod.get("metadata", {}).get("annotations") or {}
    text = annotations.get(READY_AFTER_ANNOTATION)
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also NaN
        log.warning(
            "pod %s: %s=%r is not a number of seconds; Ready at once", _pod_name(pod), READY_AFTER_ANNOTATION, text
        )
        return None
    return seconds


def _condition(kind: str, true: bool, now: str) -> dict[str, Any]:
    """A pod condition as a kubelet writes it; a container condition that is False says why, as a kubelet's does."""
    condition: dict[str, Any] = {
        "type": kind,
        "status": "True" if true else "False",
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
    if not true:
        condition["reason"] = "ContainersNotReady"
    return condition


def _pod_name(pod: dict[str, Any]) -> str:
    return f"{pod['metadata'].get('namespace')}/{pod['metadata'].get('name')}"


class Watcher(threading.Thread):
    """list+watch of one collection into a callback, relisting after errors and expired resource versions."""

    def __init__(
        self,
        name: str,
        api: Api,
        path: str,
        params: dict[str, str],
        on_list: Callable[[list[dict[str, Any]]], None],
        on_event: Callable[[str, dict[str, Any]], None],
        stop: threading.Event,
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.api = api
        self.path = path
        self.params = params
        self.on_list = on_list
        self.on_event = on_event
        self.stop = stop
        self.synced = threading.Event()
        self._response: requests.Response | None = None

    def close(self) -> None:
        """Interrupt a blocked watch read: shut the socket down (closing the response would wait for the read)."""
        response = self._response
        connection = getattr(getattr(response, "raw", None), "_connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                resource_version = self._list()
                self.synced.set()
                while not self.stop.is_set():
                    resource_version = self._watch(resource_version)
                    if resource_version is None:
                        break  # expired: relist
            except Exception as error:
                if self.stop.is_set():
                    return
                log.info("%s: %s; relisting", self.name, error)
                self.stop.wait(0.5)

    def _list(self) -> str:
        page = self.api.get(self.path, **self.params)
        self.on_list(page.get("items") or [])
        return page["metadata"]["resourceVersion"]

    def _watch(self, resource_version: str) -> str | None:
        params = {
            **self.params,
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": "30",
        }
        response = self.api.session.get(self.api.server + self.path, params=params, stream=True, timeout=(5, 60))
        self._response = response
        try:
            if response.status_code == 410:
                return None
            response.raise_for_status()
            for line in response.iter_lines():
                if self.stop.is_set():
                    return resource_version
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        return None
                    raise RuntimeError(f"watch error: {obj.get('message')}")
                resource_version = obj.get("metadata", {}).get("resourceVersion", resource_version)
                if kind != "BOOKMARK":
                    self.on_event(kind, obj)
            return resource_version
        finally:
            self._response = None
            response.close()


class KubeletStandIn:
    """Runs the stand-in in background threads; `start()` returns once both caches are synced."""

    def __init__(
        self,
        api_factory: Callable[[], Api],
        *,
        heartbeat_seconds: float = 10.0,
        resync_seconds: float = 5.0,
        log_path: Path | None = None,
    ) -> None:
        self._log_handler: logging.Handler | None = None
        if log_path is not None:
            self._log_handler = logging.FileHandler(log_path)
            self._log_handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(threadName)s %(message)s"))
            log.addHandler(self._log_handler)
            log.setLevel(logging.INFO)
        self._api_factory = api_factory
        self._api = api_factory()
        self._heartbeat_seconds = heartbeat_seconds
        self._resync_seconds = resync_seconds
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._nodes: dict[str, dict[str, Any]] = {}
        self._pods: dict[tuple[str, str], dict[str, Any]] = {}
        self._queue: queue.Queue[NodeKey | PodKey] = queue.Queue()
        # Keys due later (monotonic time, key), moved onto the queue by the worker when due; _due dedups them.
        self._delayed: list[tuple[float, PodKey]] = []
        self._due: dict[PodKey, float] = {}
        # When the stand-in marked a pod Running (by uid, monotonic): the start of its ready-after delay.
        self._running_since: dict[str, float] = {}
        self._node_index: dict[str, int] = {}
        self._pod_ips: dict[str, str] = {}
        self._pod_counter = itertools.count(1)
        self.errors: list[str] = []
        self._watchers = [
            Watcher(
                "kubelet-nodes",
                api_factory(),
                "/api/v1/nodes",
                {},
                self._on_node_list,
                self._on_node_event,
                self._stop,
            ),
            Watcher(
                "kubelet-pods",
                api_factory(),
                "/api/v1/pods",
                {"fieldSelector": "spec.nodeName!="},
                self._on_pod_list,
                self._on_pod_event,
                self._stop,
            ),
        ]
        self._worker = threading.Thread(target=self._work, name="kubelet-worker", daemon=True)

    # ---- lifecycle -------------------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> None:
        for watcher in self._watchers:
            watcher.start()
        self._worker.start()
        deadline = time.monotonic() + timeout
        for watcher in self._watchers:
            if not watcher.synced.wait(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"kubelet stand-in: {watcher.name} did not sync in {timeout}s")

    def stop(self) -> None:
        self._stop.set()
        for watcher in self._watchers:
            watcher.close()
        for thread in [*self._watchers, self._worker]:
            if thread.is_alive():
                thread.join(timeout=5)
        for watcher in self._watchers:
            watcher.api.close()
        self._api.close()
        if self._log_handler is not None:
            log.removeHandler(self._log_handler)
            self._log_handler.close()

    def is_alive(self) -> bool:
        return all(t.is_alive() for t in [*self._watchers, self._worker])

    # ---- cache -----------------------------------------------------------------------------------------
    def _on_node_list(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self._nodes = {n["metadata"]["name"]: n for n in items}
        for name in list(self._nodes):
            self._queue.put(("node", name))

    def _on_node_event(self, kind: str, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        with self._lock:
            if kind == "DELETED":
                self._nodes.pop(name, None)
                return
            previous = self._nodes.get(name)
            self._nodes[name] = node
        self._queue.put(("node", name))
        if is_managed(node) and (
            previous is None or not is_managed(previous) or wants_ready(previous) != wants_ready(node)
        ):
            # The node just came under management (or became Ready): its pods may be waiting for it.
            with self._lock:
                waiting = [k for k, p in self._pods.items() if p["spec"].get("nodeName") == name]
            for namespace, pod_name in waiting:
                self._queue.put(("pod", namespace, pod_name))

    def _on_pod_list(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self._pods = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in items}
        for namespace, name in list(self._pods):
            self._queue.put(("pod", namespace, name))

    def _on_pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        with self._lock:
            if kind == "DELETED":
                self._pods.pop(key, None)
                self._pod_ips.pop(pod["metadata"].get("uid", ""), None)
                self._running_since.pop(pod["metadata"].get("uid", ""), None)
                return
            self._pods[key] = pod
        self._queue.put(("pod", *key))

    # ---- work loop -------------------------------------------------------------------------------------
    def _work(self) -> None:
        next_resync = time.monotonic() + self._resync_seconds
        next_heartbeat = time.monotonic() + self._heartbeat_seconds
        while not self._stop.is_set():
            try:
                key = self._queue.get(timeout=self._release_due())
            except queue.Empty:
                key = None
            try:
                if key is not None:
                    if key[0] == "node":
                        self._sync_node(key[1])
                    else:
                        self._sync_pod(key[1], key[2])
                now = time.monotonic()
                if now >= next_heartbeat:
                    next_heartbeat = now + self._heartbeat_seconds
                    self._heartbeat()
                if now >= next_resync:
                    next_resync = now + self._resync_seconds
                    self._resync()
            except Exception as error:
                if self._stop.is_set():
                    return
                message = f"{key}: {error}"
                log.warning("kubelet stand-in: %s", message)
                self.errors.append(message)
                del self.errors[:-100]

    def _requeue_at(self, due: float, key: PodKey) -> None:
        """Put ``key`` back on the work queue at monotonic time ``due`` (the earliest, if asked twice)."""
        with self._lock:
            if self._due.get(key, float("inf")) <= due:
                return
            self._due[key] = due
            heapq.heappush(self._delayed, (due, key))

    def _release_due(self) -> float:
        """Move the delayed keys that are due onto the queue; how long the worker may wait for work (at most
        0.5 s, so the heartbeat and resync stay on time, and no longer than the next delayed key's due time)."""
        now = time.monotonic()
        ready: list[PodKey] = []
        with self._lock:
            while self._delayed and self._delayed[0][0] <= now:
                due, key = heapq.heappop(self._delayed)
                if self._due.get(key) == due:
                    del self._due[key]
                    ready.append(key)
            wait = min(0.5, self._delayed[0][0] - now) if self._delayed else 0.5
        for key in ready:
            self._queue.put(key)
        return max(wait, 0.0)

    def _resync(self) -> None:
        with self._lock:
            keys: list[NodeKey | PodKey] = [("node", n) for n in self._nodes]
            keys += [("pod", ns, name) for ns, name in self._pods]
        for key in keys:
            self._queue.put(key)

    def _managed_node(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            node = self._nodes.get(name)
        return node if node is not None and is_managed(node) else None

    # ---- nodes -----------------------------------------------------------------------------------------
    def _node_ip(self, name: str) -> str:
        with self._lock:
            index = self._node_index.setdefault(name, len(self._node_index) + 1)
        return f"127.100.{index // 256}.{index % 256}"

    def _conditions(self, ready: bool, transition: str) -> list[dict[str, str]]:
        now = _now()
        pressure = [
            ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ]
        conditions = [
            {
                "type": kind,
                "status": "False",
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": transition,
            }
            for kind, reason, message in pressure
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "KubeletReady" if ready else "KubeletNotReady",
                "message": "kubelet stand-in is posting ready status"
                if ready
                else "kubelet stand-in keeps this node NotReady (e2e.spotshift.io/ready=false)",
                "lastHeartbeatTime": now,
                "lastTransitionTime": transition,
            }
        )
        return conditions

    def _sync_node(self, name: str) -> None:
        node = self._managed_node(name)
        if node is None:
            return
        ready = wants_ready(node)
        path = f"/api/v1/nodes/{name}"
        taints = node.get("spec", {}).get("taints") or []
        if ready:
            wanted = [t for t in taints if t.get("key") != NOT_READY_TAINT]
        elif any(t.get("key") == NOT_READY_TAINT and t.get("effect") == "NoSchedule" for t in taints):
            wanted = taints
        else:
            wanted = [*taints, {"key": NOT_READY_TAINT, "effect": "NoSchedule", "timeAdded": _now()}]
        if wanted != taints:
            patch = {
                "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                "spec": {"taints": wanted or None},
            }
            try:
                self._api.patch(path, patch)
            except ApiError as error:
                if error.status not in (404, 409):  # 409: stale cache, the watch brings the new one
                    raise
                return
            log.info("node %s: taints %s", name, [t.get("key") for t in wanted])
        status = node.get("status", {})
        current = _ready_status(node)
        desired = "True" if ready else "False"
        if current == desired and status.get("addresses") and status.get("nodeInfo", {}).get("kubeletVersion"):
            return
        patch_status: dict[str, Any] = {"conditions": self._conditions(ready, _now())}
        if not status.get("addresses"):
            patch_status["addresses"] = [
                {"type": "InternalIP", "address": self._node_ip(name)},
                {"type": "Hostname", "address": name},
            ]
        if not status.get("nodeInfo", {}).get("kubeletVersion"):
            patch_status["nodeInfo"] = {
                "machineID": secrets.token_hex(16),
                "systemUUID": secrets.token_hex(16),
                "bootID": secrets.token_hex(16),
                "kernelVersion": "5.10.0-e2e",
                "osImage": "spotshift e2e kubelet stand-in",
                "containerRuntimeVersion": "containerd://1.4.0-e2e",
                "kubeletVersion": f"v{k8s_version()}",
                "kubeProxyVersion": f"v{k8s_version()}",
                "operatingSystem": "linux",
                "architecture": "amd64",
            }
            patch_status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 10250}}
        try:
            self._api.patch(f"{path}/status", {"status": patch_status}, "strategic")
        except ApiError as error:
            if error.status != 404:
                raise
            return
        log.info("node %s: Ready=%s", name, desired)

    def _heartbeat(self) -> None:
        with self._lock:
            nodes = [n for n in self._nodes.values() if is_managed(n)]
        for node in nodes:
            name = node["metadata"]["name"]
            conditions = [
                {"type": c["type"], "lastHeartbeatTime": _now()} for c in node.get("status", {}).get("conditions") or []
            ]
            if not conditions:
                continue
            try:
                self._api.patch(f"/api/v1/nodes/{name}/status", {"status": {"conditions": conditions}}, "strategic")
            except ApiError as error:
                if error.status != 404:
                    raise

    # ---- pods ------------------------------------------------------------------------------------------
    def _sync_pod(self, namespace: str, name: str) -> None:
        with self._lock:
            pod = self._pods.get((namespace, name))
        if pod is None:
            return
        node = self._managed_node(pod["spec"].get("nodeName", ""))
        if node is None:
            return
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        if pod["metadata"].get("deletionTimestamp"):
            options = {
                "kind": "DeleteOptions",
                "apiVersion": "v1",
                "gracePeriodSeconds": 0,
                "preconditions": {"uid": pod["metadata"]["uid"]},
            }
            try:
                self._api.delete(path, options)
            except ApiError as error:
                if error.status not in (404, 409):
                    raise
                return
            log.info("pod %s/%s on %s: graceful deletion finished", namespace, name, node["metadata"]["name"])
            return
        if not wants_ready(node):
            return
        delay = ready_after(pod)
        phase = pod.get("status", {}).get("phase")
        if phase == "Running" and delay is not None and _ready_status(pod) != "True":
            self._sync_ready_after(pod, delay)
            return
        if phase not in (None, "", "Pending"):
            return
        ready = delay is None or delay == 0
        try:
            self._api.patch(f"{path}/status", {"status": self._running_status(pod, node, ready=ready)})
        except ApiError as error:
            if error.status not in (404, 409):
                raise
            return
        log.info(
            "pod %s/%s on %s: Running%s", namespace, name, node["metadata"]["name"], "" if ready else ", not Ready"
        )
        if not ready and delay is not None:
            with self._lock:
                since = self._running_since.setdefault(pod["metadata"]["uid"], time.monotonic())
            self._requeue_at(since + delay, ("pod", namespace, name))

    def _sync_ready_after(self, pod: dict[str, Any], delay: float) -> None:
        """A Running pod waiting out its ``ready-after`` delay: Ready once it is over, else back on the queue then."""
        namespace, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]
        with self._lock:
            # A pod marked Running before this stand-in started counts from now.
            since = self._running_since.setdefault(uid, time.monotonic())
        due = since + delay
        if time.monotonic() < due:
            self._requeue_at(due, ("pod", namespace, name))
            return
        now = _now()
        status = pod.get("status") or {}
        conditions = [
            _condition(c["type"], True, now) if c.get("type") in ("Ready", "ContainersReady") else c
            for c in status.get("conditions") or []
        ]
        containers = [{**c, "ready": True, "started": True} for c in status.get("containerStatuses") or []]
        patch = {
            "metadata": {"resourceVersion": pod["metadata"]["resourceVersion"]},
            "status": {"conditions": conditions, "containerStatuses": containers},
        }
        try:
            self._api.patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status", patch)
        except ApiError as error:
            if error.status not in (404, 409):  # 409: stale cache, the watch brings the new one
                raise
            return
        log.info("pod %s/%s: Ready after %.1fs", namespace, name, time.monotonic() - since)

    def _running_status(self, pod: dict[str, Any], node: dict[str, Any], *, ready: bool = True) -> dict[str, Any]:
        now = _now()
        node_name = node["metadata"]["name"]
        host_ip = next(
            (a["address"] for a in node.get("status", {}).get("addresses") or [] if a.get("type") == "InternalIP"),
            self._node_ip(node_name),
        )
        uid = pod["metadata"]["uid"]
        if pod["spec"].get("hostNetwork"):
            pod_ip = host_ip
        else:
            with self._lock:
                pod_ip = self._pod_ips.get(uid)
                if pod_ip is None:
                    n = next(self._pod_counter)
                    pod_ip = f"127.{128 + (n >> 16) % 128}.{(n >> 8) % 256}.{n % 256}"
                    self._pod_ips[uid] = pod_ip

        def container_status(
            container: dict[str, Any], state: dict[str, Any], ready: bool, started: bool
        ) -> dict[str, Any]:
            image = container.get("image", "")
            return {
                "name": container["name"],
                "image": image,
                "imageID": f"docker-pullable://{image}",
                "containerID": f"containerd://{secrets.token_hex(32)}",
                "ready": ready,
                "started": started,
                "restartCount": 0,
                "state": state,
                "lastState": {},
            }

        completed = {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}
        status: dict[str, Any] = {
            "phase": "Running",
            "hostIP": host_ip,
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": now,
            "conditions": [
                _condition(kind, ready or kind in ("Initialized", "PodScheduled"), now)
                for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                container_status(c, {"running": {"startedAt": now}}, ready, True) for c in pod["spec"]["containers"]
            ],
        }
        init_containers = pod["spec"].get("initContainers") or []
        if init_containers:
            status["initContainerStatuses"] = [container_status(c, completed, False, False) for c in init_containers]
        return status
