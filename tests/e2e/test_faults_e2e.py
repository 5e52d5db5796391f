"""Fault injection mid-drain: kube-apiserver and etcd killed, stopped and restarted; the rescheduler killed.

Every scenario builds the same small world: one spot node, three on-demand nodes each running one pod of the
Deployment ``held`` (its PodDisruptionBudget allows one disruption at a time, so the three drains share it),
and a rescheduler (``python -m rescheduler.cli run``, as the Deployment runs it). No scheduler serves
``held``'s pods: the test binds them. Replacements therefore stay Pending until the test lets them go, which
holds the first drain in the middle (node marked, pod evicted, replacement not yet Running) for as long as
the test needs: the fault is injected at that observed moment, never after a guessed sleep. Once the fault is
over, the test binds every Pending ``held`` pod to the spot node, as a scheduler would.

A watcher runs through the whole scenario and the end state is checked once the rescheduler has settled:

* PodDisruptionBudget floor: ``currentHealthy`` never below ``desiredHealthy`` (polled every 0.1 s);
* lost pods: every ``held`` replica Running and Ready at the end;
* leftover marks: no node carries spotshift's mark unless it is ``drained`` and empty;
* crashes: no rescheduler process exited (or logged a traceback) except those the fault killed;
* the other on-demand nodes (not the one the fault hit) are drained in the same run.

Each scenario prints one ``fault-result`` line with these figures (``pytest -s`` shows them).

``test_the_leader_killed_with_three_drains_in_flight`` is the parallel case: three on-demand nodes, each with
one pod of a Deployment of its own (``held-0`` .. ``held-2``, the other replica on the spot node, a budget of
one disruption each), ``disruption.budgets`` and ``--max-nodes-per-cycle`` allowing three drains at once, two
replicas. Once three nodes are marked ``draining`` the leader is SIGKILLed; the other replica takes the lease
and resumes or rolls back each drain. Checked once it is quiet (no drain in flight, nothing left to start): no
node left ``draining``, any node still marked ``drained`` and empty, no budget below its minimum, every pod
Running and Ready, no crash.

``test_the_api_server_down_20s_with_three_drains_in_flight_delays_only_the_drain_that_meets_it`` is the outage case of
the same world without a lease: one of the three drains fails and rolls back while its node's writes are refused by
:class:`~tests.support.admission_gate.NodeWriteGate`, kube-apiserver is killed for 20 s in the middle of that
rollback, and the other two must finish once it is back while the rollback still fails. The orderings are read from
the gate's refusal times and the rescheduler's log lines, each step of the test waiting for the state it needs.
"""

from __future__ import annotations

import datetime
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.admission_gate import EvictionGate, NodeWriteGate
from tests.support.controlplane import ApiError, ControlPlane, wait_for
from tests.support.controlplane.faults import Fault, inject, restore
from tests.support.rescheduler_world import (
    STATE_ANNOTATION,
    TAINT_KEY,
    TAINT_VALUE,
    BudgetWatcher,
    Rescheduler,
    World,
    bind_pod,
)

pytestmark = pytest.mark.e2e

FAST = (
    "--pod-eviction-timeout=20s",
    "--replacement-timeout=120s",
    "--max-graceful-termination=5s",
)
"""Beyond the run-loop tests' flags: replacements may wait out a fault plus the API server's restart."""

NO_LEASE = ("--leader-elect=false",)


@dataclass(frozen=True, slots=True)
class Scenario:
    """``fault`` (``None``: SIGKILL the rescheduler, the leader when ``replicas`` is 2), extra rescheduler
    ``flags``, and whether the fault hits while an eviction is in flight (``gated``) rather than while the
    drain waits for its replacement."""

    fault: Fault | None
    replicas: int = 1
    flags: tuple[str, ...] = ()
    gated: bool = False


