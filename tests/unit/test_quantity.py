"""``resource.Quantity`` parsing against apimachinery's own tables and properties.

Transcribed from ``staging/src/k8s.io/apimachinery/pkg/api/resource/quantity_test.go``:
``TestQuantityParse`` (valid table, each also with ``-`` and ``+`` prepended, and the invalid list),
``TestParseQuantityString`` (the scanner accepts ``.`` and ``-.``), ``TestQuantityString`` and
``TestQuantityParseEmit`` (canonical forms, through the reference formatter below). Ids are the
upstream inputs. Two inputs appear twice in upstream's table (``1e3``, ``0.5e0``); they are kept once.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from shared.quantity import (
    MAX_INT64,
    NANO,
    QuantityError,
    milli_value,
    nano_value,
    parse_quantity,
    resource_value,
    value,
)

Ki, Mi, Gi, Ti, Pi, Ei = (2 ** (10 * i) for i in range(1, 7))


def dec(i: int, exponent: int) -> Fraction:
    """quantity_test.go ``decQuantity(i, exponent, _)``: ``i * 10^exponent``."""
    return Fraction(i) * Fraction(10) ** exponent


VALID = [
    ("0", 0),
    ("0n", 0),
    ("0u", 0),
    ("0m", 0),
    ("0Ki", 0),
    ("0k", 0),
    ("0Mi", 0),
    ("0M", 0),
    ("0Gi", 0),
    ("0G", 0),
    ("0Ti", 0),
    ("0T", 0),
    # Quantity less numbers are allowed
    ("1", 1),
    # Binary suffixes
    ("1Ki", Ki),
    ("8Ki", 8 * Ki),
    ("7Mi", 7 * Mi),
    ("6Gi", 6 * Gi),
    ("5Ti", 5 * Ti),
    ("4Pi", 4 * Pi),
    ("3Ei", 3 * Ei),
    ("10Ti", 10 * Ti),
    ("100Ti", 100 * Ti),
    # Decimal suffixes
    ("5n", dec(5, -9)),
    ("4u", dec(4, -6)),
    ("3m", dec(3, -3)),
    ("9", 9),
    ("8k", dec(8, 3)),
    ("50k", dec(5, 4)),
    ("7M", dec(7, 6)),
    ("6G", dec(6, 9)),
    ("5T", dec(5, 12)),
    ("40T", dec(4, 13)),
    ("300T", dec(3, 14)),
    ("2P", dec(2, 15)),
    ("1E", dec(1, 18)),
    # Decimal exponents
    ("1E-3", dec(1, -3)),
    ("1e3", dec(1, 3)),
    ("1E6", dec(1, 6)),
    ("1e9", dec(1, 9)),
    ("1E12", dec(1, 12)),
    ("1e15", dec(1, 15)),
    ("1E18", dec(1, 18)),
    # Nonstandard but still parsable
    ("1e14", dec(1, 14)),
    ("1e13", dec(1, 13)),
    ("100.035k", dec(100035, 0)),
    # Things that look like floating point
    ("0.001", dec(1, -3)),
    ("0.0005k", dec(5, -1)),
    ("0.005", dec(5, -3)),
    ("0.05", dec(5, -2)),
    ("0.5", dec(5, -1)),
    ("0.00050k", dec(5, -1)),
    ("0.00500", dec(5, -3)),
    ("0.05000", dec(5, -2)),
    ("0.50000", dec(5, -1)),
    ("0.5e0", dec(5, -1)),
    ("0.5e-1", dec(5, -2)),
    ("0.5e-2", dec(5, -3)),
    ("10.035M", dec(10035, 3)),
    ("1.2e3", dec(12, 2)),
    ("1.3E+6", dec(13, 5)),
    ("1.40e9", dec(14, 8)),
    ("1.53E12", dec(153, 10)),
    ("1.6e15", dec(16, 14)),
    ("1.7E18", dec(17, 17)),
    ("9.01", dec(901, -2)),
    ("8.1k", dec(81, 2)),
    ("7.123456M", dec(7123456, 0)),
    ("6.987654321G", dec(6987654321, 0)),
    ("5.444T", dec(5444, 9)),
    ("40.1T", dec(401, 11)),
    ("300.2T", dec(3002, 11)),
    ("2.5P", dec(25, 14)),
    ("1.01E", dec(101, 16)),
    # Things that saturate/round
    ("3.001n", dec(4, -9)),
    ("1.1E-9", dec(2, -9)),
    ("0.0000000001", dec(1, -9)),
    ("0.0000000005", dec(1, -9)),
    ("0.00000000050", dec(1, -9)),
    ("0.5e-9", dec(1, -9)),
    ("0.9n", dec(1, -9)),
    ("0.00000012345", dec(124, -9)),
    ("0.00000012354", dec(124, -9)),
    ("9Ei", MAX_INT64),
    ("9223372036854775807Ki", MAX_INT64),
    ("12E", dec(12, 18)),
    # We'll accept fractional binary stuff, too.
    ("100.035Ki", dec(10243584, -2)),
    ("0.5Mi", Fraction(Mi, 2)),
    ("0.05Gi", dec(536870912, -1)),
    ("0.025Ti", dec(274877906944, -1)),
    # Things written by trolls
    ("0.000000000001Ki", dec(2, -9)),  # rounds up, changes format
    (".001", dec(1, -3)),
    (".0001k", dec(100, -3)),
    ("1.", 1),
    ("1.G", dec(1, 9)),
]

INVALID = [
    pytest.param("1.1.M", id="1.1.M"),
    pytest.param("1+1.0M", id="1+1.0M"),
    pytest.param("0.1mi", id="0.1mi"),
    pytest.param("0.1am", id="0.1am"),
    pytest.param("aoeu", id="aoeu"),
    pytest.param(".5i", id=".5i"),
    pytest.param("1i", id="1i"),
    pytest.param("-3.01i", id="-3.01i"),
    pytest.param("-3.01e-", id="-3.01e-"),
    # trailing whitespace is forbidden
    pytest.param(" 1", id="leading-space-1"),
    pytest.param("1 ", id="1-trailing-space"),
    # "expected empty string to return error"
    pytest.param("", id="empty-string"),
]


@pytest.mark.parametrize("sign", ["", "-", "+"], ids=["as-is", "negative", "explicit-plus"])
@pytest.mark.parametrize(("text", "expect"), [pytest.param(t, Fraction(e), id=t) for t, e in VALID])
def test_quantity_parse(text: str, expect: Fraction, sign: str) -> None:
    want = -expect if sign == "-" else expect
    assert parse_quantity(sign + text) == want


@pytest.mark.parametrize("text", INVALID)
def test_quantity_parse_invalid(text: str) -> None:
    with pytest.raises(QuantityError) as err:
        parse_quantity(text)
    assert repr(text) in str(err.value)


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        # TestParseQuantityString: the scanner accepts a number part without digits.
        pytest.param(".", 0, id="."),
        pytest.param("-.", 0, id="-."),
        pytest.param("0.025Ti", dec(25, -3) * Ti, id="0.025Ti"),
        pytest.param("-1.025Ti", -dec(1025, -3) * Ti, id="-1.025Ti"),
        pytest.param("1E-3", dec(1, -3), id="1E-3"),
        # Same scanner: a lone sign, zeros, or a suffix alone read as "0" on upstream's fast path.
        pytest.param("+", 0, id="lone-plus"),
        pytest.param("-", 0, id="lone-minus"),
        pytest.param("000", 0, id="zeros"),
        pytest.param("Ki", 0, id="Ki-alone"),
        pytest.param("Ti", 0, id="Ti-alone"),
        pytest.param("M", 0, id="M-alone"),
        pytest.param("E", 0, id="E-alone"),
        pytest.param("e-9", 0, id="e-9-alone"),
        pytest.param("0.e-20", 0, id="zero-with-tiny-exponent"),
        # strconv.ParseInt accepts a sign; the exponent is truncated to int32.
        pytest.param("1e+3", 1000, id="exponent-with-plus"),
        pytest.param("1e4294967296", 1, id="exponent-wraps-like-int32"),
        pytest.param("1e-99999", dec(1, -9), id="tiny-exponent-rounds-up-to-1n"),
    ],
)
def test_scanner_quirks_match_upstream(text: str, expect: Fraction) -> None:
    assert parse_quantity(text) == expect


@pytest.mark.parametrize(
    "text",
    [
        # No digits and upstream's inf.Dec fallback: "unable to parse numeric part of quantity".
        pytest.param("Pi", id="Pi-alone"),
        pytest.param("Ei", id="Ei-alone"),
        pytest.param(".e-10", id="dot-with-tiny-exponent"),
        pytest.param("e", id="e-alone"),
        pytest.param("1K", id="upper-case-K"),
        pytest.param("1ki", id="lower-case-ki"),
        pytest.param("1e", id="e-without-exponent"),
        pytest.param("1e+", id="e-plus-without-digits"),
        pytest.param("1ee3", id="double-e"),
        pytest.param("1e99999999999999999999", id="exponent-beyond-int64"),
        pytest.param("1e100000", id="exponent-too-large-to-build"),
        pytest.param("1\t", id="tab"),
        pytest.param("1\u00a0Gi", id="non-breaking-space"),
        pytest.param("\u0661", id="arabic-indic-digit"),
        pytest.param("1_000", id="underscore"),
        pytest.param("0x10", id="hex"),
        pytest.param("nan", id="nan"),
        pytest.param("inf", id="inf"),
    ],
)
def test_more_invalid_quantities(text: str) -> None:
    with pytest.raises(QuantityError) as err:
        parse_quantity(text)
    assert repr(text) in str(err.value)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        pytest.param("1.1.M", "quantities must match the regular expression", id="format"),
        pytest.param("1i", "unable to parse quantity's suffix", id="suffix"),
        pytest.param("Pi", "unable to parse numeric part of quantity", id="numeric"),
    ],
)
def test_error_messages_name_the_string_and_upstream_error(text: str, why: str) -> None:
    with pytest.raises(QuantityError, match=re.escape(f"quantity {text!r}: {why}")):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("raw", "expect"),
    [
        pytest.param(2, 2, id="json-int"),
        pytest.param(0.5, Fraction(1, 2), id="json-float"),
        pytest.param(1e-10, dec(1, -9), id="json-float-below-nano"),
        pytest.param(1e16, dec(1, 16), id="json-float-exponent"),
    ],
)
def test_json_numbers_parse_through_their_text(raw: int | float, expect: Fraction) -> None:
    assert parse_quantity(raw) == expect


@pytest.mark.parametrize("raw", [True, None, [], {"cpu": 1}, float("nan")], ids=["bool", "none", "list", "dict", "nan"])
def test_non_quantities_are_rejected(raw: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(raw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "milli", "whole"),
    [
        pytest.param("0.1m", 1, 1, id="0.1m-is-1-millicore"),
        pytest.param("100m", 100, 1, id="100m"),
        pytest.param("1.5", 1500, 2, id="1.5"),
        pytest.param("1.5Gi", 1536 * Mi * 1000, 1536 * Mi, id="1.5Gi"),
        pytest.param("1n", 1, 1, id="1n"),
        pytest.param("9.01", 9010, 10, id="9.01"),
        # TestQuantityRoundUp: negatives round away from zero.
        pytest.param("-9.01", -9010, -10, id="-9.01"),
        pytest.param("-0.5m", -1, -1, id="-0.5m"),
        pytest.param("0", 0, 0, id="zero"),
    ],
)
def test_milli_value_and_value_round_up(text: str, milli: int, whole: int) -> None:
    assert milli_value(text) == milli
    assert value(text) == whole
    assert resource_value("cpu", text) == milli
    assert resource_value("memory", text) == whole


# --- canonical forms -------------------------------------------------------------------------------

_DECIMAL_SI = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SI = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


def canonical(nanos: int, fmt: str) -> str:
    """Reference formatter: quantity.go ``CanonicalizeBytes`` for a value in nano-units.

    BinarySI falls back to DecimalSI below 1024 in magnitude or for a fraction; decimal forms take the
    largest exponent that is a multiple of 3 and loses no precision.
    """
    if nanos == 0:
        return "0"
    sign, n = ("-" if nanos < 0 else ""), abs(nanos)
    if fmt == "BinarySI":
        if n >= 1024 * NANO and n % NANO == 0:
            v, e = n // NANO, 0
            while v % 1024 == 0 and e < 6:
                v, e = v // 1024, e + 1
            return f"{sign}{v}{_BINARY_SI[e]}"
        fmt = "DecimalSI"
    m, e = n, -9
    while m % 10 == 0:
        m, e = m // 10, e + 1
    while e % 3:
        m, e = m * 10, e - 1
    if fmt == "DecimalSI":
        while e > 18:
            m, e = m * 1000, e - 3
        return f"{sign}{m}{_DECIMAL_SI[e]}"
    return f"{sign}{m}" + (f"e{e}" if e else "")


def _format_of(text: str) -> str:
    suffix = text.lstrip("+-0123456789.")
    if suffix.endswith("i"):
        return "BinarySI"
    return "DecimalExponent" if suffix[:1] in ("e", "E") and len(suffix) > 1 else "DecimalSI"


# TestQuantityString: (value, format, canonical string, alternate spelling of the same value).
QUANTITY_STRING = [
    (Gi, "BinarySI", "1Gi", "1024Mi"),
    (300 * Mi, "BinarySI", "300Mi", "307200Ki"),
    (6 * Ki, "BinarySI", "6Ki", ""),
    (1001 * Gi, "BinarySI", "1001Gi", "1025024Mi"),
    (Ti, "BinarySI", "1Ti", "1024Gi"),
    (5, "BinarySI", "5", "5000m"),
    (dec(500, -3), "BinarySI", "500m", "0.5"),
    (dec(1, 9), "DecimalSI", "1G", "1000M"),
    (dec(1000, 6), "DecimalSI", "1G", "0.001T"),
    (dec(1000000, 3), "DecimalSI", "1G", ""),
    (dec(1000000000, 0), "DecimalSI", "1G", ""),
    (dec(1, -3), "DecimalSI", "1m", "1000u"),
    (dec(80, -3), "DecimalSI", "80m", ""),
    (dec(1080, -3), "DecimalSI", "1080m", "1.08"),
    (dec(108, -2), "DecimalSI", "1080m", "1080000000n"),
    (dec(10800, -4), "DecimalSI", "1080m", ""),
    (dec(300, 6), "DecimalSI", "300M", ""),
    (dec(1, 12), "DecimalSI", "1T", ""),
    (dec(1234567, 6), "DecimalSI", "1234567M", ""),
    (dec(1234567, -3), "BinarySI", "1234567m", ""),
    (dec(3, 3), "DecimalSI", "3k", ""),
    (1025, "BinarySI", "1025", ""),
    (0, "DecimalSI", "0", ""),
    (0, "BinarySI", "0", ""),
    (dec(1, 9), "DecimalExponent", "1e9", ".001e12"),
    (dec(1, -3), "DecimalExponent", "1e-3", "0.001e0"),
    (dec(1, -9), "DecimalExponent", "1e-9", "1000e-12"),
    (dec(80, -3), "DecimalExponent", "80e-3", ""),
    (dec(300, 6), "DecimalExponent", "300e6", ""),
    (dec(1, 12), "DecimalExponent", "1e12", ""),
    (dec(1, 3), "DecimalExponent", "1e3", ""),
    (dec(3, 3), "DecimalExponent", "3e3", ""),
    (0, "DecimalExponent", "0", "00"),
    (dec(1, -9), "DecimalSI", "1n", ""),
    (dec(80, -9), "DecimalSI", "80n", ""),
    (dec(1080, -9), "DecimalSI", "1080n", ""),
    (dec(108, -8), "DecimalSI", "1080n", ""),
    (dec(10800, -10), "DecimalSI", "1080n", ""),
    (dec(1, -6), "DecimalSI", "1u", ""),
    (dec(80, -6), "DecimalSI", "80u", ""),
    (dec(1080, -6), "DecimalSI", "1080u", ""),
]


@pytest.mark.parametrize(
    ("amount", "fmt", "expect", "alternate"),
    [pytest.param(Fraction(a), f, e, alt, id=f"{e}-{f}") for a, f, e, alt in QUANTITY_STRING],
)
def test_quantity_string(amount: Fraction, fmt: str, expect: str, alternate: str) -> None:
    nanos = amount * NANO
    assert nanos.denominator == 1
    assert canonical(int(nanos), fmt) == expect
    assert canonical(-int(nanos), fmt) == ("-" + expect if amount else "0")
    assert parse_quantity(expect) == amount
    if alternate:
        assert parse_quantity(alternate) == amount
        assert canonical(nano_value(alternate), _format_of(alternate)) == expect


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        pytest.param("1Ki", "1Ki", id="1Ki"),
        pytest.param("1Mi", "1Mi", id="1Mi"),
        pytest.param("1Gi", "1Gi", id="1Gi"),
        pytest.param("1024Mi", "1Gi", id="1024Mi"),
        pytest.param("1000M", "1G", id="1000M"),
        pytest.param(".001Ki", "1024m", id=".001Ki"),
        pytest.param(".000001Ki", "1024u", id=".000001Ki"),
        pytest.param(".000000001Ki", "1024n", id=".000000001Ki"),
        pytest.param(".000000000001Ki", "2n", id=".000000000001Ki"),
    ],
)
def test_quantity_parse_emit(text: str, expect: str) -> None:
    """TestQuantityParseEmit: parse, then emit canonically in the input's format (and negated)."""
    assert canonical(nano_value(text), _format_of(text)) == expect
    assert canonical(nano_value("-" + text), _format_of(text)) == "-" + expect


