"""A node-provisioner stand-in for the e2e tier: what cluster-autoscaler or Karpenter does for pods that need spot.

It watches (polls) one namespace for pending pods the scheduler found no node for (``PodScheduled=False``,
reason ``Unschedulable``) whose required node affinity names the test's spot label, and adds one Ready spot
node that fits all of them, ``delay`` seconds after it first saw them; with ``mode="never"`` it never adds
one (spot unavailable, quota), with ``mode="manual"`` only when the test calls :meth:`Provisioner.provision`.
Every node it adds is a node of the test's :class:`~tests.support.rescheduler_world.World`, removed with it.
The delay is what is simulated (a cloud takes a while); no test waits on it: tests wait for observed state.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import requests

from tests.support.controlplane import ApiError
from tests.support.rescheduler_world import World


def _cpu_millis(text: str) -> int:
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


def _bytes(text: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(text)


def wants_spot(pod: dict[str, Any], spot_key: str) -> bool:
    """Whether every required node-affinity term of the pod asks for the spot label."""
    affinity = (pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    return bool(terms) and all(any(e.get("key") == spot_key for e in t.get("matchExpressions") or []) for t in terms)


def unschedulable(pod: dict[str, Any]) -> bool:
    if pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
        return False
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


class Provisioner(threading.Thread):
    """See the module docstring. ``added`` lists the nodes made; ``seen`` the pods it was asked for."""

    def __init__(self, world: World, *, mode: str = "auto", delay: float = 2.0, headroom_cpu: int = 200) -> None:
        super().__init__(daemon=True, name="provisioner")
        assert mode in ("auto", "never", "manual")
        self.world = world
        self.api = world.plane.new_api()
        self.mode = mode
        self.delay = delay
        self.headroom_cpu = headroom_cpu
        self.stop = threading.Event()
        self.added: list[str] = []
        self.seen: set[str] = set()
        self._first_seen: float | None = None
        self._lock = threading.Lock()

    def pending(self) -> list[dict[str, Any]]:
        """The pods that need a spot node now."""
        pods = self.api.list(f"/api/v1/namespaces/{self.world.ns}/pods")
        return [p for p in pods if unschedulable(p) and wants_spot(p, self.world.spot_key)]

    def provision(self) -> str | None:
        """Add one spot node that fits every pod pending for spot now; returns its name (``None``: none pending)."""
        with self._lock:
            pods = self.pending()
            if not pods:
                return None
            cpu = memory = 0
            for p in pods:
                self.seen.add(p["metadata"]["name"])
                for c in p["spec"]["containers"]:
                    req = (c.get("resources") or {}).get("requests") or {}
                    cpu += _cpu_millis(req.get("cpu", "0"))
                    memory += _bytes(req.get("memory", "0"))
            name = self.world.spot(
                "spot-new",
                allocatable={
                    "cpu": f"{cpu + self.headroom_cpu}m",
                    "memory": str(memory + 2**30),
                    "pods": "110",
                },
            )
            self.added.append(name)
            return name

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                if self.mode == "auto":
                    if self.pending():
                        now = time.monotonic()
                        if self._first_seen is None:
                            self._first_seen = now
                        if now - self._first_seen >= self.delay:
                            self.provision()
                            self._first_seen = None
                    else:
                        self._first_seen = None
                elif self.mode == "never":
                    for p in self.pending():
                        self.seen.add(p["metadata"]["name"])
            except (ApiError, requests.RequestException):
                pass
            self.stop.wait(0.2)

    def close(self) -> None:
        self.stop.set()
        self.join(10)
        self.api.close()


def cpu_request(pod: dict[str, Any]) -> int:
    return sum(
        _cpu_millis(((c.get("resources") or {}).get("requests") or {}).get("cpu", "0"))
        for c in pod["spec"]["containers"]
    )


class PoolProvisioner(threading.Thread):
    """Adds nodes for the pods of ``namespaces`` (the world's) the scheduler found no node for, ``delay``
    seconds after it first saw some: spot nodes while ``spot_available`` is set, else on-demand nodes for the
    pods that do not require spot (a placeholder waits for spot). The pods are packed in order into nodes of
    ``node_cpu`` millicores, all added at once, each with ``headroom_cpu`` more (a node type is rarely an exact
    fit); a pod a node was added for is not provisioned for again. ``added`` maps each node made to its class."""

    def __init__(
        self,
        world: World,
        *,
        delay: float = 2.0,
        node_cpu: int = 1000,
        headroom_cpu: int = 0,
        namespaces: tuple[str, ...] = (),
    ) -> None:
        super().__init__(daemon=True, name="pool-provisioner")
        self.world = world
        self.namespaces = namespaces or (world.ns,)
        self.api = world.plane.new_api()
        self.delay = delay
        self.node_cpu = node_cpu
        self.headroom_cpu = headroom_cpu
        self.spot_available = True
        self.stop = threading.Event()
        self.added: dict[str, str] = {}
        self.served: set[str] = set()
        self._first_seen: float | None = None

    def pending(self) -> list[dict[str, Any]]:
        pods = [
            p
            for ns in self.namespaces
            for p in self.api.list(f"/api/v1/namespaces/{ns}/pods")
            if unschedulable(p) and p["metadata"]["uid"] not in self.served
        ]
        if self.spot_available:
            return pods
        return [p for p in pods if not wants_spot(p, self.world.spot_key)]

    def provision(self, pods: list[dict[str, Any]]) -> None:
        spot = self.spot_available
        bins: list[int] = []
        for p in pods:
            cpu = cpu_request(p)
            for i, used in enumerate(bins):
                if used + cpu <= self.node_cpu:
                    bins[i] += cpu
                    break
            else:
                bins.append(cpu)
        for _ in bins:
            allocatable = {"cpu": f"{self.node_cpu + self.headroom_cpu}m", "memory": "8Gi", "pods": "110"}
            name = (
                self.world.spot("spot-new", allocatable=allocatable)
                if spot
                else self.world.on_demand("od-new", allocatable=allocatable)
            )
            self.added[name] = "spot" if spot else "on-demand"
        self.served.update(p["metadata"]["uid"] for p in pods)

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                pods = self.pending()
                now = time.monotonic()
                if not pods:
                    self._first_seen = None
                elif self._first_seen is None:
                    self._first_seen = now
                elif now - self._first_seen >= self.delay:
                    self.provision(pods)
                    self._first_seen = None
            except (ApiError, requests.RequestException):
                pass
            self.stop.wait(0.2)

    def close(self) -> None:
        self.stop.set()
        self.join(10)
        self.api.close()