SCENARIOS = [
    pytest.param(Scenario(Fault("kube-apiserver", "kill")), id="api-server-killed-and-restarted-at-once"),
    pytest.param(Scenario(Fault("kube-apiserver", "kill"), flags=NO_LEASE), id="api-server-restarted-no-lease"),
    pytest.param(Scenario(Fault("kube-apiserver", "kill", 5)), id="api-server-down-5s"),
    pytest.param(Scenario(Fault("kube-apiserver", "kill", 5), flags=NO_LEASE), id="api-server-down-5s-no-lease"),
    pytest.param(Scenario(Fault("kube-apiserver", "kill", 15)), id="api-server-down-15s"),
    pytest.param(
        Scenario(Fault("kube-apiserver", "kill", 15), flags=(*NO_LEASE, "--pod-eviction-timeout=5s"), gated=True),
        id="api-server-down-15s-during-an-eviction-no-lease",
    ),
    pytest.param(Scenario(Fault("kube-apiserver", "stop", 10)), id="api-server-sigstop-10s"),
    pytest.param(Scenario(Fault("etcd", "kill", 5)), id="etcd-killed-5s"),
    pytest.param(Scenario(None), id="rescheduler-sigkill"),
    pytest.param(Scenario(None, replicas=2), id="leader-sigkill-with-two-replicas"),
]
"""With ``--leader-elect=false`` an outage does not end the drain through a lost lease: it has to ride it out.
The gated scenario's eviction fails (its retries end at the 5 s eviction timeout while the API server is down),
so the drain's rollback and backoff writes meet the outage too, and the node keeps its pod in backoff: the
other two nodes must still be drained."""


class Binder(threading.Thread):
    """Binds every Pending pod of ``apps`` to the spot node while ``open`` is set: the scheduler of ``held``."""

    def __init__(self, world: World, spot: str, apps: tuple[str, ...] = ("held",)) -> None:
        super().__init__(daemon=True)
        self.world = world
        self.spot = spot
        self.apps = apps
        self.open = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            if self.open.wait(0.2) and not self.stop.is_set():
                try:
                    for app in self.apps:
                        for p in self.world.pods(app):
                            if not p["spec"].get("nodeName"):
                                bind_pod(self.world, p["metadata"]["name"], self.spot)
                except (ApiError, requests.RequestException):
                    pass
            self.stop.wait(0.2)

    def close(self) -> None:
        self.stop.set()
        self.open.set()
        self.join(10)


def _held_on(world: World, node: str, apps: tuple[str, ...] = ("held",)) -> list[dict[str, Any]]:
    return [p for app in apps for p in world.pods(app) if p["spec"].get("nodeName") == node]


def _mid_drain(world: World, ods: list[str]) -> str | None:
    """The node whose drain is in the middle: marked, its pod evicted, a replacement Pending."""
    pending = [p for p in world.pods("held") if not p["spec"].get("nodeName")]
    if not pending:
        return None
    for od in ods:
        if world.our_taints(od) and not _held_on(world, od):
            return od
    return None


def _leftover_marks(world: World, ods: list[str], apps: tuple[str, ...] = ("held",)) -> dict[str, str]:
    """Nodes with spotshift's mark that are not an empty ``drained`` node, with what is left."""
    out = {}
    for od in ods:
        node = world.node(od)
        state = (node["metadata"].get("annotations") or {}).get(STATE_ANNOTATION)
        ours = [t for t in node["spec"].get("taints") or [] if t.get("key") == TAINT_KEY]
        ours = [t for t in ours if t.get("value") == TAINT_VALUE]
        if (state or ours) and not (state == "drained" and not _held_on(world, od, apps)):
            out[od] = f"state={state} taints={len(ours)}"
    return out


def _crashes(processes: list[Rescheduler], killed: set[str]) -> list[str]:
    out = []
    for r in processes:
        if r.name in killed:
            continue
        if r.proc.poll() is not None:
            out.append(f"{r.name} exited with {r.proc.returncode}")
        if "Traceback" in r.log_path.read_text(errors="replace"):
            out.append(f"{r.name} logged a traceback")
    return out


def _held_one_on_each(world: World, ods: list[str]) -> None:
    """A Deployment ``held`` no scheduler serves, one pod bound to each node of ``ods``, under a budget allowing
    one disruption."""
    world.deployment("held", 3, schedulerName=f"held-{world.label}", nodeSelector={})
    wait_for(lambda: len(world.pods("held")) == 3, timeout=60, what="the held pods to be created")
    for p, od in zip(world.pods("held"), ods, strict=True):
        bind_pod(world, p["metadata"]["name"], od)
    world.ready("held")
    world.pdb("held", "held", maxUnavailable=1)
    world.wait_pdb("held", 1)


def _kill_a_rescheduler(scenario: Scenario, processes: list[Rescheduler], restart: Callable[[], Rescheduler]) -> str:
    """SIGKILL the one rescheduler (and start another in its place) or the leader of several; the killed one's
    name."""
    if scenario.replicas == 1:
        victim = processes[0]
    else:
        victim = wait_for(
            lambda: next((r for r in processes if r.metric("spotshift_rescheduler_leader") == 1.0), None),
            timeout=30,
            what="the leader's metric",
        )
    victim.signal(signal.SIGKILL)
    victim.wait(10)
    if scenario.replicas == 1:
        processes.append(restart())
    return victim.name


