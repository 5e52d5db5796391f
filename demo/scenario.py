"""The demo's story: workloads land on on-demand nodes, spot capacity arrives, spotshift moves them there.

1. Set-up: the local control plane; ``spot-extender`` with ``spot-certs`` certificates; the webhook registered
   (``caBundle`` patched); kube-scheduler restarted with the extender; three on-demand nodes.
2. Only on-demand capacity: four Deployments (one with a PodDisruptionBudget, one whose pod says
   ``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"``) are admitted through the webhook (spot
   tolerations, spot preference, ``schedulerName: spotshift-scheduler``) and land on on-demand nodes, since
   there is nothing else. ``spot-rescheduler run`` starts and finds nothing to do.
3. Spot capacity arrives (two tainted GKE Spot nodes). The rescheduler plans, taints a node, evicts its pods
   through the Eviction API, the ReplicaSets recreate them, the scheduler (with the extender) puts them on
   spot, and the next node follows. The node with the pod that must not be evicted stays, and says why.
4. Summary: on-demand nodes emptied, pods moved, every Deployment back at its desired Ready count, the PDB
   never below its minimum. Exit code 0 only if at least one on-demand node was emptied and no pod was lost.

The configuration is the shipped GKE overlay's (``deploy/overlays/gke/config.yaml``) with
``webhook.scheduler_name`` set, as on a managed control plane; the rescheduler gets pusher-style flags with
short intervals. Everything is bounded by ``--timeout``; Ctrl-C (or SIGTERM) tears everything down.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from demo.stack import ROOT, SCHEDULER_NAME, SPOTSHIFT_NAMESPACE, LogTail, Stack
from demo.view import MoveTracker, NodeRow, Observation, PodRow, Style, fmt_time, render_screen, render_table
from rescheduler.cluster.marking import DRAINING
from rescheduler.plan.drain_marks import STATE_ANNOTATION
from shared.classes import node_class
from shared.config import Config, parse_config
from shared.model import Node, Pod
from tests.support.controlplane import ApiError, BinariesMissing, ControlPlane, wait_for
from tests.support.controlplane.process import k8s_version

__all__ = ["Options", "Demo", "Workload", "WORKLOADS", "demo_config", "DEFAULT_TIMEOUT"]

DEFAULT_TIMEOUT = 300.0
NAMESPACE = "demo"
APP_LABEL = "app"
ZONE = {"topology.kubernetes.io/zone": "europe-west1-b"}
ON_DEMAND_LABELS = {"cloud.google.com/gke-nodepool": "default-pool", **ZONE}
SPOT_LABELS = {"cloud.google.com/gke-nodepool": "spot-pool", "cloud.google.com/gke-spot": "true", **ZONE}
SPOT_TAINT = {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}
ON_DEMAND_NODES = ("od-1", "od-2", "od-3")
SPOT_NODES = ("spot-1", "spot-2")
NODE_SIZE = {"cpu": "4", "memory": "8Gi", "pods": "110"}
PDB_NAME, PDB_APP, PDB_MIN_AVAILABLE = "web", "web", 3
PAUSE = 3.0
"""Seconds the terminal view holds the on-demand-only picture before spot capacity arrives."""
NOTHING_DRAINED_AFTER = 90.0
"""Seconds after spot capacity arrives with no drain started before the demo gives up (the plan says why)."""


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    replicas: int
    cpu: str
    memory: str
    safe_to_evict: bool = True


WORKLOADS = (
    Workload("web", 6, "250m", "256Mi"),
    Workload("api", 4, "500m", "512Mi"),
    Workload("worker", 3, "400m", "384Mi"),
    Workload("ledger", 1, "200m", "256Mi", safe_to_evict=False),
)


@dataclass(frozen=True, slots=True)
class Options:
    plain: bool = False
    """One line per event, no escape codes (the default when stdout is not a terminal)."""
    timeout: float = DEFAULT_TIMEOUT
    keep: bool = False
    """Keep the work directory (logs, certificates, kubeconfig) even when the demo passed."""
    work_dir: Path | None = None


class Failed(Exception):
    """The demo could not show what it set out to show; the message says what went wrong."""


class TimedOut(Failed):
    pass


def demo_config() -> dict[str, Any]:
    """The shipped GKE overlay's configuration, with the webhook sending pods to ``spotshift-scheduler``."""
    config = yaml.safe_load((ROOT / "deploy/overlays/gke/config.yaml").read_text())
    config["webhook"]["scheduler_name"] = SCHEDULER_NAME
    return config


