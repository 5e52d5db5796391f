"""Pods per second kube-scheduler binds with no extender, with a no-op Go extender and with spot-extender.

    python3 bench/scheduling_throughput.py [--nodes 200] [--pods 600] [--runs 3] [--calls 300]
    python3 bench/scheduling_throughput.py --server-only     # the server column alone, no control plane

Needs the e2e tier's control-plane binaries (``bash tests/e2e/controlplane/build.sh``). On that real control
plane (kube-apiserver, etcd, kube-controller-manager, kube-scheduler of ``SPOTSHIFT_K8S_VERSION``, by default
the newest release the project runs on; the kubelet stand-in keeps the nodes Ready) it creates ``--nodes`` nodes,
half of them spot, and then, ``--runs`` times and in turn (each run starting with the next mode: none first, then
go-noop first, ...):

* ``none``: kube-scheduler without an extender;
* ``go-noop``: kube-scheduler with bench/noop_extender (standard-library Go, built with the machine's Go, as the
  control plane is; every node passes, every score is 0);
* ``spot-extender``: kube-scheduler with spot-extender (2 workers, its node cache watching this control plane).

Both extenders are configured like deploy/scheduler/base's v1 file (HTTPS, ``nodeCacheCapable``, filter and
prioritize, ``ignorable``), only ``urlPrefix`` and the CA differ. Each round creates ``--pods`` pods for a
profile no scheduler serves yet, restarts kube-scheduler with that profile and extender, and times the bindings
as a watch sees them: pods/s = (pods - 1) / (last binding - first binding), so start-up is left out. Printed:
the median pods/s of each, and spot-extender / go-noop.

Then the per-call breakdown of /filter and /prioritize at ``--nodes`` and 5,000 node names (``--big``; the extra
nodes are created in the control plane so spot-extender's cache knows them): p50/p99 of

* ``server``: spot-extender's direct door in this process (:func:`extender.direct.answer` on the bytes Go's
  client sends, the same cache contents), i.e. what the poller worker does for the call except the socket;
* ``client``: the whole call over one kept-alive TLS connection, to spot-extender and to the Go no-op.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import requests
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from extender import direct  # noqa: E402
from extender.app import create_app  # noqa: E402
from shared.config import Config  # noqa: E402
from tests.support.controlplane.cluster import ControlPlane, running_control_plane  # noqa: E402
from tests.support.controlplane.process import cache_dir, free_ports  # noqa: E402
from tests.support.extender_server import ExtenderProcess  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from extender_bench import Cache, node_json, pod_json  # noqa: E402

NOOP_SOURCE = ROOT / "bench" / "noop_extender" / "main.go"
SPOT = {"karpenter.sh/capacity-type": "spot"}
ON_DEMAND = {"karpenter.sh/capacity-type": "on-demand"}
MODES = ("none", "go-noop", "spot-extender")
PODS_PER_NODE = (
    110  # the pods a node created by ControlPlane.create_node allows (tests/support/controlplane/cluster.py)
)


# -- the Go no-op extender --------------------------------------------------------------------------------------


def build_noop() -> Path:
    """bench/noop_extender built with the machine's Go (standard library only: nothing to fetch), cached by its
    source and the Go version."""
    source = NOOP_SOURCE.read_bytes()
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "", "CGO_ENABLED": "0"}
    go_version = subprocess.run(["go", "env", "GOVERSION"], env=env, capture_output=True, text=True, check=True)
    key = hashlib.sha256(source + go_version.stdout.encode()).hexdigest()[:12]
    binary = cache_dir() / "bench" / f"noop-extender-{key}"
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["go", "build", "-trimpath", "-o", str(binary), "."], cwd=NOOP_SOURCE.parent, env=env, check=True)
    return binary


class NoopProcess:
    def __init__(self, binary: Path, certs: Path) -> None:
        (self.port,) = free_ports(1)
        self.url = f"https://127.0.0.1:{self.port}"
        cmd = [str(binary), f"-addr=127.0.0.1:{self.port}", f"-cert={certs / 'tls.crt'}", f"-key={certs / 'tls.key'}"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                with TlsClient(self.port, certs / "ca.crt") as client:
                    client.call("/healthz", b"")
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the Go no-op extender did not start") from None
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class _NoDelayConnection(http.client.HTTPSConnection):
    """Go's net/http sets TCP_NODELAY; http.client does not, and sends a large body after its headers, so its
    last partial segment waited for the server's delayed ACK (~40 ms on loopback) and timed the kernel."""

    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class TlsClient:
    """One kept-alive HTTPS connection, as kube-scheduler's Go client keeps it."""

    def __init__(self, port: int, ca: Path) -> None:
        context = ssl.create_default_context(cafile=str(ca))
        self.conn = _NoDelayConnection("127.0.0.1", port, context=context, timeout=30)

    def __enter__(self) -> TlsClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.close()

    def call(self, path: str, body: bytes) -> bytes:
        self.conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = self.conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise OSError(f"{path}: HTTP {response.status}: {data[:200]!r}")
        return data


