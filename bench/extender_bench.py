"""``/prioritize`` with 5,000 NodeNames and with 5,000 full Node objects, next to plain ``orjson.loads``.

    python3 bench/extender_bench.py [--nodes 5000] [--repeat-names 300] [--repeat-nodes 9]

What is timed, each as the median (p50) of its repeats:

* ``app``: one ``POST /prioritize`` through the Flask app (Werkzeug's test client builds the WSGI environ,
  the app reads the body, decodes, scores, encodes, counts metrics), i.e. everything a gunicorn worker does
  for the request except the socket; the node cache is filled from the same nodes beforehand, as the
  watch would have done;
* ``stack``: ``GET /healthz`` through the same client: the fixed cost of the stack, so ``app - stack`` is
  the extender's own work;
* ``core``: the pure part alone (``orjson.loads`` of the body plus :func:`extender.scheduling.prioritize_names`
  or :func:`~extender.scheduling.prioritize_nodes`);
* ``loads``: plain ``orjson.loads`` of the same body, the floor any Python extender pays.

Nodes look like a managed node group's (labels, annotations, taints for half of them, conditions,
addresses, capacity, allocatable, nodeInfo and a 10-image list): ~4.3 KB each, 21-22 MB for 5,000, which is
what kube-scheduler sends with ``nodeCacheCapable: false``. Targets (ISSUE 5): names p50 <= 5 ms; full
nodes app p50 <= 1.5 x loads p50.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from extender.app import create_app  # noqa: E402
from extender.scheduling import (  # noqa: E402
    ExtenderPolicy,
    NodeIndex,
    PodIndex,
    prioritize_names,
    prioritize_nodes,
    reduce_node,
)
from shared.config import Config  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from predicates import ZONES, node_labels  # noqa: E402


def node_json(i: int) -> dict[str, Any]:
    spot = i % 2 == 0
    zone = ZONES[i % 3]
    name = f"ip-10-0-{i // 250}-{i % 250}.eu-west-1.compute.internal"
    labels = node_labels(i, spot, name)
    return {
        "metadata": {
            "name": name,
            "uid": f"00000000-0000-4000-8000-{i:012x}",
            "resourceVersion": str(1_000_000 + i),
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": labels,
            "annotations": {
                "alpha.kubernetes.io/provided-node-ip": f"10.0.{i // 250}.{i % 250}",
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {
            "providerID": f"aws:///{zone}/i-{i:017x}",
            "taints": [{"key": "spotshift.io/spot", "value": "true", "effect": "NoSchedule"}] if spot else [],
        },
        "status": {
            "capacity": {"cpu": "8", "ephemeral-storage": "104845292Ki", "memory": "32408676Ki", "pods": "58"},
            "allocatable": {"cpu": "7910m", "ephemeral-storage": "95551679124", "memory": "31391844Ki", "pods": "58"},
            "conditions": node_conditions(),
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250}"},
                {"type": "Hostname", "address": name},
                {"type": "InternalDNS", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": node_info(i),
            "images": node_images(),
        },
    }


def node_conditions() -> list[dict[str, Any]]:
    """A healthy kubelet's node conditions: no pressure of any kind, Ready."""
    return [
        {
            "type": t,
            "status": "False",
            "lastHeartbeatTime": "2024-05-14T09:12:44Z",
            "lastTransitionTime": "2024-05-01T10:00:00Z",
            "reason": f"KubeletHas{r}",
            "message": f"kubelet has {m}",
        }
        for t, r, m in (
            ("MemoryPressure", "SufficientMemory", "sufficient memory available"),
            ("DiskPressure", "NoDiskPressure", "no disk pressure"),
            ("PIDPressure", "SufficientPID", "sufficient PID available"),
        )
    ] + [
        {
            "type": "Ready",
            "status": "True",
            "lastHeartbeatTime": "2024-05-14T09:12:44Z",
            "lastTransitionTime": "2024-05-01T10:00:30Z",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
        }
    ]


def node_info(i: int) -> dict[str, str]:
    """``status.nodeInfo`` of node ``i``: an EKS node's machine, OS and kubelet."""
    return {
        "machineID": f"{i:032x}",
        "systemUUID": f"ec2{i:029x}",
        "bootID": f"{i:08x}-0000-4000-8000-000000000000",
        "kernelVersion": "5.10.215-203.850.amzn2.x86_64",
        "osImage": "Amazon Linux 2",
        "containerRuntimeVersion": "containerd://1.7.11",
        "kubeletVersion": "v1.29.3-eks-ae9a62a",
        "kubeProxyVersion": "v1.29.3-eks-ae9a62a",
        "operatingSystem": "linux",
        "architecture": "amd64",
    }


