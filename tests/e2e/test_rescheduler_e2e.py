"""The rescheduler's run loop against the real 1.20 control plane: drains, refusals, dry-run, SIGTERM, restart, leader.

Each test runs ``python -m rescheduler.cli run`` as a subprocess (exactly what the Deployment runs) with short
intervals and a configuration whose node classes are the test's own labels, so it only ever sees the nodes of
that test as spot or on-demand (everything else is class "other": never a candidate, never a target).

Every test that lets the rescheduler act watches the namespace's PodDisruptionBudgets in a thread for the
whole test and fails if any budget's ``currentHealthy`` falls below its ``desiredHealthy``; and every test
ends with each workload back at its desired Ready count.

The success test runs the rescheduler as a ServiceAccount bound to ``deploy/base/rescheduler/rbac.yaml``, so
it also proves that the shipped ClusterRole grants every verb the loop uses.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests.e2e.controlplane import ApiError, ControlPlane, wait_for
from tests.e2e.controlplane.cluster import free_ports

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TAINT_KEY = "spotshift.io/draining"
TAINT_VALUE = "spotshift-rescheduler"
STATE_ANNOTATION = "spotshift.io/drain-state"
PDBS = "/apis/policy/v1beta1/namespaces/{ns}/poddisruptionbudgets"
NodeFactory = Callable[..., dict[str, Any]]


# --- the test's world ------------------------------------------------------------------------------------------


class World:
    """One test's labels, nodes and workloads; the rescheduler's config selects exactly these nodes."""

    def __init__(self, plane: ControlPlane, namespace: str, make_node: NodeFactory, tmp_path: Path) -> None:
        self.plane = plane
        self.ns = namespace
        self.make_node = make_node
        self.tmp = tmp_path
        self.label = uuid.uuid4().hex[:8]
        self.spot_key = f"e2e.spotshift.io/spot-{self.label}"
        self.od_key = f"e2e.spotshift.io/od-{self.label}"
        self.nodes: list[str] = []

    def on_demand(self, prefix: str = "od", **kwargs: Any) -> str:
        node = self.make_node(prefix, labels={self.od_key: "true", "e2e.spotshift.io/test": self.label}, **kwargs)
        self.nodes.append(node["metadata"]["name"])
        return node["metadata"]["name"]

    def spot(self, prefix: str = "spot", **kwargs: Any) -> str:
        node = self.make_node(prefix, labels={self.spot_key: "true", "e2e.spotshift.io/test": self.label}, **kwargs)
        self.nodes.append(node["metadata"]["name"])
        return node["metadata"]["name"]

    def config(self, **rescheduler: Any) -> Path:
        data = {
            "namespace": self.ns,
            "node_classes": {
                "presets": [],
                "spot_selectors": [f"{self.spot_key}=true"],
                "on_demand_selectors": [f"{self.od_key}=true"],
            },
            "rescheduler": {"lease_name": f"rescheduler-{self.label}", **rescheduler},
        }
        path = self.tmp / f"config-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    def deployment(self, name: str, replicas: int, **pod_spec: Any) -> dict[str, Any]:
        """A Deployment kept on this test's nodes, preferring spot as spotshift's webhook would make it."""
        spec: dict[str, Any] = {
            "nodeSelector": {"e2e.spotshift.io/test": self.label},
            "terminationGracePeriodSeconds": 5,
            "affinity": {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 100,
                            "preference": {
                                "matchExpressions": [{"key": self.spot_key, "operator": "In", "values": ["true"]}]
                            },
                        }
                    ]
                }
            },
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example/app:1",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
        }
        spec.update(pod_spec)
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
            },
        }
        self.plane.api.post(f"/apis/apps/v1/namespaces/{self.ns}/deployments", body)
        return body

    def ready(self, name: str, timeout: float = 90) -> list[dict[str, Any]]:
        return self.plane.wait_for_deployment(self.ns, name, timeout=timeout)

    def scale(self, name: str, replicas: int) -> None:
        self.plane.api.patch(
            f"/apis/apps/v1/namespaces/{self.ns}/deployments/{name}", {"spec": {"replicas": replicas}}, "merge"
        )

    def pods(self, app: str) -> list[dict[str, Any]]:
        return [p for p in self.plane.pods(self.ns, f"app={app}") if not p["metadata"].get("deletionTimestamp")]

    def pdb(self, name: str, app: str, **spec: Any) -> None:
        body = {
            "apiVersion": "policy/v1beta1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": app}}, **spec},
        }
        self.plane.api.post(PDBS.format(ns=self.ns), body)

    def wait_pdb(self, name: str, allowed: int) -> None:
        path = PDBS.format(ns=self.ns) + f"/{name}"

        def computed() -> bool:
            pdb = self.plane.api.get(path)
            status = pdb.get("status") or {}
            return (
                status.get("observedGeneration") == pdb["metadata"]["generation"]
                and status.get("disruptionsAllowed") == allowed
            )

        wait_for(computed, timeout=60, what=f"PDB {name} to allow {allowed} disruptions")

    def node(self, name: str) -> dict[str, Any]:
        return self.plane.api.get(f"/api/v1/nodes/{name}")

    def our_taints(self, name: str) -> list[dict[str, Any]]:
        return [t for t in self.node(name)["spec"].get("taints") or [] if t.get("key") == TAINT_KEY]

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        """The rescheduler's Events about this test's nodes (in ``default``) and pods (in its namespace)."""
        out = []
        for ns in ("default", self.ns):
            for e in self.plane.api.list(f"/api/v1/namespaces/{ns}/events"):
                if (e.get("source") or {}).get("component") != "spotshift-rescheduler":
                    continue
                if ns == "default" and e["involvedObject"].get("name") not in self.nodes:
                    continue
                if reason is None or e.get("reason") == reason:
                    out.append(e)
        return out


@pytest.fixture
def world(control_plane: ControlPlane, namespace: str, make_node: NodeFactory, tmp_path: Path) -> World:
    # A pending unschedulable pod anywhere pauses the rescheduler: let earlier tests' leftovers go first.
    wait_for(lambda: not _unschedulable(control_plane), timeout=60, what="no unschedulable pods in the cluster")
    return World(control_plane, namespace, make_node, tmp_path)


def _unschedulable(plane: ControlPlane) -> list[str]:
    out = []
    for p in plane.api.list("/api/v1/pods", fieldSelector="status.phase=Pending"):
        for c in (p.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable":
                out.append(f"{p['metadata']['namespace']}/{p['metadata']['name']}")
    return out


# --- watchers ------------------------------------------------------------------------------------------------


class BudgetWatcher(threading.Thread):
    """Polls every budget of a namespace; records any moment ``currentHealthy < desiredHealthy``."""

    def __init__(self, plane: ControlPlane, namespace: str) -> None:
        super().__init__(daemon=True)
        self.api = plane.new_api()
        self.path = PDBS.format(ns=namespace)
        self.stop = threading.Event()
        self.violations: list[str] = []
        self.samples = 0

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                for pdb in self.api.list(self.path):
                    status = pdb.get("status") or {}
                    if status.get("observedGeneration") != pdb["metadata"].get("generation"):
                        continue
                    healthy, desired = status.get("currentHealthy", 0), status.get("desiredHealthy", 0)
                    if healthy < desired:
                        self.violations.append(f"{pdb['metadata']['name']}: currentHealthy {healthy} < {desired}")
                self.samples += 1
            except (ApiError, requests.RequestException):
                pass
            self.stop.wait(0.1)

    def close(self) -> list[str]:
        self.stop.set()
        self.join(5)
        self.api.close()
        assert self.samples > 0, "the budget watcher never read the budgets"
        return self.violations


class NodeWatcher(threading.Thread):
    """Polls nodes; records every taint and cordon it ever sees on them (was a node ever touched?)."""

    def __init__(self, plane: ControlPlane, names: list[str]) -> None:
        super().__init__(daemon=True)
        self.api = plane.new_api()
        self.names = names
        self.stop = threading.Event()
        self.touched: dict[str, list[str]] = {n: [] for n in names}

    def run(self) -> None:
        while not self.stop.is_set():
            for name in self.names:
                try:
                    node = self.api.get(f"/api/v1/nodes/{name}")
                except (ApiError, requests.RequestException):
                    continue
                for t in node["spec"].get("taints") or []:
                    if t.get("key") == TAINT_KEY:
                        self.touched[name].append(f"taint {t}")
                if node["spec"].get("unschedulable"):
                    self.touched[name].append("cordoned")
            self.stop.wait(0.1)

    def close(self) -> dict[str, list[str]]:
        self.stop.set()
        self.join(5)
        self.api.close()
        return {k: v for k, v in self.touched.items() if v}


@pytest.fixture
def budgets(control_plane: ControlPlane, namespace: str) -> Iterator[BudgetWatcher]:
    watcher = BudgetWatcher(control_plane, namespace)
    watcher.start()
    yield watcher
    violations = watcher.close()
    assert violations == [], f"a PodDisruptionBudget fell below its minimum: {violations[:5]}"


# --- the rescheduler process ---------------------------------------------------------------------------------


class Rescheduler:
    """``python -m rescheduler.cli run`` as a subprocess; JSON log lines collected from stderr."""

    def __init__(self, kubeconfig: Path, config: Path, log_path: Path, *extra: str, name: str = "r") -> None:
        self.port = free_ports(1)[0]
        self.log_path = log_path
        self.name = name
        argv = [
            sys.executable,
            "-m",
            "rescheduler.cli",
            "run",
            f"--kubeconfig={kubeconfig}",
            f"--config={config}",
            f"--listen-address=127.0.0.1:{self.port}",
            "--housekeeping-interval=1s",
            "--node-drain-delay=0s",
            "--pod-eviction-timeout=20s",
            "--max-graceful-termination=10s",
            "--replacement-timeout=60s",
            "--leader-elect-lease-duration=4s",
            "--leader-elect-renew-deadline=3s",
            "--leader-elect-retry-period=1s",
            "--log-format=json",
            *extra,
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSHIFT_") and k != "KUBECONFIG"}
        env["POD_NAME"] = name
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for raw in self.log_path.read_bytes().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(raw))
        return out

    def logged(self, text: str) -> list[dict[str, Any]]:
        return [line for line in self.lines() if text in line.get("msg", "")]

    def metric(self, name: str, labels: str = "") -> float | None:
        try:
            body = requests.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5).text
        except requests.RequestException:
            return None
        for line in body.splitlines():
            if line.startswith(name + labels + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def wait_logged(self, text: str, timeout: float = 60) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"rescheduler {self.name} exited ({self.proc.returncode}):\n{self.tail()}")
            hits = self.logged(text)
            return hits[0] if hits else None

        return wait_for(found, timeout=timeout, what=f"rescheduler {self.name} to log {text!r}")

    def tail(self, n: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float = 30) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


@pytest.fixture
def start(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Callable[..., Rescheduler]]:
    started: list[Rescheduler] = []

    def run(config: Path, *extra: str, kubeconfig: Path | None = None, name: str = "r") -> Rescheduler:
        log = tmp_path / f"rescheduler-{name}-{len(started)}.log"
        r = Rescheduler(kubeconfig or control_plane.kubeconfig, config, log, *extra, name=name)
        started.append(r)
        return r

    yield run
    for r in started:
        r.close()
    for r in started:
        print(f"--- rescheduler {r.name} log tail ---\n{r.tail(15)}")


def _lease(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return plane.api.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}")
    except ApiError as error:
        if error.status == 404:
            return None
        raise


def _service_account_kubeconfig(plane: ControlPlane, namespace: str, tmp_path: Path, suffix: str) -> Path:
    """Apply deploy/base/rescheduler/rbac.yaml (into this namespace) and a kubeconfig with that account's token."""
    docs = list(yaml.safe_load_all((ROOT / "deploy/base/rescheduler/rbac.yaml").read_text()))
    for doc in docs:
        meta = doc["metadata"]
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            meta["name"] = f"{meta['name']}-{suffix}"
        else:
            meta["namespace"] = namespace
        if "roleRef" in doc and doc["roleRef"]["kind"] == "ClusterRole":
            doc["roleRef"]["name"] = f"{doc['roleRef']['name']}-{suffix}"
        for subject in doc.get("subjects") or []:
            subject["namespace"] = namespace
    paths = {
        "ServiceAccount": f"/api/v1/namespaces/{namespace}/serviceaccounts",
        "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "Role": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles",
        "RoleBinding": f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
    }
    for doc in docs:
        plane.api.post(paths[doc["kind"]], doc)

    def token() -> str | None:
        account = plane.api.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/spotshift-rescheduler")
        for ref in account.get("secrets") or []:
            secret = plane.api.get(f"/api/v1/namespaces/{namespace}/secrets/{ref['name']}")
            data = (secret.get("data") or {}).get("token")
            if data:
                import base64

                return base64.b64decode(data).decode()
        return None

    value = wait_for(token, timeout=60, what="the rescheduler ServiceAccount token")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {"server": plane.server, "certificate-authority": str(plane.ca_path)}}],
        "users": [{"name": "rescheduler", "user": {"token": value}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "rescheduler"}}],
        "current-context": "e2e",
    }
    path = tmp_path / "rescheduler.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def _cleanup_rbac(plane: ControlPlane, suffix: str) -> None:
    for kind in ("clusterroles", "clusterrolebindings"):
        plane.api.delete_if_exists(f"/apis/rbac.authorization.k8s.io/v1/{kind}/spotshift-rescheduler-{suffix}")


