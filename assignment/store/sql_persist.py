"""One protocol step's decision written in its transaction of the SQL store: the group's row (guarded by the version
it read), its changed members, the ledger's heads and new ranges, the group's events; and the heads it reads.

Only what changed is written: a step that changes only members bumps the group's version without re-encoding its
header, and a member whose partition lists did not change is updated without them."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from cohort.assignment.errors import StaleGroupVersionError
from cohort.assignment.protocol.group_state import GroupRecord
from cohort.assignment.protocol.messages import Decision
from cohort.assignment.store.codec import encode_group, encode_member, encode_member_partitions, event_row
from cohort.assignment.store.schema import (
    BUMP_GROUP,
    DELETE_MEMBER,
    INSERT_EVENT,
    INSERT_GROUP,
    INSERT_HEAD,
    INSERT_MEMBER,
    INSERT_RANGE,
    UPDATE_GROUP,
    UPDATE_HEAD,
    UPDATE_MEMBER,
    UPDATE_MEMBER_ALL,
    events,
    groups,
    heads,
    members,
    ranges,
    trail_marks,
)
from cohort.assignment.store.sql_rows import chunks, range_row
from cohort.common.types import TopicPartition

__all__ = ["persist_decision", "read_heads"]


def persist_decision(
    conn: Connection,
    name: str,
    old: GroupRecord | None,
    version: int,
    decision: Decision[Any],
    loaded: dict[TopicPartition, int | None],
) -> int | None:
    """Write `decision` on group `name` as read at `version` (`old`; None: no row yet); `loaded`: the heads the step
    read (a head read as None is inserted, any other updated). The group's new version, None when it has no row
    (deleted, or a refused step on a missing group)."""
    new = decision.group
    if decision.deleted:
        for table in (members, heads, ranges, events, trail_marks):
            conn.execute(sa.delete(table).where(table.c.group_name == name))
        conn.execute(sa.delete(groups).where(groups.c.name == name))
        return None
    unchanged = new is old or (old is None and _pristine(new))
    if unchanged and not decision.entries:
        return version if old is not None else None
    values: dict[str, Any] = {
        "g_name": name,
        "g_version": version,
        "g_new_version": version + 1,
        "g_updated_at": time.time(),  # bookkeeping for operators; protocol time lives in the record
    }
    if old is not None and not _header_changed(old, new):
        done = conn.execute(BUMP_GROUP, values)  # only members changed: no need to re-encode the header
    else:
        values.update(g_state=new.state.value, g_generation=new.generation, g_data=encode_group(new))
        done = conn.execute(INSERT_GROUP if old is None else UPDATE_GROUP, values)
    if old is not None and done.rowcount != 1:
        raise StaleGroupVersionError(f"group {name!r} changed under the transaction (version {version})")
    _persist_members(conn, name, old, new)
    _persist_ledger(conn, name, decision, loaded)
    if decision.events:
        conn.execute(INSERT_EVENT, [event_row(name, e) for e in decision.events])
    return version + 1


def read_heads(conn: Connection, name: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
    """The next offset to read per partition of group `name`'s ledger (None where never committed)."""
    wanted = sorted(set(partitions))
    result: dict[TopicPartition, int | None] = dict.fromkeys(wanted)
    for chunk in chunks(wanted):
        query = sa.select(heads.c.topic, heads.c.partition, heads.c.next_offset).where(
            heads.c.group_name == name,
            sa.tuple_(heads.c.topic, heads.c.partition).in_([(tp.topic, tp.partition) for tp in chunk]),
        )
        for row in conn.execute(query):
            result[TopicPartition(row.topic, row.partition)] = int(row.next_offset)
    return result


def _header_changed(old: GroupRecord, new: GroupRecord) -> bool:
    """Whether any group-level field (everything but the members) differs."""
    return (
        old.state is not new.state
        or old.generation != new.generation
        or old.protocol != new.protocol
        or old.rebalance_protocol != new.rebalance_protocol
        or old.leader_id != new.leader_id
        or old.pending is not new.pending
        or old.partitions_per_topic is not new.partitions_per_topic
        or old.rebalance_deadline != new.rebalance_deadline
        or old.initial_delay_until != new.initial_delay_until
        or old.next_seq != new.next_seq
        or old.rebalance_reason != new.rebalance_reason
        or old.created_at != new.created_at
        or old.rerun_claims is not new.rerun_claims
        or old.last_protocol != new.last_protocol
        or old.last_protocols != new.last_protocols
    )


def _pristine(group: GroupRecord) -> bool:
    """Whether `group` is an untouched new Empty group (a refused step on a missing group creates nothing)."""
    return group == GroupRecord(name=group.name, created_at=group.created_at)


def _persist_members(conn: Connection, name: str, old: GroupRecord | None, new: GroupRecord) -> None:
    """Delete the members that left, insert the new ones, update those that changed (without their partition
    lists when only deadlines or flags changed)."""
    before = old.members if old is not None else {}
    after = new.members
    if after is before:
        return
    changed = [(mid, m) for mid, m in after.items() if before.get(mid) is not m]
    removed = before.keys() - after.keys()
    if removed:
        conn.execute(DELETE_MEMBER, [{"g": name, "m": mid} for mid in removed])
    small: list[dict[str, str]] = []
    full: list[dict[str, str]] = []
    inserts: list[dict[str, str]] = []
    for mid, m in changed:
        previous = before.get(mid)
        row = {"g": name, "m": mid, "d": encode_member(m)}
        if previous is not None and previous.assigned is m.assigned and previous.owned is m.owned:
            small.append(row)  # deadlines or flags only: the (possibly large) partition lists stay
        else:
            row["p"] = encode_member_partitions(m)
            (full if previous is not None else inserts).append(row)
    if small:
        conn.execute(UPDATE_MEMBER, small)
    if full:
        conn.execute(UPDATE_MEMBER_ALL, full)
    if inserts:
        conn.execute(INSERT_MEMBER, inserts)


def _persist_ledger(
    conn: Connection, name: str, decision: Decision[Any], loaded: dict[TopicPartition, int | None]
) -> None:
    """Move the ledger's heads the decision moved (insert those never committed) and record its new entries."""
    if not decision.heads:
        return
    at = decision.entries[0].committed_at if decision.entries else 0.0
    fresh: list[dict[str, object]] = []
    moved: list[dict[str, object]] = []
    for tp, until in decision.heads.items():
        row = {"g": name, "t": tp.topic, "p": tp.partition, "n": until, "at": at}
        (moved if loaded.get(tp) is not None else fresh).append(row)
    if moved:
        conn.execute(UPDATE_HEAD, moved)
    if fresh:
        conn.execute(INSERT_HEAD, fresh)
    conn.execute(INSERT_RANGE, [range_row(name, e) for e in decision.entries])
