"""What each consumed range records for the audit trail, whichever orchestrator keeps it.

One `ConsumedRange` per consumed topic partition of a batch: the offsets, the counts, who consumed it (group,
generation, member, slot's instance id, run). Dagster turns each into a materialization's metadata
(`cohort.assets.translator.RangeMetadata`), Airflow into an asset event's `extra` (`cohort.airflow.lineage`);
the keys are the same (`cohort/<field>`, docs/metadata.md), so both trails read alike.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any

from cohort.assignment.ledger.trail import TrailReading
from cohort.assignment.ledger.trail_reader import unreported
from cohort.assignment.protocol.messages import LedgerEntry
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.batch.results import BatchResult

__all__ = ["METADATA_PREFIX", "ConsumedRange", "consumed_ranges", "reported_range", "unreported_ranges"]

METADATA_PREFIX = "cohort/"


@dataclass(frozen=True)
class ConsumedRange:
    """What the record of one consumed range of one topic partition holds (docs/metadata.md).

    `lag_after`, `start`, `bytes` and `seconds` are known to the run that consumed the range; `reported_by`
    is set when a later run reported the range from the ledger because the consuming run ended before it
    could; `gap` describes offsets skipped before the range (deleted by retention); `replay` says the range
    re-reads its partition from a replay's start (`earliest`, `offset N`, `datetime ...`), and
    `replay_changed` whether its output for offsets the sink held differs; `content_hash` digests the output.
    `filtered` (valid records the user transform dropped) and `expanded` (rows a flattening transform added
    beyond one per record) are set when not 0: the range consumed records - expanded + quarantined + filtered.
    """

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    records: int
    quarantined: int
    group: str
    generation: int
    member: str
    instance_id: str
    run_id: str
    lag_after: int | None = None
    bytes: int | None = None
    seconds: float | None = None
    start: str | None = None
    gap: str | None = None
    reported_by: str | None = None
    replay: str | None = None
    replay_changed: bool | None = None
    content_hash: str | None = None
    filtered: int | None = None
    expanded: int | None = None

    def items(self) -> Iterator[tuple[str, Any]]:
        """(field name, value) of every field that is set, in declaration order."""
        for spec in fields(self):
            value = getattr(self, spec.name)
            if value is not None:
                yield spec.name, value

    def as_extra(self) -> dict[str, Any]:
        """The set fields as plain JSON values under `cohort/` keys (an Airflow asset event's `extra`)."""
        return {f"{METADATA_PREFIX}{name}": value for name, value in self.items()}


def consumed_ranges(
    result: BatchResult,
    *,
    group: str,
    generation: int,
    member: str,
    instance_id: str,
    run_id: str,
    lag_after: Mapping[TopicPartition, int],
    replay: str | None = None,
    replayed: Collection[TopicPartition] = (),
) -> list[ConsumedRange]:
    """One record per topic partition the batch consumed; a partition with nothing new (an empty range and no
    gap) has none: the ledger records no range for it either."""
    ranges = []
    for part in result.partitions:
        if part.until_offset == part.from_offset and part.gap is None:
            continue
        tp = part.topic_partition
        ranges.append(
            ConsumedRange(
                topic=part.topic,
                partition=part.partition,
                from_offset=part.from_offset,
                until_offset=part.until_offset,
                records=part.records,
                quarantined=part.quarantined,
                group=group,
                generation=generation,
                member=member,
                instance_id=instance_id,
                run_id=run_id,
                lag_after=lag_after.get(tp, 0),
                bytes=part.bytes,
                seconds=round(part.seconds, 3),
                start=part.start,
                replay=replay if tp in replayed else None,
                replay_changed=part.replay_changed,
                content_hash=part.content_hash,
                filtered=part.filtered or None,
                expanded=part.expanded or None,
                gap=None
                if part.gap is None
                else f"[{part.gap.from_offset}, {part.gap.until_offset}) {part.gap.gap_reason}",
            )
        )
    return ranges


def reported_range(
    entry: OffsetRange | LedgerEntry,
    *,
    group: str,
    generation: int,
    member: str,
    instance_id: str,
    run_id: str,
    reported_by: str,
) -> ConsumedRange:
    """The record of a range run `run_id` read and committed (a ledger entry), reported by run `reported_by`
    because the reading run ended before it could (or before its ledger commit)."""
    return ConsumedRange(
        topic=entry.topic,
        partition=entry.partition,
        from_offset=entry.from_offset,
        until_offset=entry.until_offset,
        records=entry.records,
        quarantined=entry.quarantined,
        filtered=entry.filtered or None,
        expanded=entry.expanded or None,
        group=group,
        generation=generation,
        member=member,
        instance_id=instance_id,
        run_id=run_id,
        reported_by=reported_by,
    )


def unreported_ranges(
    readings: Mapping[TopicPartition, TrailReading],
    ours: Callable[[LedgerEntry], bool],
    *,
    group: str,
    reported_by: str,
) -> list[ConsumedRange]:
    """The ranges a run reports at its start (both faces): those the ledger holds and no event of the trail shows
    that `ours` says are this run's to report, each recorded as the run that committed it would have (its
    generation, member, slot and run), in partition and ledger order. A run killed between its ledger commit and
    its events leaves such ranges; the slot's next run closes the gap."""
    return [
        reported_range(
            entry,
            group=group,
            generation=entry.generation,
            member=entry.member_id or "",
            instance_id=entry.instance_id or "",
            run_id=entry.run_id or "unknown",
            reported_by=reported_by,
        )
        for entry in unreported(readings, ours)
    ]
