"""The SQL store's rows and the records the coordinator uses, each way: a ledger entry and its row of
`cohort_offset_ranges`, a trail mark and its row of the trail marks' table; and the size of the chunks the store
reads and deletes by (one `IN (...)` list each)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from cohort.assignment.ledger.trail import TrailMark
from cohort.assignment.protocol.messages import LedgerEntry

__all__ = ["CHUNK", "chunks", "ledger_entry", "range_row", "trail_mark", "trail_mark_values"]

CHUNK = 500
"""How many keys one `IN (...)` list holds."""

_T = TypeVar("_T")


def chunks(items: Sequence[_T]) -> Iterator[Sequence[_T]]:
    """`items` in consecutive slices of at most `CHUNK`."""
    for start in range(0, len(items), CHUNK):
        yield items[start : start + CHUNK]


def ledger_entry(r: Any) -> LedgerEntry:
    """A row of the ranges table as a LedgerEntry."""
    return LedgerEntry(
        group=r.group_name,
        topic=r.topic,
        partition=r.partition,
        from_offset=r.from_offset,
        until_offset=r.until_offset,
        records=r.records,
        quarantined=r.quarantined,
        filtered=r.filtered,
        expanded=r.expanded,
        gap_reason=r.gap_reason,
        run_id=r.run_id,
        member_id=r.member_id,
        instance_id=r.instance_id,
        generation=r.generation,
        committed_at=r.committed_at,
        kind=r.kind,
        note=r.note,
        content_hash=r.content_hash,
        entry_id=int(r.id),
    )


def range_row(group: str, e: LedgerEntry) -> dict[str, object]:
    """The row of the ranges table that records entry `e` of `group`'s ledger (its id is the table's to give)."""
    return {
        "group_name": group,
        "topic": e.topic,
        "partition": e.partition,
        "from_offset": e.from_offset,
        "until_offset": e.until_offset,
        "records": e.records,
        "quarantined": e.quarantined,
        "filtered": e.filtered,
        "expanded": e.expanded,
        "gap_reason": e.gap_reason,
        "run_id": e.run_id,
        "member_id": e.member_id,
        "instance_id": e.instance_id,
        "generation": e.generation,
        "committed_at": e.committed_at,
        "kind": e.kind,
        "note": e.note,
        "content_hash": e.content_hash,
    }


def trail_mark(r: Any) -> TrailMark:
    """A row of the trail marks' table as a TrailMark."""
    return TrailMark(
        topic=r.topic,
        partition=r.partition,
        ledger_id=int(r.ledger_id),
        event_cursor=None if r.event_cursor is None else int(r.event_cursor),
        head=None if r.head is None else int(r.head),
        ranges=int(r.ranges),
        gaps=int(r.gaps),
        resets=int(r.resets),
        last_commit_at=r.last_commit_at,
    )


def trail_mark_values(mark: TrailMark, at: float) -> dict[str, Any]:
    """The values of a trail mark's row (its key aside), stored at time `at`."""
    return {
        "ledger_id": mark.ledger_id,
        "event_cursor": mark.event_cursor,
        "head": mark.head,
        "ranges": mark.ranges,
        "gaps": mark.gaps,
        "resets": mark.resets,
        "last_commit_at": mark.last_commit_at,
        "updated_at": at,
    }