def _ready_count(world: World, apps: tuple[str, ...]) -> int:
    """The pods of ``apps`` bound to a node, Running and Ready."""
    return len([p for app in apps for p in world.pods(app) if p["spec"].get("nodeName") and _ready(p)])


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_fault_mid_drain_leaves_no_mark_breaks_no_budget_and_loses_no_pod(
    request: pytest.FixtureRequest,
    control_plane: ControlPlane,
    world: World,
    start: Callable[..., Rescheduler],
    tmp_path: Path,
    scenario: Scenario,
) -> None:
    began = time.monotonic()
    spot = world.spot(allocatable={"cpu": "16", "memory": "32Gi", "pods": "110"})
    ods = [world.on_demand(allocatable={"cpu": "2", "memory": "4Gi", "pods": "110"}) for _ in range(3)]
    _held_one_on_each(world, ods)

    gate = EvictionGate(control_plane, world.ns, tmp_path).start() if scenario.gated else None
    budgets = BudgetWatcher(control_plane, world.ns)
    budgets.start()
    binder = Binder(world, spot)
    binder.start()
    config = world.config()
    processes = [start(config, *FAST, *scenario.flags, name=f"r{i}") for i in range(scenario.replicas)]
    killed: set[str] = set()
    try:
        if gate is not None:
            wait_for(gate.held.is_set, timeout=90, what="an eviction to be held at the gate")
            faulted = wait_for(
                lambda: next((od for od in ods if world.our_taints(od)), None), timeout=10, what="the marked node"
            )
        else:
            faulted = wait_for(lambda: _mid_drain(world, ods), timeout=90, what="a drain to be in the middle")
        if scenario.fault is not None:
            until = inject(control_plane, scenario.fault)
            restore(control_plane, scenario.fault, until)
        else:
            killed.add(
                _kill_a_rescheduler(
                    scenario, processes, lambda: start(config, *FAST, *scenario.flags, name="r-restarted")
                )
            )
        if gate is not None:
            gate.open.set()
        binder.open.set()

        others = [od for od in ods if od != faulted]

        def drained(od: str) -> bool:
            state = (world.node(od)["metadata"].get("annotations") or {}).get(STATE_ANNOTATION)
            return state == "drained" and not _held_on(world, od)

        def settled() -> bool:
            ready = _ready_count(world, ("held",))
            return ready == 3 and all(drained(od) for od in others) and not _leftover_marks(world, ods)

        with_deadline = _try_wait(settled, timeout=240)
        marks = _leftover_marks(world, ods)
        lost = 3 - _ready_count(world, ("held",))
        drained_others = [od for od in others if drained(od)]
        crashes = _crashes(processes, killed)
    finally:
        binder.close()
        if gate is not None:
            gate.close()
        violations = budgets.close()
    seconds = time.monotonic() - began
    print(
        f"\nfault-result | {request.node.callspec.id} | marks {len(marks)} | pdb violations {len(violations)} | "
        f"lost pods {lost} | crashes {len(crashes)} | other nodes drained {len(drained_others)}/{len(others)} | "
        f"{seconds:.0f}s"
    )
    assert marks == {}, f"leftover marks: {marks}"
    assert violations == [], f"a PodDisruptionBudget fell below its minimum: {violations[:5]}"
    assert lost == 0, f"{lost} held pods not Running and Ready"
    assert crashes == [], crashes
    assert sorted(drained_others) == sorted(others), "the other drainable nodes were not drained in the same run"
    assert with_deadline, "the rescheduler did not settle"


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _try_wait(condition: Callable[[], bool], timeout: float) -> bool:
    try:
        wait_for(condition, timeout=timeout, what="the rescheduler to settle", interval=0.5)
    except TimeoutError:
        return False
    return True


def _created(world: World, app: str, n: int) -> list[dict[str, Any]]:
    """The ``n`` pods of Deployment ``app``, once its ReplicaSet has made them all."""

    def pods() -> list[dict[str, Any]]:
        found = world.pods(app)
        return found if len(found) == n else []

    return wait_for(pods, timeout=60, what=f"{app}'s {n} pods to be created")


