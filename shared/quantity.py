"""Exact ``resource.Quantity`` parsing, as apimachinery's ``ParseQuantity`` does it.

Values are exact ``Fraction`` objects, so ``0.1`` plus ``0.2`` CPUs is exactly 300 millicores and
``1.5Gi`` is exactly 1610612736 bytes. The scheduler compares CPU as ``MilliValue()`` and every other
resource as ``Value()``; both round *up* to the next integer (``Quantity.ScaledValue`` rounds away
from zero for positive values, ``0.1m`` CPU is 1 millicore), and :func:`milli_value` / :func:`value`
do the same.

Grammar (from ``k8s.io/apimachinery/pkg/api/resource/quantity.go``)::

    <quantity>        ::= <signedNumber><suffix>
    <signedNumber>    ::= <number> | +<number> | -<number>
    <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
    <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
    <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
    <decimalSI>       ::= m | "" | k | M | G | T | P | E   (and n, u)
    <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>

Deliberately like upstream: ``1.G`` is accepted (upstream has a TODO to reject it), ``1ki`` is not
(``k`` is the only lower-case multiplier), white space anywhere is an error. A number part with no
digit at all (``Ki``, ``.``, ``-``) is an error.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache

__all__ = ["QuantityError", "parse_quantity", "milli_value", "value", "resource_value"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_DIGITS = frozenset("0123456789")


class QuantityError(ValueError):
    """A string that is not a valid ``resource.Quantity``; the message quotes it."""


def _multiplier(suffix: str, text: str) -> Fraction:
    if suffix in _DECIMAL:
        return _DECIMAL[suffix]
    if suffix in _BINARY:
        return Fraction(_BINARY[suffix])
    if len(suffix) > 1 and suffix[0] in "eE":
        exponent = suffix[1:]
        digits = exponent[1:] if exponent[0] in "+-" else exponent
        if digits and all(c in _DIGITS for c in digits):
            return Fraction(10) ** int(exponent)
    raise QuantityError(f"quantity {text!r}: unknown suffix {suffix!r}")


@lru_cache(maxsize=4096)
def _parse_str(text: str) -> Fraction:
    if not text:
        raise QuantityError("quantity '': empty string is not a quantity")
    end = len(text)
    pos = 0
    negative = False
    if text[0] in "+-":
        negative = text[0] == "-"
        pos = 1
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    whole = text[start:pos]
    fraction = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        fraction = text[start:pos]
    if not whole and not fraction:
        # "Ki", "+", ".", "-G": the regular expression asks for a number before the suffix.
        raise QuantityError(f"quantity {text!r}: expected a number before the suffix")
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos != end:
        raise QuantityError(
            f"quantity {text!r}: must match the regular expression "
            r"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        )
    number = Fraction(int(whole or "0")) + (Fraction(int(fraction), 10 ** len(fraction)) if fraction else 0)
    result = number * _multiplier(text[suffix_start:], text)
    return -result if negative else result


def parse_quantity(raw: str | int | float) -> Fraction:
    """Parse a quantity exactly; raise :class:`QuantityError` naming the bad text.

    JSON numbers (``cpu: 2`` in a hand-written manifest) are accepted like the API server's
    decoder does, through their decimal text.
    """
    if isinstance(raw, bool):
        raise QuantityError(f"quantity {raw!r}: a boolean is not a quantity")
    if isinstance(raw, int):
        return Fraction(raw)
    if isinstance(raw, float):
        return _parse_str(repr(raw))
    if not isinstance(raw, str):
        raise QuantityError(f"quantity {raw!r}: expected a string, got {type(raw).__name__}")
    return _parse_str(raw)


def _ceil(q: Fraction) -> int:
    return -((-q.numerator) // q.denominator)


@lru_cache(maxsize=4096)
def _milli_str(text: str) -> int:
    return _ceil(_parse_str(text) * 1000)


@lru_cache(maxsize=4096)
def _value_str(text: str) -> int:
    return _ceil(_parse_str(text))


def milli_value(raw: str | int | float) -> int:
    """``Quantity.MilliValue()``: thousandths, rounded up (CPU in millicores)."""
    if isinstance(raw, str):
        return _milli_str(raw)
    return _ceil(parse_quantity(raw) * 1000)


def value(raw: str | int | float) -> int:
    """``Quantity.Value()``: whole units, rounded up (bytes, counts, extended resources)."""
    if isinstance(raw, str):
        return _value_str(raw)
    return _ceil(parse_quantity(raw))


def resource_value(name: str, raw: str | int | float) -> int:
    """The integer the scheduler compares for resource ``name``: millicores for ``cpu``, else ``Value()``."""
    return milli_value(raw) if name == "cpu" else value(raw)