def _names(pods: list[dict[str, Any]]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "") for p in pods}


# --- scenarios -------------------------------------------------------------------------------------------------


def test_a_drainable_on_demand_node_is_emptied_and_its_pods_run_on_spot(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler], tmp_path: Path
) -> None:
    plane = world.plane
    od = world.on_demand()
    world.deployment("web", 1)
    world.deployment("api", 1)
    assert {n for n in _names(world.ready("web")).values()} == {od}
    assert {n for n in _names(world.ready("api")).values()} == {od}
    spot1 = world.spot()
    world.scale("web", 2)  # the new replica goes to the empty spot node (spread, spot preference)
    web = world.ready("web")
    assert sorted(_names(web).values()) == sorted([od, spot1]), _names(web)
    spot2 = world.spot()
    world.pdb("web", "web", minAvailable=1)
    world.wait_pdb("web", allowed=1)
    before = {p["metadata"]["uid"] for p in world.pods("web") + world.pods("api")}

    suffix = world.label
    kubeconfig = _service_account_kubeconfig(plane, world.ns, tmp_path, suffix)
    try:
        # The shipped Role grants get/update on the shipped Lease name only (this namespace is the test's own).
        r = start(world.config(lease_name="spotshift-rescheduler"), kubeconfig=kubeconfig)
        r.wait_logged("drained node", timeout=120)

        moved = world.pods("web") + world.pods("api")
        assert all(p["spec"]["nodeName"] in (spot1, spot2) for p in moved), _names(moved)
        assert len({p["metadata"]["uid"] for p in moved} - before) == 2, "one new pod per evicted pod"
        assert world.ready("web") and world.ready("api")
        node = world.node(od)
        assert world.our_taints(od) == [{"key": TAINT_KEY, "value": TAINT_VALUE, "effect": "PreferNoSchedule"}]
        assert node["metadata"]["annotations"][STATE_ANNOTATION] == "drained"
        # Nothing but the drained node was touched, and the Events tell the story.
        assert world.our_taints(spot1) == [] and world.our_taints(spot2) == []
        reasons = {e["reason"] for e in world.events()}
        assert {"SpotshiftDrainStarted", "SpotshiftEvicting", "SpotshiftDrainSucceeded"} <= reasons, reasons
        started = world.events("SpotshiftDrainStarted")[0]
        assert started["involvedObject"]["kind"] == "Node" and started["involvedObject"]["name"] == od
        assert r.metric("spotshift_rescheduler_drains_succeeded_total") == 1
        assert r.metric("spotshift_rescheduler_evictions_total", '{result="evicted"}') == 2
        assert r.metric("spotshift_rescheduler_leader") == 1
        assert r.metric("spotshift_rescheduler_nodes", '{class="spot"}') == 2
        assert not [line for line in r.lines() if line.get("level") == "error"]
        assert not [line for line in r.lines() if "403" in json.dumps(line)], "RBAC refused a verb the loop uses"
    finally:
        _cleanup_rbac(plane, suffix)