# --- properties ------------------------------------------------------------------------------------

DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}

suffixes = st.one_of(
    st.sampled_from(sorted(DECIMAL_SUFFIXES)),
    st.sampled_from(sorted(BINARY_SUFFIXES)),
    st.builds(lambda e, n, s: f"{e}{s}{n}", st.sampled_from("eE"), st.integers(0, 24), st.sampled_from(["", "+", "-"])),
)


def _multiplier(suffix: str) -> tuple[Fraction, bool]:
    if suffix in DECIMAL_SUFFIXES:
        return Fraction(10) ** DECIMAL_SUFFIXES[suffix], False
    if suffix in BINARY_SUFFIXES:
        return Fraction(2) ** BINARY_SUFFIXES[suffix], True
    return Fraction(10) ** int(suffix[1:]), False


def _upstream_rounding(exact: Fraction, binary: bool) -> Fraction:
    """The exact value as upstream stores it: magnitude rounded up to 1n, BinarySI capped at 2^63-1."""
    magnitude = Fraction(math.ceil(abs(exact) * NANO), NANO)
    if binary:
        magnitude = min(magnitude, Fraction(MAX_INT64))
    return magnitude if exact >= 0 else -magnitude


@given(
    sign=st.sampled_from(["", "+", "-"]),
    whole=st.integers(0, 10**15),
    fraction=st.one_of(st.none(), st.text("0123456789", max_size=12)),
    suffix=suffixes,
)
def test_parsed_value_is_the_exact_mathematical_value(sign: str, whole: int, fraction: str | None, suffix: str) -> None:
    number = str(whole) if fraction is None else f"{whole}.{fraction}"
    text = f"{sign}{number}{suffix}"
    mult, binary = _multiplier(suffix)
    exact = Fraction(number) * mult * (-1 if sign == "-" else 1)
    got = parse_quantity(text)
    if (exact * NANO).denominator == 1 and not (binary and abs(exact) > MAX_INT64):
        assert got == exact  # representable: no rounding at all
    assert got == _upstream_rounding(exact, binary)


