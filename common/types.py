"""The records every layer shares: a topic partition and a committed offset range.

They import only the standard library and `cohort.common.validation`, so the coordinator, the reading tasks
on Spark executors and the Dagster code all use the same values without loading each other's dependencies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from cohort.common.validation import INT32_MAX, as_integer

__all__ = ["OffsetRange", "TopicPartition"]


class TopicPartition(NamedTuple):
    """One partition of one topic; orders by (topic, partition)."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True)
class OffsetRange:
    """A consumed range [from_offset, until_offset) of one partition, as committed to the ledger.

    `records` counts the rows that reached the sink, `quarantined` what went to quarantine, `filtered` the valid
    records a user transform dropped, `expanded` the rows a flattening transform wrote beyond one per record, so
    the range consumed `records - expanded + quarantined + filtered` records (`consumed`). A range with a
    `gap_reason` records offsets that could not be read (e.g. deleted by retention) and holds no records.
    `content_hash` is the digest of what the range wrote (cohort.pipelines.sink.digest), `note` a remark the
    ledger keeps with it (a replay says whether its output changed): annotations, not part of a range's identity
    (equality compares the offsets and the counts).
    """

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    records: int = 0
    quarantined: int = 0
    gap_reason: str | None = None
    content_hash: str | None = field(default=None, compare=False)
    note: str | None = field(default=None, compare=False)
    filtered: int = 0
    expanded: int = 0

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def consumed(self) -> int:
        """The records of the range that were read: written (one row each, or several), quarantined or filtered."""
        return self.records - self.expanded + self.quarantined + self.filtered

    def __post_init__(self) -> None:
        """Refuse anything Kafka's ledger could not hold: offsets and counts must be integers (not bools,
        not floats, not NaN) in [0, 2**63 - 1], partitions in [0, 2**31 - 1]; int-likes such as
        numpy.int64 are stored as plain ints. Every problem is a ValueError naming the field and partition.
        """
        where = f"{self.topic}-{self.partition}"
        partition = as_integer(self.partition, f"partition of topic {self.topic!r}", maximum=INT32_MAX)
        if partition < 0:
            raise ValueError(f"partition must be >= 0, got {self.partition} for topic {self.topic!r}")
        values = {"partition": partition}
        for name in ("from_offset", "until_offset"):
            values[name] = as_integer(getattr(self, name), f"{name} (an offset) of {where}")
        for name in ("records", "quarantined", "filtered", "expanded"):
            values[name] = as_integer(getattr(self, name), f"{name} (a record count) of {where}")
        for name, value in values.items():
            object.__setattr__(self, name, value)  # plain ints (frozen dataclass)
        if self.from_offset < 0 or self.until_offset < self.from_offset:
            raise ValueError(f"invalid offset range [{self.from_offset}, {self.until_offset}) for {where}")
        if min(self.records, self.quarantined, self.filtered, self.expanded) < 0 or self.expanded > self.records:
            raise ValueError(f"record counts must be >= 0 for {where}")
