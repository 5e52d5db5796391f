"""``spot-rescheduler plan --output json``: the plan as one JSON document for programs.

The document is :meth:`~rescheduler.plan.records.Plan.to_json` (``worth``: each weighed node's saving, cost and
verdict); in capacity mode it also carries ``capacity``,
the spot room each node that only lacks room would need, one object per node with its pods' keys.
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from rescheduler.plan.capacity_needs import CapacityNeed
from rescheduler.plan.records import Plan

__all__ = ["render_json"]


def render_json(result: Plan, needs: Sequence[CapacityNeed] | None = None) -> str:
    """The plan's JSON document on one line; with ``needs`` (capacity mode), its ``capacity`` list too."""
    data = result.to_json()
    if needs is not None:
        data["capacity"] = [
            {
                "node": n.node,
                "pods": [p.key for p in n.pods],
                "cpu_millicores": n.cpu,
                "memory_bytes": n.memory,
                "text": n.text,
            }
            for n in needs
        ]
    return orjson.dumps(data).decode() + "\n"
