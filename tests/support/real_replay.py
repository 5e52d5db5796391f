"""The churn replay (bench/churnlab/replay.py) on the real control plane, one policy in one autoscaling world at a
time: ``run_replay(plane, policy, world, work_dir)`` returns the run's :class:`bench.churnlab.replay.Outcome`.

Every run has its own namespace, the replay's Deployments and budgets, spotshift's webhook and extender in front of
it unless the policy runs without spotshift (:func:`spotshift_front`: ``spot-extender`` serving the webhook,
narrowed to the namespace by a label, and the extender of the ``spotshift-scheduler`` profile of a restarted
kube-scheduler), and:

* a **policy** (``POLICIES``), which brings its own processes (:class:`Processes`): ``none`` (the webhook and the
  extender alone), ``spotshift`` (``spot-rescheduler run`` with the replay's configuration), ``spotshift
  no-capacity`` (capacity mode off), ``descheduler (chart)`` (the real descheduler with the policy and the
  schedule its Helm chart ships at v0.36.0: its default policy, a CronJob every two minutes, taken as a
  descheduling interval), ``descheduler (spot-tuned)`` (``RemovePodsViolatingNodeAffinity`` on
  ``preferredDuringSchedulingIgnoredDuringExecution``, ``DefaultEvictor`` with ``nodeFit``, every
  ``replay.TUNED_INTERVAL``), ``karpenter`` (no spotshift at all: plain Deployments under the default scheduler,
  Karpenter alone), ``karpenter + spotshift`` (spotshift's webhook, extender and rescheduler with the replay's
  configuration and spotshift's defaults otherwise, beside Karpenter). The descheduler acts on the run's namespace
  only (``DefaultEvictor``'s ``namespaceLabelSelector``), never on the control plane's own pods;
* a **world** (``WORLDS``), which brings its own cloud: an object with the node books of
  :class:`tests.support.replay_cloud.Cloud` (``pending`` and ``refill`` are that cloud in either world;
  ``karpenter`` is :class:`KarpenterWorld`: the real Karpenter provisions, the trace's spot market is played
  through its NodePool; ``karpenter-when-empty`` is :class:`KarpenterWhenEmptyWorld`: Karpenter only as the
  autoscaler of nodes for pending pods, which the simulation's provisioner model is checked against).

A policy runs in the worlds ``WORLD_POLICIES`` gives it (:func:`combinations`). Every duration the processes get is
the trace's divided by the compression (Karpenter's own timers excepted: the ``karpenter`` world's runs go on past
the trace's end until no on-demand node is left, ``SETTLE``); the figures are in trace time, from the cloud's node
books and a :class:`tests.support.disruption_ledger.DisruptionLedger` of the namespace, which the cloud tells of
every node it reclaims. The run's nodes and namespaces are deleted afterwards, so runs do not see each other.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from bench.churnlab import replay
from extender.certs import main as spot_certs
from tests.support.controlplane import ApiError, ControlPlane, wait_for
from tests.support.disruption_ledger import PDBS, DisruptionLedger
from tests.support.extender_server import ROOT, ExtenderProcess
from tests.support.karpenter import (
    CONSOLIDATING,
    NODECLASSES,
    NODEPOOLS,
    Karpenter,
    KarpenterCloud,
    install_crds,
    node_class,
    node_pool,
    remove_pool,
    when_empty,
)
from tests.support.peers import descheduler_binary
from tests.support.replay_cloud import TEST_LABEL, Book, Cloud, node_minutes, on_demand_series
from tests.support.rescheduler_world import Rescheduler

SCOPE_LABEL = "e2e.spotshift.io/replay"
"""The namespaces the webhook of a run serves."""
NAMESPACE_NAME = "kubernetes.io/metadata.name"


def seconds(trace_seconds: float, compression: float) -> str:
    """A duration of the trace as the real processes take it (a Go-style duration)."""
    return f"{trace_seconds / compression:g}s"


# ---- spotshift's webhook and extender ---------------------------------------------------------------------------


def _probe_pod(label: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {
            "nodeSelector": {TEST_LABEL: label},
            "containers": [{"name": "app", "image": "registry.example/app:1"}],
        },
    }


def mutated(plane: ControlPlane, namespace: str) -> bool:
    """Whether the webhook mutates the pods of ``namespace`` (a dry-run pod gets the replay's scheduler)."""
    pod = plane.api.post(f"/api/v1/namespaces/{namespace}/pods?dryRun=All", _probe_pod("none"))
    return pod["spec"].get("schedulerName") == replay.SCHEDULER_NAME


@contextlib.contextmanager
def spotshift_front(
    plane: ControlPlane, namespace: str, work_dir: Path, config: dict[str, Any]
) -> Iterator[tuple[Path, str]]:
    """spot-extender serving the webhook (for ``namespace``) and the extender (the ``spotshift-scheduler``
    profile of a restarted kube-scheduler) with ``config``; yields the path of that configuration and spotshift's own
    namespace (its Lease and the placeholders; the webhook leaves the pods of that namespace alone)."""
    home = f"{namespace}-spotshift"
    plane.create_namespace(home)
    config = {**config, "namespace": home}
    config["rescheduler"] = {**config.get("rescheduler", {}), "lease_name": f"replay-{namespace}"}
    path = work_dir / "spotshift.yaml"
    path.write_text(yaml.safe_dump(config))
    server = ExtenderProcess(work_dir, plane.kubeconfig, config).start()
    hook_name = f"spotshift-replay-{uuid.uuid4().hex[:6]}"
    hook_path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{hook_name}"
    shipped = yaml.safe_load((ROOT / "deploy/base/mutatingwebhook.yaml").read_text())
    shipped["metadata"]["name"] = hook_name
    hook = shipped["webhooks"][0]
    hook["clientConfig"] = {"url": server.url + "/mutate"}  # no Service networking on loopback
    hook["namespaceSelector"]["matchExpressions"].append({"key": SCOPE_LABEL, "operator": "In", "values": ["on"]})
    scheduler = yaml.safe_load((ROOT / "deploy/scheduler/base/kube-scheduler-v1.yaml").read_text())
    (ext,) = scheduler["extenders"]
    ext["urlPrefix"] = server.url
    ext["tlsConfig"]["caFile"] = str(server.certs / "ca.crt")
    scheduler["profiles"].append({"schedulerName": "default-scheduler"})
    try:
        plane.api.post("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", shipped)
        certs = ["--out", str(server.certs), "--ip", "127.0.0.1"]
        patched = spot_certs([*certs, "--patch-webhook", hook_name, "--kubeconfig", str(plane.kubeconfig)])
        if patched != 0:
            raise RuntimeError(f"spot-certs --patch-webhook {hook_name} exited {patched}")
        plane.api.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {SCOPE_LABEL: "on"}}})
        plane.restart_scheduler(scheduler)
        wait_for(lambda: mutated(plane, namespace), timeout=30, what="the API server to call the webhook")
        yield path, home
    finally:
        plane.delete_namespace(home)
        plane.api.delete_if_exists(hook_path)
        plane.restart_scheduler(None)
        server.stop()


