"""The processes of the e2e control plane: where their binaries are, free ports, waiting, and one process each.

Binaries come from tests/e2e/controlplane/build.sh, for the release :func:`k8s_version` names (etcd is built
with them, the release's own pairing). Every process runs in its
own process group and gets SIGKILL if the Python thread that started it dies (PR_SET_PDEATHSIG), so a crashed
test run leaves no stray etcd or kube-* behind; :meth:`Component.stop` terminates the group and waits for it.
:class:`~tests.support.controlplane.cluster.ControlPlane` puts them together.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

RELEASES_FILE = Path(__file__).resolve().parents[2] / "e2e" / "controlplane" / "releases.env"
VERSION_VARIABLE = "SPOTSHIFT_K8S_VERSION"

BUILD_HINT = "bash tests/e2e/controlplane/build.sh"
# The variables that choose the control plane (not settings of spotshift's own commands, which refuse them).
CONTROL_PLANE_VARIABLES = frozenset({VERSION_VARIABLE, "SPOTSHIFT_CACHE", "SPOTSHIFT_K8S_BIN"})

T = TypeVar("T")


class BinariesMissing(RuntimeError):
    """The control-plane binaries are not built (or etcd is not installed)."""


def releases() -> dict[str, str]:
    """``releases.env`` as a dict: ``SPOTSHIFT_K8S_DEFAULT`` and ``SPOTSHIFT_K8S_COMPAT`` (build.sh sources it; the
    compatibility releases are one string, separated by spaces)."""
    out: dict[str, str] = {}
    for line in RELEASES_FILE.read_text().splitlines():
        name, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            out[name.strip()] = value.strip().strip('"')
    return out


def k8s_version() -> str:
    """The release the e2e tier, the demo and the benches run on: ``$SPOTSHIFT_K8S_VERSION``, else the default."""
    version = os.environ.get(VERSION_VARIABLE) or releases()["SPOTSHIFT_K8S_DEFAULT"]
    return version.removeprefix("v")


def cache_dir() -> Path:
    return Path(os.environ.get("SPOTSHIFT_CACHE") or Path.home() / ".cache" / "spotshift")


def bin_dir() -> Path:
    override = os.environ.get("SPOTSHIFT_K8S_BIN")
    return Path(override) if override else cache_dir() / f"k8s-{k8s_version()}" / "bin"


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path

    @classmethod
    def locate(cls) -> Binaries:
        """Find every binary or raise BinariesMissing saying how to build them."""
        directory = bin_dir()
        found: dict[str, Path] = {}
        missing: list[str] = []
        for field in ("etcd", "kube_apiserver", "kube_controller_manager", "kube_scheduler", "kubectl"):
            path = directory / field.replace("_", "-")
            if os.access(path, os.X_OK):
                found[field] = path
            else:
                missing.append(str(path))
        if missing:
            raise BinariesMissing(
                f"the e2e control plane (Kubernetes {k8s_version()}) is not built: missing {', '.join(missing)}. "
                f"Run `{BUILD_HINT}` first (10-15 minutes once, then cached), "
                "or set SPOTSHIFT_SKIP_E2E=1 to skip the e2e tier."
            )
        return cls(**found)


def free_ports(count: int) -> list[int]:
    """`count` distinct free TCP ports on 127.0.0.1 (held open together so they differ)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def wait_for(
    probe: Callable[[], T],
    *,
    timeout: float,
    what: str,
    interval: float = 0.2,
    check: Callable[[], None] | None = None,
) -> T:
    """Call `probe` until it returns something truthy; its exceptions count as "not yet".

    `check` runs each round and may raise to stop early (e.g. when the process being waited for died).
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        if check is not None:
            check()
        try:
            result = probe()
            if result:
                return result
            last = result
        except Exception as error:
            last = error
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
        time.sleep(interval)


def etcd_scratch_dir() -> Path:
    """A fresh directory for etcd's data, on tmpfs when there is one (fsync there costs nothing).

    It records the owning pid, and directories of owners that died without cleaning up (killed test runs)
    are removed here, so they do not pile up in memory.
    """
    shm = Path("/dev/shm")
    parent = shm if os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    for stale in parent.glob("spotshift-e2e-etcd-*"):
        try:
            owner = int((stale / "owner.pid").read_text())
        except (OSError, ValueError):
            continue
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(stale, ignore_errors=True)
        except PermissionError:
            pass
    directory = Path(tempfile.mkdtemp(prefix="spotshift-e2e-etcd-", dir=parent))
    (directory / "owner.pid").write_text(str(os.getpid()))
    return directory


def _die_with_parent() -> None:
    """In the child before exec: get SIGKILL when the parent thread dies (no strays after a crash)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


def component_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and k != "KUBECONFIG"}
    env["NO_PROXY"] = "*"
    return env


class Component:
    """One control-plane process, logging to its own file, in its own process group."""

    def __init__(self, name: str, argv: list[str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log_file:
            log_file.write(f"=== {time.strftime('%H:%M:%S')} starting: {' '.join(self.argv)}\n".encode())
            log_file.flush()
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=component_env(),
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def ensure_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with code {self.process.returncode}; last log lines "
                f"({self.log_path}):\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 10.0) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=timeout)
        # Anything else left in the group (there should be nothing) goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        self.process = None
