"""A real ``spot-extender`` process for the e2e tier: TLS from ``spot-certs``, node cache on the control plane.

Used by test_webhook_e2e.py and test_extender_e2e.py (helpers of this tier's own; conftest.py is shared).
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import requests
import yaml

from extender.certs import write_bundle

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ExtenderProcess:
    """``spot-extender --bind 127.0.0.1:PORT --certfile --keyfile --config --kubeconfig`` on loopback."""

    def __init__(
        self, directory: Path, kubeconfig: Path, config: dict[str, Any] | None = None, *, workers: int = 1
    ) -> None:
        self.dir = directory
        self.certs = directory / "certs"
        if not (self.certs / "ca.crt").exists():
            write_bundle(
                self.certs, service="spotshift", namespace="spotshift", secret_name="spotshift-tls", ips=["127.0.0.1"]
            )
        self.config_path = directory / "config.yaml"
        self.config_path.write_text(yaml.safe_dump(config or {}))
        self.kubeconfig = kubeconfig
        self.workers = workers
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.log_path = directory / f"spot-extender-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.session = requests.Session()
        self.session.trust_env = False  # these machines set REQUESTS_CA_BUNDLE; our CA is the one to trust
        self.session.verify = str(self.certs / "ca.crt")

    @property
    def ca_pem(self) -> bytes:
        return (self.certs / "ca.crt").read_bytes()

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca_pem).decode()

    def start(self, timeout: float = 60.0) -> ExtenderProcess:
        # spot-extender refuses SPOTSHIFT_* variables it does not know (the test scripts' own, like
        # SPOTSHIFT_K8S_VERSION): it gets only what the test gives it.
        env = {
            k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR" and not k.startswith("SPOTSHIFT_")
        }
        cmd = [
            sys.executable,
            "-m",
            "extender.cli",
            "--bind",
            f"127.0.0.1:{self.port}",
            "--certfile",
            str(self.certs / "tls.crt"),
            "--keyfile",
            str(self.certs / "tls.key"),
            "--config",
            str(self.config_path),
            "--kubeconfig",
            str(self.kubeconfig),
            "--workers",
            str(self.workers),
        ]
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.session.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"spot-extender did not become ready:\n{self.log_tail()}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
        if getattr(self, "_log", None) is not None:
            self._log.close()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def post(self, path: str, payload: Any) -> Any:
        r = self.session.post(self.url + path, data=orjson.dumps(payload), timeout=10)
        r.raise_for_status()
        return r.json()

    def scores(self, node_names: list[str]) -> dict[str, int]:
        pod = {"metadata": {"name": "probe", "namespace": "default"}, "spec": {"containers": []}}
        return {h["Host"]: h["Score"] for h in self.post("/prioritize", {"Pod": pod, "NodeNames": node_names})}

    def metrics(self) -> str:
        return self.session.get(self.url + "/metrics", timeout=10).text