def _one_pod_on_each(world: World, spot: str, ods: list[str]) -> tuple[str, ...]:
    """A Deployment ``held-<i>`` of two replicas per on-demand node, one replica bound there and one on ``spot``,
    each with a budget allowing one disruption (computed); returns the Deployments' names."""
    apps = tuple(f"held-{i}" for i in range(len(ods)))
    for app in apps:
        world.deployment(app, 2, schedulerName=f"held-{world.label}", nodeSelector={})
    for app, od in zip(apps, ods, strict=True):
        first, second = _created(world, app, 2)
        bind_pod(world, first["metadata"]["name"], od)
        bind_pod(world, second["metadata"]["name"], spot)
    for app in apps:
        world.ready(app)
        world.pdb(app, app, maxUnavailable=1)
    for app in apps:
        world.wait_pdb(app, 1)
    return apps


def _draining(world: World, ods: list[str]) -> list[str]:
    """The nodes among ``ods`` marked ``draining`` with spotshift's taint."""
    out = []
    for od in ods:
        node = world.node(od)
        state = (node["metadata"].get("annotations") or {}).get(STATE_ANNOTATION)
        if state == "draining" and any(t.get("key") == TAINT_KEY for t in node["spec"].get("taints") or []):
            out.append(od)
    return out


def _kill_the_leader(processes: list[Rescheduler]) -> Rescheduler:
    """SIGKILL the replica that leads (once its metric says so); that replica."""
    leader = wait_for(
        lambda: [r for r in processes if r.metric("spotshift_rescheduler_leader") == 1.0],
        timeout=30,
        what="the leader's metric",
    )[0]
    leader.signal(signal.SIGKILL)
    leader.wait(10)
    return leader


def _quiet_leader(r: Rescheduler, cycles_at_takeover: float) -> bool:
    """The replica has run cycles as the leader, has no drain in flight, and its last plan found nothing to
    start."""
    led = (r.metric("spotshift_rescheduler_cycle_duration_seconds_count") or 0.0) >= cycles_at_takeover + 2
    return (
        led
        and r.metric("spotshift_rescheduler_drains_in_flight") == 0.0
        and r.metric("spotshift_rescheduler_drainable_nodes") == 0.0
    )


def _state(world: World, od: str) -> str | None:
    """The drain state annotation of a node."""
    state: str | None = (world.node(od)["metadata"].get("annotations") or {}).get(STATE_ANNOTATION)
    return state


def test_the_leader_killed_with_three_drains_in_flight(
    control_plane: ControlPlane, world: World, start: Callable[..., Rescheduler]
) -> None:
    """Three on-demand nodes, each with one pod of a Deployment of its own whose other replica runs on the spot
    node and whose PDB allows one disruption; ``disruption.budgets`` lets three nodes drain at once and three
    drains start per cycle. No scheduler serves the pods, so every drain waits for its replacement with its node
    marked. Once three nodes are marked ``draining`` at once, the leader of two replicas is SIGKILLed; the other
    takes the lease and resumes or rolls back each drain while the test binds the replacements to spot."""
    began = time.monotonic()
    spot = world.spot(allocatable={"cpu": "16", "memory": "32Gi", "pods": "110"})
    ods = [world.on_demand(allocatable={"cpu": "2", "memory": "4Gi", "pods": "110"}) for _ in range(3)]
    apps = _one_pod_on_each(world, spot, ods)

    budgets = BudgetWatcher(control_plane, world.ns)
    budgets.start()
    binder = Binder(world, spot, apps)
    binder.start()
    config = world.config(disruption={"budgets": [{"nodes": "3"}]})
    processes = [start(config, *FAST, "--max-nodes-per-cycle=3", name=name) for name in ("a", "b")]
    killed: set[str] = set()

    def draining() -> list[str]:
        return _draining(world, ods)

    try:
        wait_for(lambda: len(draining()) == 3, timeout=90, what="three drains in flight at once", interval=0.1)
        evicted = sum(1 for od in ods if not _held_on(world, od, apps))
        leader = _kill_the_leader(processes)
        killed.add(leader.name)
        (survivor,) = [r for r in processes if r is not leader]
        binder.open.set()
        wait_for(
            lambda: survivor.metric("spotshift_rescheduler_leader") == 1.0, timeout=60, what="the other replica to lead"
        )
        cycles_at_takeover = survivor.metric("spotshift_rescheduler_cycle_duration_seconds_count") or 0.0

        def lost() -> int:
            return 2 * len(apps) - _ready_count(world, apps)

        def settled() -> bool:
            quiet = _quiet_leader(survivor, cycles_at_takeover)
            return quiet and lost() == 0 and not draining() and not _leftover_marks(world, ods, apps)

        with_deadline = _try_wait(settled, timeout=240)
        marks = _leftover_marks(world, ods, apps)
        still_draining = draining()
        missing = lost()
        drained = [od for od in ods if _state(world, od) == "drained"]
        crashes = _crashes(processes, killed)
    finally:
        binder.close()
        violations = budgets.close()
    print(
        f"\nfault-result | leader-sigkill-with-three-drains-in-flight | {evicted} of 3 pods evicted at the kill | "
        f"drained {len(drained)}, rolled back {3 - len(drained)} | marks {len(marks)} | "
        f"pdb violations {len(violations)} | lost pods {missing} | crashes {len(crashes)} | "
        f"{time.monotonic() - began:.0f}s"
    )
    assert still_draining == [], f"nodes left draining: {still_draining}"
    assert marks == {}, f"leftover marks: {marks}"
    assert violations == [], f"a PodDisruptionBudget fell below its minimum: {violations[:5]}"
    assert missing == 0, f"{missing} held pods not Running and Ready"
    assert crashes == [], crashes
    assert with_deadline, "the rescheduler did not settle"


