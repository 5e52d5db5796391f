"""Exact ``resource.Quantity`` parsing, as apimachinery's ``ParseQuantity`` does it.

Every quantity ``ParseQuantity`` accepts is a whole number of nano-units: values finer than ``1n``
are rounded *up* in magnitude to the next nano (``0.1n`` is ``1n``; "if you want some resources, you
should get some resources"), and a ``BinarySI`` value (``Ki`` .. ``Ei``) larger than ``2^63-1`` in
magnitude is capped there (``9Ei``). :func:`nano_value` returns that integer, so sums of quantities
(a pod's containers, its overhead) are exact integer additions, rounded only at the end like
upstream adds ``Quantity`` values before calling ``MilliValue()``/``Value()``.

The scheduler compares CPU as ``MilliValue()`` and every other resource as ``Value()``; both round
*up*, away from zero (``Quantity.RoundUp``/``int64Amount.AsScale``: ``0.1m`` CPU is 1 millicore,
``-1.5`` is ``-2``); :func:`milli_value` / :func:`value` do the same.

Grammar (``k8s.io/apimachinery/pkg/api/resource/quantity.go``)::

    <quantity>        ::= <signedNumber><suffix>
    <signedNumber>    ::= <number> | +<number> | -<number>
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= n | u | m | "" | k | M | G | T | P | E
    <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>

The grammar is what upstream documents; what it *accepts* is its hand-written scanner
(``parseQuantityString``), reproduced here quirks included:

* ``1.G`` and ``1.`` are accepted (upstream has a TODO to reject them); ``1ki`` and ``1K`` are not
  (``k`` is the only lower-case multiplier); white space anywhere is an error (``" 1"``);
* a number part with no digit is zero, not an error, when upstream's fast path handles it: ``"+"``,
  ``"-"``, ``"."``, ``"-."``, ``"Ki"``, ``"M"``, ``"e-9"`` all parse as 0. Where upstream falls
  back to ``inf.Dec`` (``"Pi"``, ``"Ei"``, ``".e-10"``) it fails with "unable to parse numeric part";
* the exponent of ``1e<n>`` is parsed as an int64 and truncated to int32 (``1e4294967296`` is ``1``).

Deliberate deviation: an exponent that would need more than :data:`MAX_DIGITS` decimal digits
(``1e100000``) is rejected instead of building an enormous number; upstream accepts it and then
overflows in ``Value()``. Quantities above ``2^63-1`` that upstream does not cap (``12E``) are kept
exact here, where upstream's ``Value()`` would overflow.

``QuantityError`` messages quote the text and carry upstream's error wording.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

__all__ = [
    "QuantityError",
    "parse_quantity",
    "nano_value",
    "milli_value",
    "value",
    "resource_value",
    "round_up",
    "NANO",
    "NANO_PER_MILLI",
    "MAX_INT64",
    "MAX_DIGITS",
]

NANO = 10**9
"""Nano-units per unit: :func:`nano_value` ``// NANO`` (rounded up) is ``Value()``."""
NANO_PER_MILLI = 10**6
"""Nano-units per milli-unit: :func:`nano_value` ``// NANO_PER_MILLI`` (rounded up) is ``MilliValue()``."""
MAX_INT64 = 2**63 - 1
"""``maxAllowed`` in quantity.go: the cap for ``BinarySI`` quantities."""
MAX_DIGITS = 4096
"""Largest decimal exponent (in nano-units) this module builds; see the module docstring."""

# suffix.go: quantitySuffixer's decimal and binary tables.
_DECIMAL_EXP = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_EXP = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_DIGITS = frozenset("0123456789")
_INT64_TEXT = re.compile(r"[+-]?[0-9]+")  # strconv.ParseInt(s, 10, 64) syntax

# quantity.go error values, quoted verbatim.
_ERR_FORMAT = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
_ERR_NUMERIC = "unable to parse numeric part of quantity"
_ERR_SUFFIX = "unable to parse quantity's suffix"


class QuantityError(ValueError):
    """A string that is not a valid ``resource.Quantity``; the message quotes it."""


def _fail(text: str, why: str) -> QuantityError:
    return QuantityError(f"quantity {text!r}: {why}")


def _interpret(suffix: str, text: str) -> tuple[int, bool]:
    """``quantitySuffixer.interpret``: (exponent, is BinarySI); the base follows from the latter."""
    exp = _DECIMAL_EXP.get(suffix)
    if exp is not None:
        return exp, False
    exp = _BINARY_EXP.get(suffix)
    if exp is not None:
        return exp, True
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        if _INT64_TEXT.fullmatch(digits):
            parsed = int(digits)
            if -(2**63) <= parsed < 2**63:
                # int32(parsed): Go truncates the exponent to 32 bits.
                return ((parsed + 2**31) % 2**32) - 2**31, False
    raise _fail(text, _ERR_SUFFIX)


