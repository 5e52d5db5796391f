"""Hostile clients against a real ``spot-extender`` over TLS on loopback: does a valid caller still get in?

    python3 bench/abuse.py [--workers 2] [--case NAME ...]

Starts one ``spot-extender`` (gunicorn with the poller worker, TLS with a certificate from ``spot-certs``,
no node cache, so every node name is unknown) and replays each availability case below against it, one
after another. During every case a probe sends a valid ``/mutate`` every 250 ms on a fresh TLS connection
(what a kube-apiserver reconnecting after a blip does) and the worker processes' RSS is sampled every 100 ms.
Per case it prints the worst probe latency, the worst worker RSS and the sum over the server's processes,
the status codes the attacker got, and whether a worker was replaced (killed by gunicorn's timeout, or
crashed). The acceptance: probe ≤ 1 s in every case, the server's RSS under the shipped 512 Mi container
limit (deploy/base/deployment.yaml), no worker replaced, no 5xx.

Cases (each bounded: a fixed number of requests or connections, and at most ``CASE_SECONDS``):

* ``quadratic-pod``: reviews of a pod with 2,000 nodeSelector keys and 2,000 required terms, then 7,000 x
  7,000 (each term ``karpenter.sh/capacity-type In [on-demand]``), four connections sending back to back;
* ``unknown-names``: ``/prioritize`` with 131,000 unknown node names (4 MB), then 15,000 (the cap), repeated;
* ``huge-bodies``: a 50 MB ``/filter`` body, then 25 MB of 5,000 full Nodes (a real payload), repeated;
* ``idle-connections``: 2,100 TLS connections that finish the handshake and never send a request;
* ``partial-requests``: 24 connections each sending 8 MiB of a 30 MB ``/filter`` body, then nothing;
* ``slow-chunked``: 16 chunked uploads trickling a byte a second;
* ``malformed``: ``apiVersion: []``, a DELETE review whose pod's ``metadata`` is a list, ``kind`` nested 1,000
  deep, a Nodes item nested 300 deep, a chunk size ``zz``, and clients closing mid-body, on a loop.

All traffic stays on 127.0.0.1; the server is stopped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.extender_bench import node_json, pod_json  # noqa: E402
from extender.certs import write_bundle  # noqa: E402

CASE_SECONDS = 20.0
PROBE_EVERY = 0.25
LIMIT_BYTES = 512 * 1024 * 1024  # deploy/base/deployment.yaml: resources.limits.memory


def review(pod: dict) -> bytes:
    return orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "0df28fbd-5f5f-11e8-bc74-36e6bb280816",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "namespace": "shop",
                "operation": "CREATE",
                "object": pod,
            },
        }
    )


PROBE_BODY = review({"metadata": {"name": "web", "labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}})


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int
    context: ssl.SSLContext
    log: Path

    def connect(self, timeout: float = 10) -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        return self.context.wrap_socket(raw, server_hostname="127.0.0.1")

    def processes(self) -> list[int]:
        out = [self.proc.pid]
        with contextlib.suppress(OSError):
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                            out.append(int(pid))
        return out


def start(tmp: Path, workers: int) -> Server:
    certs = tmp / "certs"
    write_bundle(certs, service="spotshift", namespace="spotshift", secret_name="s", ips=["127.0.0.1"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp / "server.log"
    cmd = [sys.executable, "-m", "extender.cli", "--bind", f"127.0.0.1:{port}", "--no-node-cache"]
    cmd += ["--workers", str(workers), "--certfile", str(certs / "tls.crt"), "--keyfile", str(certs / "tls.key")]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    server = Server(proc, port, ssl.create_default_context(cafile=str(certs / "ca.crt")), log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            conn = server.connect(2)
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            if conn.recv(100).startswith(b"HTTP/1.1 200"):
                conn.close()
                return server
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"spot-extender did not start: {log.read_text()}")


def read_response(conn: socket.socket) -> int:
    """Read one response with a Content-Length body; its status (0 when the connection ended first)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return 0
        data += chunk
    head, _, first = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    left = length - len(first)
    while left > 0:
        chunk = conn.recv(1 << 20)
        if not chunk:
            break
        left -= len(chunk)
    return int(head.split(b" ", 2)[1])


def post(path: str, body: bytes, *, length: int | None = None) -> bytes:
    n = len(body) if length is None else length
    return f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {n}\r\n\r\n".encode()