@contextlib.contextmanager
def no_front(plane: ControlPlane, namespace: str, work_dir: Path, config: dict[str, Any]) -> Iterator[tuple[Path, str]]:
    """No spotshift at all: plain pods under kube-scheduler's default profile; yields where a configuration would
    be (none is written) and an empty namespace of spotshift's own."""
    yield work_dir / "spotshift.yaml", ""


@contextlib.contextmanager
def capacity_priority_class(plane: ControlPlane) -> Iterator[None]:
    """The PriorityClass deploy/base/rescheduler ships for the placeholders, deleted afterwards if this made it."""
    body = yaml.safe_load((ROOT / "deploy/base/rescheduler/capacity-priorityclass.yaml").read_text())
    path = "/apis/scheduling.k8s.io/v1/priorityclasses"
    made = True
    try:
        plane.api.post(path, body)
    except ApiError as error:
        if error.status != 409:
            raise
        made = False
    try:
        yield
    finally:
        if made:
            plane.api.delete_if_exists(f"{path}/{body['metadata']['name']}")


# ---- the workloads ----------------------------------------------------------------------------------------------


def deployment(workload: Any, label: str, compression: float) -> dict[str, Any]:
    """A replay workload as a Deployment on the run's nodes (``label``), Ready ``READY_AFTER`` after it runs."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": workload.name},
        "spec": {
            "replicas": workload.peak,
            "selector": {"matchLabels": {"app": workload.name}},
            "template": {
                "metadata": {
                    "labels": {"app": workload.name},
                    "annotations": {"e2e.spotshift.io/ready-after": f"{replay.READY_AFTER / compression:g}"},
                },
                "spec": {
                    "nodeSelector": {TEST_LABEL: label},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.example/app:1",
                            "resources": {
                                "requests": {"cpu": f"{workload.cpu_m}m", "memory": f"{workload.memory_mi}Mi"}
                            },
                        }
                    ],
                },
            },
        },
    }


def budgets(plane: ControlPlane, namespace: str) -> None:
    """The replay's budgets (``maxUnavailable: 1``) in ``namespace``."""
    for w in replay.WORKLOADS:
        if w.pdb:
            if w.pdb != "max-unavailable-1":
                raise ValueError(f"{w.name}: budget {w.pdb!r} is not one the replay knows")
            body = {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": w.name},
                "spec": {"selector": {"matchLabels": {"app": w.name}}, "maxUnavailable": 1},
            }
            plane.api.post(PDBS.format(ns=namespace), body)


