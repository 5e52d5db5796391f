"""How one configuration setting's raw value becomes a typed value, or a phrase saying why it cannot.

Each converter takes ``(raw, from_env)``: ``raw`` is what the YAML file holds, or text from an environment
variable or a command-line flag (``from_env`` true), where ``"true"``, ``"5"`` and ``"a,b"`` stand for a
boolean, an integer and a list. A converter returns the value or raises :class:`Bad` with a phrase
(``must be ...``) that :mod:`shared.config` turns into one sentence naming the field and where the value came
from. :func:`setting` attaches a default and a converter to a field of the schema.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from shared.cron import CronError, CronSchedule, next_start, zone
from shared.model import NO_EXECUTE, NO_SCHEDULE, PREFER_NO_SCHEDULE, Toleration
from shared.names import is_dns1123_label, is_dns1123_subdomain, is_label_value, is_qualified_name
from shared.quantity import QuantityError, resource_value
from shared.selectors import Selector, SelectorSyntaxError

__all__ = [
    "Bad",
    "Conv",
    "setting",
    "boolean",
    "integer",
    "number",
    "parse_duration",
    "duration",
    "choice",
    "text",
    "label_key",
    "namespace",
    "object_name",
    "bind",
    "path",
    "scheduler_name",
    "selector",
    "seq",
    "toleration",
    "tolerations",
    "optional_tolerations",
    "Budget",
    "budgets",
    "time_zone",
    "optional_selector",
    "quantity",
    "image",
]

_TAINT_EFFECTS = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)


class Bad(Exception):
    """Raised by converters: ``problem`` is a phrase (``must be ...``); ``suffix`` extends the path."""

    def __init__(self, problem: str, suffix: str = "", value: Any = ..., *, bare: bool = False) -> None:
        super().__init__(problem)
        self.problem = problem
        self.suffix = suffix
        self.value = value
        self.bare = bare  # the problem already says what was found: no ", got ..."


Conv = Callable[[Any, bool], Any]
"""A field converter: ``(raw value, came from the environment) -> value``; raises :class:`Bad`."""


# --- converters -----------------------------------------------------------------------------------

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def boolean(raw: Any, from_env: bool) -> bool:
    if isinstance(raw, bool):
        return raw
    if from_env and isinstance(raw, str):
        low = raw.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    raise Bad("must be true or false")


def integer(lo: int | None = None, hi: int | None = None) -> Conv:
    if lo is not None and hi is not None:
        phrase = f"must be an integer from {lo} to {hi}"
    elif lo is not None:
        phrase = f"must be an integer of at least {lo}"
    else:
        phrase = "must be an integer"

    def conv(raw: Any, from_env: bool) -> int:
        value = raw
        if from_env and isinstance(raw, str):
            try:
                value = int(raw.strip())
            except ValueError:
                raise Bad(phrase) from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise Bad(phrase)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise Bad(phrase)
        return value

    return conv


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_NUMBER = re.compile(r"[+-]?(\d+(?:\.\d*)?|\.\d+)")


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration (``time.ParseDuration``): ``300ms``, ``30s``, ``5m``, ``1h30m``.

    Also accepts a bare number as seconds (``"90"``), which Go does not. Raises ``ValueError``.
    """
    s = text.strip()
    if _NUMBER.fullmatch(s):
        return float(s)
    sign = 1.0
    if s and s[0] in "+-":
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    total, pos = 0.0, 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            raise ValueError(f"invalid duration {text!r}")
        total += float(m[1]) * _DURATION_UNITS[m[2]]
        pos = m.end()
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    return sign * total


def duration(*, positive: bool) -> Conv:
    phrase = (
        "must be a positive duration like 30s, 5m or 1h30m"
        if positive
        else "must be a duration of zero or more like 30s, 5m or 1h30m"
    )

    def conv(raw: Any, from_env: bool) -> float:
        if isinstance(raw, bool):
            raise Bad(phrase)
        if isinstance(raw, int | float):
            seconds = float(raw)
        elif isinstance(raw, str):
            try:
                seconds = parse_duration(raw)
            except ValueError:
                raise Bad(phrase) from None
        else:
            raise Bad(phrase)
        if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0):
            raise Bad(phrase)
        return seconds

    return conv


def number(lo: float, hi: float | None = None, *, below_hi: bool = False) -> Conv:
    """A real number from ``lo`` up to ``hi`` (``below_hi``: below it); an integer is taken as one."""
    if hi is None:
        phrase = f"must be a number of at least {lo:g}"
    else:
        phrase = f"must be a number from {lo:g} to {'below ' if below_hi else ''}{hi:g}"

    def conv(raw: Any, from_env: bool) -> float:
        value = raw
        if from_env and isinstance(raw, str):
            try:
                value = float(raw.strip())
            except ValueError:
                raise Bad(phrase) from None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise Bad(phrase)
        if value < lo or (hi is not None and (value >= hi if below_hi else value > hi)):
            raise Bad(phrase)
        return float(value)

    return conv