def deployment(w: Workload) -> dict[str, Any]:
    annotations = {} if w.safe_to_evict else {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": w.name},
        "spec": {
            "replicas": w.replicas,
            "selector": {"matchLabels": {APP_LABEL: w.name}},
            "template": {
                "metadata": {"labels": {APP_LABEL: w.name}, "annotations": annotations},
                "spec": {
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {
                            "name": w.name,
                            "image": f"registry.example/{w.name}:1",
                            "resources": {"requests": {"cpu": w.cpu, "memory": w.memory}},
                        }
                    ],
                },
            },
        },
    }


class Demo:
    """One run of the demo; :meth:`run` returns the process exit code."""

    def __init__(
        self,
        options: Options,
        out: IO[str] | None = None,
        stack_factory: Callable[[Path, dict[str, Any]], Stack] = Stack,
    ) -> None:
        self.options = options
        self.stack_factory = stack_factory
        self.out = out if out is not None else sys.stdout
        self.style = Style(tty=not options.plain)
        self.started = time.monotonic()
        self.deadline = self.started + options.timeout
        self.config_data = demo_config()
        self.config: Config = parse_config(self.config_data)
        self.phase = "starting"
        self.events: list[str] = []
        self.tracker = MoveTracker()
        self.records: list[dict[str, Any]] = []
        self.log_tail: LogTail | None = None
        self.last_obs: Observation | None = None
        self.min_healthy: dict[str, int] = {}
        self.stack: Stack | None = None
        self._last_plan: tuple[str, ...] | None = None

    # ---- output ------------------------------------------------------------------------------------------

    def now(self) -> float:
        return time.monotonic() - self.started

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def say(self, what: str, text: str) -> None:
        """An event: a line in plain mode, an entry of the "recent" list on a terminal."""
        line = f"{fmt_time(self.now())}  {what:<11} {text}"
        self.events.append(line)
        if self.options.plain:
            self.write(line + "\n")
        else:
            self.redraw()

    def set_phase(self, text: str) -> None:
        self.phase = text
        if self.options.plain:
            self.write(f"\n== {text}\n")
        else:
            self.redraw()

    def redraw(self, *, footer: bool = True) -> None:
        if self.options.plain:
            return
        obs = self.last_obs or Observation(self.now(), (), ())
        obs = Observation(self.now(), obs.nodes, obs.pods, obs.pdbs)
        width = shutil.get_terminal_size((120, 40)).columns
        screen = render_screen(
            "spotshift demo", self.phase, obs, self.events, self.style, self.tracker.arrived, width=width, footer=footer
        )
        self.write(screen)

    def print_table(self, obs: Observation) -> None:
        if self.options.plain:
            self.write("\n".join(render_table(obs, self.style, self.tracker.arrived)) + "\n")

    # ---- time --------------------------------------------------------------------------------------------

    def left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimedOut(f"the demo did not finish within --timeout {self.options.timeout:.0f}s")
        return left

    def wait(self, probe: Callable[[], Any], what: str, limit: float = 120.0) -> Any:
        try:
            return wait_for(probe, timeout=min(limit, self.left()), what=what, check=self._check)
        except TimeoutError as e:
            raise TimedOut(str(e)) from None

    def _check(self) -> None:
        if self.stack is not None:
            self.stack.check()

    # ---- the cluster -------------------------------------------------------------------------------------

    @property
    def plane(self) -> ControlPlane:
        assert self.stack is not None and self.stack.plane is not None
        return self.stack.plane

    def observe(self) -> Observation:
        """Nodes, the demo's pods and budgets, as the view needs them; the classes come from ``shared``."""
        api = self.plane.api
        nodes = []
        for raw in api.list("/api/v1/nodes"):
            node = Node.from_api(raw)
            state = (raw["metadata"].get("annotations") or {}).get(STATE_ANNOTATION, "")
            nodes.append(
                NodeRow(
                    node.name,
                    node_class(node, self.config.node_classes),
                    state,
                    node.allocatable.get("cpu", 0),
                    node.allocatable.get("memory", 0),
                )
            )
        pods = []
        for raw in api.list(f"/api/v1/namespaces/{NAMESPACE}/pods"):
            pod = Pod.from_api(raw)
            pods.append(
                PodRow(
                    pod.uid,
                    pod.name,
                    pod.labels.get(APP_LABEL, ""),
                    pod.node_name,
                    pod.requests.get("cpu", 0),
                    pod.requests.get("memory", 0),
                    pod.ready,
                    pod.terminating,
                )
            )
        pdbs = {}
        for raw in api.list(f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets"):
            status = raw.get("status") or {}
            if status.get("observedGeneration") == raw["metadata"].get("generation"):
                name = raw["metadata"]["name"]
                healthy, desired = status.get("currentHealthy", 0), status.get("desiredHealthy", 0)
                pdbs[name] = (healthy, desired)
                self.min_healthy[name] = min(self.min_healthy.get(name, healthy), healthy)
        obs = Observation(self.now(), tuple(nodes), tuple(pods), pdbs)
        self.last_obs = obs
        return obs

    def deployments_ready(self) -> dict[str, tuple[int, int]]:
        """Deployment → (ready replicas, desired replicas), counting only pods that are Running and Ready."""
        out = {}
        for d in self.plane.api.list(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"):
            wanted = d["spec"].get("replicas", 1)
            status = d.get("status") or {}
            ready = min(status.get("readyReplicas", 0), status.get("availableReplicas", 0))
            if status.get("observedGeneration", 0) < d["metadata"]["generation"] or status.get("replicas") != wanted:
                ready = min(ready, wanted - 1)
            out[d["metadata"]["name"]] = (ready, wanted)
        return out

    def all_ready(self) -> bool:
        ready = self.deployments_ready()
        return len(ready) == len(WORKLOADS) and all(r == w for r, w in ready.values())

    def preview(self) -> Any:
        """What ``kubectl spotshift plan`` would print now: the planner on a live snapshot."""
        from rescheduler.cluster.listing import load_cluster
        from rescheduler.plan.planner import plan

        return plan(load_cluster(str(self.plane.kubeconfig)), self.config)

    # ---- the story ---------------------------------------------------------------------------------------

    def set_up(self, work: Path) -> None:
        self.set_phase(f"set-up: a local Kubernetes {k8s_version()} control plane and spotshift's three parts")
        self.stack = self.stack_factory(work, self.config_data)
        plane = self.stack.start_control_plane()
        self.say(
            "cluster",
            f"control plane up in {plane.start_seconds:.1f}s: etcd, kube-apiserver, kube-controller-manager, "
            "kube-scheduler, a kubelet stand-in",
        )
        for ns in (SPOTSHIFT_NAMESPACE, NAMESPACE):
            plane.create_namespace(ns)
        self.stack.create_placeholder_priority_class()
        self.stack.start_extender()
        self.say("extender", f"spot-extender serving /mutate, /filter, /prioritize on {self.stack.extender_url}")
        self.stack.register_webhook(NAMESPACE)
        self.say("webhook", "registered from deploy/base/mutatingwebhook.yaml; caBundle set by spot-certs")
        self.stack.use_extender_in_scheduler()
        self.say("scheduler", "kube-scheduler restarted with deploy/scheduler/base (v1: extender, spotshift-scheduler)")
        for name in ON_DEMAND_NODES:
            plane.create_node(name, labels=ON_DEMAND_LABELS, allocatable=NODE_SIZE)
        self.say("nodes", f"on-demand nodes {', '.join(ON_DEMAND_NODES)} (4 CPU, 8 GiB each); no spot capacity yet")

    def on_demand_only(self) -> None:
        self.set_phase("1/3  only on-demand capacity: workloads land where they can")
        api = self.plane.api
        for w in WORKLOADS:
            api.post(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments", deployment(w))
        api.post(
            f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets",
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": PDB_NAME},
                "spec": {"minAvailable": PDB_MIN_AVAILABLE, "selector": {"matchLabels": {APP_LABEL: PDB_APP}}},
            },
        )
        pods = sum(w.replicas for w in WORKLOADS)
        self.say(
            "workloads",
            f"{len(WORKLOADS)} Deployments, {pods} pods: "
            + ", ".join(f"{w.name} ×{w.replicas}" for w in WORKLOADS)
            + f"; PDB {PDB_NAME}: minAvailable {PDB_MIN_AVAILABLE}; ledger is safe-to-evict=false",
        )
        self.wait(self.all_ready, "every Deployment to be ready on on-demand nodes")
        sample = self.plane.pods(NAMESPACE, f"{APP_LABEL}=web")[0]["spec"]
        tolerated = [t["key"] for t in sample.get("tolerations") or [] if "gke" in t.get("key", "")]
        self.say(
            "webhook",
            f"mutated every pod: schedulerName {sample.get('schedulerName')}, spot preference, "
            f"tolerations {', '.join(tolerated)}",
        )
        obs = self.observe()
        self.redraw()
        self.print_table(obs)
        result = self.preview()
        s = result.summary
        self.say(
            "plan",
            f"{s.drained} of {s.on_demand_nodes} on-demand nodes can be drained onto {s.spot_targets} spot "
            "nodes: nothing to do yet",
        )
        assert self.stack is not None
        self.stack.start_rescheduler()
        self.log_tail = LogTail(self.stack.logs / "spot-rescheduler.log")

        def planned() -> bool:
            self._pump_log()
            return any(str(r.get("msg", "")).startswith("plan:") for r in self.records)

        self.wait(planned, "spot-rescheduler's first plan", limit=60)

    def spot_arrives(self) -> None:
        if not self.options.plain:
            time.sleep(min(PAUSE, self.left()))  # a moment to take in the on-demand-only picture
        self.set_phase("2/3  spot capacity arrives: the rescheduler empties on-demand nodes onto spot")
        plane = self.plane
        for name in SPOT_NODES:
            plane.create_node(name, labels=SPOT_LABELS, taints=[SPOT_TAINT], allocatable=NODE_SIZE)
        self.say("nodes", f"spot nodes {', '.join(SPOT_NODES)} ready (GKE Spot: label and NoSchedule taint)")
        result = self.preview()
        self.say(
            "plan",
            f"kubectl spotshift plan now says: {result.summary.drained} of {result.summary.on_demand_nodes} "
            f"on-demand nodes can be drained, {result.summary.pods_moved} pods to move",
        )
        self.tracker.prime(self.observe())
        spot_at = time.monotonic()
        while True:
            self.left()
            self._check()
            self._pump_log()
            obs = self.observe()
            for move in self.tracker.update(obs):
                self.say("moved", f"{move.app}: {move.source} → {move.target}  ({NAMESPACE}/{move.pod})")
            self.redraw()
            if self._settled():
                return
            if not self._drain_started() and time.monotonic() - spot_at > NOTHING_DRAINED_AFTER:
                raise Failed(f"no drain started within {NOTHING_DRAINED_AFTER:.0f}s of spot capacity arriving")
            time.sleep(0.5)

    def _pump_log(self) -> None:
        """Show what the rescheduler says: its plans (when they change), drains, evictions, problems."""
        if self.log_tail is None:
            return
        for r in self.log_tail.new():
            self.records.append(r)
            msg = str(r.get("msg", ""))
            level = r.get("level")
            if msg.startswith("plan:"):
                drainable = tuple(r.get("drainable") or ())
                if drainable != self._last_plan:
                    self._last_plan = drainable
                    self.say("rescheduler", msg + (f": {', '.join(drainable)}" if drainable else ""))
            elif msg.startswith(("draining node", "drained node", "eviction of")) or level in ("warning", "error"):
                self.say("rescheduler", msg)

    def _drain_started(self) -> bool:
        return any(str(r.get("msg", "")).startswith("draining node") for r in self.records)

    def _settled(self) -> bool:
        """At least one drain done, the latest plan (after the latest drain) finds nothing more, nothing is
        being drained, and every Deployment is back at its desired Ready count."""
        last_drained = max(
            (i for i, r in enumerate(self.records) if str(r.get("msg", "")).startswith("drained node")), default=-1
        )
        if last_drained < 0:
            return False
        plans = [i for i, r in enumerate(self.records) if str(r.get("msg", "")).startswith("plan:")]
        if not plans or plans[-1] < last_drained or self.records[plans[-1]].get("drainable"):
            return False
        if self.last_obs is None or any(n.state == DRAINING for n in self.last_obs.nodes):
            return False
        return self.all_ready()

    def summary(self) -> bool:
        """Print the outcome; true when an on-demand node was emptied onto spot and no pod was lost."""
        self.set_phase("3/3  summary")
        obs = self.observe()
        self.print_table(obs)
        on_demand = [n for n in obs.nodes if n.cls == "on-demand"]
        emptied = [n.name for n in on_demand if not obs.pods_on(n.name) and n.state == "drained"]
        stayed = [n.name for n in on_demand if n.name not in emptied]
        assert self.stack is not None
        evicted = int(self.stack.rescheduler_metric("spotshift_rescheduler_evictions_total", '{result="evicted"}') or 0)
        succeeded = int(self.stack.rescheduler_metric("spotshift_rescheduler_drains_succeeded_total") or 0)
        ready = self.deployments_ready()
        lost = {name: (r, w) for name, (r, w) in ready.items() if r != w}
        spot = {n.name for n in obs.nodes if n.cls == "spot"}
        on_spot = sum(1 for p in obs.pods if not p.terminating and p.uid in self.tracker.arrived and p.node in spot)
        low = self.min_healthy.get(PDB_NAME)
        budget_ok = low is not None and low >= PDB_MIN_AVAILABLE
        why: dict[str, str] = {}
        if stayed:
            with contextlib.suppress(Exception):
                why = dict(self.preview().undrainable)
        lines = [
            "",
            f"spotshift demo summary ({self.now():.0f}s):",
            f"  nodes emptied: {len(emptied)} of {len(on_demand)} on-demand nodes drained onto spot"
            + (f" ({', '.join(emptied)})" if emptied else ""),
        ]
        for name in stayed:
            lines.append(f"  stays: {name}: {why.get(name, 'not drained')}")
        lines.append(
            f"  pods moved: {evicted} (evicted through the Eviction API by {succeeded} drain(s); "
            f"{on_spot} replacements running on spot)"
        )
        states = ", ".join(f"{name} {r}/{w}" for name, (r, w) in sorted(ready.items()))
        if lost or len(ready) != len(WORKLOADS):
            lines.append(f"  POD LOST: a Deployment is below its desired Ready count: {states}")
        else:
            lines.append(f"  no pod lost: every Deployment back at its desired Ready count ({states})")
        lines.append(
            f"  PodDisruptionBudget {PDB_NAME}: minAvailable {PDB_MIN_AVAILABLE}, lowest healthy seen "
            f"{low if low is not None else '?'}" + ("" if budget_ok else "  (VIOLATED)")
        )
        ok = bool(emptied) and not lost and len(ready) == len(WORKLOADS) and budget_ok
        lines.append(f"RESULT: {'PASS' if ok else 'FAIL'}")
        if not self.options.plain:
            self.redraw(footer=False)
        self.write("\n".join(lines) + "\n")
        return ok

    # ---- run ---------------------------------------------------------------------------------------------

    def run(self) -> int:
        work = self.options.work_dir or Path(tempfile.mkdtemp(prefix="spotshift-demo-"))
        work.mkdir(parents=True, exist_ok=True)
        code = 1
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
        if not self.options.plain:
            self.write("\x1b[?25l\x1b[2J")  # hide the cursor, clear the screen
        try:
            self.set_up(work)
            self.on_demand_only()
            self.spot_arrives()
            code = 0 if self.summary() else 1
        except KeyboardInterrupt:
            code = 130
            self.say("demo", "interrupted: tearing down")
        except BinariesMissing as e:
            code = 2
            self.write(f"demo: {e}\n")
        except Exception as e:  # the demo's top level: say what failed, keep the logs, tear down
            what = str(e) if isinstance(e, Failed | ApiError | RuntimeError) else f"{type(e).__name__}: {e}"
            self.say("demo", f"FAILED: {what}")
            with contextlib.suppress(Exception):
                self.summary()
            code = 1
        finally:
            code = self.tear_down(work, code)
            signal.signal(signal.SIGTERM, previous)
        return code

    def tear_down(self, work: Path, code: int) -> int:
        """Stop everything; a second Ctrl-C during this cannot leave processes behind half-stopped."""
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            began = time.monotonic()
            left: list[int] = []
            if self.stack is not None:
                pids = self.stack.pids()
                self.stack.stop(lambda text: self.write(f"{fmt_time(self.now())}  {'teardown':<11} {text}\n"))
                left = [pid for pid in pids if _running(pid)]
            if not self.options.plain:
                self.write("\x1b[?25h")
            keep = self.options.keep or code not in (0, 130)
            if keep:
                self.write(f"demo: logs, certificates and kubeconfig kept in {work}\n")
            elif self.options.work_dir is None:
                shutil.rmtree(work, ignore_errors=True)
            if left:
                self.write(f"demo: processes still running after tear-down: {left}\n")
                code = code or 1
            else:
                self.write(f"demo: torn down in {time.monotonic() - began:.1f}s; no process left running\n")
        finally:
            signal.signal(signal.SIGINT, previous)
        return code


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
