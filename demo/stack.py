"""The demo's running parts: the local control plane, ``spot-extender`` and ``spot-rescheduler`` as processes.

Everything is started the way an operator would start it, only on loopback: certificates from ``spot-certs``,
the webhook registered from ``deploy/base/mutatingwebhook.yaml`` with its ``caBundle`` set by
``spot-certs --patch-webhook``, kube-scheduler restarted with ``deploy/scheduler/base``'s KubeSchedulerConfiguration
``v1`` pointed at the local server, and the rescheduler with the same configuration file as the server.

Every child runs in its own session, so a Ctrl-C at the terminal reaches only the demo, which then stops the
children in order (the rescheduler first, so it can roll back a node in the middle of a drain). Children also
get SIGKILL if the demo dies without cleaning up (``PR_SET_PDEATHSIG``), so no process outlives it.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
import yaml

from tests.support.controlplane import ApiError, Binaries, ControlPlane, wait_for

ROOT = Path(__file__).resolve().parents[1]
SCHEDULER_NAME = "spotshift-scheduler"
WEBHOOK_NAME = "spotshift"
SPOTSHIFT_NAMESPACE = "spotshift"
DEMO_RESCHEDULER_FLAGS = (
    "--housekeeping-interval=1s",
    "--node-drain-delay=2s",
    "--pod-eviction-timeout=30s",
    "--max-graceful-termination=20s",
    "--replacement-timeout=60s",
    "--leader-elect-lease-duration=4s",
    "--leader-elect-renew-deadline=3s",
    "--leader-elect-retry-period=1s",
    "--log-format=json",
)
"""The demo's short intervals (a drain every few seconds instead of every 10 minutes) and JSON logs, which
the demo reads to tell the story."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the demo's main thread dies, so nothing is left behind."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def child_env() -> dict[str, str]:
    """The demo's environment minus what would change the children's behaviour behind the demo's back:
    ``SPOTSHIFT_*`` overrides, a ``KUBECONFIG`` of another cluster, a metrics directory, proxies."""
    drop = ("KUBECONFIG", "PROMETHEUS_MULTIPROC_DIR")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SPOTSHIFT_") and k not in drop and not k.lower().endswith("_proxy")
    }
    env["NO_PROXY"] = "*"
    return env