def evicted(r: Rescheduler) -> set[str]:
    """Pods the rescheduler evicted (an eviction of a pod already terminating is not one)."""
    return {
        line["pod"]
        for line in r.lines()
        if str(line.get("msg", "")).startswith("eviction of pod")
        and line.get("result") == "evicted"
        and "already terminating" not in line["msg"]
    }


def rescheduler_flags(compression: float) -> list[str]:
    """``spot-rescheduler run``'s durations of the replay, divided by ``compression``."""
    r = replay.RESCHEDULER
    return [
        f"--{name.replace('_', '-')}={seconds(r[name], compression)}"
        for name in (
            "housekeeping_interval",
            "node_drain_delay",
            "pod_eviction_timeout",
            "max_graceful_termination",
            "replacement_timeout",
            "node_backoff",
        )
    ]


# ---- the policies' processes ------------------------------------------------------------------------------------


@dataclass(slots=True)
class RunContext:
    """What a policy's processes are started with."""

    plane: ControlPlane
    namespace: str
    home: str
    config: Path
    work_dir: Path
    compression: float


class Processes(Protocol):
    """A policy's own processes, started before the workloads and closed after the run."""

    def start(self, ctx: RunContext) -> None: ...
    def failure(self) -> str | None:
        """Why a process ended early (``None``: all running)."""

    def logged_evictions(self) -> int | None:
        """Evictions by the policy's own log (``None``: it logs none)."""

    def close(self) -> str:
        """Stop; the tail of the log."""


class NoProcesses:
    def start(self, ctx: RunContext) -> None:
        pass

    def failure(self) -> str | None:
        return None

    def logged_evictions(self) -> int | None:
        return None

    def close(self) -> str:
        return ""


class SpotshiftProcesses:
    """``spot-rescheduler run`` with the run's configuration and the replay's durations."""

    def __init__(self) -> None:
        self.r: Rescheduler | None = None

    def start(self, ctx: RunContext) -> None:
        log = ctx.work_dir / "rescheduler.log"
        self.r = Rescheduler(ctx.plane.kubeconfig, ctx.config, log, *rescheduler_flags(ctx.compression))

    def failure(self) -> str | None:
        if self.r is not None and self.r.proc.poll() is not None:
            return f"the rescheduler exited ({self.r.proc.returncode}):\n{self.r.tail()}"
        return None

    def logged_evictions(self) -> int | None:
        return None if self.r is None else len(evicted(self.r))

    def close(self) -> str:
        if self.r is None:
            return ""
        self.r.close()
        return self.r.tail(15)