@dataclass
class Observed:
    probes: list[float] = field(default_factory=list)
    probe_failures: int = 0
    worker_rss: int = 0
    total_rss: int = 0
    pids: set[int] = field(default_factory=set)
    statuses: Counter[int] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def status(self, code: int) -> None:
        with self.lock:
            self.statuses[code] += 1


def rss(pid: int) -> int:
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def observe(server: Server, seen: Observed, stop: threading.Event) -> None:
    """Probe /mutate every PROBE_EVERY s on a fresh connection; sample RSS every 100 ms."""
    next_probe = time.monotonic()
    while not stop.is_set():
        procs = server.processes()
        sizes = {pid: rss(pid) for pid in procs}
        seen.pids.update(procs[1:])
        seen.worker_rss = max(seen.worker_rss, *(sizes[p] for p in procs[1:]), 0)
        seen.total_rss = max(seen.total_rss, sum(sizes.values()))
        if time.monotonic() >= next_probe:
            next_probe += PROBE_EVERY
            started = time.monotonic()
            try:
                with server.connect(5) as conn:
                    conn.sendall(post("/mutate", PROBE_BODY) + PROBE_BODY)
                    ok = read_response(conn) == 200
            except OSError:
                ok = False
            seen.probes.append(time.monotonic() - started)
            if not ok:
                seen.probe_failures += 1
        stop.wait(0.1)


# --- the cases --------------------------------------------------------------------------------------------


def until(deadline: float) -> Iterator[int]:
    i = 0
    while time.monotonic() < deadline:
        yield i
        i += 1


def send_all(server: Server, seen: Observed, requests: list[bytes], connections: int, deadline: float) -> None:
    """Each of ``connections`` sends the requests one after another (reconnecting when closed)."""

    def one(_: int) -> None:
        conn: ssl.SSLSocket | None = None
        for body in requests:
            if time.monotonic() > deadline:
                break
            try:
                if conn is None:
                    conn = server.connect(30)
                    conn.settimeout(30)
                conn.sendall(body)
                code = read_response(conn)
            except OSError:
                code = 0
            seen.status(code)
            if code in (0, 400, 413):
                with contextlib.suppress(OSError):
                    if conn is not None:
                        conn.close()
                conn = None
        if conn is not None:
            conn.close()

    with ThreadPoolExecutor(connections) as pool:
        list(pool.map(one, range(connections)))


def quadratic_pod(server: Server, seen: Observed, deadline: float) -> None:
    bodies = []
    for keys, terms in ((2000, 2000), (7000, 7000)):
        term = {"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}
        affinity = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term] * terms}}
        pod = {
            "metadata": {"name": "p"},
            "spec": {"nodeSelector": {f"k{i}": "v" for i in range(keys)}, "affinity": {"nodeAffinity": affinity}},
        }
        body = review(pod)
        bodies += [post("/mutate", body) + body] * 10
    send_all(server, seen, bodies, 4, deadline)


def unknown_names(server: Server, seen: Observed, deadline: float) -> None:
    bodies = []
    for n in (131_000, 15_000):
        body = orjson.dumps({"Pod": {}, "NodeNames": [f"unknown-node-{i:06d}" for i in range(n)]})
        bodies += [post("/prioritize", body) + body] * 10
    send_all(server, seen, bodies, 2, deadline)


def huge_bodies(server: Server, seen: Observed, deadline: float) -> None:
    pod = pod_json()
    big = b" " * (50 * 1024 * 1024)
    nodes = orjson.dumps({"Pod": pod, "Nodes": {"items": [node_json(i) for i in range(5000)]}})
    requests = [post("/filter", big) + big, post("/filter", nodes) + nodes, post("/prioritize", nodes) + nodes] * 4
    send_all(server, seen, requests, 2, deadline)


def idle_connections(server: Server, seen: Observed, deadline: float) -> None:
    conns: list[ssl.SSLSocket] = []
    lock = threading.Lock()

    def open_one(_: int) -> None:
        try:
            conn = server.connect(10)
        except OSError:
            seen.status(0)
            return
        with lock:
            conns.append(conn)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(open_one, range(2100)))
    seen.status(len(conns))  # how many were open at once, as a pseudo-status for the report
    while time.monotonic() < min(deadline, time.monotonic() + 5):
        time.sleep(0.5)
    for conn in conns:
        conn.close()


