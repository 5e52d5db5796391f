"""The parts of the live-scale bench the e2e tier uses too: a generated cluster on a real control plane, the
components run against it as processes, their memory and CPU read from ``/proc``, and the API server's audit
log read back as a start-up request pattern.

Used by ``bench/live_scale.py`` (figures at 1,000 x 30,000 and more) and ``tests/e2e/test_live_scale_e2e.py``
(the request pattern and the plan at 200 x 6,000).
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.support.cluster_load import CONTROLLERS  # noqa: E402
from tests.support.controlplane.cluster import ControlPlane  # noqa: E402
from tests.support.controlplane.process import free_ports  # noqa: E402

RESCHEDULER_USER = "bench-rescheduler"
EXTENDER_USER = "bench-extender"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def control_plane_options() -> dict[str, Any]:
    """``ControlPlane`` arguments for a loaded cluster: controllers that keep what is loaded, no kubelet stand-in,
    one admin user per component, and the audit log of those two users' requests."""
    users = [RESCHEDULER_USER, EXTENDER_USER]
    return {"controllers": CONTROLLERS, "kubelet": False, "users": users, "audit_users": users}


# -- /proc ------------------------------------------------------------------------------------------------------


def cpu_seconds(pid: int, *, children: bool = True) -> float:
    """User + system CPU of ``pid`` (and of its children it has waited for, with ``children``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / CLOCK_TICKS


def memory_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (peak) of ``pid``, in KiB."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def children_of(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def tree_pss_kib(pid: int) -> int:
    """Proportional set size of ``pid`` and its descendants: shared pages counted once overall."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
                    break
        except OSError:
            continue
        todo.extend(children_of(p))
    return total


class MemorySampler(threading.Thread):
    """Samples the summed PSS of a process tree every ``interval`` seconds; :attr:`peak_kib` is the largest."""

    def __init__(self, pid: int, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.peak_kib = 0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.interval):
            self.peak_kib = max(self.peak_kib, tree_pss_kib(self.pid))

    def stop(self) -> None:
        self._done.set()
        self.join(5)


# -- processes --------------------------------------------------------------------------------------------------


def component_env() -> dict[str, str]:
    """The environment of a component: no ``SPOTSHIFT_*`` of the caller's (the components refuse unknown ones)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SPOTSHIFT_") and k != "PROMETHEUS_MULTIPROC_DIR"}


@dataclass
class LogLine:
    at: float
    """``time.monotonic()`` when the line was read."""
    wall: float
    """``time.time()`` then."""
    record: dict[str, Any]


@dataclass
class Rescheduler:
    """``spot-rescheduler run --dry-run`` as a child process, its JSON log lines read as they come."""

    plane: ControlPlane
    work: Path
    interval: str = "5s"
    extra: tuple[str, ...] = ()
    lines: list[LogLine] = field(default_factory=list)
    started: float = 0.0
    """``time.monotonic()`` when the process was started."""
    began: float = 0.0
    """``time.time()`` then: the API server's audit log is stamped in wall time."""
    proc: subprocess.Popen[bytes] | None = None
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def start(self) -> Rescheduler:
        cmd = [
            sys.executable,
            "-m",
            "rescheduler.cli",
            "run",
            "--dry-run",
            "--kubeconfig",
            str(self.plane.kubeconfig_of(RESCHEDULER_USER)),
            "--leader-elect",
            "false",
            "--log-format",
            "json",
            "--listen-address",
            f"127.0.0.1:{free_ports(1)[0]}",
            "--housekeeping-interval",
            self.interval,
            *self.extra,
        ]
        self.started, self.began = time.monotonic(), time.time()
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=component_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        log = (self.work / "spot-rescheduler.log").open("ab")
        for raw in self.proc.stdout:
            log.write(raw)
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError:
                record = {"msg": raw.decode(errors="replace").rstrip()}
            with self._cond:
                self.lines.append(LogLine(time.monotonic(), time.time(), record if isinstance(record, dict) else {}))
                self._cond.notify_all()
        log.close()
        with self._cond:
            self._cond.notify_all()

    def wait_line(self, starts: str, *, after: int = 0, timeout: float = 600.0) -> tuple[int, LogLine]:
        """The first line at index >= ``after`` whose message starts with ``starts``: (index, line)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for i in range(after, len(self.lines)):
                    if str(self.lines[i].record.get("msg", "")).startswith(starts):
                        return i, self.lines[i]
                if self.proc is None or self.proc.poll() is not None:
                    raise RuntimeError(f"spot-rescheduler exited:\n{self.tail()}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"no log line {starts!r} within {timeout:.0f}s:\n{self.tail()}")
                self._cond.wait(min(left, 1.0))

    def tail(self, n: int = 30) -> str:
        return "\n".join(orjson.dumps(line.record).decode() for line in self.lines[-n:])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


# -- the audit log ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One request of the audit log (stage ResponseComplete, or ResponseStarted for a watch)."""

    user: str
    verb: str
    resource: str
    name: str
    uri: str
    code: int
    received: float
    """Unix time the API server received it."""

    @property
    def query(self) -> dict[str, list[str]]:
        return parse_qs(urlsplit(self.uri).query)


