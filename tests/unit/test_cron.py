"""Cron schedules and drain windows (shared/cron.py): fields, Vixie cron's day rule, window edges and the two
daylight-saving changes of Europe/Berlin (last Sunday of March: 02:00 CET -> 03:00 CEST; last Sunday of October:
03:00 CEST -> 02:00 CET)."""

from __future__ import annotations

import datetime

import pytest

from shared.cron import CronError, CronSchedule, next_start, window_open, zone

BERLIN = zone("Europe/Berlin")
UTC = zone("UTC")
HOUR = 3600.0


def at(tz: datetime.tzinfo, *args: int, fold: int = 0) -> float:
    return datetime.datetime(*args, tzinfo=tz, fold=fold).timestamp()  # type: ignore[misc]


def local(t: float, tz: datetime.tzinfo = BERLIN) -> str:
    return datetime.datetime.fromtimestamp(t, tz).isoformat()


@pytest.mark.parametrize(
    ("text", "field", "values"),
    [
        pytest.param("*/15 * * * *", "minutes", {0, 15, 30, 45}, id="step-over-star"),
        pytest.param("0 9-17/4 * * *", "hours", {9, 13, 17}, id="stepped-range"),
        pytest.param("0 22/1 * * *", "hours", {22, 23}, id="value-with-step-runs-to-the-end"),
        pytest.param("0 0 1,15 * *", "days", {1, 15}, id="list"),
        pytest.param("0 0 * jan-mar *", "months", {1, 2, 3}, id="month-names"),
        pytest.param("0 0 * * mon-fri", "weekdays", {1, 2, 3, 4, 5}, id="weekday-names"),
        pytest.param("0 0 * * 7", "weekdays", {0}, id="seven-is-sunday"),
        pytest.param("@hourly", "minutes", {0}, id="macro"),
    ],
)
def test_fields_parse_as_crontab_5_says(text: str, field: str, values: set[int]) -> None:
    assert getattr(CronSchedule.parse(text), field) == values


@pytest.mark.parametrize(
    ("text", "why"),
    [
        pytest.param("0 22 * *", "5 fields", id="too-few-fields"),
        pytest.param("60 * * * *", "minute 60 is outside 0-59", id="minute-out-of-range"),
        pytest.param("0 24 * * *", "hour 24 is outside 0-23", id="hour-out-of-range"),
        pytest.param("0 0 0 * *", "day of month 0 is outside 1-31", id="day-zero"),
        pytest.param("0 0 * * 8", "day of week 8 is outside 0-7", id="weekday-eight"),
        pytest.param("0 0 * foo *", "month 'foo' is not a number", id="bad-name"),
        pytest.param("*/0 * * * *", "step '0' must be a positive number", id="zero-step"),
        pytest.param("0 5-2 * * *", "runs backwards", id="backwards-range"),
        pytest.param("0, * * * *", "empty list item", id="empty-list-item"),
    ],
)
def test_bad_schedules_say_which_field(text: str, why: str) -> None:
    with pytest.raises(CronError, match=why):
        CronSchedule.parse(text)


def test_day_of_month_and_day_of_week_both_restricted_match_either() -> None:
    # Vixie cron: "0 0 13 * fri" runs on every 13th and on every Friday.
    s = CronSchedule.parse("0 0 13 * fri")
    assert s.matches_day(datetime.date(2026, 5, 13))  # a Wednesday, the 13th
    assert s.matches_day(datetime.date(2026, 5, 15))  # a Friday, the 15th
    assert not s.matches_day(datetime.date(2026, 5, 14))


def test_only_day_of_week_restricted_needs_the_weekday() -> None:
    s = CronSchedule.parse("0 0 * * fri")
    assert not s.matches_day(datetime.date(2026, 5, 13))
    assert s.matches_day(datetime.date(2026, 5, 15))