CHART_POLICY: dict[str, Any] = {
    "pluginConfig": [
        {
            "name": "DefaultEvictor",
            "args": {"podProtections": {"defaultDisabled": ["PodsWithLocalStorage"], "extraEnabled": ["PodsWithPVC"]}},
        },
        {"name": "RemoveDuplicates"},
        {
            "name": "RemovePodsHavingTooManyRestarts",
            "args": {"podRestartThreshold": 100, "includingInitContainers": True},
        },
        {
            "name": "RemovePodsViolatingNodeAffinity",
            "args": {"nodeAffinityType": ["requiredDuringSchedulingIgnoredDuringExecution"]},
        },
        {"name": "RemovePodsViolatingNodeTaints"},
        {"name": "RemovePodsViolatingInterPodAntiAffinity"},
        {"name": "RemovePodsViolatingTopologySpreadConstraint"},
        {
            "name": "LowNodeUtilization",
            "args": {
                "thresholds": {"cpu": 20, "memory": 20, "pods": 20},
                "targetThresholds": {"cpu": 50, "memory": 50, "pods": 50},
            },
        },
    ],
    "plugins": {
        "balance": {
            "enabled": ["RemoveDuplicates", "RemovePodsViolatingTopologySpreadConstraint", "LowNodeUtilization"]
        },
        "deschedule": {
            "enabled": [
                "RemovePodsHavingTooManyRestarts",
                "RemovePodsViolatingNodeTaints",
                "RemovePodsViolatingNodeAffinity",
                "RemovePodsViolatingInterPodAntiAffinity",
            ]
        },
    },
}
"""The profile of the descheduler Helm chart's default ``deschedulerPolicy`` (charts/descheduler/values.yaml of
sigs.k8s.io/descheduler v0.36.0)."""

TUNED_POLICY: dict[str, Any] = {
    "pluginConfig": [
        {"name": "DefaultEvictor", "args": {"nodeFit": True}},
        {
            "name": "RemovePodsViolatingNodeAffinity",
            "args": {"nodeAffinityType": ["preferredDuringSchedulingIgnoredDuringExecution"]},
        },
    ],
    "plugins": {"deschedule": {"enabled": ["RemovePodsViolatingNodeAffinity"]}},
}
"""The descheduler as tuned for spot: pods leave a node when another matches more of their preferred affinity (the
webhook's preference for spot) and fits them."""


def descheduler_policy(profile: dict[str, Any], namespace: str) -> dict[str, Any]:
    """A ``DeschedulerPolicy`` of one profile that evicts only the pods of ``namespace``."""
    config = [dict(p) for p in profile["pluginConfig"]]
    evictor = next((p for p in config if p["name"] == "DefaultEvictor"), None)
    if evictor is None:
        evictor = {"name": "DefaultEvictor", "args": {}}
        config.insert(0, evictor)
    evictor["args"] = {
        **evictor.get("args", {}),
        "namespaceLabelSelector": {"matchLabels": {NAMESPACE_NAME: namespace}},
    }
    return {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerPolicy",
        "profiles": [{"name": "default", "pluginConfig": config, "plugins": profile["plugins"]}],
    }


class DeschedulerProcess:
    """The real descheduler (``tests.support.peers.descheduler_binary``), out of the cluster, every ``interval``
    trace seconds; its log kept in the run's directory."""

    def __init__(self, profile: dict[str, Any], interval: float) -> None:
        self.profile = profile
        self.interval = interval
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path: Path | None = None

    def start(self, ctx: RunContext) -> None:
        policy = ctx.work_dir / "descheduler-policy.yaml"
        policy.write_text(yaml.safe_dump(descheduler_policy(self.profile, ctx.namespace)))
        self.log_path = ctx.work_dir / "descheduler.log"
        argv = [
            str(descheduler_binary()),
            f"--kubeconfig={ctx.plane.kubeconfig}",
            f"--policy-config-file={policy}",
            f"--descheduling-interval={seconds(self.interval, ctx.compression)}",
            "--secure-port=0",
            "--v=3",
        ]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def _log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path is not None else ""

    def failure(self) -> str | None:
        if self.proc is not None and self.proc.poll() is not None:
            return f"the descheduler exited ({self.proc.returncode}):\n{self.tail()}"
        return None

    def logged_evictions(self) -> int | None:
        return sum(1 for line in self._log().splitlines() if '"Evicted pod"' in line)

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self._log().splitlines()[-lines:])

    def close(self) -> str:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.tail()


Front = Callable[[ControlPlane, str, Path, dict[str, Any]], contextlib.AbstractContextManager[tuple[Path, str]]]


@dataclass(frozen=True, slots=True)
class PolicySpec:
    config: Callable[[float], dict[str, Any]]
    """spotshift's configuration (webhook, extender, rescheduler) at a compression."""
    processes: Callable[[], Processes]
    front: Front = spotshift_front
    """spotshift's webhook and extender (:func:`spotshift_front`), or none (:func:`no_front`)."""


