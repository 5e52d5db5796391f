"""Cron schedules and drain windows, in an IANA time zone, without a clock: the time is always an argument.

A schedule has the five fields of crontab(5): minute (0-59), hour (0-23), day of month (1-31), month (1-12 or
``jan``-``dec``) and day of week (0-7, 0 and 7 are Sunday, or ``sun``-``sat``). Each field is ``*``, a value,
a range ``a-b``, a step ``*/n`` or ``a-b/n`` (``a/n``: from ``a`` to the field's end), or a comma-separated
list of those. The macros ``@yearly`` (``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``)
and ``@hourly`` stand for their usual expansions. As in Vixie cron (and Karpenter's schedules, which use the
same parser), when both day of month and day of week are restricted (neither starts with ``*``), a day matches
if either matches.

The rules for time zones, decided here and tested with Europe/Berlin's changes on the last Sundays of March
and October:

1. A schedule matches an *instant* (a whole minute) when the local wall-clock time of that instant in the zone
   matches its fields.
2. So a wall-clock time the zone skips (02:30 on the day clocks go forward) never matches: the window of
   ``30 2 * * *`` does not open that day. A wall-clock time the zone repeats (02:30 on the day clocks go back)
   matches twice: that window opens twice.
3. A window's ``duration`` is elapsed time: ``0 22 * * *`` with 8h closes at 07:00 local time on the night
   clocks go forward and at 05:00 on the night they go back.
4. A window is open from its start, inclusive, to start + duration, exclusive.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = [
    "CronError",
    "CronSchedule",
    "zone",
    "next_start",
    "window_open",
    "SEARCH_DAYS",
]

SEARCH_DAYS = 366 * 8 + 2
"""How far ahead :func:`next_start` looks: any valid schedule (even ``0 0 29 2 mon``) matches within it."""

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELDS = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)


class CronError(ValueError):
    """A schedule that cannot be parsed; the message says which field and why."""


def _value(text: str, name: str, lo: int, hi: int, names: tuple[str, ...]) -> int:
    low = text.lower()
    if names and low in names:
        return names.index(low) + (1 if name == "month" else 0)
    if not text.isdigit():
        raise CronError(f"{name} {text!r} is not a number" + (f" or a name like {names[0]}" if names else ""))
    value = int(text)
    if not lo <= value <= hi:
        raise CronError(f"{name} {value} is outside {lo}-{hi}")
    return value


def _field(text: str, name: str, lo: int, hi: int, names: tuple[str, ...]) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        if not part:
            raise CronError(f"{name} has an empty list item")
        base, slash, step_text = part.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or int(step_text) == 0:
                raise CronError(f"{name} step {step_text!r} must be a positive number")
            step = int(step_text)
        if base == "*":
            first, last = lo, hi
        elif "-" in base:
            a, _, b = base.partition("-")
            first, last = _value(a, name, lo, hi, names), _value(b, name, lo, hi, names)
            if first > last:
                raise CronError(f"{name} range {base!r} runs backwards")
        else:
            first = _value(base, name, lo, hi, names)
            last = hi if slash else first
        out.update(range(first, last + 1, step))
    return frozenset(out)


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A parsed five-field schedule; ``text`` is what was written."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    """0-6, Sunday 0 (a written 7 is folded into 0)."""
    days_restricted: bool
    weekdays_restricted: bool

    @classmethod
    def parse(cls, text: str) -> CronSchedule:
        """Parse ``text``; raises :class:`CronError` naming the field at fault."""
        expanded = _MACROS.get(text.strip().lower(), text)
        parts = expanded.split()
        if len(parts) != 5:
            raise CronError(f"a schedule has 5 fields: minute hour day-of-month month day-of-week; got {len(parts)}")
        sets = [_field(p, name, lo, hi, names) for p, (name, lo, hi, names) in zip(parts, _FIELDS, strict=True)]
        weekdays = frozenset(d % 7 for d in sets[4])
        return cls(
            text.strip(),
            sets[0],
            sets[1],
            sets[2],
            sets[3],
            weekdays,
            not parts[2].startswith("*"),
            not parts[4].startswith("*"),
        )

    def matches_day(self, day: datetime.date) -> bool:
        """Whether the schedule runs on this calendar date (month, then day of month / day of week)."""
        if day.month not in self.months:
            return False
        dom = day.day in self.days
        dow = (day.isoweekday() % 7) in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return dom or dow  # Vixie cron: either restricted day field may match
        return dom and dow

    def matches(self, local: datetime.datetime) -> bool:
        """Whether the schedule matches this wall-clock minute."""
        return local.minute in self.minutes and local.hour in self.hours and self.matches_day(local.date())


def zone(name: str) -> ZoneInfo:
    """The IANA zone ``name`` (``Europe/Berlin``, ``UTC``); raises ``ValueError`` for an unknown one."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as e:
        raise ValueError(f"unknown time zone {name!r}") from e


_UTC = datetime.UTC


def _starts_on(schedule: CronSchedule, day: datetime.date, tz: ZoneInfo) -> list[float]:
    """Unix times of the instants on local date ``day`` whose wall-clock time matches (rules 1 and 2)."""
    if not schedule.matches_day(day):
        return []
    out = []
    for hour in sorted(schedule.hours):
        for minute in sorted(schedule.minutes):
            for fold in (0, 1):
                wall = datetime.datetime(day.year, day.month, day.day, hour, minute, fold=fold, tzinfo=tz)
                instant = wall.astimezone(_UTC)
                back = instant.astimezone(tz)
                if (back.hour, back.minute, back.date()) != (hour, minute, day):
                    continue  # a wall-clock time this zone skips
                out.append(instant.timestamp())
    return sorted(set(out))


def next_start(schedule: CronSchedule, tz: ZoneInfo, after: float) -> float | None:
    """The first instant strictly after ``after`` (Unix time) that the schedule matches, or ``None`` when none
    comes within :data:`SEARCH_DAYS` (a schedule such as ``0 0 31 2 *`` never matches)."""
    day = datetime.datetime.fromtimestamp(after, _UTC).astimezone(tz).date() - datetime.timedelta(days=1)
    for i in range(SEARCH_DAYS):
        later = [s for s in _starts_on(schedule, day + datetime.timedelta(days=i), tz) if s > after]
        if later:
            # The next local date too: a zone that moves its clocks back across midnight repeats a date.
            more = [s for s in _starts_on(schedule, day + datetime.timedelta(days=i + 1), tz) if s > after]
            return min(later + more)
    return None


def window_open(schedule: CronSchedule, duration: float, tz: ZoneInfo, now: float) -> bool:
    """Whether a window (``schedule`` + ``duration`` seconds) is open at ``now``: some start ``s`` has
    ``s <= now < s + duration`` (rule 4)."""
    start = next_start(schedule, tz, now - duration)
    return start is not None and start <= now