@given(nanos=st.integers(-(10**27), 10**27), fmt=st.sampled_from(["DecimalSI", "BinarySI", "DecimalExponent"]))
def test_canonical_forms_round_trip(nanos: int, fmt: str) -> None:
    text = canonical(nanos, fmt)
    assert nano_value(text) == nanos
    assert canonical(nano_value(text), fmt) == text


@given(n=st.integers(1, 10**24))
def test_milli_value_and_value_round_up_property(n: int) -> None:
    text = f"{n}n"
    assert value(text) == -(-n // NANO)
    assert milli_value(text) == -(-n // 10**6)
    assert value("-" + text) == -value(text)  # away from zero
    q = parse_quantity(text)
    assert value(text) - 1 < q <= value(text)
    assert milli_value(text) - 1 < q * 1000 <= milli_value(text)


valid_texts = st.builds(
    lambda w, f, s: f"{w}.{f}{s}" if f else f"{w}{s}",
    st.integers(0, 10**6),
    st.text("0123456789", max_size=4),
    st.sampled_from(sorted(DECIMAL_SUFFIXES) + sorted(BINARY_SUFFIXES) + ["e3", "E-2"]),
)


@given(text=valid_texts, at=st.integers(0, 30), space=st.sampled_from([" ", "\t", "\n", "\r", "\u00a0", "\u2003"]))
def test_whitespace_anywhere_is_an_error(text: str, at: int, space: str) -> None:
    at = min(at, len(text))
    bad = text[:at] + space + text[at:]
    with pytest.raises(QuantityError) as err:
        parse_quantity(bad)
    assert repr(bad) in str(err.value)


@given(a=st.integers(0, 999), b=st.text("0123456789", max_size=3), c=st.text("0123456789", max_size=3), suffix=suffixes)
def test_two_dots_are_an_error(a: int, b: str, c: str, suffix: str) -> None:
    bad = f"{a}.{b}.{c}{suffix}"
    with pytest.raises(QuantityError) as err:
        parse_quantity(bad)
    assert repr(bad) in str(err.value)


@given(number=st.integers(0, 10**6), suffix=st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1))
def test_unknown_suffix_is_an_error(number: int, suffix: str) -> None:
    assume(suffix[0] not in "0123456789.+-")
    assume(suffix not in DECIMAL_SUFFIXES and suffix not in BINARY_SUFFIXES)
    assume(not re.fullmatch(r"[eE][+-]?[0-9]+", suffix))
    bad = f"{number}{suffix}"
    with pytest.raises(QuantityError) as err:
        parse_quantity(bad)
    assert repr(bad) in str(err.value)


@given(text=st.text(max_size=20))
def test_arbitrary_text_parses_or_raises_quantity_error(text: str) -> None:
    try:
        got = parse_quantity(text)
    except QuantityError as err:
        assert repr(text) in str(err)
    else:
        assert (got * NANO).denominator == 1