def partial_requests(server: Server, seen: Observed, deadline: float) -> None:
    part = b" " * (8 * 1024 * 1024)
    conns = []

    def send(_: int) -> None:
        try:
            conn = server.connect(10)
            conn.settimeout(15)
            conn.sendall(post("/filter", b"", length=30 * 1024 * 1024) + part)
            conns.append(conn)
        except OSError:
            seen.status(0)

    with ThreadPoolExecutor(24) as pool:
        list(pool.map(send, range(24)))
    for conn in conns:
        try:
            seen.status(read_response(conn))  # 408 once IO_TIMEOUT passed
        except OSError:
            seen.status(0)
        conn.close()


def slow_chunked(server: Server, seen: Observed, deadline: float) -> None:
    conns = []
    for _ in range(16):
        conn = server.connect(10)
        head = (
            b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        conn.sendall(head)
        conns.append(conn)
    for _ in until(min(deadline, time.monotonic() + 13)):
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.sendall(b"1\r\n \r\n")
        time.sleep(1)
    for conn in conns:
        try:
            conn.settimeout(5)
            seen.status(read_response(conn))
        except OSError:
            seen.status(0)
        conn.close()


def malformed(server: Server, seen: Observed, deadline: float) -> None:
    deep_kind = b'{"kind":' + b'{"k":' * 1000 + b"1" + b"}" * 1001
    deep_node = b'{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"n"},"x":' + b"[" * 300 + b"]" * 300 + b"}]}}"
    chunked = b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"
    delete_pod = orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"kind": "Pod"}, "operation": "DELETE", "object": {"metadata": [1]}},
        }
    )
    requests = [
        post("/mutate", delete_pod) + delete_pod,
        post("/mutate", b'{"kind":"AdmissionReview","apiVersion":[]}') + b'{"kind":"AdmissionReview","apiVersion":[]}',
        post("/mutate", deep_kind) + deep_kind,
        post("/filter", deep_node) + deep_node,
        b"POST /mutate HTTP/1.1\r\nHost: x\r\n" + chunked,
    ]
    for _ in until(min(deadline, time.monotonic() + 8)):
        send_all(server, seen, requests, 1, deadline)
        with contextlib.suppress(OSError), server.connect(5) as conn:  # leaves mid-body
            conn.sendall(post("/mutate", b"", length=5000) + b'{"kind"')


CASES: dict[str, Callable[[Server, Observed, float], None]] = {
    "quadratic-pod": quadratic_pod,
    "unknown-names": unknown_names,
    "huge-bodies": huge_bodies,
    "idle-connections": idle_connections,
    "partial-requests": partial_requests,
    "slow-chunked": slow_chunked,
    "malformed": malformed,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--case", action="append", choices=tuple(CASES), help="run only these cases")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    with tempfile.TemporaryDirectory(prefix="spotshift-abuse-") as tmp:
        server = start(Path(tmp), args.workers)
        failed = False
        try:
            print(
                f"{'case':18} {'worst probe':>11} {'probe fails':>11} {'worker RSS':>10} {'total RSS':>9}  "
                f"{'workers':>7}  attacker got"
            )
            for name in args.case or CASES:
                before = set(server.processes()[1:])
                seen = Observed()
                stop = threading.Event()
                watcher = threading.Thread(target=observe, args=(server, seen, stop), daemon=True)
                watcher.start()
                started = time.monotonic()
                CASES[name](server, seen, started + CASE_SECONDS)
                stop.set()
                watcher.join()
                replaced = len(seen.pids - before)
                worst = max(seen.probes, default=float("nan"))
                got = ", ".join(f"{k}x{v}" for k, v in sorted(seen.statuses.items()))
                print(
                    f"{name:18} {worst:10.3f}s {seen.probe_failures:11d} {seen.worker_rss / 2**20:8.0f}Mi "
                    f"{seen.total_rss / 2**20:7.0f}Mi  {replaced:>7}  {got}",
                    flush=True,
                )
                bad = any(code >= 500 for code in seen.statuses if code < 1000)
                if worst > 1.0 or seen.probe_failures or seen.total_rss > LIMIT_BYTES or replaced or bad:
                    failed = True
            log = server.log.read_text()
            for marker in ("WORKER TIMEOUT", "Traceback"):
                if marker in log:
                    at = log.index(marker)
                    print(f"server log has {marker!r}:\n{log[max(0, at - 200) : at + 1500]}")
                    failed = True
        finally:
            server.proc.send_signal(signal.SIGTERM)
            try:
                server.proc.wait(30)
            except subprocess.TimeoutExpired:
                server.proc.kill()
    print("FAIL" if failed else "PASS: probe <= 1 s, RSS under 512 Mi, no worker replaced, no 5xx")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
