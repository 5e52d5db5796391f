"""rescheduler.plan.drain_marks: the drain marks' timestamps parse to the Unix time datetime gives, without it."""

from __future__ import annotations

import datetime

import pytest

from rescheduler.plan.drain_marks import parse_utc


def _reference(text: str) -> float:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()


@pytest.mark.parametrize(
    "text",
    [
        "1970-01-01T00:00:00Z",
        "2024-05-14T09:12:44Z",
        "2024-02-29T23:59:59Z",
        "2000-02-29T12:00:00Z",
        "1999-12-31T23:59:59Z",
        "2100-03-01T00:00:00Z",
        "2038-01-19T03:14:08Z",
        "1969-12-31T23:59:59Z",
    ],
)
def test_timestamps_parse_like_datetime(text: str) -> None:
    assert parse_utc(text) == _reference(text)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("2024-05-14 09:12:44Z", id="space-instead-of-T"),
        pytest.param("2024-05-14T09:12:44", id="no-zone"),
        pytest.param("2024-05-14T09:12:44+00:00", id="offset-zone"),
        pytest.param("2023-02-29T00:00:00Z", id="not-a-leap-year"),
        pytest.param("2100-02-29T00:00:00Z", id="century-not-a-leap-year"),
        pytest.param("2024-13-01T00:00:00Z", id="month-13"),
        pytest.param("2024-04-31T00:00:00Z", id="april-31"),
        pytest.param("2024-05-14T24:00:00Z", id="hour-24"),
        pytest.param("soon", id="words"),
    ],
)
def test_anything_else_is_no_time(text: str) -> None:
    assert parse_utc(text) is None
