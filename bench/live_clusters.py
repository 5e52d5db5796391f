"""Written clusters kept for the next run: the etcd data of a control plane the generator's cluster was written to.

Writing 150,000 pods through the API takes over half an hour of a two-core machine; reading the same etcd data
back takes seconds. :func:`written_cluster` runs a control plane on the cluster of ``(nodes, pods, seed)``:

- **kept** (``~/.cache/spotshift/live-clusters/<key>``, or ``SPOTSHIFT_LIVE_CLUSTERS``): its ``data`` directory
  is copied into the fresh etcd directory before etcd starts. etcd, started on a data directory it already has,
  ignores the ``--initial-cluster*`` flags and keeps its one member (the peer address it was written with is
  never dialled: a one-member cluster has no peer). The API server's PKI and tokens are made anew, as at every
  start; nothing in the written objects depends on them.
- **not kept**: a control plane is started, the cluster written (:func:`tests.support.cluster_load.load`) and the
  control plane stopped (etcd last, so its data is complete on disk); the data is copied to the cache, and then a
  control plane is started on that copy as above. Every measurement is made on a restored copy, the first too.

The key covers what the data depends on: the sizes, the seed, the generator's profile, the digest of the
generator's and the loader's source files, and the Kubernetes release. A partial copy is never taken for a
kept one: it is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from livelab import control_plane_options, cpu_seconds

from tests.support.cluster_load import load
from tests.support.controlplane.cluster import ControlPlane, running_control_plane
from tests.support.controlplane.process import Binaries, cache_dir, k8s_version

ROOT = Path(__file__).resolve().parents[1]
GENERATOR_SOURCES = (
    "tests/support/cluster_gen.py",
    "tests/support/cluster_objects.py",
    "tests/support/cluster_workloads.py",
    "tests/support/cluster_load.py",
)
"""What the written objects are made by: their digest is part of the key."""


def clusters_dir() -> Path:
    override = os.environ.get("SPOTSHIFT_LIVE_CLUSTERS")
    return Path(override) if override else cache_dir() / "live-clusters"


def cluster_key(nodes: int, pods: int, seed: int, profile: str) -> str:
    """The directory name of a kept cluster: its sizes and seed, readable, and a digest of everything else."""
    digest = hashlib.sha256()
    for path in GENERATOR_SOURCES:
        digest.update(path.encode() + b"\0" + (ROOT / path).read_bytes() + b"\0")
    digest.update(f"{profile}\0{k8s_version()}".encode())
    return f"n{nodes}-p{pods}-s{seed}-k{k8s_version()}-{digest.hexdigest()[:16]}"


class KeptControlPlane(ControlPlane):
    """A control plane whose etcd starts from a kept data directory (``restore``) if one is given."""

    def __init__(self, binaries: Binaries, *, restore: Path | None = None, **kwargs: Any) -> None:
        super().__init__(binaries, **kwargs)
        self.restore = restore

    def _start_etcd(self, timeout: float) -> None:
        if self.restore is not None:
            shutil.copytree(self.restore, self._etcd_dir / "data")
        super()._start_etcd(timeout)

    def stop_and_keep(self, dest: Path, meta: dict[str, Any]) -> None:
        """Stop every component (etcd last), then copy etcd's data and ``meta`` (``written.json``) to ``dest``:
        complete, or not at all."""
        self.stop_components(timeout=60)
        partial = dest.with_name(dest.name + f".partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(self._etcd_dir / "data", partial / "data")
        (partial / "written.json").write_text(json.dumps(meta))
        partial.rename(dest)


@dataclass(frozen=True)
class Written:
    """How the cluster came to be: written now (``seconds``, ``requests`` of the writing) or restored."""

    key: str
    restored: bool
    seconds: float
    requests: int
    restore_seconds: float


@contextlib.contextmanager
def written_cluster(
    nodes: int,
    pods: int,
    seed: int,
    profile: str,
    items: Callable[[], Iterable[dict[str, Any]]],
    *,
    threads: int = 8,
    keep: bool = True,
    progress: Callable[[str], None] = print,
) -> Iterator[tuple[ControlPlane, Written]]:
    """A running control plane holding the generated cluster; ``items`` makes it when it is not kept."""
    key = cluster_key(nodes, pods, seed, profile)
    kept = clusters_dir() / key
    meta_path = kept / "written.json"
    if not keep:
        with _running(None) as plane:
            loaded = load(plane, items(), threads=threads, progress=lambda s: progress(f"  {s}"))
            yield plane, Written(key, False, loaded.seconds, loaded.requests, 0.0)
        return
    if not meta_path.exists():
        progress(f"writing the cluster, to be kept in {kept}")
        kept.parent.mkdir(parents=True, exist_ok=True)
        plane = KeptControlPlane(Binaries.locate(), **control_plane_options())
        plane.start()
        try:
            loaded = load(plane, items(), threads=threads, progress=lambda s: progress(f"  {s}"))
            plane.stop_and_keep(kept, {"seconds": loaded.seconds, "requests": loaded.requests, "at": time.time()})
        finally:
            plane.stop()
            plane.remove_run_dir()
    meta = json.loads(meta_path.read_text())
    began = time.monotonic()
    with _running(kept / "data") as plane:
        restored = time.monotonic() - began
        quiet = settle(plane)
        idle = settle_cpu(plane)
        progress(
            f"cluster restored from {kept} in {restored:.0f}s, its pods quiet after {quiet:.0f}s more, "
            f"its control plane idle after {idle:.0f}s more"
        )
        yield plane, Written(key, True, float(meta["seconds"]), int(meta["requests"]), restored)


def settle(plane: ControlPlane, *, quiet: float = 10.0, limit: float = 300.0) -> float:
    """Wait until no pod changes for ``quiet`` seconds (at most ``limit``); the seconds waited.

    A control plane just started on a kept cluster may still write pods for a while (its kube-scheduler tries
    the pending pods it finds, each attempt writing the pod's status); a cluster written through the API had that
    done while it was written, so the measurements start from the same calm.
    """
    began = time.monotonic()
    while time.monotonic() - began < limit:
        version = plane.api.get("/api/v1/pods", limit=1)["metadata"]["resourceVersion"]
        params = {"watch": "true", "resourceVersion": version, "timeoutSeconds": int(quiet)}
        response = plane.api.request("GET", "/api/v1/pods", params=params, timeout=quiet + 30)
        if not response.content.strip():
            break
    return time.monotonic() - began


IDLE_SHARE = 0.3
"""A control plane is idle when its processes use less than this share of one core over :data:`IDLE_WINDOW`."""
IDLE_WINDOW = 5.0


def settle_cpu(plane: ControlPlane, *, limit: float = 300.0) -> float:
    """Wait until the control plane's processes are idle (:data:`IDLE_SHARE`, at most ``limit``); the seconds waited.

    Its pods quiet, a control plane just started on a kept cluster still works for a while: kube-scheduler and
    kube-controller-manager list every pod and node into their caches (at 150,000 pods, more than a core for most
    of a minute). A cluster in use has done that long ago, so a component measured on it does not share the
    machine's cores with them.
    """
    began = time.monotonic()

    def used() -> float:
        total = 0.0
        for component in plane.components.values():
            if component.pid is not None and component.alive():
                total += cpu_seconds(component.pid, children=False)
        return total

    while time.monotonic() - began < limit:
        before = used()
        time.sleep(IDLE_WINDOW)
        if used() - before < IDLE_SHARE * IDLE_WINDOW:
            break
    return time.monotonic() - began


def _running(restore: Path | None) -> contextlib.AbstractContextManager[ControlPlane]:
    return running_control_plane(kind=KeptControlPlane, start_timeout=600, restore=restore, **control_plane_options())