def _logged(r: Rescheduler, text: str, node: str) -> list[float]:
    """The times (Unix seconds) of ``r``'s log lines about ``node`` whose message holds ``text``, in order."""
    return [
        datetime.datetime.fromisoformat(line["ts"]).timestamp()
        for line in r.lines()
        if line.get("node") == node and text in line.get("msg", "")
    ]


def _emptied(world: World, od: str, apps: tuple[str, ...]) -> bool:
    state = (world.node(od)["metadata"].get("annotations") or {}).get(STATE_ANNOTATION)
    return state == "drained" and not _held_on(world, od, apps)


def _refused_after(gate: NodeWriteGate, moment: float) -> Callable[[], bool]:
    return lambda: any(t > moment for t in gate.refused)


def _rollback_attempts(r: Rescheduler, node: str) -> list[tuple[float, str]]:
    """The times and messages of ``r``'s rollback attempts on ``node``, in order."""
    return [
        (datetime.datetime.fromisoformat(line["ts"]).timestamp(), line["msg"])
        for line in r.lines()
        if line.get("node") == node and "rolling-back: attempt" in line.get("msg", "")
    ]


def _finished(r: Rescheduler, nodes: list[str]) -> list[float] | None:
    """The time each node's drain finished, once every one of them has."""
    times = [_logged(r, f"drained node {od}", od) for od in nodes]
    return [t[0] for t in times] if all(times) else None


def _assert_the_others_finished_during_the_rollback(
    others: list[str],
    done: list[float],
    opened_and_back: tuple[float, float],
    refused: list[float],
    gated: str,
    ended: list[float],
) -> None:
    """Each other drain finished after its replacement could be bound, after the rollback met the gate once the
    API server was back, while the rollback was still tried, and before the rollback ended."""
    opened_at, back_at = opened_and_back
    for od, t in zip(others, done, strict=True):
        assert opened_at < t, f"{od} finished before its replacement could be bound"
        assert any(back_at < moment < t for moment in refused), f"{od} finished before the rollback met the gate"
        assert any(moment > t for moment in refused), f"the rollback stopped being tried before {od} finished"
        assert ended and ended[0] > t, f"the rollback of {gated} ended before {od} finished: it held the others up"


def _wait_for_three_drains_waiting(world: World, ods: list[str], apps: tuple[str, ...]) -> None:
    wait_for(
        lambda: len(_draining(world, ods)) == 3 and not any(_held_on(world, od, apps) for od in ods),
        timeout=90,
        what="three drains in flight, each waiting for its replacement",
        interval=0.2,
    )


