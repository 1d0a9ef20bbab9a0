"""The audit trails' marks in the SQL store: how far each partition's ledger is settled in each trail, read, moved
forward only (two runs advancing at once keep the furthest), and the lowest over every trail following a group
(what ledger retention may fold)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from cohort.assignment.ledger.trail import TrailMark
from cohort.assignment.store.schema import trail_marks
from cohort.assignment.store.sql_rows import chunks, trail_mark, trail_mark_values
from cohort.common.types import TopicPartition

__all__ = ["advance_marks", "lowest_marks", "read_marks"]


def read_marks(
    conn: Connection, group: str, trail: str, partitions: Sequence[TopicPartition]
) -> dict[TopicPartition, TrailMark]:
    """How far each partition's ledger is settled in `trail` (`TrailMark.start` where never checked)."""
    wanted = sorted(set(partitions))
    result = {tp: TrailMark.start(tp.topic, tp.partition) for tp in wanted}
    for chunk in chunks(wanted):
        query = sa.select(trail_marks).where(
            trail_marks.c.group_name == group,
            trail_marks.c.trail == trail,
            sa.tuple_(trail_marks.c.topic, trail_marks.c.partition).in_([(tp.topic, tp.partition) for tp in chunk]),
        )
        for r in conn.execute(query):
            result[TopicPartition(r.topic, r.partition)] = trail_mark(r)
    return result


def advance_marks(conn: Connection, group: str, trail: str, marks: Sequence[TrailMark], at: float) -> None:
    """Insert the marks the trail has none of yet and move the others forward; a mark the stored one is already
    past stays as it is. An insert racing another process's raises IntegrityError (the caller retries)."""
    known: dict[tuple[str, int], tuple[int, int | None]] = {}
    for chunk in chunks(marks):
        known.update(_known_marks(conn, group, trail, chunk))
    for mark in marks:
        row = trail_mark_values(mark, at)
        old = known.get((mark.topic, mark.partition))
        if old is None:
            conn.execute(
                sa.insert(trail_marks).values(
                    group_name=group, trail=trail, topic=mark.topic, partition=mark.partition, **row
                )
            )
        elif (mark.ledger_id, mark.event_cursor or 0) > (old[0], old[1] or 0):
            conn.execute(
                sa.update(trail_marks)
                .where(
                    trail_marks.c.group_name == group,
                    trail_marks.c.trail == trail,
                    trail_marks.c.topic == mark.topic,
                    trail_marks.c.partition == mark.partition,
                    trail_marks.c.ledger_id <= mark.ledger_id,
                )
                .values(**row)
            )


def _known_marks(
    conn: Connection, group: str, trail: str, marks: Sequence[TrailMark]
) -> dict[tuple[str, int], tuple[int, int | None]]:
    """The stored (ledger id, event cursor) of the marks' partitions that have one."""
    query = sa.select(
        trail_marks.c.topic, trail_marks.c.partition, trail_marks.c.ledger_id, trail_marks.c.event_cursor
    ).where(
        trail_marks.c.group_name == group,
        trail_marks.c.trail == trail,
        sa.tuple_(trail_marks.c.topic, trail_marks.c.partition).in_([(m.topic, m.partition) for m in marks]),
    )
    return {(r.topic, r.partition): (int(r.ledger_id), r.event_cursor) for r in conn.execute(query)}


def lowest_marks(rows: Sequence[Any], partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
    """From every mark row of a group (trail, topic, partition, ledger_id): the lowest mark of each partition over
    the trails, 0 where a trail has not marked the partition, None for every partition when no trail follows."""
    if not rows:
        return dict.fromkeys(partitions)
    trails = {r.trail for r in rows}
    marks = {(r.trail, r.topic, r.partition): int(r.ledger_id) for r in rows}
    return {tp: min(marks.get((t, tp.topic, tp.partition), 0) for t in trails) for tp in partitions}
