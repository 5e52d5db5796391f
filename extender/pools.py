"""The node cache's memory of spot reclaims, and the score it gives a spot node by its pool.

Each gunicorn worker learns reclaims from its own node watch (:class:`~shared.spot_pools.ReclaimSpotter`: the
first list counts nothing, later events and relists do) into its own :class:`~shared.spot_pools.ReclaimMemory`,
timed by ``clock`` (Unix seconds). A spot node's score then depends on its pool (:meth:`PoolScores.spot_score`):

* a pool reclaimed within ``spot.stability_window`` scores as on-demand (``extender.on_demand_score``): kube-
  scheduler then prefers any steadier spot node, and a spot node of that pool over nothing;
* a settled pool with reclaims remembered scores between the two, by its expected stay as a share of
  ``spot.memory``: ``on_demand + ceil((spot - on_demand) * stay / memory)`` (a pool reclaimed once in the memory
  scores half-way, and never as low as on-demand);
* any other spot node scores ``extender.spot_score``, as without a memory.

The scores change only when a reclaim is recorded or when a window or the memory runs out for a pool; the node
index re-renders the fragments of that pool's nodes then (:meth:`PoolScores.due` is one comparison, so
``/prioritize`` does no work proportional to the history).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

from shared.config import ExtenderConfig, SpotConfig
from shared.spot_pools import PoolKey, ReclaimMemory, ReclaimSpotter, Sighting

__all__ = ["PoolScores"]


class PoolScores:
    """See the module docstring. Not thread-safe: the node index calls it under its lock."""

    def __init__(self, scores: ExtenderConfig, spot: SpotConfig, clock: Callable[[], float] = time.time) -> None:
        self.scores = scores
        self.memory = ReclaimMemory(spot.memory, spot.stability_window)
        self.spotter = ReclaimSpotter()
        self.clock = clock
        self.next_change = math.inf
        """When (``clock``) a pool's score changes next without a new reclaim."""
        self._score: dict[PoolKey, int] = {}
        """The pools that do not score ``spot_score`` now, and their score."""

    def spot_score(self, pool: PoolKey) -> int:
        return self._score.get(pool, self.scores.spot_score)

    def scored(self) -> list[PoolKey]:
        """The pools that do not score ``extender.spot_score`` now."""
        return list(self._score)

    def relist(self, sightings: Iterable[Sighting]) -> set[PoolKey]:
        """Every spot node listed; the pools whose score changed."""
        return self._record(self.spotter.relist(sightings))

    def note(self, name: str, pool: PoolKey, why: str | None) -> set[PoolKey]:
        """One spot node changed or appeared; the pools whose score changed."""
        reclaimed = self.spotter.note(name, pool, why)
        return self._record([reclaimed] if reclaimed is not None else [])

    def gone(self, name: str) -> set[PoolKey]:
        """A node was deleted; the pools whose score changed."""
        reclaimed = self.spotter.gone(name)
        return self._record([reclaimed] if reclaimed is not None else [])

    def due(self) -> bool:
        return self.clock() >= self.next_change

    def update(self) -> set[PoolKey]:
        """The scores as of now; the pools whose score changed."""
        now = self.clock()
        self.memory.forget(now)
        outlook = self.memory.outlook(now)
        s = self.scores
        score: dict[PoolKey, int] = {}
        for pool, stay in outlook.stays:
            if pool in outlook.unsettled:
                score[pool] = s.on_demand_score
            else:
                share = math.ceil((s.spot_score - s.on_demand_score) * stay / self.memory.memory)
                score[pool] = min(s.spot_score, s.on_demand_score + max(1, share))
        changed = {p for p in score.keys() | self._score.keys() if score.get(p) != self._score.get(p)}
        self._score = {p: v for p, v in score.items() if v != s.spot_score}
        self.next_change = self.memory.next_change(now)
        return changed

    def _record(self, reclaimed: list[PoolKey]) -> set[PoolKey]:
        if not reclaimed:
            return set()
        now = self.clock()
        for pool in reclaimed:
            self.memory.record(pool, now)
        return self.update()
