"""Backlog: the records a group still has to read per partition, as a backlog-aware assignor takes it.

The leader's view of the log (Kafka's first and end offset per partition, which a worker already reads to plan
its batch) meets the ledger's committed offsets at the sync step: the coordinator reads the committed offsets
in the sync's transaction and hands `backlog_from_offsets(...)` to the elected assignor if it asks for a
backlog (`uses_backlog`). Assignors that do not ask get the plain `assign(counts, subscriptions)` call, so the
built-in count-balancing assignors and custom ones are unaffected. Nothing here is stored.

Example:
    >>> from cohort.common.types import TopicPartition as TP
    >>> backlog_from_offsets({TP("t", 0): (0, 100), TP("t", 1): (50, 80)}, {TP("t", 0): 90, TP("t", 1): None})
    {TopicPartition(topic='t', partition=0): 10, TopicPartition(topic='t', partition=1): 30}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, cast, runtime_checkable

from cohort.assignment.types import Assignment, Assignor, Subscription
from cohort.common.types import TopicPartition

__all__ = ["Backlog", "BacklogAssignor", "LogOffsets", "backlog_from_offsets", "run_assignor", "uses_backlog"]

Backlog = Mapping[TopicPartition, int]
"""Records still to read per partition (end offset minus where the group reads next); absent = unknown."""

LogOffsets = Mapping[TopicPartition, tuple[int, int]]
"""(first available offset, end offset) per partition: what `KafkaResource.watermarks` returns."""


@runtime_checkable
class BacklogAssignor(Protocol):
    """An assignor that also takes each partition's backlog (`uses_backlog = True`)."""

    name: str
    protocol: str
    uses_backlog: bool

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        backlog: Backlog | None = None,
    ) -> Assignment: ...


def uses_backlog(assignor: Assignor) -> bool:
    """Whether `assignor` wants a backlog passed to `assign` (it says so with `uses_backlog = True`)."""
    return getattr(assignor, "uses_backlog", False) is True


def run_assignor(
    assignor: Assignor,
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    backlog: Backlog | None = None,
) -> Assignment:
    """`assignor.assign(...)`, with `backlog=` only for an assignor that asks for it (and when one is known)."""
    if backlog is not None and uses_backlog(assignor):
        return cast(BacklogAssignor, assignor).assign(partitions_per_topic, subscriptions, backlog=backlog)
    return assignor.assign(partitions_per_topic, subscriptions)


def backlog_from_offsets(
    log_offsets: LogOffsets, committed: Mapping[TopicPartition, int | None]
) -> dict[TopicPartition, int]:
    """Records left per partition: end offset minus the next offset the group reads, never below zero.

    The group reads next from its committed offset, or from the first available offset when nothing was
    committed (an 'earliest' start) or retention removed the committed position. Bad offsets (not integers,
    negative, first after end) are a ValueError: they come from the leader and would skew the assignment.
    """
    backlog: dict[TopicPartition, int] = {}
    for tp, pair in log_offsets.items():
        try:
            first, end = pair
        except (TypeError, ValueError):
            raise ValueError(f"log offsets of {tp} must be (first, end), got {pair!r}") from None
        if not (_is_offset(first) and _is_offset(end) and first <= end):
            raise ValueError(f"log offsets of {tp} must be integers with 0 <= first <= end, got {pair!r}")
        head = committed.get(tp)
        start = first if head is None else max(int(head), first)
        backlog[TopicPartition(tp[0], tp[1])] = max(0, end - start)
    return backlog


def _is_offset(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