def test_the_api_server_down_20s_with_three_drains_in_flight_delays_only_the_drain_that_meets_it(
    control_plane: ControlPlane, world: World, start: Callable[..., Rescheduler], tmp_path: Path
) -> None:
    """Three on-demand nodes drain at once (one pod each of its own Deployment, as in the leader test), each waiting for
    its replacement, without a lease (the drains ride the outage out). The middle node's replacement is bound to a node
    that is not spot, so its drain fails and rolls back, and its node's writes are refused (503,
    :class:`~tests.support.admission_gate.NodeWriteGate`) from before the outage until the test has seen the other two
    drains finish after it: the rollback keeps failing across the whole scenario, and the outage (kube-apiserver killed
    for 20 s) falls in the middle of it. The orderings, from the gate's clock and the rescheduler's log lines (the same
    machine's time), not from sleeps: the rollback's attempts fail before, during and after the outage, one at a time;
    once the API server is back the other two drains finish while it still fails (a refusal before each finishes and one
    after); it ends only after them, its mark removed. Then no mark is left, no pod lost, no budget broken, no crash."""
    began = time.monotonic()
    spot = world.spot(allocatable={"cpu": "16", "memory": "32Gi", "pods": "110"})
    ods = [world.on_demand(allocatable={"cpu": "2", "memory": "4Gi", "pods": "110"}) for _ in range(3)]
    elsewhere = world.make_node("other", labels={"e2e.spotshift.io/test": world.label})["metadata"]["name"]
    apps = _one_pod_on_each(world, spot, ods)
    gated, others = ods[1], [ods[0], ods[2]]
    gate = NodeWriteGate(control_plane, gated, tmp_path).start()
    budgets = BudgetWatcher(control_plane, world.ns)
    budgets.start()
    binder = Binder(world, spot, (apps[0], apps[2]))
    binder.start()
    config = world.config(disruption={"budgets": [{"nodes": "3"}]})
    r = start(config, *FAST, "--max-nodes-per-cycle=3", "--replacement-timeout=600s", *NO_LEASE, name="r")
    fault = Fault("kube-apiserver", "kill", 20)
    try:
        _wait_for_three_drains_waiting(world, ods, apps)
        gate.refusing.set()
        (pending,) = wait_for(
            lambda: [p for p in world.pods(apps[1]) if not p["spec"].get("nodeName")], timeout=30, what="a pending pod"
        )
        bind_pod(world, pending["metadata"]["name"], elsewhere)
        wait_for(lambda: bool(gate.refused), timeout=60, what=f"the rollback of {gated} to be refused")
        killed_at = time.time()
        restore(control_plane, fault, inject(control_plane, fault))
        back_at = time.time()
        wait_for(_refused_after(gate, back_at), timeout=180, what="the rollback to be refused again after the outage")
        opened_at = time.time()
        binder.open.set()
        wait_for(
            lambda: all(_emptied(world, od, apps) for od in others), timeout=240, what="the other two drains to finish"
        )

        done = wait_for(lambda: _finished(r, others), timeout=30, what="the other two drains' log lines")
        wait_for(_refused_after(gate, max(done)), timeout=60, what="the rollback to be refused after they finished")
        gate.refusing.clear()

        def settled() -> bool:
            return _ready_count(world, apps) == 2 * len(apps) and not _leftover_marks(world, ods, apps)

        with_deadline = _try_wait(settled, timeout=120)
        attempts = _rollback_attempts(r, gated)
        ended = _logged(r, f"drain of node {gated} failed", gated)
        marks = _leftover_marks(world, ods, apps)
        lost = 2 * len(apps) - _ready_count(world, apps)
        crashes = _crashes([r], set())
    finally:
        binder.close()
        gate.close()
        violations = budgets.close()
    during = [t for t, msg in attempts if killed_at < t < back_at and "no answer" in msg]
    print(
        f"\nfault-result | api-server-down-20s-with-three-drains-in-flight | rollback attempts {len(attempts)} "
        f"({len(during)} during the outage) | others finished {[round(t - back_at, 1) for t in done]}s after it "
        f"was back | marks {len(marks)} | pdb violations {len(violations)} | lost pods {lost} | "
        f"crashes {len(crashes)} | {time.monotonic() - began:.0f}s"
    )
    assert any(t < killed_at for t, _ in attempts), "the rollback's attempts before the outage are not in the log"
    assert len(during) >= 2, f"the rollback was not tried again during the outage, one attempt at a time: {attempts}"
    assert any(t > back_at for t, _ in attempts), "the rollback's attempts after the outage are not in the log"
    _assert_the_others_finished_during_the_rollback(others, done, (opened_at, back_at), gate.refused, gated, ended)
    assert marks == {}, f"leftover marks: {marks}"
    assert violations == [], f"a PodDisruptionBudget fell below its minimum: {violations[:5]}"
    assert lost == 0, f"{lost} held pods not Running and Ready"
    assert crashes == [], crashes
    assert with_deadline, "the rescheduler did not settle"