def _ceil_div(n: int, d: int) -> int:
    """``n / d`` rounded up in magnitude (away from zero), ``d > 0``."""
    q = -(-abs(n) // d)
    return q if n >= 0 else -q


@lru_cache(maxsize=8192)
def _nanos_str(text: str) -> int:
    if not text:
        raise _fail(text, _ERR_FORMAT)
    end = len(text)
    pos = 0
    positive = True
    if text[0] == "-":
        positive = False
        pos = 1
    elif text[0] == "+":
        pos = 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos == end:
        # parseQuantityString returns "0" as soon as only zeros (or nothing) follow the sign.
        return 0
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos]
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
    number_end = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos != end:
        raise _fail(text, _ERR_FORMAT)
    exponent, binary = _interpret(text[number_end:], text)

    if not num and not denom and not any(c in _DIGITS for c in text[:number_end]):
        # No digit at all: upstream's int64 fast path reads num "0" and succeeds; its inf.Dec
        # fallback finds no digits and fails. The fast path applies when its precision estimate
        # is non-negative and the scale is at least nano (quantity.go ParseQuantity).
        precision = 18 - 1 if not binary else 15 - 1 - (exponent * 3) // 10 - 1
        scale = exponent if not binary else 0
        if precision >= 0 and scale >= -9:
            return 0
        raise _fail(text, _ERR_NUMERIC)

    mantissa = int(num + denom) if num or denom else 0
    if binary:
        # mantissa / 10^len(denom) * 2^exponent, in nanos, rounded up; capped at 2^63-1 units.
        scaled = mantissa * (2**exponent) * NANO
        nanos = _ceil_div(scaled, 10 ** len(denom))
        nanos = min(nanos, MAX_INT64 * NANO)
    else:
        shift = exponent - len(denom) + 9
        if shift >= 0:
            if shift > MAX_DIGITS:
                raise _fail(text, f"exponent {exponent} is too large to represent")
            nanos = mantissa * 10**shift
        elif -shift > len(str(mantissa)):
            nanos = 1 if mantissa else 0  # below 1n: rounds up to the minimum representable value
        else:
            nanos = _ceil_div(mantissa, 10**-shift)
    return nanos if positive else -nanos


def _check_type(raw: object) -> None:
    if isinstance(raw, bool):
        raise _fail(str(raw), "a boolean is not a quantity")
    if not isinstance(raw, str | int | float):
        raise QuantityError(f"quantity {raw!r}: expected a string, got {type(raw).__name__}")


def nano_value(raw: str | int | float) -> int:
    """The quantity in nano-units (an exact integer after upstream's rounding and cap).

    JSON numbers (``cpu: 2`` in a hand-written manifest) are accepted like the API server's
    decoder does, through their decimal text (``Quantity.UnmarshalJSON``).
    """
    if isinstance(raw, str):
        return _nanos_str(raw)
    _check_type(raw)
    if isinstance(raw, int):
        return raw * NANO
    return _nanos_str(repr(raw))


def parse_quantity(raw: str | int | float) -> Fraction:
    """Parse a quantity exactly (after upstream's nano rounding); raise :class:`QuantityError` naming the text."""
    return Fraction(nano_value(raw), NANO)


def round_up(nanos: int, unit: int) -> int:
    """``nanos`` in multiples of ``unit`` nano-units, rounded up in magnitude (``ScaledValue``)."""
    return _ceil_div(nanos, unit)


@lru_cache(maxsize=8192)
def _milli_str(text: str) -> int:
    return _ceil_div(_nanos_str(text), NANO_PER_MILLI)


@lru_cache(maxsize=8192)
def _value_str(text: str) -> int:
    return _ceil_div(_nanos_str(text), NANO)


def milli_value(raw: str | int | float) -> int:
    """``Quantity.MilliValue()``: thousandths, rounded up (CPU in millicores)."""
    if isinstance(raw, str):
        return _milli_str(raw)
    return _ceil_div(nano_value(raw), NANO_PER_MILLI)


def value(raw: str | int | float) -> int:
    """``Quantity.Value()``: whole units, rounded up (bytes, counts, extended resources)."""
    if isinstance(raw, str):
        return _value_str(raw)
    return _ceil_div(nano_value(raw), NANO)


def resource_value(name: str, raw: str | int | float) -> int:
    """The integer the scheduler compares for resource ``name``: millicores for ``cpu``, else ``Value()``."""
    return milli_value(raw) if name == "cpu" else value(raw)