def test_a_node_whose_pdb_forbids_eviction_is_never_touched(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler]
) -> None:
    od = world.on_demand()
    world.deployment("db", 1)
    db = world.ready("db")
    world.pdb("db", "db", minAvailable=1)
    world.wait_pdb("db", allowed=0)
    world.spot()
    nodes = NodeWatcher(world.plane, [od])
    nodes.start()

    r = start(world.config())
    r.wait_logged("plan:", timeout=60)
    time.sleep(5)  # several housekeeping cycles

    assert nodes.close() == {}
    assert _names(world.pods("db")) == _names(db)
    assert {p["metadata"]["uid"] for p in world.pods("db")} == {p["metadata"]["uid"] for p in db}
    assert r.metric("spotshift_rescheduler_evictions_total", '{result="evicted"}') in (None, 0.0)
    assert r.metric("spotshift_rescheduler_drains_started_total") == 0
    assert len(world.ready("db")) == 1


def test_a_pod_pinned_to_on_demand_keeps_its_node(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler]
) -> None:
    od = world.on_demand()
    world.deployment("pinned", 1, nodeSelector={world.od_key: "true"})
    world.deployment("free", 1)
    pinned = world.ready("pinned")
    free = world.ready("free")
    assert _names(pinned)[pinned[0]["metadata"]["name"]] == od
    world.spot()
    nodes = NodeWatcher(world.plane, [od])
    nodes.start()

    r = start(world.config())
    r.wait_logged("plan:", timeout=60)
    time.sleep(5)

    assert nodes.close() == {}
    assert world.pods("pinned")[0]["metadata"]["uid"] == pinned[0]["metadata"]["uid"]
    assert world.pods("pinned")[0]["spec"]["nodeName"] == od
    assert world.pods("free")[0]["metadata"]["uid"] == free[0]["metadata"]["uid"], "all or nothing per node"
    assert r.metric("spotshift_rescheduler_drains_started_total") == 0
    assert len(world.ready("pinned")) == 1 and len(world.ready("free")) == 1