POLICIES: dict[str, PolicySpec] = {
    "none": PolicySpec(replay.overrides, NoProcesses),
    "spotshift": PolicySpec(replay.overrides, SpotshiftProcesses),
    "spotshift no-capacity": PolicySpec(replay.no_capacity, SpotshiftProcesses),
    "descheduler (chart)": PolicySpec(
        replay.overrides, lambda: DeschedulerProcess(CHART_POLICY, replay.CHART_INTERVAL)
    ),
    "descheduler (spot-tuned)": PolicySpec(
        replay.overrides, lambda: DeschedulerProcess(TUNED_POLICY, replay.TUNED_INTERVAL)
    ),
    "karpenter": PolicySpec(replay.overrides, NoProcesses, no_front),
    "karpenter + spotshift": PolicySpec(replay.overrides, SpotshiftProcesses),
}


# ---- the worlds -------------------------------------------------------------------------------------------------


class ReplayCloud(Protocol):
    """What the runner needs of a world's cloud (tests.support.replay_cloud.Cloud has it)."""

    t0: float
    books: dict[str, Book]
    events: list[str]
    errors: list[str]
    on_node_end: Callable[[str, float], None]

    def now(self) -> float: ...
    def fill(self) -> None: ...
    def start(self) -> None: ...
    def is_alive(self) -> bool: ...
    def halt(self) -> None: ...
    def close(self) -> None: ...


WorldFactory = Callable[[ControlPlane, list[str], str, float, replay.Replay, Path], ReplayCloud]
"""A world's cloud of (the plane, the namespaces of the run, the nodes' label, the compression, the trace, the run's
directory)."""


def _cloud_world(world: str) -> WorldFactory:
    def make(
        plane: ControlPlane, namespaces: list[str], label: str, k: float, run: replay.Replay, work_dir: Path
    ) -> ReplayCloud:
        return Cloud(plane, namespaces, label, k, world=world, run=run)

    return make


class KarpenterWorld(KarpenterCloud):
    """The ``karpenter`` world: the real Karpenter (KWOK provider, tests/support/karpenter.py) started with its
    CRDs, a KWOKNodeClass and a NodePool of the run's own (spot and on-demand, ``WhenEmptyOrUnderutilized``) whose
    nodes carry the run's label, and the trace's spot market played through that NodePool. ``close()`` removes the
    run's Deployments, then the NodePool with its nodes and the node class, then stops Karpenter."""

    disruption: dict[str, Any] = CONSOLIDATING
    """The NodePool's disruption block."""

    def __init__(
        self, plane: ControlPlane, namespaces: list[str], label: str, k: float, run: replay.Replay, work_dir: Path
    ) -> None:
        pool = f"replay-{label}"
        super().__init__(plane, namespaces, pool, label, k, cut=run.cut, back=run.back, notice=replay.NOTICE)
        install_crds(plane)
        self.karpenter = Karpenter(plane, work_dir / "karpenter.log")
        self.karpenter.start()
        try:
            plane.api.post(NODECLASSES, node_class(pool))
            plane.api.post(NODEPOOLS, node_pool(pool, pool, label, ["spot", "on-demand"], self.disruption))
        except BaseException:
            self.karpenter.stop()
            raise

    def is_alive(self) -> bool:
        return super().is_alive() and self.karpenter.alive()

    def close(self) -> None:
        super().close()
        try:
            for w in replay.WORKLOADS:
                self.plane.api.delete_if_exists(f"/apis/apps/v1/namespaces/{self.namespaces[0]}/deployments/{w.name}")
            remove_pool(self.plane, self.pool, self.pool, self.label)
        finally:
            self.karpenter.stop()


class KarpenterWhenEmptyWorld(KarpenterWorld):
    """The ``karpenter-when-empty`` world (``replay.KARPENTER_WHEN_EMPTY``): the real Karpenter as the pending
    world's autoscaler, its NodePool consolidating ``WhenEmpty`` after the replay's removal delay (compressed, as
    the other worlds' provisioner's) and replacing no drifted node (:func:`when_empty`). What the simulation's
    provisioner model is checked against."""

    disruption = when_empty(seconds(replay.REMOVAL_DELAY, replay.COMPRESSION))


WORLDS: dict[str, WorldFactory] = {w: _cloud_world(w) for w in replay.WORLDS} | {
    "karpenter": KarpenterWorld,
    replay.KARPENTER_WHEN_EMPTY: KarpenterWhenEmptyWorld,
}

