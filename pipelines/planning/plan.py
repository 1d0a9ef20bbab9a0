"""Batch planning on the driver, as pure functions over plain values.

For each assigned partition the plan decides where reading starts (the ledger's committed offset, or the
reset policy when there is none; a partition added to the topic later always starts at earliest), where it
ends (the end offset seen at planning time, capped by `max_records_per_partition`), how the range is split
into Spark tasks, and what happens when the committed offset is no longer in Kafka (fail, or record a
ledger gap). Nothing here talks to Kafka, Spark or the ledger: `cohort.pipelines.planning.positions` gathers the inputs.

Example:
    >>> from cohort.common.types import TopicPartition
    >>> pos = PartitionPosition(TopicPartition("orders", 0), committed=40, low=0, high=100)
    >>> plan = plan_batch([pos], PlanLimits(max_records_per_task=25))
    >>> [(s.from_offset, s.until_offset) for s in plan.spans]
    [(40, 60), (60, 80), (80, 100)]
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal

from cohort.common.names import validate_topic_name
from cohort.common.types import OffsetRange, TopicPartition
from cohort.common.validation import as_integer
from cohort.pipelines.tasks.spans import OffsetSpan, validate_partition

__all__ = [
    "BatchPlan",
    "OffsetOutOfRangeError",
    "PartitionPlan",
    "PartitionPosition",
    "PlanLimits",
    "ResetPolicy",
    "plan_batch",
    "plan_partition",
    "split_range",
    "spread_spans",
]

StartReason = Literal["committed", "earliest", "latest", "timestamp", "new-partition"]


class OffsetOutOfRangeError(RuntimeError):
    """A committed offset lies outside what Kafka still holds and `fail_on_data_loss` forbids skipping."""


@dataclass(frozen=True)
class ResetPolicy:
    """Where a partition with no committed offset starts: `earliest`, `latest`, or the first record at or
    after `timestamp_ms` (milliseconds since the epoch)."""

    kind: Literal["earliest", "latest", "timestamp"] = "earliest"
    timestamp_ms: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("earliest", "latest", "timestamp"):
            raise ValueError(f"unknown reset policy {self.kind!r}; use 'earliest', 'latest' or a timestamp")
        if (self.kind == "timestamp") != (self.timestamp_ms is not None):
            raise ValueError("a timestamp reset policy needs timestamp_ms, and only it may have one")
        if self.timestamp_ms is not None and self.timestamp_ms < 0:
            raise ValueError(f"reset timestamp must be >= 0 ms since the epoch, got {self.timestamp_ms}")

    @classmethod
    def parse(cls, value: ResetPolicy | str | datetime) -> ResetPolicy:
        """Accept a policy, 'earliest', 'latest', or a timezone-aware datetime."""
        if isinstance(value, ResetPolicy):
            return value
        if isinstance(value, datetime):
            if value.tzinfo is None:
                raise ValueError(f"reset timestamp {value.isoformat()} has no timezone; give an aware datetime")
            return cls("timestamp", round(value.timestamp() * 1000))
        if value == "earliest":  # (two tests, not `in`: mypy narrows `==` to the literal, not `in`)
            return cls("earliest")
        if value == "latest":
            return cls("latest")
        raise ValueError(f"unknown reset policy {value!r}; use 'earliest', 'latest' or a timezone-aware datetime")


@dataclass(frozen=True)
class PlanLimits:
    """Caps and split sizes for one batch.

    `max_records_per_partition` caps each range (None: read to the end offset); ranges longer than
    `max_records_per_task` become several Spark tasks; when there are fewer tasks than `target_tasks`
    (the cluster's parallelism), the longest are halved while halves keep at least `min_task_records`.
    """

    max_records_per_partition: int | None = None
    max_records_per_task: int = 250_000
    target_tasks: int = 1
    min_task_records: int = 20_000
    fail_on_data_loss: bool = True
    reset: ResetPolicy = field(default_factory=ResetPolicy)

    def __post_init__(self) -> None:
        counts = {
            "max_records_per_partition": self.max_records_per_partition,
            "max_records_per_task": self.max_records_per_task,
            "target_tasks": self.target_tasks,
            "min_task_records": self.min_task_records,
        }
        for name, value in counts.items():
            if value is not None and as_integer(value, name) < 1:  # not a bool, a float or NaN either
                raise ValueError(f"{name} must be >= 1, got {value}")


@dataclass(frozen=True)
class PartitionPosition:
    """What the ledger and Kafka say about one partition at planning time.

    `committed` is the next offset to read (None: never committed); `low`/`high` are Kafka's first
    available offset and end offset (the offset after the last record, as a fetch confirms it: the range
    up to it holds every record written when it was taken; the last stable offset while a transaction is
    open, so that no range waits for it); `timestamp_offset` answers the timestamp
    reset policy (the first offset at or after the timestamp, None when no record is that recent); `new`
    marks a partition added to the topic after the group started consuming it.
    """

    tp: TopicPartition
    committed: int | None
    low: int
    high: int
    timestamp_offset: int | None = None
    new: bool = False

    def __post_init__(self) -> None:
        validate_topic_name(self.tp.topic)
        validate_partition(self.tp.topic, self.tp.partition)
        if not 0 <= self.low <= self.high:
            raise ValueError(
                f"{self.tp}: watermarks must satisfy 0 <= low <= high, got low={self.low} high={self.high}"
            )
        if self.committed is not None and self.committed < 0:
            raise ValueError(f"{self.tp}: committed offset must be >= 0, got {self.committed}")


@dataclass(frozen=True)
class PartitionPlan:
    """The decision for one partition: read [from_offset, until_offset) in `spans`, after `gap` if any.

    `must_commit` is true when the ledger must hear about this partition even without records: a gap
    to record, or a first position to pin (a `latest` start that found nothing must not be re-evaluated
    next batch, or records produced in between would be skipped).
    """

    tp: TopicPartition
    from_offset: int
    until_offset: int
    start: StartReason
    spans: tuple[OffsetSpan, ...] = ()
    gap: OffsetRange | None = None
    must_commit: bool = False
    warning: str | None = None

    @property
    def length(self) -> int:
        return self.until_offset - self.from_offset


@dataclass(frozen=True)
class BatchPlan:
    """The plan of one batch: one PartitionPlan per assigned partition, in (topic, partition) order."""

    partitions: tuple[PartitionPlan, ...]

    @property
    def spans(self) -> tuple[OffsetSpan, ...]:
        """Every Spark task's span, longest first so the slowest tasks start first."""
        spans = [s for p in self.partitions for s in p.spans]
        return tuple(sorted(spans, key=lambda s: s.from_offset - s.until_offset))

    @property
    def to_read(self) -> tuple[PartitionPlan, ...]:
        return tuple(p for p in self.partitions if p.length > 0)


def split_range(topic: str, partition: int, from_offset: int, until_offset: int, max_len: int) -> list[OffsetSpan]:
    """Split [from, until) into the fewest spans of at most `max_len` offsets, of near-equal length."""
    total = until_offset - from_offset
    if total <= 0:
        return []
    count = math.ceil(total / max_len)
    bounds = [from_offset + (total * i) // count for i in range(count + 1)]
    return [OffsetSpan(topic, partition, a, b) for a, b in itertools.pairwise(bounds)]


def spread_spans(spans: Sequence[OffsetSpan], target_tasks: int, min_records: int) -> list[OffsetSpan]:
    """Halve the longest spans until there are `target_tasks` of them or halving would go below `min_records`."""
    result = list(spans)
    while len(result) < target_tasks:
        longest = max(result, key=lambda s: s.until_offset - s.from_offset, default=None)
        if longest is None or longest.until_offset - longest.from_offset < 2 * min_records:
            break
        result.remove(longest)
        result.extend(
            split_range(
                longest.topic,
                longest.partition,
                longest.from_offset,
                longest.until_offset,
                math.ceil((longest.until_offset - longest.from_offset) / 2),
            )
        )
    return sorted(result, key=lambda s: (s.topic, s.partition, s.from_offset))


def _start(pos: PartitionPosition, limits: PlanLimits) -> tuple[int, StartReason, OffsetRange | None, str | None]:
    """Where reading starts, why, the gap it leaves behind (if any) and a warning (if any)."""
    tp = pos.tp
    if pos.committed is None:
        if pos.new:
            return pos.low, "new-partition", None, None
        if limits.reset.kind == "earliest":
            return pos.low, "earliest", None, None
        if limits.reset.kind == "latest":
            return pos.high, "latest", None, None
        offset = pos.high if pos.timestamp_offset is None else min(max(pos.timestamp_offset, pos.low), pos.high)
        return offset, "timestamp", None, None
    if pos.committed < pos.low:
        message = (
            f"{tp}: committed offset {pos.committed} is no longer in Kafka (the earliest available offset is "
            f"{pos.low}); records {pos.committed}..{pos.low - 1} were deleted, probably by retention, before "
            "this group read them"
        )
        if limits.fail_on_data_loss:
            raise OffsetOutOfRangeError(message + "; set fail_on_data_loss=False to record a gap and go on")
        reason = f"offsets [{pos.committed}, {pos.low}) deleted from Kafka before they were read (log start {pos.low})"
        gap = OffsetRange(tp.topic, tp.partition, pos.committed, pos.low, gap_reason=reason)
        return pos.low, "committed", gap, message
    if pos.committed > pos.high:
        message = (
            f"{tp}: committed offset {pos.committed} is beyond the end offset {pos.high}; the topic may have "
            "been deleted and recreated or truncated"
        )
        if limits.fail_on_data_loss:
            raise OffsetOutOfRangeError(message + "; set fail_on_data_loss=False to wait for the log to catch up")
        return pos.committed, "committed", None, message + "; nothing read until the end offset passes it"
    return pos.committed, "committed", None, None


def plan_partition(pos: PartitionPosition, limits: PlanLimits) -> PartitionPlan:
    """Plan one partition (without the parallelism spread, which looks at the whole batch)."""
    start, reason, gap, warning = _start(pos, limits)
    until = max(start, pos.high)
    if limits.max_records_per_partition is not None:
        until = min(until, start + limits.max_records_per_partition)
    spans = split_range(pos.tp.topic, pos.tp.partition, start, until, limits.max_records_per_task)
    return PartitionPlan(
        tp=pos.tp,
        from_offset=start,
        until_offset=until,
        start=reason,
        spans=tuple(spans),
        gap=gap,
        must_commit=bool(spans) or gap is not None or pos.committed is None,
        warning=warning,
    )


def plan_batch(positions: Sequence[PartitionPosition], limits: PlanLimits) -> BatchPlan:
    """Plan every assigned partition, then spread the spans over `limits.target_tasks` Spark tasks."""
    seen = [p.tp for p in positions]
    if len(set(seen)) != len(seen):
        raise ValueError(f"a partition is listed twice in the batch: {sorted(seen)}")
    plans = [plan_partition(pos, limits) for pos in sorted(positions, key=lambda p: p.tp)]
    spans = spread_spans([s for p in plans for s in p.spans], limits.target_tasks, limits.min_task_records)
    by_tp: dict[TopicPartition, list[OffsetSpan]] = {}
    for span in spans:
        by_tp.setdefault(TopicPartition(span.topic, span.partition), []).append(span)
    return BatchPlan(tuple(replace(p, spans=tuple(by_tp.get(p.tp, ()))) for p in plans))