def test_dry_run_evicts_nothing(world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler]) -> None:
    od = world.on_demand()
    world.deployment("web", 2)
    web = world.ready("web")
    world.spot()
    nodes = NodeWatcher(world.plane, [od])
    nodes.start()

    r = start(world.config(), "--dry-run")
    r.wait_logged("would evict", timeout=60)
    r.wait_logged("dry-run: would taint", timeout=30)
    time.sleep(3)

    assert nodes.close() == {}
    assert {p["metadata"]["uid"] for p in world.pods("web")} == {p["metadata"]["uid"] for p in web}
    assert world.events() == [], "dry-run writes no Events either"
    assert r.metric("spotshift_rescheduler_evictions_total", '{result="dry-run"}') >= 2
    assert r.metric("spotshift_rescheduler_evictions_total", '{result="evicted"}') in (None, 0.0)
    assert len(world.ready("web")) == 2


def _held_world(world: World) -> tuple[str, str]:
    """An on-demand node with pods of a Deployment no scheduler serves: the test binds them by hand.

    The rescheduler's replacements then stay Pending until the test binds them, so a drain is reliably
    caught in the middle (tainted, pods evicted, waiting for replacements).
    """
    od = world.on_demand()
    spot = world.spot()
    world.deployment("held", 2, schedulerName=f"held-{world.label}", nodeSelector={})
    wait_for(lambda: len(world.pods("held")) == 2, timeout=60, what="the held pods to be created")
    for p in world.pods("held"):
        _bind(world, p["metadata"]["name"], od)
    world.ready("held")
    return od, spot