class Process:
    """One child process in its own session, logging to a file."""

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=child_env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check(self) -> None:
        """Raise with the log's tail if the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with code {self.proc.returncode}:\n{self.tail()}")

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM, wait, then SIGKILL the whole process group (gunicorn's workers included)."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
        self.proc = None


class Stack:
    """The control plane and spotshift's processes; :meth:`stop` undoes whatever was started, in order."""

    def __init__(self, work: Path, config: dict[str, Any]) -> None:
        self.work = work
        self.logs = work / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.certs = work / "certs"
        self.config_path = work / "config.yaml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.plane: ControlPlane | None = None
        self.extender: Process | None = None
        self.rescheduler: Process | None = None
        self.extender_port = free_port()
        self.metrics_port = free_port()
        self.extender_url = f"https://127.0.0.1:{self.extender_port}"

    # ---- start ---------------------------------------------------------------------------------------------

    def start_control_plane(self) -> ControlPlane:
        self.plane = ControlPlane(Binaries.locate(), run_dir=self.work / "control-plane")
        self.plane.start()
        return self.plane

    def create_placeholder_priority_class(self) -> None:
        """The placeholders' PriorityClass as deploy/base/rescheduler ships it (capacity mode is on by default)."""
        assert self.plane is not None
        body = yaml.safe_load((ROOT / "deploy/base/rescheduler/capacity-priorityclass.yaml").read_text())
        self.plane.api.post("/apis/scheduling.k8s.io/v1/priorityclasses", body)

    @property
    def kubeconfig(self) -> Path:
        assert self.plane is not None
        return self.plane.kubeconfig

    def spot_certs(self, *args: str) -> None:
        """``spot-certs --out certs --ip 127.0.0.1 ...``: the CA is made once and reused by later calls."""
        argv = [sys.executable, "-m", "extender.certs", "--out", str(self.certs), "--ip", "127.0.0.1", *args]
        done = subprocess.run(argv, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"spot-certs failed: {done.stderr.strip() or done.stdout.strip()}")

    def extender_command(self) -> list[str]:
        """How ``spot-extender`` is started (a subclass may start it another way, e.g. from the image)."""
        return [
            sys.executable,
            "-m",
            "extender.cli",
            f"--bind=127.0.0.1:{self.extender_port}",
            f"--certfile={self.certs / 'tls.crt'}",
            f"--keyfile={self.certs / 'tls.key'}",
            f"--config={self.config_path}",
            f"--kubeconfig={self.kubeconfig}",
            "--workers=1",
        ]

    def start_extender(self, timeout: float = 60.0) -> None:
        """``spot-extender`` over TLS on loopback, its node cache fed by the control plane."""
        self.spot_certs()
        self.extender = Process("spot-extender", self.extender_command(), self.logs / "spot-extender.log").start()
        session = requests.Session()
        session.trust_env = False  # these machines set REQUESTS_CA_BUNDLE; the demo's own CA is the one to trust
        session.verify = str(self.certs / "ca.crt")
        with session:
            wait_for(
                lambda: session.get(self.extender_url + "/readyz", timeout=2).status_code == 200,
                timeout=timeout,
                what="spot-extender to be ready",
                check=self.extender.check,
            )

    def register_webhook(self, probe_namespace: str, timeout: float = 60.0) -> None:
        """The shipped registration, called by URL (no Service networking on loopback), ``caBundle`` set by
        ``spot-certs --patch-webhook`` as deploy/README.md tells an operator; returns once the API server
        calls it (it picks new configurations up asynchronously)."""
        assert self.plane is not None
        hook_config = yaml.safe_load((ROOT / "deploy/base/mutatingwebhook.yaml").read_text())
        hook_config["webhooks"][0]["clientConfig"] = {"url": self.extender_url + "/mutate"}
        self.plane.api.post("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", hook_config)
        self.spot_certs("--patch-webhook", WEBHOOK_NAME, "--kubeconfig", str(self.kubeconfig))
        probe = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "webhook-probe"},
            "spec": {"containers": [{"name": "c", "image": "registry.example/probe:1"}]},
        }
        api = self.plane.api
        path = f"/api/v1/namespaces/{probe_namespace}/pods"
        wait_for(
            lambda: api.post(path, probe, dryRun="All")["spec"]["schedulerName"] == SCHEDULER_NAME,
            timeout=timeout,
            what="the API server to call the webhook",
        )

    def use_extender_in_scheduler(self) -> None:
        """Restart kube-scheduler with the shipped v1 configuration, pointed at the local server.

        The shipped file has one profile, ``spotshift-scheduler``, which the webhook puts into every pod it
        mutates (``webhook.scheduler_name``); ``default-scheduler`` is kept for pods it leaves alone.
        """
        assert self.plane is not None
        config = yaml.safe_load((ROOT / "deploy/scheduler/base/kube-scheduler-v1.yaml").read_text())
        (extender,) = config["extenders"]
        extender["urlPrefix"] = self.extender_url
        extender["tlsConfig"] = {"caFile": str(self.certs / "ca.crt")}
        config["profiles"].append({"schedulerName": "default-scheduler"})
        self.plane.restart_scheduler(config)

    def rescheduler_command(self) -> list[str]:
        """How ``spot-rescheduler run`` is started: the pusher-style flags with :data:`DEMO_RESCHEDULER_FLAGS`."""
        return [
            sys.executable,
            "-m",
            "rescheduler.cli",
            "run",
            f"--kubeconfig={self.kubeconfig}",
            f"--config={self.config_path}",
            f"--listen-address=127.0.0.1:{self.metrics_port}",
            *DEMO_RESCHEDULER_FLAGS,
        ]

    def start_rescheduler(self) -> None:
        """``spot-rescheduler run`` with the demo's short intervals (pusher-style flags), JSON logs to a file."""
        self.rescheduler = Process(
            "spot-rescheduler", self.rescheduler_command(), self.logs / "spot-rescheduler.log"
        ).start()

    # ---- observe -------------------------------------------------------------------------------------------

    def rescheduler_metric(self, name: str, labels: str = "") -> float | None:
        """One sample of the rescheduler's ``/metrics`` (``None`` if absent or unreachable)."""
        try:
            session = requests.Session()
            session.trust_env = False
            with session:
                body = session.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text
        except requests.RequestException:
            return None
        for line in body.splitlines():
            if line.startswith(name + labels + " "):
                return float(line.rsplit(" ", 1)[1])
        return None

    def check(self) -> None:
        """Raise if any part has died (the demo cannot go on without it)."""
        if self.plane is not None:
            self.plane.ensure_alive()
        for proc in (self.extender, self.rescheduler):
            if proc is not None:
                proc.check()

    def pids(self) -> list[int]:
        """Every process started so far (control-plane components, server, rescheduler)."""
        out = []
        if self.plane is not None:
            out.extend(c.pid for c in self.plane.components.values() if c.pid is not None)
        for proc in (self.extender, self.rescheduler):
            if proc is not None and proc.proc is not None:
                out.append(proc.proc.pid)
        return out

    # ---- stop ----------------------------------------------------------------------------------------------

    def stop(self, say: Callable[[str], None] = lambda _: None) -> None:
        """Rescheduler first (SIGTERM rolls back a node mid-drain), then the webhook, the server, the plane.

        The server holds nothing to save, and gunicorn waits its whole graceful timeout for a thread blocked on
        an idle client connection, so it gets three seconds before SIGKILL. It stops before the control plane,
        whose API server would otherwise wait for the server's watches.
        """
        if self.rescheduler is not None:
            say("stopping spot-rescheduler")
            self.rescheduler.stop()
            self.rescheduler = None
        if self.plane is not None:
            with contextlib.suppress(ApiError, requests.RequestException):
                self.plane.api.delete_if_exists(
                    f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{WEBHOOK_NAME}"
                )
        if self.extender is not None:
            say("stopping spot-extender")
            self.extender.stop(timeout=3)
            self.extender = None
        if self.plane is not None:
            say("stopping the control plane")
            self.plane.stop()
            self.plane = None


class LogTail:
    """New JSON records of a growing log file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def new(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        out = []
        for line in data[: end + 1].splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if isinstance(record, dict):
                    out.append(record)
        return out
