"""Gathering the planning inputs: the ledger's committed offsets and Kafka's offsets per partition.

The only I/O step of planning; `cohort.pipelines.planning.plan` then decides with plain values. The end offset is
the one a fetch from the high watermark confirms (`cohort.pipelines.kafka.client.watermarks`), not the
broker's watermark answer alone: on a broker whose watermark stops at the base offset of the last record
batch (the embedded Tansu broker), a plan up to the watermark would leave the rest of that batch unread in
a batch that reports no lag.

The end offset is also the *last stable offset*: `watermarks` asks under `read_committed` whatever the
configuration says, so while a transaction is open a range ends at its first offset. A read_committed reader never
gets an open transaction's offsets; a range past them would wait for them until its read timeout and fail the
batch. The transaction's records are planned by a later batch, once it has ended (docs/guarantees.md,
"Transactions, compaction and record shapes").
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from cohort.common.ledger import OffsetLedger
from cohort.common.names import validate_topic_name
from cohort.common.types import TopicPartition
from cohort.pipelines.kafka.client import offsets_for_times, watermarks
from cohort.pipelines.planning.plan import PartitionPosition, ResetPolicy
from cohort.pipelines.tasks.spans import validate_partition

__all__ = ["CommittedRange", "RangeLedger", "gather_positions"]


class CommittedRange(Protocol):
    """A committed range as the ledger reports it (the coordinator's `LedgerEntry` is one)."""

    @property
    def from_offset(self) -> int: ...

    @property
    def until_offset(self) -> int: ...

    @property
    def records(self) -> int: ...

    @property
    def quarantined(self) -> int: ...

    @property
    def run_id(self) -> str | None: ...


@runtime_checkable
class RangeLedger(Protocol):
    """An `OffsetLedger` that also reports each partition's last committed range and the run that committed
    it (`GroupMember` and `StandaloneLedger` do). With it, a batch publishes a committed range whose run
    died before publishing it, and tells a commit whose answer was lost from a refused one."""

    def last_committed(self, partitions: Sequence[TopicPartition]) -> Mapping[TopicPartition, CommittedRange | None]:
        """The last committed range per partition, None where nothing was committed."""
        ...


def _checked(tp: TopicPartition) -> TopicPartition:
    """The partition, after checking its topic name and number (before they reach the ledger or Kafka)."""
    topic, partition = tp
    validate_topic_name(topic)
    return TopicPartition(topic, validate_partition(topic, partition))


def gather_positions(
    kafka_config: Mapping[str, Any],
    ledger: OffsetLedger,
    partitions: Sequence[TopicPartition],
    reset: ResetPolicy,
    *,
    new_partitions: Collection[TopicPartition] = (),
) -> list[PartitionPosition]:
    """One PartitionPosition per partition: committed offset, first available and end offsets, and the
    timestamp answer when the reset policy needs one (only for partitions with nothing committed that are
    not new)."""
    tps = sorted({_checked(tp) for tp in partitions})
    if not tps:
        return []
    committed = ledger.committed_offsets(tps)
    marks = watermarks(kafka_config, tps)
    new = {TopicPartition(tp[0], tp[1]) for tp in new_partitions}
    by_time: dict[TopicPartition, int | None] = {}
    if reset.kind == "timestamp" and reset.timestamp_ms is not None:
        asked = [tp for tp in tps if committed.get(tp) is None and tp not in new]
        by_time = offsets_for_times(kafka_config, asked, reset.timestamp_ms)
    return [
        PartitionPosition(
            tp,
            committed=committed.get(tp),
            low=marks[tp][0],
            high=marks[tp][1],
            timestamp_offset=by_time.get(tp),
            new=tp in new,
        )
        for tp in tps
    ]