def _bind(world: World, pod: str, node: str) -> None:
    world.plane.api.post(
        f"/api/v1/namespaces/{world.ns}/pods/{pod}/binding",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        },
    )


def _bind_pending(world: World, app: str, node: str) -> None:
    for p in world.pods(app):
        if not p["spec"].get("nodeName"):
            _bind(world, p["metadata"]["name"], node)


def _evictions_started(world: World, od: str) -> bool:
    on_od = [p for p in world.plane.pods(world.ns, "app=held") if p["spec"].get("nodeName") == od]
    return bool(world.our_taints(od)) and len(on_od) < 2


def test_sigterm_mid_drain_leaves_no_taint_and_no_lost_pod(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler]
) -> None:
    od, spot = _held_world(world)

    r = start(world.config())
    wait_for(lambda: _evictions_started(world, od), timeout=60, what="the drain to start evicting")
    r.signal(signal.SIGTERM)
    assert r.wait(30) == 0, r.tail()

    assert world.our_taints(od) == []
    assert STATE_ANNOTATION not in (world.node(od)["metadata"].get("annotations") or {})
    assert r.logged("interrupted")
    lease = _lease(world.plane, world.ns, f"rescheduler-{world.label}")
    assert lease is not None and lease["spec"].get("holderIdentity", "") == "", "the lease is released on SIGTERM"
    assert len(world.pods("held")) == 2, "the ReplicaSet replaced every evicted pod"
    _bind_pending(world, "held", spot)
    assert len(world.ready("held")) == 2


