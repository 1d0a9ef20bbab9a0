"""Ledger retention in the SQL store (`cohort compact`): folded ranges written in place of the ranges they stand for,
refused whole when the ledger changed since the plan, and the group's old events dropped but the newest."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from cohort.assignment.errors import FoldConflictError
from cohort.assignment.ledger.retention import Fold
from cohort.assignment.store.schema import events, ranges
from cohort.assignment.store.sql_rows import chunks

__all__ = ["apply_folds", "drop_old_events"]


def apply_folds(conn: Connection, group: str, folds: Sequence[Fold]) -> None:
    """Rewrite each fold's kept entry as the fold and delete the entries it replaces; FoldConflictError (the caller
    rolls the transaction back) when an entry is not as the plan read it."""
    for fold in folds:
        e = fold.entry
        kept = conn.execute(
            sa.update(ranges)
            .where(ranges.c.id == fold.entry_id, ranges.c.until_offset == e.until_offset)
            .values(
                from_offset=e.from_offset,
                records=e.records,
                quarantined=e.quarantined,
                filtered=e.filtered,
                expanded=e.expanded,
                kind=e.kind,
                note=e.note,
                content_hash=e.content_hash,
            )
        ).rowcount
        removed = 0
        for chunk in chunks(fold.removed_ids):
            removed += conn.execute(
                sa.delete(ranges).where(ranges.c.group_name == group, ranges.c.id.in_(chunk))
            ).rowcount
        if kept != 1 or removed != len(fold.removed_ids):
            raise FoldConflictError(
                f"the ledger of {e.topic}-{e.partition} in group {group!r} changed while it was folded "
                "(another retention run?): nothing was changed, run it again"
            )


def drop_old_events(conn: Connection, group: str, events_before: float, keep_events: int) -> int:
    """Delete the group's events older than `events_before` but the newest `keep_events`; how many went."""
    newest = (
        sa.select(events.c.id)
        .where(events.c.group_name == group)
        .order_by(events.c.id.desc())
        .limit(1)
        .offset(max(0, keep_events - 1))
    )
    floor = conn.execute(newest).scalar()
    if floor is None:
        return 0
    dropped = conn.execute(
        sa.delete(events).where(events.c.group_name == group, events.c.at < events_before, events.c.id < floor)
    ).rowcount
    return int(dropped or 0)
