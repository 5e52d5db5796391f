"""Load on ``/mutate`` next to a trivial echo endpoint on the same stack, with wrk, over TLS on loopback.

    python3 bench/webhook_load.py [--seconds 5] [--repeat 3] [--connections 8] [--workers 2]
                                  [--worker-class poller] [--compare-workers]

One ``spot-extender`` (gunicorn, the configured worker model, TLS with a certificate from ``spot-certs``,
``--echo`` to add ``POST /echo``) serves both endpoints in the same run, so "the same stack" holds exactly:
same process, same TLS, same Flask, same metrics hooks; ``/echo`` returns the request body and does nothing
else. The body is a realistic AdmissionReview of a Deployment's pod (~2.5 KB); ``/mutate`` answers with the
prefer-mode patch (affinity for all six presets plus three tolerations), ``/echo`` with the body itself.

1. Saturation: ``wrk -t1 -cN`` (keep-alive connections, like kube-apiserver's) for ``--seconds``; the two
   endpoints alternate, ``--repeat`` times, and the figure is the median requests/s of each. Next to it, the
   server's own CPU time per request (user + system of the gunicorn master and workers from /proc, divided
   by the requests wrk completed): on a shared 2-core machine other processes move requests/s around from
   run to run, while CPU per request barely moves, and at saturation throughput is its inverse.
2. Latency at half the saturation rate (half of the lower of the two, so both endpoints run at the same rate
   and ``/echo``'s percentiles are the stack's own tail at that rate). wrk2 (constant-rate wrk) is not
   packaged in Debian, so the rate is paced with wrk's own Lua ``delay()`` hook: each of N connections waits
   an exponentially distributed think time before each request, which makes the arrivals close to Poisson;
   the mean think time starts at N / rate and is shortened by up to three 2-second probes until the achieved
   rate is within 10% of the target (a connection's cycle is think time plus response time). This is a
   closed loop with think time, not a strict open loop: a slow response delays that connection's next
   request. That hides queueing (coordinated omission) only when responses take a sizable part of the think
   time; p99 is printed next to the mean think time so the reader can check it is well below.

wrk is Debian's package ``wrk`` (``apt-get install wrk``); the script says so and stops if it is missing.
All traffic stays on 127.0.0.1 and every run is bounded by ``--seconds``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from extender.cli import DEFAULT_THREADS, DEFAULT_WORKER_CLASS, WORKER_CLASSES

ROOT = Path(__file__).resolve().parents[1]

LUA = r"""
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open(os.getenv("BENCH_BODY"), "rb")
wrk.body = f:read("*a")
f:close()
local mean_delay_ms = tonumber(os.getenv("BENCH_DELAY_MS") or "0")
local failures = 0

function setup(thread)
  math.randomseed(os.time())
end

if mean_delay_ms > 0 then
  function delay()
    return math.floor(-math.log(1 - math.random()) * mean_delay_ms + 0.5)
  end
end

function response(status, headers, body)
  if status ~= 200 then failures = failures + 1 end
end

function done(summary, latency, requests)
  io.write(string.format(
    "BENCH {\"requests\": %d, \"duration_us\": %d, \"p50_us\": %d, \"p90_us\": %d, \"p99_us\": %d, " ..
    "\"mean_us\": %.1f, \"errors\": %d, \"non200\": %d}\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.mean,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.status))
end
"""


def admission_review() -> dict[str, Any]:
    """A pod of a Deployment as kube-apiserver sends it to a mutating webhook (defaults applied)."""
    pod = checkout_pod()
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop",
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "groups": ["system:serviceaccounts"],
            },
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def checkout_pod() -> dict[str, Any]:
    """The pod of the ``checkout`` Deployment's ReplicaSet, with the defaults kube-apiserver applies."""
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "generateName": "checkout-7d9c6b8f5-",
            "namespace": "shop",
            "labels": {"app": "checkout", "pod-template-hash": "7d9c6b8f5", "team": "payments"},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "checkout-7d9c6b8f5",
                    "uid": "2b2ad4a3-4f3e-4a39-9b1c-1c7f7f0b6a11",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": checkout_pod_spec(),
        "status": {},
    }


def checkout_pod_spec() -> dict[str, Any]:
    """The checkout pod's spec: its two containers, a service account token volume, anti-affinity between its
    replicas and the default tolerations."""
    return {
        "volumes": [
            {"name": "kube-api-access-x", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}
        ],
        "containers": checkout_containers(),
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "checkout",
        "serviceAccount": "checkout",
        "securityContext": {},
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "labelSelector": {"matchLabels": {"app": "checkout"}},
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }
                ]
            }
        },
        "schedulerName": "default-scheduler",
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }


def checkout_containers() -> list[dict[str, Any]]:
    """The application container and its proxy sidecar."""
    return [
        {
            "name": "app",
            "image": "registry.example.com/shop/checkout:1.42.0",
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
            "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "PORT", "value": "8080"}],
            "resources": {"limits": {"memory": "512Mi"}, "requests": {"cpu": "250m", "memory": "256Mi"}},
            "readinessProbe": {
                "httpGet": {"path": "/ready", "port": 8080, "scheme": "HTTP"},
                "periodSeconds": 5,
            },
            "volumeMounts": [{"name": "kube-api-access-x", "readOnly": True, "mountPath": "/var/run/secrets"}],
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent",
        },
        {
            "name": "proxy",
            "image": "envoyproxy/envoy:v1.30.1",
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent",
        },
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(port: int, ca: Path, timeout: float = 30.0) -> None:
    ctx = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=1) as raw,
                ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s,
            ):
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("spot-extender did not become healthy")


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its direct children (gunicorn master and workers), in seconds."""
    pids = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        pids += [int(c) for c in children]
    except OSError:
        pass
    total = 0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / _TICK


def handler_buckets(server: Server, endpoint: str) -> dict[float, float]:
    """Cumulative counts of the server's own handling-time histogram (``/metrics``) for one endpoint."""
    ctx = ssl.create_default_context(cafile=str(server.certs / "ca.crt"))
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s,
    ):
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    text = b"".join(chunks).decode(errors="replace")
    prefix = f'spotshift_http_request_duration_seconds_bucket{{endpoint="{endpoint}",le="'
    out: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith(prefix):
            le, value = line[len(prefix) :].split('"}')
            out[float(le)] = float(value)
    return out


def run_wrk(url: str, lua: Path, body: Path, seconds: float, connections: int, delay_ms: float = 0.0) -> dict[str, Any]:
    env = dict(os.environ, BENCH_BODY=str(body), BENCH_DELAY_MS=f"{delay_ms:.3f}")
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "5s", "-s", str(lua), url]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=seconds + 30, check=True).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("BENCH "))
    result = json.loads(line[6:])
    result["rps"] = result["requests"] / (result["duration_us"] / 1e6)
    return result