def audit_requests(path: Path, user: str) -> Iterator[Request]:
    """The requests of ``user``, one per request (a watch counts once, when it started)."""
    if not path.exists():
        return
    with path.open("rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                return  # the line the API server is writing now: read on the next call
            event = orjson.loads(raw)
            if (event.get("user") or {}).get("username") != user:
                continue
            stage = event.get("stage")
            if event.get("verb") == "watch" and stage != "ResponseStarted":
                continue
            if event.get("verb") != "watch" and stage != "ResponseComplete":
                continue
            ref = event.get("objectRef") or {}
            resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            yield Request(
                user=user,
                verb=str(event.get("verb")),
                resource=resource or urlsplit(event.get("requestURI", "")).path,
                name=str(ref.get("name") or ""),
                uri=str(event.get("requestURI", "")),
                code=int((event.get("responseStatus") or {}).get("code") or 0),
                received=_unix(str(event.get("requestReceivedTimestamp", ""))),
            )


def _unix(stamp: str) -> float:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else 0.0


def requests_between(path: Path, user: str, began: float, until: float) -> list[Request]:
    """The requests of ``user`` the API server received from ``began`` to ``until`` (Unix time): one process's,
    when others ran under the same user before it."""
    return [r for r in audit_requests(path, user) if began <= r.received <= until]


def request_pattern(requests: list[Request]) -> Counter[tuple[str, str]]:
    """Requests counted by (verb, resource); a GET of a named object is verb ``get``, a list ``list``."""
    return Counter((r.verb, r.resource) for r in requests)


def paginated(r: Request) -> bool:
    return "limit" in r.query


# -- memory per object ------------------------------------------------------------------------------------------


@dataclass
class Held:
    """Bytes a component keeps for what it watches: per node, per pod, and the source lines holding the most."""

    per_node: float
    per_pod: float
    total: int
    holders: list[tuple[str, int]]


def json_pages(items: list[dict[str, Any]], kind: str, page: int = 500) -> list[bytes]:
    """The items of ``kind`` as list pages of API JSON, as an informer receives them."""
    of_kind = [i for i in items if i["kind"] == kind]
    return [orjson.dumps({"metadata": {}, "items": of_kind[i : i + page]}) for i in range(0, len(of_kind), page)]


def _where(frame: Any) -> str:
    path = Path(frame.filename)
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else Path(*path.parts[-2:])
    return f"{shown}:{frame.lineno}"


def traced(
    items: list[dict[str, Any]],
    kinds: tuple[str, ...],
    read_page: Callable[[str, bytes], list[Any]],
    finish: Callable[[str, list[Any]], None],
) -> Held:
    """Bytes still allocated after each kind's pages went through ``read_page(kind, body)`` (page by page, the
    raw page dropped) and ``finish(kind, read)`` (the informer's ``replace``); nodes are the first kind."""
    import gc
    import tracemalloc

    pages = {kind: json_pages(items, kind) for kind in kinds}
    counts = {kind: sum(1 for i in items if i["kind"] == kind) for kind in kinds}
    gc.collect()
    tracemalloc.start(1)
    base = tracemalloc.take_snapshot()
    start = tracemalloc.get_traced_memory()[0]
    after_nodes = start
    for kind in kinds:
        read: list[Any] = []
        for body in pages[kind]:
            read.extend(read_page(kind, body))
        finish(kind, read)
        del read
        gc.collect()
        if kind == "Node":
            after_nodes = tracemalloc.get_traced_memory()[0]
    snap = tracemalloc.take_snapshot()
    total = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    stats = snap.compare_to(base, "lineno")
    holders = [(_where(s.traceback[0]), s.size_diff) for s in stats[:8]]
    return Held(
        per_node=(after_nodes - start) / max(1, counts["Node"]),
        per_pod=(total - (after_nodes - start)) / max(1, counts.get("Pod", 0)),
        total=total,
        holders=holders,
    )


def rescheduler_held(items: list[dict[str, Any]]) -> Held:
    """What the rescheduler's :class:`~rescheduler.cluster.watch_cache.ClusterState` keeps, fed as its informers feed
    it (pods by :class:`~rescheduler.cluster.watch_cache.PodPages`, finished pods left out as its field selector
    does); "per pod" counts PDBs and volumes with the pods."""
    from rescheduler.cluster.watch_cache import NODES, PDBS, PODS, PVCS, PVS, ClusterState, PodPages

    watched = {"Node": NODES, "PersistentVolume": PVS, "PersistentVolumeClaim": PVCS, "PodDisruptionBudget": PDBS}
    watched["Pod"] = PODS
    live = [i for i in items if not (i["kind"] == "Pod" and i["status"].get("phase") in ("Succeeded", "Failed"))]
    state = ClusterState()
    pod_pages = PodPages(state)

    def read_page(kind: str, body: bytes) -> list[Any]:
        if kind == "Pod":
            return pod_pages(body).items
        return [state.parse(watched[kind], obj) for obj in orjson.loads(body)["items"]]

    held = traced(live, tuple(watched), read_page, lambda kind, read: state.replace_parsed(watched[kind], read))
    assert len(state.pods) > 0
    return held


def extender_held(items: list[dict[str, Any]]) -> Held:
    """What one spot-extender worker keeps: its node index and pod index (:mod:`extender.scheduling`)."""
    from extender.scheduling import ExtenderPolicy, NodeIndex, PodIndex, reduce_node, reduce_pod
    from shared.config import Config

    config = Config()
    policy = ExtenderPolicy.from_config(config)
    nodes, pods = NodeIndex(), PodIndex()

    def read_page(kind: str, body: bytes) -> list[tuple[str, Any]]:
        objs = orjson.loads(body)["items"]
        if kind == "Node":
            return [(obj["metadata"]["name"], reduce_node(obj, policy)) for obj in objs]
        return [(obj["metadata"]["uid"], reduce_pod(obj, config.spot_ceiling)) for obj in objs]

    def finish(kind: str, read: list[tuple[str, Any]]) -> None:
        store: Any = nodes if kind == "Node" else pods
        store.replace_all({key: value for key, value in read if value is not None})

    return traced(items, ("Node", "Pod"), read_page, finish)


def relabel_pods(plane: ControlPlane, label: str, value: str, threads: int) -> tuple[int, float]:
    """Set ``label`` to ``value`` on every pod (a merge patch each, from ``threads`` threads, each with its own
    connection), as a rollout changes every pod's template: each pod's watchers get a ``MODIFIED`` event carrying
    a new object. Returns the pods relabelled and the seconds it took."""
    began = time.monotonic()
    pods = [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in plane.api.list("/api/v1/pods")]
    patch = {"metadata": {"labels": {label: value}}}
    local = threading.local()

    def one(key: tuple[str, str]) -> None:
        api = getattr(local, "api", None)
        if api is None:
            api = local.api = plane.new_api()
        namespace, name = key
        for attempt in range(8):  # API priority and fairness may push back on a busy server
            response = api.request(
                "PATCH",
                f"/api/v1/namespaces/{namespace}/pods/{name}",
                body=patch,
                content_type="application/merge-patch+json",
            )
            if response.status_code not in (429, 500, 503, 504) or attempt == 7:
                break
            time.sleep(0.2 * 2**attempt)
        if response.status_code != 200:
            raise RuntimeError(f"PATCH pod {namespace}/{name}: HTTP {response.status_code}: {response.text[:300]}")

    with ThreadPoolExecutor(threads) as pool:
        for _ in pool.map(one, pods):
            pass
    return len(pods), time.monotonic() - began
