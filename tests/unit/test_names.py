"""Name syntax against the cases of apimachinery's ``validation_test.go`` (TestIsQualifiedName, TestIsValidLabelValue,
TestIsDNS1123Label, TestIsDNS1123Subdomain)."""

from __future__ import annotations

import pytest

from shared.names import (
    dns1123_label_error,
    is_dns1123_label,
    is_dns1123_subdomain,
    is_label_value,
    is_qualified_name,
    label_value_error,
    qualified_name_error,
)

QUALIFIED_GOOD = [
    "simple",
    "now-with-dashes",
    "1-starts-with-num",
    "1234",
    "simple/simple",
    "now-with-dashes/simple",
    "now-with-dashes/now-with-dashes",
    "now.with.dots/simple",
    "now-with.dashes-and.dots/simple",
    "1-num.2-num/3-num",
    "1234/5678",
    "1.2.3.4/5678",
    "Uppercase_Is_OK_123",
    "example.com/Uppercase_Is_OK_123",
    "requests.storage-foo",
    "a" * 63,
    "a" * 253 + "/" + "b" * 63,
]
QUALIFIED_BAD = [
    "nospecialchars%^=@",
    "cantendwithadash-",
    "-cantstartwithadash-",
    "only/one/slash",
    "Example.com/abc",
    "example_com/abc",
    "example.com/",
    "/simple",
    "a" * 64,
    "a" * 254 + "/abc",
    "",
]


@pytest.mark.parametrize("value", QUALIFIED_GOOD)
def test_qualified_name_accepted(value: str) -> None:
    assert is_qualified_name(value), qualified_name_error(value)


@pytest.mark.parametrize("value", QUALIFIED_BAD)
def test_qualified_name_rejected(value: str) -> None:
    assert not is_qualified_name(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param(
            "a/b/c", "a qualified name must be a name with an optional DNS subdomain prefix", id="two-slashes"
        ),
        pytest.param("/x", "prefix part must be non-empty", id="empty-prefix"),
        pytest.param("Example.com/x", "prefix part must be a lowercase RFC 1123 subdomain", id="upper-prefix"),
        pytest.param("x/", "name part must be non-empty", id="empty-name"),
        pytest.param("a" * 64, "name part must be no more than 63 characters", id="long-name"),
        pytest.param("-x", "name part must consist of alphanumeric characters", id="dash-first"),
    ],
)
def test_qualified_name_errors_say_which_part_is_wrong(value: str, message: str) -> None:
    assert message in (qualified_name_error(value) or "")


@pytest.mark.parametrize(
    "value", ["simple", "now-with-dashes", "1-starts-with-num", "end-with-num-1", "1234", "", "a" * 63]
)
def test_label_value_accepted(value: str) -> None:
    assert is_label_value(value), label_value_error(value)


@pytest.mark.parametrize(
    "value", ["nospecialchars%^=@", "Tama-nui-te-rā.is.Māori.sun", "\\backslashes", "-x", "a" * 64, "a/b"]
)
def test_label_value_rejected(value: str) -> None:
    assert not is_label_value(value)


@pytest.mark.parametrize("value", ["a", "ab", "abc", "a1", "a-1", "a--1--2--b", "0", "01", "a" * 63])
def test_dns1123_label_accepted(value: str) -> None:
    assert is_dns1123_label(value), dns1123_label_error(value)


@pytest.mark.parametrize("value", ["", "A", "ABC", "aBc", "A1", "a-1-", "-a", "a.b", "a_b", "a" * 64])
def test_dns1123_label_rejected(value: str) -> None:
    assert not is_dns1123_label(value)


@pytest.mark.parametrize("value", ["a", "a.b", "a1.b2", "a-1.b-2", "0.0", "a" * 253])
def test_dns1123_subdomain_accepted(value: str) -> None:
    assert is_dns1123_subdomain(value)


@pytest.mark.parametrize("value", ["", "A", "a.", ".a", "a..b", "a_b", "a" * 254])
def test_dns1123_subdomain_rejected(value: str) -> None:
    assert not is_dns1123_subdomain(value)
