"""The rescheduler's marks on a node, read: whether it is draining or drained, and until when it rests.

The drainer (:mod:`rescheduler.cluster.drain`) writes these marks; the pure cycle decision
(:mod:`rescheduler.plan.cycle`) and the drainer both read them here, so the names and the timestamp format
are defined once. Timestamps are RFC 3339 in UTC with second precision (``2024-05-14T09:12:44Z``), parsed
without a clock or a timezone database.
"""

from __future__ import annotations

import re

from shared.model import Node

__all__ = [
    "TAINT_VALUE",
    "STATE_ANNOTATION",
    "BACKOFF_UNTIL_ANNOTATION",
    "backoff_until",
    "is_marked",
    "parse_utc",
]

TAINT_VALUE = "spotshift-rescheduler"
"""The value of the drain taint: names spotshift, so a restart knows the taint is its own."""
STATE_ANNOTATION = "spotshift.io/drain-state"
BACKOFF_UNTIL_ANNOTATION = "spotshift.io/drain-backoff-until"

_UTC = re.compile(r"(\d{4})-(\d{1,2})-(\d{1,2})T(\d{1,2}):(\d{1,2}):(\d{1,2})Z")
_DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's ``days_from_civil``)."""
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def _leap(y: int) -> bool:
    return y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)


def parse_utc(text: str) -> float | None:
    """Unix time of ``YYYY-MM-DDTHH:MM:SSZ``; ``None`` for anything else (an impossible date included)."""
    m = _UTC.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(g) for g in m.groups())
    if not (1 <= month <= 12 and 1 <= day <= _DAYS_IN_MONTH[month - 1]) or (
        month == 2 and day == 29 and not _leap(year)
    ):
        return None
    if hour > 23 or minute > 59 or second > 61:
        return None
    return float(_days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second)


def backoff_until(node: Node) -> float | None:
    """Unix time until which the node is left alone, from its annotation (``None``: no backoff)."""
    text = node.annotations.get(BACKOFF_UNTIL_ANNOTATION)
    return parse_utc(text) if text else None


def is_marked(node: Node, taint_key: str) -> bool:
    """Whether the node carries the rescheduler's mark (taint with our value, or our state annotation)."""
    if STATE_ANNOTATION in node.annotations:
        return True
    return any(t.key == taint_key and t.value == TAINT_VALUE for t in node.taints)