def node_images() -> list[dict[str, Any]]:
    """The ten application images a node reports, each by digest and by tag."""
    return [
        {
            "names": [
                f"registry.example.com/team/app-{j}@sha256:{j:064x}",
                f"registry.example.com/team/app-{j}:v1.{j}.0",
            ],
            "sizeBytes": 50_000_000 + j * 1_000_003,
        }
        for j in range(10)
    ]


def pod_json() -> dict[str, Any]:
    return {
        "metadata": {
            "name": "checkout-7d9c6b8f5-x2x9q",
            "namespace": "shop",
            "labels": {"app": "checkout", "pod-template-hash": "7d9c6b8f5"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "checkout-7d9c6b8f5",
                    "uid": "u",
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "app", "image": "x", "resources": {"requests": {"cpu": "250m"}}}]},
    }


class Cache:
    def __init__(self, nodes: list[dict[str, Any]], config: Config) -> None:
        policy = ExtenderPolicy.from_config(config)
        self.nodes = NodeIndex()
        self.nodes.replace_all({n["metadata"]["name"]: reduce_node(n, policy) for n in nodes})
        self.pods = PodIndex()

    def synced(self) -> bool:
        return True


def p50(fn: Callable[[], Any], repeat: int) -> tuple[float, list[float]]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--repeat-names", type=int, default=300)
    parser.add_argument("--repeat-nodes", type=int, default=9)
    args = parser.parse_args()

    config = Config()
    nodes = [node_json(i) for i in range(args.nodes)]
    names = [n["metadata"]["name"] for n in nodes]
    names_body = orjson.dumps({"Pod": pod_json(), "Nodes": None, "NodeNames": names})
    nodes_body = orjson.dumps({"Pod": pod_json(), "Nodes": {"items": nodes}, "NodeNames": None})
    cache = Cache(nodes, config)
    del nodes
    gc.collect()
    app = create_app(config, cache)
    client = app.test_client()
    policy = ExtenderPolicy.from_config(config)

    def post(body: bytes) -> Callable[[], Any]:
        def call() -> Any:
            r = client.post("/prioritize", data=body, content_type="application/json")
            assert r.status_code == 200
            return r.data

        return call

    # Sanity: both forms give the same scores.
    assert orjson.loads(post(names_body)()) == orjson.loads(post(nodes_body)())

    def core_names() -> bytes:
        args_ = orjson.loads(names_body)
        return prioritize_names(args_["NodeNames"], cache.nodes)

    def core_nodes() -> bytes:
        args_ = orjson.loads(nodes_body)
        return prioritize_nodes(args_["Nodes"]["items"], policy)

    sizes = f"NodeNames body {len(names_body) / 1e3:.1f} kB, full Nodes body {len(nodes_body) / 1e6:.1f} MB"
    print(f"{args.nodes} nodes; {sizes}")
    stack, _ = p50(lambda: client.get("/healthz"), args.repeat_names)
    rows = []
    for label, body, core, repeat in (
        ("NodeNames", names_body, core_names, args.repeat_names),
        ("full Nodes", nodes_body, core_nodes, args.repeat_nodes),
    ):
        post(body)()  # warm
        loads, _ = p50(lambda body=body: orjson.loads(body), repeat)
        core_t, _ = p50(core, repeat)
        app_t, _ = p50(post(body), repeat)
        rows.append((label, app_t, core_t, loads))
        print(
            f"  {label:<10} app p50 {app_t * 1e3:8.2f} ms   own work (app - stack) {(app_t - stack) * 1e3:8.2f} ms   "
            f"core {core_t * 1e3:8.2f} ms   plain orjson.loads {loads * 1e3:8.2f} ms   "
            f"app/loads {app_t / loads:5.2f}"
        )
    print(f"  stack (GET /healthz through the same client) p50 {stack * 1e3:.3f} ms")
    names_app = rows[0][1]
    nodes_app, nodes_loads = rows[1][1], rows[1][3]
    verdict = "PASS" if names_app <= 0.005 else "FAIL"
    print(f"  /prioritize NodeNames p50 {names_app * 1e3:.2f} ms (target <= 5 ms: {verdict})")
    ratio = nodes_app / nodes_loads
    print(f"  /prioritize full Nodes = {ratio:.2f} x plain parse (target <= 1.5: {'PASS' if ratio <= 1.5 else 'FAIL'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