def test_a_restart_after_a_crash_cleans_the_left_over_taint_and_resumes(
    world: World, budgets: BudgetWatcher, start: Callable[..., Rescheduler]
) -> None:
    od, spot = _held_world(world)

    first = start(world.config(), name="first")
    wait_for(lambda: _evictions_started(world, od), timeout=60, what="the drain to start evicting")
    first.signal(signal.SIGKILL)  # no chance to clean up: the taint stays
    first.wait(10)
    assert world.our_taints(od) != []

    second = start(world.config(), name="second")
    # Once it holds the lease (the killed process's lease expires first), it removes what the first one left.
    second.wait_logged("removed the mark left on node", timeout=60)
    wait_for(lambda: world.events("SpotshiftTaintRemoved"), timeout=10, what="the TaintRemoved Event on the node")

    # Then it resumes: whatever is left on the node is drained again, and every replacement ends on spot.
    def settled() -> bool:
        _bind_pending(world, "held", spot)
        pods = world.pods("held")
        return len(pods) == 2 and all(p["spec"].get("nodeName") == spot for p in pods)

    wait_for(settled, timeout=120, what="every held pod to run on the spot node")
    assert len(world.ready("held")) == 2
    state = (world.node(od)["metadata"].get("annotations") or {}).get(STATE_ANNOTATION)
    assert state in (None, "drained"), f"no drain left half done, got {state}"
    assert second.proc.poll() is None


def test_two_replicas_elect_one_leader_and_hand_over_on_shutdown(
    world: World, start: Callable[..., Rescheduler]
) -> None:
    world.on_demand()
    world.spot()
    config = world.config()
    a = start(config, name="a")
    b = start(config, name="b")
    lease_name = f"rescheduler-{world.label}"

    def one_leader() -> tuple[Rescheduler, Rescheduler] | None:
        values = (a.metric("spotshift_rescheduler_leader"), b.metric("spotshift_rescheduler_leader"))
        if sorted(values, key=lambda v: v or 0) == [0.0, 1.0]:
            return (a, b) if values[0] == 1.0 else (b, a)
        return None

    leader, follower = wait_for(one_leader, timeout=60, what="exactly one leader")
    time.sleep(5)  # it stays that way over several renewals
    assert one_leader() == (leader, follower)
    lease = _lease(world.plane, world.ns, lease_name)
    assert lease is not None and lease["spec"]["holderIdentity"].startswith(leader.name + "_")
    assert leader.logged("plan:") and not follower.logged("plan:"), "only the leader plans and acts"

    leader.signal(signal.SIGTERM)
    assert leader.wait(30) == 0
    wait_for(lambda: follower.metric("spotshift_rescheduler_leader") == 1.0, timeout=15, what="the follower to lead")
    lease = _lease(world.plane, world.ns, lease_name)
    assert lease is not None and lease["spec"]["holderIdentity"].startswith(follower.name + "_")
    assert lease["spec"]["leaseTransitions"] >= 1