# -- throughput ------------------------------------------------------------------------------------------------


def extender_config(url: str, ca_bundle: str) -> dict[str, Any]:
    """deploy/scheduler/base's v1 extender entry, pointed at ``url``."""
    shipped = yaml.safe_load((ROOT / "deploy/scheduler/base/kube-scheduler-v1.yaml").read_text())
    (ext,) = shipped["extenders"]
    ext["urlPrefix"] = url
    ext["tlsConfig"] = {"caData": ca_bundle}
    return dict(ext)


def create_nodes(plane: ControlPlane, names: list[str], *, managed: bool) -> None:
    """Nodes, half spot, kept Ready by the kubelet stand-in; unmanaged ones (all spot) only feed the node cache."""
    for i, name in enumerate(names):
        if managed:
            plane.create_node(name, labels=SPOT if i % 2 == 0 else ON_DEMAND, wait=False)
        else:
            labels = {"kubernetes.io/hostname": name, **SPOT}
            plane.api.post(
                "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
            )


def wait_until(check: Callable[[], bool], what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.5)


def ready_nodes(plane: ControlPlane, names: set[str]) -> int:
    ready = 0
    for node in plane.api.list("/api/v1/nodes"):
        if node["metadata"]["name"] in names:
            conditions = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions") or []}
            tainted = any(t.get("key") == "node.kubernetes.io/not-ready" for t in node["spec"].get("taints") or [])
            ready += conditions.get("Ready") == "True" and not tainted
    return ready


def knows(spot: ExtenderProcess, names: list[str], spot_nodes: int) -> bool:
    """Does spot-extender's node cache know every spot node of ``names`` (scored 10)?"""
    return sum(score == 10 for score in spot.scores(names).values()) == spot_nodes


def one_round(plane: ControlPlane, pods: int, extenders: list[dict[str, Any]], qps: int) -> float:
    """Pods/s kube-scheduler binds ``pods`` pending pods at, with ``extenders``.

    The pods are created first, for a profile no scheduler serves; the watch starts after them, then
    kube-scheduler is restarted with the profile. The API server closes a watch whose client falls behind
    (``Forcing ... watcher close due to unresponsiveness``, a busy 2-core machine does), so the watch resumes
    from the last resourceVersion it saw; resumptions are counted on stderr.
    """
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    profile = f"bench-{namespace}"
    plane.create_namespace(namespace)
    for i in range(pods):
        plane.api.post(
            f"/api/v1/namespaces/{namespace}/pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"p{i}", "labels": {"app": "bench"}},
                "spec": {
                    "schedulerName": profile,
                    "containers": [
                        {"name": "app", "image": "registry.example/app:1", "resources": {"requests": {"cpu": "10m"}}}
                    ],
                },
            },
        )
    bound: list[float] = []
    resumed = 0
    version = plane.api.get(f"/api/v1/namespaces/{namespace}/pods")["metadata"]["resourceVersion"]
    watch_api = plane.new_api()
    done = threading.Event()
    failed: list[BaseException] = []

    def watch() -> None:
        nonlocal version, resumed
        seen: set[str] = set()
        while True:
            try:
                with watch_api.session.get(
                    f"{plane.server}/api/v1/namespaces/{namespace}/pods",
                    params={"watch": "1", "resourceVersion": version, "allowWatchBookmarks": "false"},
                    stream=True,
                    timeout=600,
                ) as stream:
                    stream.raise_for_status()
                    for line in stream.iter_lines():
                        event = orjson.loads(line)
                        obj = event.get("object") or {}
                        if event.get("type") == "ERROR":
                            raise RuntimeError(f"the watch failed: {obj.get('message')}")
                        version = obj["metadata"]["resourceVersion"]
                        name = obj["metadata"]["name"]
                        if obj.get("spec", {}).get("nodeName") and name not in seen:
                            seen.add(name)
                            bound.append(time.monotonic())
                            if len(seen) == pods:
                                done.set()
                                return
            except requests.RequestException:
                pass  # closed by the API server: resume from `version`
            except BaseException as error:
                failed.append(error)
                done.set()
                return
            resumed += 1

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    config = plane.scheduler_config(profiles=[{"schedulerName": profile}], extenders=extenders or None)
    config["clientConnection"] = {"qps": qps, "burst": qps}
    plane.restart_scheduler(config)
    if not done.wait(600):
        raise RuntimeError(f"only {len(bound)} of {pods} pods were bound")
    if failed:
        raise failed[0]
    watch_api.close()
    if resumed:
        print(f"  (the watch was closed by the API server and resumed {resumed} time(s))", file=sys.stderr)
    return (len(bound) - 1) / (bound[-1] - bound[0])