WORLD_POLICIES: dict[str, tuple[str, ...]] = {
    "pending": ("none", "spotshift", "spotshift no-capacity", "descheduler (chart)", "descheduler (spot-tuned)"),
    "refill": ("none", "spotshift", "spotshift no-capacity", "descheduler (chart)", "descheduler (spot-tuned)"),
    "karpenter": ("karpenter", "karpenter + spotshift"),
    replay.KARPENTER_WHEN_EMPTY: ("none", "spotshift"),
}
"""The policies run in each world: Karpenter's two in the ``karpenter`` world, where Karpenter is the provisioner,
the others in the worlds of the replay's provisioner (tests/support/replay_cloud.py), and ``none`` and
``spotshift`` where Karpenter is only the autoscaler (``karpenter-when-empty``: the provisioner model's check)."""

SETTLE: dict[str, float] = {"karpenter": 900.0}
"""Wall seconds a world's run may go on past the trace's end until no on-demand node is left (Karpenter's timers
run on the wall clock, not compressed: tests/support/karpenter.py); the figures stay counted over the trace."""


def combinations(policies: list[str] | None = None, worlds: list[str] | None = None) -> list[tuple[str, str]]:
    """The (world, policy) pairs run, in ``WORLD_POLICIES`` order: every valid one, or those of ``policies`` and
    ``worlds``."""
    return [
        (world, policy)
        for world, valid in WORLD_POLICIES.items()
        if worlds is None or world in worlds
        for policy in valid
        if policies is None or policy in policies
    ]


# ---- one run ----------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class RunLog:
    """What a run leaves besides its figures: the cloud's events, the policy's log tail and logged evictions."""

    events: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    tail: str = ""
    logged_evictions: int | None = None
    budget_samples: int = 0
    violations: list[tuple[float, str]] = field(default_factory=list)
    """(trace time, budget) of each PDB violation."""
    marks: dict[str, dict[str, float]] = field(default_factory=dict)
    """The ``karpenter`` world's: per node, the drain marks seen on it with the trace time each was first seen."""
    ended: int = 0
    """Nodes the cloud reclaimed."""
    seconds: float = 0.0


def run_replay(
    plane: ControlPlane,
    policy: str,
    world: str | WorldFactory,
    work_dir: Path,
    *,
    run: replay.Replay = replay.LONG,
    compression: float = replay.COMPRESSION,
    settle: bool = True,
) -> tuple[replay.Outcome, RunLog]:
    """``policy`` (a key of ``POLICIES``) in ``world`` (a key of ``WORLDS``, or a world's cloud factory) over
    ``run`` on ``plane``; see the module docstring. ``settle=False``: the run ends with the trace in every world
    (no ``on_demand_gone_at``)."""
    spec = POLICIES[policy]
    if isinstance(world, str) and policy not in WORLD_POLICIES[world]:
        raise ValueError(f"{policy!r} is not run in the {world} world: {', '.join(WORLD_POLICIES[world])}")
    make_cloud = WORLDS[world] if isinstance(world, str) else world
    world_name = world if isinstance(world, str) else getattr(world, "__name__", "world")
    namespace = f"rr-{uuid.uuid4().hex[:6]}"
    work_dir.mkdir(parents=True, exist_ok=True)
    plane.create_namespace(namespace)
    log = RunLog()
    started = time.monotonic()
    processes = spec.processes()
    try:
        with (
            capacity_priority_class(plane),
            spec.front(plane, namespace, work_dir, spec.config(compression)) as (config, home),
        ):
            ctx = RunContext(plane, namespace, home, config, work_dir, compression)
            wait = SETTLE.get(world_name, 0.0) if settle else 0.0
            outcome = _play(ctx, processes, make_cloud, run, log, (policy, world_name, wait))
    finally:
        log.tail = processes.close()
        plane.delete_namespace(namespace)
        log.seconds = time.monotonic() - started
    return outcome, log


