"""Faults for a running :class:`~tests.support.controlplane.cluster.ControlPlane`: kill, stop and restart its parts.

What a production control plane does to its clients now and then, made on demand: kube-apiserver killed and
restarted (an upgrade, an OOM kill), down for some seconds, frozen (``SIGSTOP``: connections are accepted by
the kernel but nothing answers, as with a long GC pause or a stuck node), and etcd killed under a running
kube-apiserver (which then answers 500 "transport is closing" or times out). Each fault leaves the component
as it was: restarted with the same command line, data directory and ports, and healthy again before
:func:`restore` returns.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass

from .cluster import ControlPlane

__all__ = ["Fault", "kill", "restart", "pause", "resume", "inject", "restore"]

KINDS = ("kill", "stop")


def _process(plane: ControlPlane, name: str) -> subprocess.Popen[bytes]:
    process = plane.components[name].process
    if process is None or process.poll() is not None:
        raise RuntimeError(f"{name} is not running")
    return process


def kill(plane: ControlPlane, name: str) -> None:
    """SIGKILL the component's process group and wait for it to be gone (no clean shutdown)."""
    process = _process(plane, name)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)


def restart(plane: ControlPlane, name: str, timeout: float = 120.0) -> None:
    """Start a killed component again with the same command line, and wait until it is healthy."""
    component = plane.components[name]
    component.start()
    plane._wait_healthy(name, timeout)


def pause(plane: ControlPlane, name: str) -> None:
    """SIGSTOP the component: its sockets stay open, nothing answers."""
    os.killpg(_process(plane, name).pid, signal.SIGSTOP)


def resume(plane: ControlPlane, name: str) -> None:
    os.killpg(_process(plane, name).pid, signal.SIGCONT)


@dataclass(frozen=True, slots=True)
class Fault:
    """``kind`` ``kill`` (SIGKILL, then restart after ``seconds``) or ``stop`` (SIGSTOP for ``seconds``)."""

    component: str
    kind: str
    seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault kind must be one of {KINDS}, got {self.kind!r}")


def inject(plane: ControlPlane, fault: Fault) -> float:
    """Start ``fault``; returns the monotonic time at which it may be ended (:func:`restore`)."""
    if fault.kind == "kill":
        kill(plane, fault.component)
    else:
        pause(plane, fault.component)
    return time.monotonic() + fault.seconds


def restore(plane: ControlPlane, fault: Fault, until: float, timeout: float = 120.0) -> None:
    """Wait out the fault's duration, then restart or resume the component and wait until it is healthy."""
    time.sleep(max(0.0, until - time.monotonic()))
    if fault.kind == "kill":
        restart(plane, fault.component, timeout)
    else:
        resume(plane, fault.component)
        plane._wait_healthy(fault.component, timeout)
