"""What the data path codes against to commit and mirror offsets: the ledger and mirror interfaces.

The coordinator's `GroupMember` and `StandaloneLedger` implement `OffsetLedger`; `cohort.pipelines.kafka.mirror`
implements `OffsetMirror`. Keeping the interfaces here lets a reading task or a batch import them without
loading the coordinator or its SQL store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from cohort.common.types import OffsetRange, TopicPartition

__all__ = ["OffsetLedger", "OffsetMirror"]


@runtime_checkable
class OffsetLedger(Protocol):
    """Committed offsets of one group as a run sees them.

    `committed_offsets` answers the next offset to read per partition (None if never committed).
    `commit` records consumed ranges or raises a typed `CoordinatorError`: ILLEGAL_GENERATION,
    UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, REBALANCE_IN_PROGRESS, PARTITION_NOT_OWNED, or a `LedgerError`
    such as NON_CONTIGUOUS_RANGE (with `.partition`, `.expected`, `.given`).

    Example:
        >>> def plan(ledger: OffsetLedger, partitions):
        ...     return {tp: offset or 0 for tp, offset in ledger.committed_offsets(partitions).items()}
    """

    def committed_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The next offset to read for each partition, None where nothing was committed."""
        ...

    def commit(self, ranges: Sequence[OffsetRange], *, run_id: str | None = None) -> None:
        """Record consumed ranges atomically, or raise a typed error and record nothing."""
        ...


@runtime_checkable
class OffsetMirror(Protocol):
    """Copies accepted commits to Kafka's committed offsets under the group id (`cohort.pipelines.kafka.mirror`
    implements it with confluent-kafka, putting `run_id` in the commit metadata). Called by the pipeline after
    the ledger accepted the ranges; a failure is retried by the mirror and never undoes the ledger."""

    def mirror(self, group: str, ranges: Sequence[OffsetRange], *, run_id: str | None) -> None:
        """Commit `until_offset` of each range to Kafka for `group`."""
        ...
