"""A real ``spot-extender`` (gunicorn, TLS with a certificate from ``spot-certs``) on loopback, for tests."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from extender.certs import write_bundle

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    host: str
    port: int
    ca: Path | None
    log: Path

    @property
    def base(self) -> str:
        return f"{'https' if self.ca else 'http'}://{self.host}:{self.port}"

    def session(self) -> requests.Session:
        s = requests.Session()
        s.trust_env = False
        if self.ca:
            s.verify = str(self.ca)
        return s

    def tls_connection(self) -> ssl.SSLSocket:
        """A connection with the TLS handshake done and no request sent: what Go parks."""
        assert self.ca
        context = ssl.create_default_context(cafile=str(self.ca))
        return context.wrap_socket(
            socket.create_connection((self.host, self.port), timeout=5), server_hostname=self.host
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(
    tmp: Path,
    *,
    tls: bool = True,
    workers: int = 1,
    threads: int | None = None,
    worker_class: str | None = None,
    extra: list[str] | None = None,
) -> Server:
    """Started and answering /healthz; ``threads``/``worker_class`` None means spot-extender's defaults."""
    args = ["--no-node-cache", "--workers", str(workers), *(extra or [])]
    if threads is not None:
        args += ["--threads", str(threads)]
    if worker_class is not None:
        args += ["--worker-class", worker_class]
    ca = None
    if tls:
        certs = tmp / "certs"
        write_bundle(certs, service="spotshift", namespace="spotshift", secret_name="s", ips=["127.0.0.1"])
        args += ["--certfile", str(certs / "tls.crt"), "--keyfile", str(certs / "tls.key")]
        ca = certs / "ca.crt"
    port = free_port()
    log = tmp / "server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "extender.cli", "--bind", f"127.0.0.1:{port}", *args],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = Server(proc, "127.0.0.1", port, ca, log)
    session = server.session()
    deadline = time.monotonic() + 60
    while True:
        try:
            if session.get(server.base + "/healthz", timeout=5).status_code == 200:
                break
        except requests.RequestException:  # not listening yet, or slow to answer on a busy machine
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"spot-extender did not start: {log.read_text()}")
        time.sleep(0.2)
    session.close()
    return server


def stop_server(server: Server) -> None:
    if server.proc.poll() is None:
        server.proc.terminate()
        try:
            server.proc.wait(30)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