def _play(
    ctx: RunContext,
    processes: Processes,
    make_cloud: WorldFactory,
    run: replay.Replay,
    log: RunLog,
    names: tuple[str, str, float],
) -> replay.Outcome:
    """The run; ``names``: the policy, the world and the wall seconds it may settle past the trace's end."""
    plane, k = ctx.plane, ctx.compression
    policy, world, settle = names
    label = uuid.uuid4().hex[:8]
    processes.start(ctx)
    budgets(plane, ctx.namespace)
    cloud = make_cloud(plane, [ns for ns in (ctx.namespace, ctx.home) if ns], label, k, run, ctx.work_dir)
    ledger = DisruptionLedger(plane, [ctx.namespace], cloud.now)
    cloud.on_node_end = ledger.node_ended
    try:
        ledger.start()
        cloud.fill()
        for w in replay.WORKLOADS:
            plane.api.post(f"/apis/apps/v1/namespaces/{ctx.namespace}/deployments", deployment(w, label, k))
        cloud.t0 = time.monotonic()
        cloud.start()
        # The trace's clock drives the run; the figures come from what was observed, not from this loop's pace.
        deadline = time.monotonic() + run.length / k + settle
        while cloud.now() < run.length or (settle and on_demand_left(cloud.books)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"on-demand nodes left {settle:g} s past the trace: {on_demand_left(cloud.books)}")
            failure = processes.failure()
            if failure is not None:
                raise RuntimeError(failure)
            plane.ensure_alive()
            if not cloud.is_alive():
                raise RuntimeError(f"the cloud stopped: {cloud.errors[-3:]}")
            ledger.sample_budgets()
            time.sleep(0.2)
        settled_at = cloud.now() if settle else None
        _stop_policy(processes, ledger, log)
        cloud.halt()
        outcome = _outcome(ctx, cloud, ledger, run, (policy, world), settled_at)
        log.events, log.errors, log.budget_samples = list(cloud.events), list(cloud.errors), ledger.samples
        log.violations = list(ledger.violations)
        log.marks = dict(getattr(cloud, "marks", {}))
        log.ended = len(getattr(cloud, "ended", ()))
        return outcome
    finally:
        cloud.close()
        ledger.close()


def _stop_policy(processes: Processes, ledger: DisruptionLedger, log: RunLog, timeout: float = 15.0) -> None:
    """Stop the policy's processes before its figures are read, so that the evictions its log reports and those the
    ledger saw cover the same run (an eviction made between two reads would count on one side only), then give the
    ledger's watch the time to see the last of them."""
    log.tail = processes.close()
    log.logged_evictions = processes.logged_evictions()
    if log.logged_evictions is None:
        return
    deadline = time.monotonic() + timeout
    while ledger.evictions() < log.logged_evictions and time.monotonic() < deadline:
        time.sleep(0.2)


def on_demand_left(books: dict[str, Book]) -> list[str]:
    """The on-demand nodes alive."""
    return sorted(name for name, b in books.items() if not b.spot and b.gone is None)


def _outcome(
    ctx: RunContext,
    cloud: ReplayCloud,
    ledger: DisruptionLedger,
    run: replay.Replay,
    names: tuple[str, str],
    settled_at: float | None,
) -> replay.Outcome:
    """The figures over the trace; ``settled_at``: the trace time the last on-demand node was gone at, when the
    run went on past the trace for it."""
    policy, world = names
    until = run.length
    od = node_minutes(cloud.books, until, spot=False)
    spot = node_minutes(cloud.books, until, spot=True)
    price = replay.NODE_TYPE.price
    # The ReplicaSets replace what ended in the last moments: missing replicas are counted once they had the time.
    deadline = time.monotonic() + 30.0
    lost = ledger.lost_pods(ctx.namespace, until)
    while lost and time.monotonic() < deadline:
        time.sleep(0.5)
        lost = ledger.lost_pods(ctx.namespace, until)
    on_demand = {name for name, b in cloud.books.items() if not b.spot and b.gone is None}
    pods = ctx.plane.api.list(f"/api/v1/namespaces/{ctx.namespace}/pods")
    return replay.Outcome(
        policy=policy,
        world=world,
        on_demand_node_minutes=od,
        spot_node_minutes=spot,
        cost=(od + spot * replay.SPOT_FRACTION) * price / 60.0,
        evictions=ledger.evictions(),
        moved_then_reclaimed=ledger.moved_then_reclaimed(),
        reclaimed=ledger.reclaimed(),
        pending_pod_minutes=ledger.pending_pod_minutes(until),
        pdb_violations=len(ledger.violations),
        lost_pods=lost,
        on_demand_pods_at_end=sum(1 for p in pods if p["spec"].get("nodeName") in on_demand),
        on_demand_series=on_demand_series(cloud.books, until),
        on_demand_gone_at=settled_at,
        on_demand_node_minutes_until_gone=None
        if settled_at is None
        else node_minutes(cloud.books, settled_at, spot=False),
    )