class Server:
    """``spot-extender`` on loopback with TLS, no node cache, ``/echo`` on."""

    def __init__(
        self, certs: Path, workers: int, worker_class: str, threads: int, switch_interval: float | None = None
    ) -> None:
        self.port = free_port()
        self.certs = certs
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSHIFT_")}
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        cmd = [
            sys.executable,
            "-m",
            "extender.cli",
            "--bind",
            f"127.0.0.1:{self.port}",
            "--certfile",
            str(certs / "tls.crt"),
            "--keyfile",
            str(certs / "tls.key"),
            "--no-node-cache",
            "--echo",
            "--workers",
            str(workers),
            "--threads",
            str(threads),
            "--worker-class",
            worker_class,
            "--log-level",
            "warning",
        ]
        if switch_interval is not None:
            cmd += ["--switch-interval", str(switch_interval)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_healthy(self.port, certs / "ca.crt")

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def measure(server: Server, lua: Path, body: Path, args: argparse.Namespace) -> dict[str, Any]:
    paths = {"echo": "/echo", "mutate": "/mutate"}
    # Warm both endpoints (imports, first TLS contexts, metric files).
    for path in paths.values():
        run_wrk(server.url(path), lua, body, 1, args.connections)
    sat: dict[str, list[float]] = {k: [] for k in paths}
    cpu: dict[str, list[float]] = {k: [] for k in paths}
    for _ in range(args.repeat):
        for name, path in paths.items():
            before = cpu_seconds(server.proc.pid)
            result = run_wrk(server.url(path), lua, body, args.seconds, args.connections)
            cpu[name].append((cpu_seconds(server.proc.pid) - before) / result["requests"] * 1e6)
            sat[name].append(result["rps"])
    saturation = {k: statistics.median(v) for k, v in sat.items()}
    half: dict[str, Any] = {}
    # Both endpoints at the same rate, half of /mutate's saturation: the echo figures are the stack's own tail.
    rate = min(saturation.values()) / 2
    for name, path in paths.items():
        delay_ms = args.paced_connections / rate * 1000.0
        # Calibrate: a connection's cycle is think time + response time, so shorten the think time until
        # the achieved rate is within 10% of the target (at most three short tries).
        for _ in range(3):
            probe = run_wrk(server.url(path), lua, body, 2, args.paced_connections, delay_ms)
            if abs(probe["rps"] / rate - 1) <= 0.1:
                break
            delay_ms *= probe["rps"] / rate
        before = handler_buckets(server, name)
        runs = [
            run_wrk(server.url(path), lua, body, args.paced_seconds, args.paced_connections, delay_ms)
            for _ in range(args.repeat)
        ]
        after = handler_buckets(server, name)
        delta = {le: after[le] - before.get(le, 0.0) for le in after}
        total = delta.get(float("inf"), 0.0) or 1.0
        half[name] = {
            "target_rps": rate,
            "achieved_rps": statistics.median(r["rps"] for r in runs),
            "p50_ms": statistics.median(r["p50_us"] for r in runs) / 1000,
            "p99_ms": statistics.median(r["p99_us"] for r in runs) / 1000,
            "p99_ms_runs": [r["p99_us"] / 1000 for r in runs],
            "mean_think_ms": delay_ms,
            "errors": sum(r["errors"] + r["non200"] for r in runs),
            "handler_within": {le: delta[le] / total for le in (0.001, 0.0025, 0.005) if le in delta},
        }
    cpu_us = {k: statistics.median(v) for k, v in cpu.items()}
    return {"saturation_rps": saturation, "saturation_runs": sat, "cpu_us": cpu_us, "half": half}


def report(label: str, res: dict[str, Any]) -> None:
    sat, half = res["saturation_rps"], res["half"]
    ratio = sat["mutate"] / sat["echo"]
    print(f"\n== {label}")
    for name in ("echo", "mutate"):
        runs = ", ".join(f"{x:.0f}" for x in res["saturation_runs"][name])
        print(f"  saturation  /{name:<7} {sat[name]:8.0f} req/s   (median of {runs})")
    print(f"  /mutate throughput = {ratio:.2f} x echo   (target >= 0.80: {'PASS' if ratio >= 0.8 else 'FAIL'})")
    cpu = res["cpu_us"]
    print(
        f"  server CPU per request: /echo {cpu['echo']:.0f} us, /mutate {cpu['mutate']:.0f} us -> CPU-bound throughput "
        f"ratio {cpu['echo'] / cpu['mutate']:.2f} (robust to other load on the machine)"
    )
    for name in ("echo", "mutate"):
        h = half[name]
        runs = ", ".join(f"{x:.2f}" for x in h["p99_ms_runs"])
        print(
            f"  half rate   /{name:<7} target {h['target_rps']:6.0f}/s achieved {h['achieved_rps']:6.0f}/s   "
            f"p50 {h['p50_ms']:.2f} ms  p99 {h['p99_ms']:.2f} ms  (p99 runs {runs};"
            " "
            f"mean think {h['mean_think_ms']:.1f} ms; errors {h['errors']})"
        )
    for name in ("echo", "mutate"):
        within = half[name]["handler_within"]
        shares = ", ".join(f"{share:.2%} within {le * 1000:g} ms" for le, share in within.items())
        print(f"  server-side handling /{name:<7} (Flask app, from /metrics): {shares}")
    p99 = half["mutate"]["p99_ms"]
    print(f"  /mutate p99 at half saturation = {p99:.2f} ms   (target <= 5 ms: {'PASS' if p99 <= 5 else 'FAIL'})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each wrk run (default 5)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; medians are reported (default 3)")
    parser.add_argument("--connections", type=int, default=8, help="keep-alive connections at saturation")
    parser.add_argument("--paced-connections", type=int, default=16, help="connections for the half-rate run")
    parser.add_argument("--paced-seconds", type=float, default=8.0, help="length of each half-rate run (default 8)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    parser.add_argument("--switch-interval", type=float, default=None, help="GIL switch interval of the workers")
    parser.add_argument("--worker-class", default=DEFAULT_WORKER_CLASS, choices=tuple(WORKER_CLASSES))
    parser.add_argument("--compare-workers", action="store_true", help="run every worker class one after the other")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed: apt-get install wrk (Debian's package)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from extender.certs import write_bundle

    with tempfile.TemporaryDirectory(prefix="spotshift-bench-") as tmp:
        tmpdir = Path(tmp)
        certs = tmpdir / "certs"
        write_bundle(certs, service="spotshift", namespace="spotshift", secret_name="x", ips=["127.0.0.1"])
        lua, body = tmpdir / "post.lua", tmpdir / "review.json"
        lua.write_text(LUA)
        body.write_text(json.dumps(admission_review(), separators=(",", ":")))
        print(f"body {body.stat().st_size} bytes; wrk -t1; {args.seconds:g} s per run; medians of {args.repeat}")
        print(
            "load average before: {:.2f} {:.2f} {:.2f} (2 cores; others' processes share them)".format(*os.getloadavg())
        )
        classes = tuple(WORKER_CLASSES) if args.compare_workers else (args.worker_class,)
        for worker_class in classes:
            server = Server(certs, args.workers, worker_class, args.threads, args.switch_interval)
            try:
                res = measure(server, lua, body, args)
            finally:
                server.stop()
            report(
                f"{worker_class} x {args.workers} workers"
                + (f" x {args.threads} threads" if worker_class != "sync" else "")
                + ", TLS",
                res,
            )
    print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
