"""Dagster's audit trail as a `TrailSource`: a topic asset partition's materializations, read after a storage id.

The event log's storage ids increase in the order events were stored, so a partition's mark keeps the storage id
of the last materialization it matched and the next run reads only newer ones, page by page (never a newest-first
window that silently drops the oldest).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import dagster as dg

from cohort.assets.translator import consumed_offsets
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.ledger.trail import TrailEvent, TrailReading
from cohort.assignment.ledger.trail_reader import read_trail, settle_trail
from cohort.assignment.protocol.messages import LedgerEntry
from cohort.common.types import TopicPartition

__all__ = ["EVENT_PAGE", "DagsterTrail", "OtherInstanceRuns", "dagster_trail_name", "read_dagster_trail"]

EVENT_PAGE = 1_000
"""Materializations fetched per event-log query."""


def dagster_trail_name(host_slots: Sequence[int] | None = None) -> str:
    """The trail's name in the store's marks: one per Dagster instance sharing a group (its slots name it)."""
    if not host_slots:
        return "dagster"
    return "dagster:slots=" + ",".join(str(s) for s in sorted(host_slots))


@dataclass(frozen=True)
class DagsterTrail:
    """The materializations of the asset `asset_key(topic)` for each Kafka partition, in storage order."""

    instance: dg.DagsterInstance
    asset_key: Callable[[str], dg.AssetKey]

    def events_after(self, tp: TopicPartition, cursor: int | None) -> list[TrailEvent]:
        """Every materialization of partition `tp` stored after `cursor`, oldest first."""
        records_filter = dg.AssetRecordsFilter(
            asset_key=self.asset_key(tp.topic), asset_partitions=[str(tp.partition)], after_storage_id=cursor
        )
        events: list[TrailEvent] = []
        page_cursor: str | None = None
        while True:
            result = self.instance.fetch_materializations(
                records_filter, limit=EVENT_PAGE, cursor=page_cursor, ascending=True
            )
            for record in result.records:
                materialization = record.asset_materialization
                if materialization is None:
                    continue
                offsets = consumed_offsets(materialization.metadata)
                start, until = offsets if offsets is not None else (None, None)
                events.append(
                    TrailEvent(record.storage_id, start, until, record.run_id or f"event {record.storage_id}")
                )
            if not result.has_more:
                return events
            page_cursor = result.cursor


@dataclass
class OtherInstanceRuns:
    """Whether a ledger entry was committed by a run this Dagster instance does not know (several instances share
    the group's slots: that range is the other instance's to show). Runs are looked up once each, as asked."""

    instance: dg.DagsterInstance
    _known: dict[str, bool] = field(default_factory=dict)

    def __call__(self, entry: LedgerEntry) -> bool:
        run = entry.run_id
        if not run:
            return False
        if run not in self._known:
            records = self.instance.get_run_records(dg.RunsFilter(run_ids=[run]), limit=1)
            self._known[run] = not records
        return self._known[run]


def read_dagster_trail(
    instance: dg.DagsterInstance,
    coordinator: Coordinator,
    group: str,
    asset_key: Callable[[str], dg.AssetKey],
    partitions: Sequence[TopicPartition],
    *,
    host_slots: Sequence[int] | None,
    full: bool = False,
) -> dict[TopicPartition, TrailReading]:
    """The group's ledger against this instance's materializations since each partition's mark (all of it with
    `full`), the marks advanced and stored."""
    readings = read_trail(
        coordinator,
        group,
        dagster_trail_name(host_slots),
        partitions,
        DagsterTrail(instance, asset_key),
        elsewhere=OtherInstanceRuns(instance) if host_slots is not None else None,
        full=full,
    )
    settle_trail(coordinator, group, dagster_trail_name(host_slots), readings)
    return readings