def choice(options: tuple[str, ...]) -> Conv:
    phrase = "must be one of " + ", ".join(options)

    def conv(raw: Any, from_env: bool) -> str:
        value = raw.strip() if from_env and isinstance(raw, str) else raw
        if value is False and "off" in options:
            return "off"  # YAML 1.1 reads an unquoted `mode: off` as false
        if not isinstance(value, str) or value not in options:
            raise Bad(phrase)
        return value

    return conv


def text(check: Callable[[str], bool] | None = None, phrase: str = "must be a string") -> Conv:
    def conv(raw: Any, from_env: bool) -> str:
        value = raw.strip() if from_env and isinstance(raw, str) else raw
        if not isinstance(value, str) or (check is not None and not check(value)):
            raise Bad(phrase)
        return value

    return conv


_BIND_RE = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]*):(\d{1,5})")


def _is_bind(v: str) -> bool:
    m = _BIND_RE.fullmatch(v)
    return m is not None and int(m[2]) <= 65535  # port 0: any free port, as bind(2) does


label_key = text(is_qualified_name, "must be a valid label or annotation key like example.com/name")
namespace = text(is_dns1123_label, "must be a namespace name (lower-case letters, digits and '-', at most 63)")
object_name = text(is_dns1123_subdomain, "must be a lower-case DNS subdomain name like spotshift-rescheduler")
bind = text(_is_bind, "must be an address like 0.0.0.0:8443 or [::]:8443")
path = text()


def scheduler_name(raw: Any, from_env: bool) -> str:
    value = raw.strip() if from_env and isinstance(raw, str) else raw
    if not isinstance(value, str) or (value and not is_dns1123_subdomain(value)):
        raise Bad("must be empty or a scheduler name like spot-scheduler")
    return value


def selector(raw: Any, from_env: bool) -> Selector:
    if not isinstance(raw, str):
        raise Bad("must be a label selector string like key=value, key or key in (a,b)")
    try:
        return Selector.parse(raw)
    except SelectorSyntaxError as e:
        raise Bad(str(e)) from None


def seq(item: Conv, *, comma_separated: bool) -> Conv:
    """A list of ``item``. From the environment: a YAML flow list, else comma-separated names
    (``comma_separated``) or a single item (selectors, whose commas are their own)."""

    def conv(raw: Any, from_env: bool) -> tuple[Any, ...]:
        if from_env and isinstance(raw, str):
            text = raw.strip()
            if text.startswith("["):
                try:
                    raw = yaml.safe_load(text)
                except yaml.YAMLError:
                    raise Bad("must be a YAML flow list like [a, b]") from None
                from_env = False
            elif comma_separated:
                raw = [p.strip() for p in text.split(",") if p.strip()]
            else:
                raw = [text] if text else []
        if not isinstance(raw, list | tuple):
            raise Bad("must be a list")
        out = []
        for i, x in enumerate(raw):
            try:
                out.append(item(x, from_env))
            except Bad as e:
                raise Bad(e.problem, f"[{i}]{e.suffix}", x if e.value is ... else e.value, bare=e.bare) from None
        return tuple(out)

    return conv


_TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")


def toleration(raw: Any, from_env: bool) -> Toleration:
    if not isinstance(raw, Mapping):
        raise Bad("must be a toleration mapping with key, operator, value and effect")
    for k in raw:
        if k not in _TOLERATION_FIELDS:
            raise Bad("is not a toleration field (one of " + ", ".join(_TOLERATION_FIELDS) + ")", f".{k}", bare=True)
    key, op = raw.get("key"), raw.get("operator", "Equal")
    value, effect, seconds = raw.get("value", ""), raw.get("effect"), raw.get("tolerationSeconds")
    if not isinstance(key, str) or not is_qualified_name(key):
        raise Bad(
            "must be a taint key like example.com/name (a key-less toleration would tolerate every taint)", ".key", key
        )
    if op not in ("Equal", "Exists"):
        raise Bad("must be Equal or Exists", ".operator", op)
    if not isinstance(value, str) or not is_label_value(value) or (op == "Exists" and value):
        phrase = (
            "must be empty with operator Exists" if op == "Exists" else "must be a label value (quote true in YAML)"
        )
        raise Bad(phrase, ".value", value)
    if effect not in _TAINT_EFFECTS:
        raise Bad(
            "must be one of " + ", ".join(_TAINT_EFFECTS) + " (an empty effect tolerates every effect)",
            ".effect",
            effect,
        )
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int) or effect != NO_EXECUTE):
        raise Bad("must be an integer and is only allowed with effect NoExecute", ".tolerationSeconds", seconds)
    return Toleration(key, op, value, effect, seconds)


tolerations = seq(toleration, comma_separated=False)


def optional_tolerations(raw: Any, from_env: bool) -> tuple[Toleration, ...] | None:
    return None if raw is None else tolerations(raw, from_env)


