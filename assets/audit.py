"""Offset audits shared by the asset checks, the demo and the CLI: plain values in, findings out.

For one partition the audit compares three records of what was consumed: the ledger's committed ranges
(the source of truth), the Dagster materializations (the audit trail) and Kafka's committed offset (the
mirror), and measures the lag against the end offset. `gather_audits` collects the inputs from the
coordinator, the Dagster instance and Kafka; `audit_partition` decides with plain values.

Example:
    >>> from cohort.common.types import TopicPartition
    >>> audit = audit_partition(TopicPartition("t", 0), [(0, 10, None), (10, 25, None)], {(0, 10), (10, 25)},
    ...                         kafka_committed=25, end_offset=30)
    >>> audit.ok, audit.lag
    (True, 5)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg

from cohort.assets.trail import DagsterTrail, read_dagster_trail
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.protocol.messages import RESET
from cohort.common.types import TopicPartition

__all__ = ["Materialized", "PartitionAudit", "audit_partition", "gather_audits", "materialized_ranges"]

LedgerRange = tuple[int, int, str | None] | tuple[int, int, str | None, str]
"""(from_offset, until_offset, gap_reason[, kind]) of one ledger entry, in the order they were made; kind is
"commit" (the default) or "reset" (an operator moved the position from `from_offset` to `until_offset`)."""


@dataclass(frozen=True)
class PartitionAudit:
    """The findings for one partition: `problems` is empty when everything agrees."""

    tp: TopicPartition
    ledger_ranges: int
    gaps: int
    committed: int | None
    kafka_committed: int | None
    end_offset: int
    lag: int
    problems: tuple[str, ...]
    last_commit_at: float | None = None
    resets: int = 0
    elsewhere: int = 0

    @property
    def ok(self) -> bool:
        """No contiguity or agreement problem (lag is judged separately)."""
        return not self.problems


def audit_partition(
    tp: TopicPartition,
    ledger: Sequence[LedgerRange],
    materialized: Collection[tuple[int, int]],
    *,
    kafka_committed: int | None,
    end_offset: int,
    low_offset: int = 0,
    foreign: Sequence[str] = (),
    last_commit_at: float | None = None,
    elsewhere: Collection[tuple[int, int]] = (),
) -> PartitionAudit:
    """Check one partition: contiguous ledger, ledger == materializations, ledger head == Kafka's committed.

    `foreign` names the runs of materializations that record no offsets: nothing the ledger accounts for.
    `elsewhere` are ledger ranges committed by runs of another Dagster instance (several hosts on one group):
    their materializations are that instance's, so they are not looked for here.
    """
    problems: list[str] = []
    previous: int | None = None
    for entry in ledger:
        start, until = entry[0], entry[1]
        if previous is not None and start != previous:
            kind = "gap" if start > previous else "overlap"
            problems.append(f"{tp}: ledger {kind} between offset {previous} and range [{start}, {until})")
        previous = until
    resets = sum(1 for e in ledger if _is_reset(e))
    recorded = {(e[0], e[1]) for e in ledger if e[2] is None and e[1] > e[0] and not _is_reset(e)}
    shown = {(s, u) for s, u in materialized if u > s}
    for s, u in sorted(recorded - shown - set(elsewhere)):
        problems.append(f"{tp}: ledger range [{s}, {u}) has no materialization")
    for s, u in sorted(shown - recorded):
        problems.append(f"{tp}: materialization [{s}, {u}) is not in the ledger")
    for run in foreign:
        problems.append(f"{tp}: materialization by run {run} records no offsets: the ledger does not account for it")
    committed = previous
    if committed != kafka_committed:
        problems.append(f"{tp}: ledger committed offset {committed} but Kafka's committed offset is {kafka_committed}")
    position = committed if committed is not None else low_offset
    return PartitionAudit(
        tp=tp,
        ledger_ranges=len(ledger) - resets,
        gaps=sum(1 for e in ledger if e[2] is not None),
        resets=resets,
        committed=committed,
        kafka_committed=kafka_committed,
        end_offset=end_offset,
        lag=max(0, end_offset - position),
        problems=tuple(problems),
        last_commit_at=last_commit_at,
        elsewhere=len(recorded & set(elsewhere)),
    )


def _is_reset(entry: LedgerRange) -> bool:
    return len(entry) > 3 and entry[3] == RESET


@dataclass(frozen=True)
class Materialized:
    """The materializations of one asset partition: the offset ranges they record, and the ones that record
    none (reported by hand or by foreign code), each named by its run."""

    ranges: frozenset[tuple[int, int]]
    foreign: tuple[str, ...] = ()


def materialized_ranges(instance: dg.DagsterInstance, asset_key: dg.AssetKey, partition: int) -> Materialized:
    """What every materialization of one asset partition records, read page by page (none left out)."""
    ranges: set[tuple[int, int]] = set()
    foreign: list[str] = []
    for event in DagsterTrail(instance, lambda _topic: asset_key).events_after(TopicPartition("-", partition), None):
        if event.shows is not None:
            ranges.add(event.shows)
        else:
            foreign.append(event.source)
    return Materialized(frozenset(ranges), tuple(foreign))


def gather_audits(
    coordinator: Coordinator,
    group: str,
    topic: str,
    partitions: int,
    *,
    instance: dg.DagsterInstance,
    asset_key: dg.AssetKey,
    kafka: Any,
    several_instances: bool = False,
    host_slots: Sequence[int] | None = None,
    full: bool = False,
) -> list[PartitionAudit]:
    """Audit partitions 0..partitions-1 of `topic` for `group` (kafka: a `KafkaResource`).

    Only the ledger entries and materializations since each partition's trail mark are read (the marks then
    advance: cohort.assignment.ledger.trail), so the cost follows what changed, not the history; `full` reads
    everything, page by page. With `several_instances` (the group's slots run from several Dagster instances on
    one store, this one hosting `host_slots`), a range committed by a run this instance does not know is another
    instance's to report, and is not looked for here.
    """
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    marks: Mapping[TopicPartition, tuple[int, int]] = kafka.watermarks(tps)
    in_kafka = kafka.committed_offsets(group, tps)
    slots = (host_slots or ()) if several_instances else None
    readings = read_dagster_trail(
        instance, coordinator, group, lambda _topic: asset_key, tps, host_slots=slots, full=full
    )
    audits = []
    for tp in tps:
        reading = readings[tp]
        low, high = marks[tp]
        problems = list(reading.problems)
        committed = reading.head
        kafka_committed = in_kafka.get(tp)
        if committed != kafka_committed:
            problems.append(
                f"{tp}: ledger committed offset {committed} but Kafka's committed offset is {kafka_committed}"
            )
        position = committed if committed is not None else low
        audits.append(
            PartitionAudit(
                tp=tp,
                ledger_ranges=reading.ranges,
                gaps=reading.gaps,
                resets=reading.resets,
                committed=committed,
                kafka_committed=kafka_committed,
                end_offset=high,
                lag=max(0, high - position),
                problems=tuple(problems),
                last_commit_at=reading.last_commit_at,
                elsewhere=reading.elsewhere,
            )
        )
    return audits
