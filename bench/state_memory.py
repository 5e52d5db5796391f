"""Memory of the rescheduler's watched pod state after its list, and after a watch event for every pod.

    python3 bench/state_memory.py                          # 1,000 nodes, 30,000 pods (about a minute)
    python3 bench/state_memory.py --nodes 200 --pods 6000 --page-size 2000

Why it measures what it does: ``spot-rescheduler run`` lists the pods once and then keeps them current from watch
events, so on a live cluster with rollouts, restarts and status updates every pod is eventually replaced by the
object an event carries. Memory that grows with that churn shows only after hours on a big cluster; here it is
measured in-process without one. The generated cluster's pods (``tests/support/cluster_gen.py``, profile FULL,
seed 1) are served page by page to the product's pod informer (:class:`~rescheduler.cluster.watch_cache.StateInformer`
over a scripted collection in place of the API server, same decoders, same handler); then its watch sends one
``MODIFIED`` event for every pod, each with a changed label (``bench.spotshift.io/churn``, as a rollout changes a
template) and a changed status condition time (as a kubelet's update does).

The figures are ``tracemalloc``'s: the live Python memory of the state alone (what was allocated since just
before the state was made and is still held), after the list and after the events, and the peak during the list
(the state so far, the pages in flight and their decoding: what ``--page-size`` changes). They say nothing of the
process's RSS (the interpreter, the libraries, freed memory the allocator keeps), only of what the state holds.
Recorded figures and the commands are in bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import sys
import threading
import time
import tracemalloc
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rescheduler.cluster.watch_cache import NODES, PODS, ClusterState, StateInformer
from shared.kube.api import Kube
from tests.support.cluster_gen import FULL, iter_items

CHURN_LABEL = "bench.spotshift.io/churn"


class _Script:
    """The API server's pods (the project's :class:`~shared.kube.api.Transport`): their list, page by page, and a
    watch that sends a ``MODIFIED`` event for every pod, then waits to be closed."""

    def __init__(self, items: list[bytes]) -> None:
        self.items = items
        """Each pod as the JSON bytes the API server would send."""
        self.sent = threading.Event()
        self.closed = threading.Event()

    def request(self, method: str, path: str, *, query: Sequence[tuple[str, Any]] = (), **_: Any) -> bytes:
        q = dict(query)
        start, limit = int(q.get("continue") or 0), int(q["limit"])
        end = min(start + limit, len(self.items))
        meta = b'{"resourceVersion":"1000"' + (b',"continue":"%d"}' % end if end < len(self.items) else b"}")
        items = b",".join(self.items[start:end])
        return b'{"kind":"PodList","apiVersion":"v1","metadata":' + meta + b',"items":[' + items + b"]}"

    def stream(self, path: str, **_: Any) -> _Stream:
        return _Stream(self)


class _Stream:
    def __init__(self, script: _Script) -> None:
        self.script = script

    def __iter__(self) -> Iterator[bytes]:
        if not self.script.sent.is_set():
            for rv, item in enumerate(self.script.items, start=1001):
                yield orjson.dumps({"type": "MODIFIED", "object": _churned(orjson.loads(item), rv)})
            self.script.sent.set()
        self.script.closed.wait()

    def close(self) -> None:
        self.script.closed.set()


def _churned(pod: dict[str, Any], rv: int) -> dict[str, Any]:
    """The pod as a watch event carries it after a label changed and it started again a day later (its start
    time and every condition's time moved by a day: its start-up time, which the state keeps, stays)."""
    meta = pod["metadata"]
    meta["labels"] = {**(meta.get("labels") or {}), CHURN_LABEL: "1"}
    meta["resourceVersion"] = str(rv)
    status = pod.get("status") or {}
    if status.get("startTime"):
        status["startTime"] = _a_day_later(status["startTime"])
    for c in status.get("conditions") or ():
        if c.get("lastTransitionTime"):
            c["lastTransitionTime"] = _a_day_later(c["lastTransitionTime"])
    return pod


def _a_day_later(stamp: str) -> str:
    when = datetime.datetime.fromisoformat(stamp) + datetime.timedelta(days=1)
    return when.isoformat().replace("+00:00", "Z")


def _traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def measure(nodes: int, pods: int, page_size: int) -> dict[str, float]:
    items = [i for i in iter_items(1, nodes, pods, FULL) if i["kind"] in ("Node", "Pod")]
    node_items = [i for i in items if i["kind"] == "Node"]
    pod_bytes = [
        orjson.dumps(i) for i in items if i["kind"] == "Pod" and i["status"].get("phase") not in ("Succeeded", "Failed")
    ]
    del items
    script = _Script(pod_bytes)
    tracemalloc.start()
    base = _traced()
    tracemalloc.reset_peak()
    state = ClusterState()
    state.replace(NODES, node_items)
    started = time.perf_counter()
    informer = StateInformer(Kube(script), state, PODS, "/api/v1/pods", threading.Event(), page_size=page_size)
    informer.start()
    informer.synced.wait()
    listed_at = time.perf_counter()
    list_peak = tracemalloc.get_traced_memory()[1] - base
    after_list = _traced() - base
    script.sent.wait()
    state.wait_until(lambda: informer.events >= len(pod_bytes), timeout=600)
    churned_at = time.perf_counter()
    after_churn = _traced() - base
    informer.close()
    informer.join()
    tracemalloc.stop()
    return {
        "pods": len(pod_bytes),
        "list_s": listed_at - started,
        "events_s": churned_at - listed_at,
        "list_peak_mb": list_peak / 1e6,
        "after_list_mb": after_list / 1e6,
        "after_churn_mb": after_churn / 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--pods", type=int, default=30000)
    p.add_argument("--page-size", type=int, default=500)
    args = p.parse_args(argv)
    r = measure(args.nodes, args.pods, args.page_size)
    print(f"{args.nodes:,} nodes, {r['pods']:,} pods listed by pages of {args.page_size} (times under tracemalloc)")
    print(f"peak during the list:        {r['list_peak_mb']:7.1f} MB")
    print(f"after the list:              {r['after_list_mb']:7.1f} MB  ({r['list_s']:.1f} s)")
    print(f"after a MODIFIED per pod:    {r['after_churn_mb']:7.1f} MB  ({r['events_s']:.1f} s)")
    print(f"ratio:                       {r['after_churn_mb'] / r['after_list_mb']:7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