# -- per-call latency ------------------------------------------------------------------------------------------


def go_request(path: str, body: bytes) -> bytes:
    """The call as kube-scheduler's Go client writes it."""
    head = b"POST %s HTTP/1.1\r\nHost: spotshift\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: %d\r\n" % (
        path.encode(),
        len(body),
    )
    return head + b"Content-Type: application/json\r\nAccept-Encoding: gzip\r\n\r\n" + body


def percentiles(times: list[float]) -> tuple[float, float]:
    ordered = sorted(times)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def timed(fn: Callable[[], Any], calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def server_latency(names: list[str], calls: int) -> dict[str, tuple[float, float]]:
    """p50 and p99 of each call through the direct door in this process, the caches holding ``names``."""
    body = orjson.dumps({"Pod": pod_json(), "NodeNames": names, "Nodes": None})
    nodes = [node_json(i) for i in range(len(names))]
    for node, name in zip(nodes, names, strict=True):
        node["metadata"]["name"] = name
    app = create_app(Config(), Cache(nodes, Config()))
    out = {}
    for verb in ("filter", "prioritize"):
        request = go_request(f"/{verb}", body)

        def in_process(request: bytes = request) -> None:
            assert direct.answer(request, app.direct.decide, time.monotonic(), True) is not None

        timed(in_process, 50)
        out[verb] = percentiles(timed(in_process, calls))
    return out


def call_latency(names: list[str], spot: ExtenderProcess, noop: NoopProcess, certs: Path, calls: int) -> list[str]:
    """Rows of the per-call table for ``names``."""
    body = orjson.dumps({"Pod": pod_json(), "NodeNames": names, "Nodes": None})
    servers = server_latency(names, calls)
    rows = []
    for verb in ("filter", "prioritize"):
        server = servers[verb]
        with TlsClient(spot.port, certs / "ca.crt") as client:
            client.call(f"/{verb}", body)
            spot_client = percentiles(timed(lambda verb=verb: client.call(f"/{verb}", body), calls))
        with TlsClient(noop.port, certs / "ca.crt") as client:
            client.call(f"/{verb}", body)
            noop_client = percentiles(timed(lambda verb=verb: client.call(f"/{verb}", body), calls))
        ms = [f"{x * 1000:.2f}" for pair in (server, spot_client, noop_client) for x in pair]
        rows.append(f"| /{verb} | {len(names)} | " + " | ".join(ms) + " |")
    return rows


def parse_args() -> argparse.Namespace:
    """The command line; exits with a usage error when the rounds need more pod slots than the nodes hold."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--pods", type=int, default=600)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--big", type=int, default=5000, help="node names of the second per-call row")
    parser.add_argument("--calls", type=int, default=300, help="calls per per-call figure")
    parser.add_argument(
        "--qps",
        type=int,
        default=1000,
        help="kube-scheduler's API client rate limit (its default, 50, caps every mode at the same ~75 pods/s)",
    )
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument(
        "--server-only",
        action="store_true",
        help="only the server column, at --nodes and --big names (no control plane)",
    )
    args = parser.parse_args()
    rounds = args.runs * len(MODES)
    if not args.server_only and rounds * args.pods > args.nodes * PODS_PER_NODE:
        # bound pods stay: the last rounds would never finish
        parser.error(
            f"{rounds} rounds of {args.pods} pods need {rounds * args.pods} pod slots and {args.nodes} nodes hold "
            f"{args.nodes * PODS_PER_NODE} ({PODS_PER_NODE} each): raise --nodes or lower --pods or --runs"
        )
    return args


def print_server_latency(args: argparse.Namespace) -> None:
    """The server column alone, at ``--nodes`` and ``--big`` names."""
    for count, calls in ((args.nodes, args.calls * 10), (args.big, args.calls)):
        times = server_latency([f"bench-node-{i}" for i in range(count)], calls)
        print(
            " | ".join(
                f"/{verb} {count}: p50 {p50 * 1000:.3f} p99 {p99 * 1000:.3f}" for verb, (p50, p99) in times.items()
            )
        )


def throughput(plane: ControlPlane, args: argparse.Namespace, configs: dict[str, list[dict[str, Any]]]) -> None:
    """Every mode's rounds, each run starting with the next mode; each round's rate, then the medians."""
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    for run in range(args.runs):
        # Each run starts with the next mode, so no mode always has the first (or last) slot of a run.
        for mode in MODES[run % len(MODES) :] + MODES[: run % len(MODES)]:
            rate = one_round(plane, args.pods, configs[mode], args.qps)
            rates[mode].append(rate)
            print(f"run {run + 1}: {mode}: {rate:.1f} pods/s", flush=True)
    median = {mode: statistics.median(values) for mode, values in rates.items()}
    print(f"\n{args.nodes} nodes, {args.pods} pods, median of {args.runs} runs:")
    for mode in MODES:
        print(f"  {mode:14s} {median[mode]:7.1f} pods/s   ({', '.join(f'{r:.1f}' for r in rates[mode])})")
    print(f"  spot-extender / go-noop: {median['spot-extender'] / median['go-noop']:.2f}")
    print(f"  go-noop / none:          {median['go-noop'] / median['none']:.2f}", flush=True)


def print_call_latency(
    plane: ControlPlane,
    args: argparse.Namespace,
    names: list[str],
    spot: ExtenderProcess,
    noop: NoopProcess,
    certs: Path,
    rows: list[str],
) -> None:
    """The per-call table: ``rows`` (at ``names``), then the same calls with ``--big`` nodes known."""
    more = [f"bench-big-{i}" for i in range(args.big - len(names))]
    create_nodes(plane, more, managed=False)
    everything = names + more
    spot_nodes = (len(names) + 1) // 2 + len(more)
    wait_until(lambda: knows(spot, everything, spot_nodes), "the cache to know every node")
    rows += call_latency(everything, spot, noop, certs, max(20, args.calls // 10))
    print("\nper call, ms (server: the direct door in-process; client: one kept-alive TLS connection)")
    print("| call | nodes | server p50 | p99 | spot-extender client p50 | p99 | go-noop client p50 | p99 |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


def main() -> int:
    args = parse_args()
    if args.server_only:
        print_server_latency(args)
        return 0
    noop_binary = build_noop()
    with running_control_plane() as plane:
        work = plane.run_dir / "bench"
        work.mkdir()
        spot = ExtenderProcess(work, plane.kubeconfig, {}, workers=2).start()
        certs = spot.certs
        noop = NoopProcess(noop_binary, certs)
        try:
            names = [f"bench-node-{i}" for i in range(args.nodes)]
            create_nodes(plane, names, managed=True)
            wait_until(lambda: ready_nodes(plane, set(names)) == len(names), f"{len(names)} Ready nodes")
            wait_until(lambda: knows(spot, names, (len(names) + 1) // 2), "spot-extender's cache to know the nodes")
            configs = {
                "none": [],
                "go-noop": [extender_config(noop.url, spot.ca_bundle)],
                "spot-extender": [extender_config(spot.url, spot.ca_bundle)],
            }
            rows = [] if args.skip_latency else call_latency(names, spot, noop, certs, args.calls)
            throughput(plane, args, configs)
            if not args.skip_latency:
                print_call_latency(plane, args, names, spot, noop, certs, rows)
        finally:
            noop.stop()
            spot.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
