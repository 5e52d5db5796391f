"""The rescheduler's memory of spot reclaims: fed by the loop from its watch-backed state, kept in its Lease.

Each cycle the leader shows the snapshot's nodes to a :class:`~shared.spot_pools.ReclaimSpotter` and records the
reclaims it tells (:meth:`SpotMemory.observe`), then reads the memory at the cycle's time into the snapshot
(:attr:`~shared.snapshot.ClusterSnapshot.spot_outlook`), which the plan and the placeholders judge pools by.

The memory lives in the leader-election Lease as the annotation :data:`ANNOTATION` (compact JSON, under 24 KiB):
the elector writes it with every renewal (:meth:`SpotMemory.current`) and, on taking the lease, adds what the
annotation holds to this process's memory (:meth:`SpotMemory.inherit`), so a new leader inherits its
predecessor's. With ``--leader-elect=false`` there is no Lease: the memory lives in the process and is lost with
it. The elector's thread and the loop's share the memory under one lock.
"""

from __future__ import annotations

import logging
import threading

from rescheduler.metrics import Metrics
from shared.config import Config
from shared.snapshot import ClusterSnapshot
from shared.spot_pools import PoolKey, PoolOutlook, ReclaimMemory, ReclaimSpotter, holds_workload

__all__ = ["ANNOTATION", "SpotMemory"]

ANNOTATION = "spotshift.io/spot-reclaims"
"""The Lease annotation holding the memory (:meth:`shared.spot_pools.ReclaimMemory.to_json`)."""

log = logging.getLogger("spotshift.rescheduler.cluster.spot_memory")


class SpotMemory:
    """The memory of spot reclaims of one rescheduler process (see the module docstring)."""

    annotation = ANNOTATION

    def __init__(self, config: Config, metrics: Metrics | None = None) -> None:
        spot = config.spot
        self.classes = config.node_classes
        self.memory = ReclaimMemory(spot.memory, spot.stability_window)
        self.metrics = metrics
        self._spotter = ReclaimSpotter()
        self._lock = threading.Lock()
        self._text: str | None = None
        """The JSON of :attr:`memory` as last written (``None``: to be written again)."""
        self._seen_version: int | None = None
        """The state version of the nodes last observed: the same nodes again tell no new reclaim."""
        self._occupied: dict[str, tuple[int, bool]] = {}
        """Node name -> the :attr:`~shared.snapshot.NodeInfo.stamp` of its pods and whether they hold workload."""

    def observe(self, snapshot: ClusterSnapshot, now: float, version: int | None = None) -> list[PoolKey]:
        """Record the reclaims the snapshot's nodes tell since the last call, forget the old ones, and set the
        snapshot's :attr:`~shared.snapshot.ClusterSnapshot.spot_outlook` to the memory read at ``now``.
        ``version`` is the cluster state's version the snapshot was taken at: a snapshot of the version last
        observed holds the same nodes and pods, which tell nothing new (a sighting seen twice is no reclaim), so
        they are not looked at again."""
        same = version is not None and version == self._seen_version
        occupied = {} if same else self._holding(snapshot)
        with self._lock:
            reclaimed = [] if same else self._spotter.observe((info.node for info in snapshot), self.classes, occupied)
            self._seen_version = version
            for pool in reclaimed:
                self.memory.record(pool, now)
            before = len(self.memory)
            self.memory.forget(now)
            if reclaimed or len(self.memory) != before:
                self._text = None
            outlook = self.memory.outlook(now)
        snapshot.spot_outlook = outlook
        for pool in reclaimed:
            log.info("spot pool %s reclaimed: not a target for %.0fs", pool.text, self.memory.stability_window)
        if self.metrics is not None:
            self.metrics.spot_reclaims.inc(len(reclaimed))
            self.metrics.unsettled_spot_pools.set(len(outlook.unsettled))
        return reclaimed

    def _holding(self, snapshot: ClusterSnapshot) -> dict[str, bool]:
        """Per node, whether its pods hold workload (:func:`holds_workload`), looked at again only where they changed
        (another stamp)."""
        kept = self._occupied
        fresh: dict[str, tuple[int, bool]] = {}
        for info in snapshot:
            seen = kept.get(info.name)
            if seen is None or seen[0] != info.stamp:
                seen = (info.stamp, holds_workload(info.pods))
            fresh[info.name] = seen
        self._occupied = fresh
        return {name: seen[1] for name, seen in fresh.items()}

    def record(self, pool: PoolKey, at: float) -> None:
        """Remember a reclaim of ``pool`` at ``at`` (one told otherwise than by :meth:`observe`)."""
        with self._lock:
            self.memory.record(pool, at)
            self._text = None

    def outlook(self, now: float) -> PoolOutlook:
        with self._lock:
            return self.memory.outlook(now)

    def next_change(self, now: float) -> float:
        """When (``wall``) the outlook changes next without a new reclaim (:meth:`ReclaimMemory.next_change`)."""
        with self._lock:
            return self.memory.next_change(now)

    # ---- the Lease (called from the elector's thread) -----------------------------------------------------------

    def inherit(self, text: str | None) -> None:
        """Add the reclaims the Lease annotation ``text`` holds (``None``: none) to this process's memory."""
        if not text:
            return
        try:
            found = ReclaimMemory.from_json(text, self.memory.memory, self.memory.stability_window)
        except ValueError as e:
            log.warning("the Lease annotation %s is not a spot reclaim memory (%s): ignored", ANNOTATION, e)
            return
        with self._lock:
            self.memory.merge(found)
            self._text = None
        log.info("inherited the spot reclaims of %d pool(s) from the Lease", len(found))

    def current(self) -> str:
        """The memory's JSON, for the Lease annotation."""
        with self._lock:
            if self._text is None:
                self._text = self.memory.to_json()
            return self._text
