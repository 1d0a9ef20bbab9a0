"""What a batch reports: per-partition figures and per-stage timings, for the Dagster layer to show.

Plain frozen values with no Spark or Kafka inside, so they cross process boundaries and serialize as-is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cohort.common.types import OffsetRange, TopicPartition

__all__ = ["AdoptedRange", "BatchResult", "CountMismatchError", "PartitionResult"]


class CountMismatchError(RuntimeError):
    """Records were lost or duplicated between Kafka and the outputs: consumed != written + quarantined."""


@dataclass(frozen=True)
class PartitionResult:
    """One partition's range in a batch.

    `records` rows reached the sink, `quarantined` records went to quarantine, `filtered` valid records the
    user transform dropped, `expanded` rows a flattening transform wrote beyond one per record; `bytes` is the
    consumed key + value size, `seconds` the Spark tasks' reading time. `start` says where `from_offset` came from
    ('committed', 'earliest', 'latest', 'timestamp', 'new-partition'); `gap` is the ledger gap recorded
    before the range, if records were lost to retention; `warning` explains anything unusual;
    `content_hash` digests what the range wrote; `replay_changed` says, for a range that re-read offsets
    the sink held (a replay), whether its output for them differs (None: not a replay, or no digest).
    """

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    records: int = 0
    quarantined: int = 0
    bytes: int = 0
    seconds: float = 0.0
    start: str = "committed"
    gap: OffsetRange | None = None
    warning: str | None = None
    content_hash: str | None = None
    replay_changed: bool | None = None
    filtered: int = 0
    expanded: int = 0

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def consumed(self) -> int:
        """The records read: written (one row each, or several), quarantined or filtered."""
        return self.records - self.expanded + self.quarantined + self.filtered


@dataclass(frozen=True)
class AdoptedRange:
    """A range a table sink's commit landed and the ledger never saw, adopted into the ledger by a later batch
    (cohort.pipelines.tables.reconcile): committed by that batch's member, read by run `run_id`."""

    range: OffsetRange
    run_id: str | None


@dataclass(frozen=True)
class BatchResult:
    """The outcome of `run_batch`: what was read, written and committed.

    `committed` are the ranges the ledger accepted (gaps included), `adopted` the ranges of a table sink's
    commit the ledger never saw, adopted before the batch read (reported like committed ones); `mirror_error`
    is set when the Kafka mirror failed after the ledger commit (the ledger's commit stands). `stage_seconds`
    holds wall-clock time per stage: plan, then either read_and_write (the tasks read, check and write both outputs) or
    read (read + decode + validate, materialized once), write (the sink through Spark) and quarantine
    (only when records failed); then verify, publish, commit, mirror.
    """

    run_id: str
    partitions: tuple[PartitionResult, ...]
    committed: tuple[OffsetRange, ...] = ()
    sink_dirs: tuple[str, ...] = ()
    quarantine_dirs: tuple[str, ...] = ()
    stage_seconds: Mapping[str, float] = field(default_factory=dict)
    mirror_error: str | None = None
    adopted: tuple[AdoptedRange, ...] = ()

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def quarantined(self) -> int:
        return sum(p.quarantined for p in self.partitions)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions)

    @property
    def seconds(self) -> float:
        return sum(self.stage_seconds.values())

    def lag_after(self, ends: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Records left behind per consumed partition once the batch committed (0 when caught up), given the
        partitions' end offsets."""
        return {tp: max(0, end - self.partition(tp.topic, tp.partition).until_offset) for tp, end in ends.items()}

    def partition(self, topic: str, partition: int) -> PartitionResult:
        """The result of one partition; KeyError naming it if it was not in the batch."""
        for result in self.partitions:
            if (result.topic, result.partition) == (topic, partition):
                return result
        raise KeyError(f"{topic}-{partition} was not part of batch {self.run_id}")
