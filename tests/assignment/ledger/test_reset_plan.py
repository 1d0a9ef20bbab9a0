"""Reset planning as Kafka's `--reset-offsets` computes it, with plain values. The datetime target is tested
here with looked-up offsets given as values: the embedded broker answers every offsets-for-times lookup with
0 (a deviation README lists), so an end-to-end test could not tell a right answer from a wrong one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cohort.assignment.ledger.resets import ResetTarget, parse_datetime, parse_duration, plan_reset
from cohort.common.types import TopicPartition

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
MARKS = {A: (10, 100), B: (0, 50), C: (0, 20)}
CURRENT = {A: 60, B: 50, C: None}


def _moves(target: ResetTarget, times=None):
    return [
        (p.tp.partition, p.current, p.new, p.replayed, p.skipped, p.clamped)
        for p in plan_reset(target, CURRENT, MARKS, times)
    ]


def test_earliest_and_latest_go_to_the_ends_of_each_log():
    assert _moves(ResetTarget.earliest()) == [
        (0, 60, 10, 50, 0, False),
        (1, 50, 0, 50, 0, False),
        (2, None, 0, 0, 0, False),
    ]
    assert _moves(ResetTarget.latest()) == [
        (0, 60, 100, 0, 40, False),
        (1, 50, 50, 0, 0, False),
        (2, None, 20, 0, 0, False),
    ]


def test_an_offset_or_a_shift_outside_the_log_is_clamped_to_its_nearest_end():
    assert _moves(ResetTarget.to_offset(5)) == [
        (0, 60, 10, 50, 0, True),
        (1, 50, 5, 45, 0, False),
        (2, None, 5, 0, 0, False),
    ]
    assert _moves(ResetTarget.shift(-55)) == [
        (0, 60, 10, 50, 0, True),
        (1, 50, 0, 50, 0, True),
        (2, None, 0, 0, 0, True),
    ]
    assert _moves(ResetTarget.shift(30)) == [
        (0, 60, 90, 0, 30, False),
        (1, 50, 50, 0, 0, True),
        (2, None, 20, 0, 0, True),
    ]


def test_a_time_goes_to_the_first_record_at_or_after_it_or_to_the_end():
    target = ResetTarget.to_datetime(datetime(2026, 11, 23, 8, tzinfo=UTC))
    assert target.timestamp_ms == 1_795_420_800_000
    assert _moves(target, {A: 42, B: None, C: 3}) == [
        (0, 60, 42, 18, 0, False),
        (1, 50, 50, 0, 0, False),
        (2, None, 3, 0, 0, False),
    ]
    with pytest.raises(ValueError, match="no offset was looked up"):
        plan_reset(target, CURRENT, MARKS, {A: 1})


def test_a_duration_is_that_long_before_now():
    now = datetime(2026, 11, 23, 12, tzinfo=UTC)
    assert ResetTarget.by_duration(parse_duration("PT90M"), now).at == datetime(2026, 11, 23, 10, 30, tzinfo=UTC)
    assert parse_duration("P1DT6H") == timedelta(days=1, hours=6)
    assert parse_duration("p2w") == timedelta(weeks=2)
    assert parse_duration("PT0.5S") == timedelta(seconds=0.5)


@pytest.mark.parametrize("text", ["15 minutes", "P", "PT", "P1Y", "P1M", "PT1H30", "-PT1H", ""])
def test_a_duration_that_is_not_days_hours_minutes_seconds_is_refused(text):
    with pytest.raises(ValueError, match="is not an ISO 8601 duration"):
        parse_duration(text)


def test_a_datetime_without_a_zone_is_utc_and_garbage_is_refused():
    assert parse_datetime("2026-11-23T08:00:00") == datetime(2026, 11, 23, 8, tzinfo=UTC)
    assert parse_datetime("2026-11-23T09:00:00+01:00") == datetime(2026, 11, 23, 8, tzinfo=UTC)
    assert parse_datetime("2026-11-23") == datetime(2026, 11, 23, tzinfo=UTC)
    with pytest.raises(ValueError, match="is not an ISO 8601 date-time"):
        parse_datetime("yesterday")
    with pytest.raises(ValueError, match="needs a time zone"):
        ResetTarget.to_datetime(datetime(2026, 11, 23))