def optional_selector(raw: Any, from_env: bool) -> Selector | None:
    """A label selector, or ``None`` for an empty string or ``null`` (every pod)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    return selector(raw, from_env)


def time_zone(raw: Any, from_env: bool) -> str:
    value = raw.strip() if from_env and isinstance(raw, str) else raw
    if not isinstance(value, str) or not value:
        raise Bad("must be an IANA time zone name like UTC or Europe/Berlin")
    try:
        zone(value)
    except ValueError:
        raise Bad("must be an IANA time zone name like UTC or Europe/Berlin") from None
    return value


@dataclass(frozen=True, slots=True)
class Budget:
    """At most ``nodes`` on-demand nodes draining at once: a count, or ``percent`` of the on-demand nodes
    (rounded up). With a ``schedule`` (cron, in ``disruption.time_zone``) it applies only during the window of
    ``duration`` seconds that opens at each match; without one it always applies."""

    nodes: int | None = None
    percent: int | None = None
    schedule: CronSchedule | None = None
    duration: float | None = None

    @property
    def text(self) -> str:
        """The limit as written: ``3`` or ``20%``."""
        return f"{self.percent}%" if self.percent is not None else str(self.nodes)

    def limit(self, on_demand: int) -> int:
        """How many nodes this budget lets drain at once out of ``on_demand`` nodes. A percentage is rounded up,
        as Karpenter rounds its disruption budgets (``intstr.GetScaledValueFromIntOrPercent(..., true)``): 10% of
        5 nodes is 1 node, 0% is none, 100% is all."""
        if self.percent is not None:
            return (self.percent * on_demand + 99) // 100
        assert self.nodes is not None
        return self.nodes


_BUDGET_FIELDS = ("nodes", "schedule", "duration")
_NODES_PHRASE = "must be a node count like 3 or a percentage of on-demand nodes like 20%"


def _budget_nodes(raw: Any) -> tuple[int | None, int | None]:
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return raw, None
    if isinstance(raw, str):
        text = raw.strip()
        if text.endswith("%") and text[:-1].isdigit() and int(text[:-1]) <= 100:
            return None, int(text[:-1])
        if text.isdigit():
            return int(text), None
    raise Bad(_NODES_PHRASE, ".nodes", raw)


def budget(raw: Any, from_env: bool) -> Budget:
    if not isinstance(raw, Mapping):
        raise Bad("must be a budget mapping with nodes, and optionally schedule and duration")
    for k in raw:
        if k not in _BUDGET_FIELDS:
            raise Bad("is not a budget field (one of " + ", ".join(_BUDGET_FIELDS) + ")", f".{k}", bare=True)
    if "nodes" not in raw:
        raise Bad(_NODES_PHRASE, ".nodes", None)
    nodes, percent = _budget_nodes(raw["nodes"])
    sched_raw, dur_raw = raw.get("schedule"), raw.get("duration")
    if (sched_raw is None) != (dur_raw is None):
        missing = ".duration" if dur_raw is None else ".schedule"
        other = "schedule" if dur_raw is None else "duration"
        raise Bad(f"must be set together with {other}", missing, None)
    schedule: CronSchedule | None = None
    seconds: float | None = None
    if sched_raw is not None:
        if not isinstance(sched_raw, str):
            raise Bad("must be a cron schedule like '0 22 * * mon-fri'", ".schedule", sched_raw)
        try:
            schedule = CronSchedule.parse(sched_raw)
        except CronError as e:
            raise Bad(f"must be a cron schedule like '0 22 * * mon-fri' ({e})", ".schedule", sched_raw) from None
        if next_start(schedule, zone("UTC"), 0.0) is None:
            raise Bad("must be a cron schedule that matches some day (this one never does)", ".schedule", sched_raw)
        try:
            seconds = duration(positive=True)(dur_raw, from_env)
        except Bad as e:
            raise Bad(e.problem, ".duration", dur_raw) from None
    return Budget(nodes, percent, schedule, seconds)


budgets = seq(budget, comma_separated=False)


def quantity(resource: str) -> Conv:
    """A ``resource.Quantity`` (``16``, ``500m``, ``64Gi``) of at least one unit as the scheduler counts
    ``resource`` (a millicore for ``cpu``, a byte otherwise); the value stays text, as written, and
    :func:`shared.quantity.resource_value` reads it."""
    examples = "4, 500m or 2.5" if resource == "cpu" else "512Mi or 64Gi"
    phrase = f"must be a positive {resource} quantity like {examples}"

    def conv(raw: Any, from_env: bool) -> str:
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            raise Bad(phrase)
        text = raw.strip() if isinstance(raw, str) else str(raw)
        try:
            amount = resource_value(resource, text)
        except (QuantityError, ValueError, TypeError):
            raise Bad(phrase) from None
        if amount < 1:
            raise Bad(phrase)
        return text

    return conv


_IMAGE_RE = re.compile(r"[a-z0-9]+(?:[._/:@-][A-Za-z0-9_.-]+)*")
image = text(
    lambda v: len(v) <= 512 and _IMAGE_RE.fullmatch(v) is not None,
    "must be a container image reference like registry.k8s.io/pause:3.9",
)


def setting(default: Any, conv: Conv) -> Any:
    return field(default=default, metadata={"conv": conv})
