"""kube-scheduler's score normalisation, for tests that compare with upstream's normalised expectations."""

from __future__ import annotations


def default_normalize_score(scores: list[int], max_priority: int = 100, reverse: bool = False) -> list[int]:
    """``helper.DefaultNormalizeScore`` (``pkg/scheduler/framework/plugins/helper/normalize_score.go``): scale to
    ``max_priority`` by the highest score (integer division), reversed if asked; all zeros stay zeros (or become
    ``max_priority`` when reversed)."""
    max_count = max(scores, default=0)
    if max_count == 0:
        return [max_priority] * len(scores) if reverse else list(scores)
    out = []
    for s in scores:
        s = max_priority * s // max_count
        out.append(max_priority - s if reverse else s)
    return out
