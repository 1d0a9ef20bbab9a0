"""Planning decisions with plain values: reset policies, caps, splits, out-of-range offsets, bad names."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cohort.common.names import InvalidNameError
from cohort.common.types import TopicPartition
from cohort.pipelines.planning.plan import (
    OffsetOutOfRangeError,
    PartitionPosition,
    PlanLimits,
    ResetPolicy,
    plan_batch,
    plan_partition,
    split_range,
    spread_spans,
)
from cohort.pipelines.tasks.reader import OffsetSpan

TP = TopicPartition("orders", 3)


def pos(committed: int | None, low: int = 0, high: int = 100, **kwargs: object) -> PartitionPosition:
    return PartitionPosition(TP, committed=committed, low=low, high=high, **kwargs)  # type: ignore[arg-type]


def bounds(plan) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
    return [(s.from_offset, s.until_offset) for s in plan.spans]


def test_committed_offset_to_end_offset():
    plan = plan_partition(pos(40), PlanLimits())
    assert (plan.from_offset, plan.until_offset, plan.start) == (40, 100, "committed")
    assert bounds(plan) == [(40, 100)]
    assert plan.must_commit and plan.gap is None


@pytest.mark.parametrize(
    ("reset", "expected", "reason"),
    [
        (ResetPolicy(), 10, "earliest"),
        (ResetPolicy("latest"), 100, "latest"),
        (ResetPolicy("timestamp", 1_700_000_000_000), 55, "timestamp"),
    ],
)
def test_reset_policy_applies_without_a_committed_offset(reset, expected, reason):
    plan = plan_partition(pos(None, low=10, timestamp_offset=55), PlanLimits(reset=reset))
    assert (plan.from_offset, plan.until_offset, plan.start) == (expected, 100, reason)
    assert plan.must_commit  # a first position is always reported to the ledger


def test_timestamp_with_no_recent_record_starts_at_the_end_and_is_clamped_into_the_log():
    limits = PlanLimits(reset=ResetPolicy("timestamp", 5))
    assert plan_partition(pos(None, low=10, timestamp_offset=None), limits).from_offset == 100
    assert plan_partition(pos(None, low=10, timestamp_offset=3), limits).from_offset == 10


def test_new_partitions_start_at_earliest_whatever_the_policy():
    plan = plan_partition(pos(None, low=7, new=True), PlanLimits(reset=ResetPolicy("latest")))
    assert (plan.from_offset, plan.start) == (7, "new-partition")


def test_cap_per_partition_and_split_per_task():
    plan = plan_partition(pos(0, high=1000), PlanLimits(max_records_per_partition=250, max_records_per_task=100))
    assert plan.until_offset == 250
    assert bounds(plan) == [(0, 83), (83, 166), (166, 250)]


def test_empty_range_produces_no_task_and_no_commit_once_committed():
    plan = plan_partition(pos(100), PlanLimits())
    assert plan.spans == () and plan.length == 0 and not plan.must_commit


def test_data_loss_fails_by_default_with_a_clear_message():
    with pytest.raises(OffsetOutOfRangeError, match=r"orders-3: committed offset 5 .* earliest available offset is 20"):
        plan_partition(pos(5, low=20), PlanLimits())


def test_data_loss_allowed_records_a_gap_with_its_reason():
    plan = plan_partition(pos(5, low=20), PlanLimits(fail_on_data_loss=False))
    assert plan.gap is not None
    assert (plan.gap.from_offset, plan.gap.until_offset, plan.gap.records) == (5, 20, 0)
    assert "deleted" in (plan.gap.gap_reason or "")
    assert (plan.from_offset, plan.until_offset) == (20, 100)
    assert plan.must_commit and plan.warning


def test_committed_beyond_the_end_fails_or_waits():
    with pytest.raises(OffsetOutOfRangeError, match="beyond the end offset 100"):
        plan_partition(pos(150), PlanLimits())
    plan = plan_partition(pos(150), PlanLimits(fail_on_data_loss=False))
    assert (plan.from_offset, plan.until_offset, plan.spans, plan.gap) == (150, 150, (), None)
    assert not plan.must_commit and "beyond the end" in (plan.warning or "")


def test_batch_spreads_spans_over_the_cores_and_keeps_partitions_ordered():
    positions = [PartitionPosition(TopicPartition("b", 0), 0, 0, 100_000), PartitionPosition(TP, 0, 0, 0)]
    plan = plan_batch(positions, PlanLimits(target_tasks=4, min_task_records=20_000))
    assert [p.tp for p in plan.partitions] == [TopicPartition("b", 0), TP]
    assert len(plan.spans) == 4
    assert sorted(bounds(plan)) == [(0, 25_000), (25_000, 50_000), (50_000, 75_000), (75_000, 100_000)]
    assert plan.to_read == (plan.partitions[0],)


def test_spread_stops_at_the_minimum_task_size():
    spans = [OffsetSpan("t", 0, 0, 30_000)]
    assert len(spread_spans(spans, target_tasks=8, min_records=10_000)) == 2
    assert spread_spans(spans, target_tasks=8, min_records=20_000) == spans


def test_duplicate_partitions_are_refused():
    with pytest.raises(ValueError, match="listed twice"):
        plan_batch([pos(0), pos(1)], PlanLimits())


@pytest.mark.parametrize("topic", ["../etc", "a/b", "", "x y", ".."])
def test_topic_names_unsafe_in_a_path_are_rejected(topic):
    with pytest.raises(InvalidNameError):
        PartitionPosition(TopicPartition(topic, 0), None, 0, 1)
    with pytest.raises(InvalidNameError):
        OffsetSpan(topic, 0, 0, 1)


@pytest.mark.parametrize("partition", [-1, True, "0", 1.0])
def test_partitions_must_be_non_negative_ints(partition):
    with pytest.raises(ValueError, match="partition must be an int"):
        PartitionPosition(TopicPartition("t", partition), None, 0, 1)  # type: ignore[arg-type]


def test_reset_policy_parsing():
    assert ResetPolicy.parse("latest") == ResetPolicy("latest")
    moment = datetime(2024, 1, 2, tzinfo=UTC)
    assert ResetPolicy.parse(moment) == ResetPolicy("timestamp", 1_704_153_600_000)
    with pytest.raises(ValueError, match="no timezone"):
        ResetPolicy.parse(datetime(2024, 1, 2))
    with pytest.raises(ValueError, match="unknown reset policy"):
        ResetPolicy.parse("newest")


@given(
    start=st.integers(0, 10**12),
    length=st.integers(0, 10**5),
    max_len=st.integers(1, 10**5),
)
@settings(deadline=None)
def test_split_covers_the_range_contiguously_within_the_task_size(start, length, max_len):
    spans = split_range("t", 0, start, start + length, max_len)
    if length == 0:
        assert spans == []
        return
    assert spans[0].from_offset == start and spans[-1].until_offset == start + length
    assert all(a.until_offset == b.from_offset for a, b in itertools.pairwise(spans))
    sizes = [s.until_offset - s.from_offset for s in spans]
    assert max(sizes) <= max_len and max(sizes) - min(sizes) <= 1
    assert len(spans) == -(-length // max_len)  # the fewest tasks possible
