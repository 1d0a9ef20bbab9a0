"""Reading a group's audit trail against its ledger from the marks: the one implementation both orchestrator faces
use for the unreported-range report at a run's start and for the offsets check after a batch.

A face supplies its trail as a `TrailSource` (Dagster: a landed asset partition's materializations; Airflow: the
group's asset events), each event with an increasing id. `read_trail` reads, per partition, the ledger entries
after the partition's mark and the trail's events after its cursor, and decides (`decide_trail`);
`settle_trail` stores the advanced marks. With `full=True` the marks are ignored and the whole ledger and trail
are read, page by page: what `cohort audit` and a check launched by hand with the full option do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.ledger.trail import TrailEvent, TrailMark, TrailReading, decide_trail
from cohort.assignment.protocol.messages import LedgerEntry
from cohort.common.types import TopicPartition

__all__ = ["LEDGER_PAGE", "TrailSource", "read_trail", "settle_trail", "unreported"]

LEDGER_PAGE = 10_000
"""Ledger entries read per query: a full read pages through the history rather than loading it in one result."""


class TrailSource(Protocol):
    """An orchestrator's audit trail for one group, read after a cursor."""

    def events_after(self, tp: TopicPartition, cursor: int | None) -> Sequence[TrailEvent]:
        """Every event of partition `tp` with an id above `cursor` (all of them when None), in id order."""
        ...  # pragma: no cover - protocol


def read_trail(
    coordinator: Coordinator,
    group: str,
    trail: str,
    partitions: Sequence[TopicPartition],
    source: TrailSource,
    *,
    elsewhere: Callable[[LedgerEntry], bool] | None = None,
    full: bool = False,
    marks: Mapping[TopicPartition, TrailMark] | None = None,
) -> dict[TopicPartition, TrailReading]:
    """The reading of each partition since its mark in `trail` (since the start with `full`); `marks`: the marks
    when the caller has just read them (its source needed them), so they are not read twice."""
    if full:
        marks = {tp: TrailMark.start(tp.topic, tp.partition) for tp in partitions}
    elif marks is None:
        marks = coordinator.trail_marks(group, trail, partitions)
    readings = {}
    for tp in partitions:
        mark = marks[tp]
        pending = _entries_after(coordinator, group, tp, mark.ledger_id)
        events = source.events_after(tp, mark.event_cursor)
        ranges = {(e.from_offset, e.until_offset) for e in pending}
        unmatched = {e.shows for e in events if e.shows is not None and e.shows not in ranges}
        earlier = coordinator.recorded_ranges(group, tp.topic, tp.partition, unmatched) if unmatched else set()
        readings[tp] = decide_trail(
            mark,
            pending,
            events,
            elsewhere=elsewhere or (lambda _entry: False),
            recorded_earlier=earlier,
        )
    return readings


def unreported(
    readings: Mapping[TopicPartition, TrailReading], reports: Callable[[LedgerEntry], bool]
) -> list[LedgerEntry]:
    """The ranges a run reports at its start: those no event shows that `reports` says are its to report (the
    slots it runs committed them, or an earlier run it reruns), in partition and ledger order."""
    return [e for tp in sorted(readings) for e in readings[tp].unshown if reports(e)]


def settle_trail(
    coordinator: Coordinator, group: str, trail: str, readings: Mapping[TopicPartition, TrailReading]
) -> None:
    """Store the marks the readings advanced."""
    coordinator.advance_trail_marks(group, trail, [r.mark for r in readings.values()])


def _entries_after(coordinator: Coordinator, group: str, tp: TopicPartition, after_id: int) -> list[LedgerEntry]:
    entries: list[LedgerEntry] = []
    while True:
        page = coordinator.ledger_after(group, tp.topic, tp.partition, after_id, limit=LEDGER_PAGE)
        entries.extend(page)
        if len(page) < LEDGER_PAGE:
            return entries
        after_id = page[-1].entry_id or after_id
