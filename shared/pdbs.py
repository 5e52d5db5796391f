"""Which PodDisruptionBudgets select a pod, fast: one index for the planner, the safety checks and the tests.

A budget is matched against a pod only if the pod carries a label value the budget's selector requires with
``In`` (``matchLabels`` entries are ``In``): budgets are indexed by ``(namespace, key, value)`` of their
narrowest such requirement, so a pod is checked against the few budgets that can select it, not against
every budget of its namespace (thousands in a large cluster). Budgets without an ``In`` requirement are
checked for every pod of their namespace; a budget without a selector selects nothing (``policy/v1``).
"""

from __future__ import annotations

from collections.abc import Iterable

from shared.model import PDB, Pod
from shared.selectors import IN

__all__ = ["PdbIndex"]


class PdbIndex:
    """The budgets of one snapshot, indexed by the label values that select them; positions are those of the
    ``pdbs`` given, so callers may keep per-budget counts in lists."""

    __slots__ = ("pdbs", "_anchored", "_general")

    def __init__(self, pdbs: Iterable[PDB]) -> None:
        self.pdbs: tuple[PDB, ...] = tuple(pdbs)
        self._anchored: dict[tuple[str, str, str], list[int]] = {}
        self._general: dict[str, list[int]] = {}
        for i, pdb in enumerate(self.pdbs):
            sel = pdb.selector
            if sel is None:
                continue  # selects no pod
            anchor = None
            for r in sel.requirements:
                if r.operator == IN and (anchor is None or len(r.values) < len(anchor.values)):
                    anchor = r
            if anchor is None:
                self._general.setdefault(pdb.namespace, []).append(i)
            else:
                for v in anchor.values:
                    self._anchored.setdefault((pdb.namespace, anchor.key, v), []).append(i)

    def indices(self, pod: Pod) -> list[int]:
        """Positions of the budgets that select ``pod``, ascending, each once."""
        ns = pod.namespace
        index = self._anchored
        found: list[int] = []
        for k, v in pod.labels.items():
            hit = index.get((ns, k, v))
            if hit:
                found.extend(hit)
        found.extend(self._general.get(ns, ()))
        pdbs = self.pdbs
        return sorted({i for i in found if pdbs[i].selects(pod)})

    def selecting(self, pod: Pod) -> list[PDB]:
        """The budgets that select ``pod``, each once, in the order they were given."""
        return [self.pdbs[i] for i in self.indices(pod)]