def test_next_start_is_strictly_after_the_given_time() -> None:
    s = CronSchedule.parse("0 22 * * *")
    ten_pm = at(UTC, 2026, 5, 4, 22, 0)
    assert next_start(s, UTC, ten_pm - 1) == ten_pm
    assert next_start(s, UTC, ten_pm) == ten_pm + 24 * HOUR


def test_a_schedule_that_never_matches_has_no_next_start() -> None:
    assert next_start(CronSchedule.parse("0 0 31 2 *"), UTC, 0.0) is None


def test_window_start_is_inclusive_and_end_exclusive() -> None:
    s = CronSchedule.parse("0 22 * * *")
    start = at(UTC, 2026, 5, 4, 22, 0)
    assert not window_open(s, 2 * HOUR, UTC, start - 1)
    assert window_open(s, 2 * HOUR, UTC, start)
    assert window_open(s, 2 * HOUR, UTC, start + 2 * HOUR - 1)
    assert not window_open(s, 2 * HOUR, UTC, start + 2 * HOUR)


def test_a_window_across_midnight_is_open_after_midnight() -> None:
    s = CronSchedule.parse("0 22 * * mon")  # Monday 22:00, 8h: until Tuesday 06:00
    assert window_open(s, 8 * HOUR, UTC, at(UTC, 2026, 5, 5, 5, 59))  # Tuesday
    assert not window_open(s, 8 * HOUR, UTC, at(UTC, 2026, 5, 5, 6, 0))


def test_the_schedule_is_read_in_the_time_zone() -> None:
    s = CronSchedule.parse("0 22 * * *")
    berlin_ten_pm = at(BERLIN, 2026, 5, 4, 22, 0)  # 20:00 UTC in summer
    assert window_open(s, HOUR, BERLIN, berlin_ten_pm)
    assert not window_open(s, HOUR, UTC, berlin_ten_pm)


def test_the_duration_is_elapsed_time_across_the_spring_change() -> None:
    # Saturday 28 March 2026 22:00 CET + 8h = Sunday 29 March 07:00 CEST (the night is an hour shorter).
    s = CronSchedule.parse("0 22 * * *")
    assert window_open(s, 8 * HOUR, BERLIN, at(BERLIN, 2026, 3, 29, 6, 59))
    assert not window_open(s, 8 * HOUR, BERLIN, at(BERLIN, 2026, 3, 29, 7, 0))


def test_the_duration_is_elapsed_time_across_the_autumn_change() -> None:
    # Saturday 24 October 2026 22:00 CEST + 8h = Sunday 25 October 05:00 CET (the night is an hour longer).
    s = CronSchedule.parse("0 22 * * *")
    assert window_open(s, 8 * HOUR, BERLIN, at(BERLIN, 2026, 10, 25, 4, 59))
    assert not window_open(s, 8 * HOUR, BERLIN, at(BERLIN, 2026, 10, 25, 5, 0))


def test_a_wall_clock_time_the_zone_skips_never_matches() -> None:
    # 02:30 does not exist in Berlin on 29 March 2026: the next 02:30 is the following night.
    s = CronSchedule.parse("30 2 * * *")
    start = next_start(s, BERLIN, at(BERLIN, 2026, 3, 28, 12, 0))
    assert start is not None
    assert local(start) == "2026-03-30T02:30:00+02:00"


def test_a_wall_clock_time_the_zone_repeats_matches_twice() -> None:
    # 02:30 happens twice in Berlin on 25 October 2026: at 00:30 and 01:30 UTC.
    s = CronSchedule.parse("30 2 * * *")
    first = next_start(s, BERLIN, at(BERLIN, 2026, 10, 25, 0, 0))
    assert first is not None and local(first) == "2026-10-25T02:30:00+02:00"
    second = next_start(s, BERLIN, first)
    assert second is not None and local(second) == "2026-10-25T02:30:00+01:00"
    assert second - first == HOUR


def test_unknown_time_zones_are_an_error() -> None:
    with pytest.raises(ValueError, match="unknown time zone"):
        zone("Mars/Olympus_Mons")
