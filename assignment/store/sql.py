"""The coordinator's SQL store on SQLAlchemy 2: SQLite file by default, PostgreSQL for many hosts.

One row per group (`cohort_groups`, with a `version`), one row per member (`cohort_group_members`), the
offset ledger's heads and history (`cohort_offsets`, `cohort_offset_ranges`) and the group events
(`cohort_group_events`). Every protocol step is ONE transaction: take the group's lock, load the group,
run the pure decision, write what changed, bump the version. The lock is a row lock
(`SELECT ... FOR UPDATE`) on PostgreSQL, so different groups never wait for each other; on SQLite it is
`BEGIN IMMEDIATE` (SQLite has one writer per file). The update is also guarded by the version it read, so
a lost update is impossible even if a lock were missed.

Loading a 500-member group for every heartbeat would dominate the cost, so each store keeps the last
record it wrote or read per group with its version, and reloads only when the version in the row differs
(another process wrote). Records are immutable, so sharing them is safe.

Example:
    >>> store = SqlGroupStore.from_url("sqlite:///.cohort/cohort.db")  # doctest: +SKIP
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from cohort.assignment.errors import (
    FoldConflictError,
    StaleGroupVersionError,
    StoreError,
    StoreNotFoundError,
    StoreTransactionError,
    StoreUnavailableError,
)
from cohort.assignment.ledger.retention import Fold
from cohort.assignment.ledger.trail import TrailMark
from cohort.assignment.protocol.group_state import GroupEvent, GroupRecord
from cohort.assignment.protocol.messages import RESET, Decision, LedgerEntry
from cohort.assignment.store.codec import (
    decode_group,
    decode_member,
    encode_group,
    encode_member,
    encode_member_partitions,
    event_from_row,
    event_row,
)
from cohort.assignment.store.engines import as_store_error, error_cause, open_engine, shown_url
from cohort.assignment.store.protocol import HeadReader
from cohort.assignment.store.schema import (
    BUMP_GROUP,
    DELETE_MEMBER,
    INSERT_EVENT,
    INSERT_GROUP,
    INSERT_HEAD,
    INSERT_MEMBER,
    INSERT_RANGE,
    SCHEMA_VERSION,
    SELECT_GROUP,
    SELECT_GROUP_FOR_UPDATE,
    SELECT_MEMBERS,
    UPDATE_GROUP,
    UPDATE_HEAD,
    UPDATE_MEMBER,
    UPDATE_MEMBER_ALL,
    SchemaVersionError,
    create_schema,
    create_store_engine,
    events,
    groups,
    heads,
    members,
    ranges,
    trail_marks,
)
from cohort.common.types import TopicPartition

__all__ = ["SCHEMA_VERSION", "SchemaVersionError", "SqlGroupStore", "create_store_engine"]

R = TypeVar("R")

_CHUNK = 500


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
    )


def _pristine(group: GroupRecord) -> bool:
    """Whether `group` is an untouched new Empty group (a refused step on a missing group creates nothing)."""
    return group == GroupRecord(name=group.name, created_at=group.created_at)


class SqlGroupStore:
    """`GroupStore` on a SQLAlchemy engine (thread-safe; one per process and URL is enough).

    Example:
        >>> store = SqlGroupStore.from_url("sqlite:////tmp/cohort-doc.db")  # doctest: +SKIP
        >>> store.group_names()  # doctest: +SKIP
        []
    """

    def __init__(self, engine: Engine, *, create: bool = True) -> None:
        self.engine = engine
        self._pg = engine.dialect.name == "postgresql"
        self._cache: dict[str, tuple[int, GroupRecord]] = {}
        self._lock = threading.Lock()
        if create:
            create_schema(engine)

    @classmethod
    def from_url(cls, url: str | sa.URL, *, create: bool = True, **engine_kwargs: Any) -> SqlGroupStore:
        """A store on `url` (`sqlite:///path.db` or `postgresql+psycopg://user@host/db`).

        With `create=False` the store must exist (the operator's read-only tools): nothing is created, no
        SQLite file or directory and no table, and a missing store raises `StoreNotFoundError`. A URL that
        cannot be used raises `InvalidStoreUrlError`, a store that cannot be reached or opened
        `StoreUnavailableError`: `StoreError`s with a one-line message naming the store, password hidden.
        """
        engine = open_engine(url, create, engine_kwargs)
        try:
            store = cls(engine, create=create)
            if not create:
                _require_schema(store, shown_url(url))
            return store
        except (sa.exc.DBAPIError, StoreUnavailableError, StoreTransactionError) as exc:
            engine.dispose()
            cause = exc if isinstance(exc, sa.exc.DBAPIError) else exc.__cause__
            if not isinstance(cause, sa.exc.DBAPIError):
                raise
            raise StoreUnavailableError(f"cannot open the store {shown_url(url)}: {error_cause(cause)}") from cause
        except BaseException:
            engine.dispose()
            raise

    def close(self) -> None:
        """Release the engine's connections."""
        self.engine.dispose()

    # -------------------------------------------------------------------------------- transactions

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with as_store_error(self.engine, "a read"), self.engine.connect() as conn:
            conn.execution_options(cohort_read_only=True)
            with conn.begin():
                yield conn

    def transact(self, group: str, step: Callable[[GroupRecord | None, HeadReader], Decision[R]]) -> Decision[R]:
        """Run `step` on the group under its lock and persist its decision in the same transaction.

        A database error becomes a `StoreTransactionError` naming the store and the group (nothing of the
        transaction was applied); the coordinator's own refusals pass as they are."""
        for attempt in range(5):
            try:
                with as_store_error(self.engine, f"a transaction of group {group!r}", passing=sa.exc.IntegrityError):
                    return self._transact_once(group, step)
            except (sa.exc.IntegrityError, StaleGroupVersionError):
                # Two processes created the same new group at once: the loser retries and finds the row.
                self._cache.pop(group, None)
                if attempt == 4:
                    raise
        raise AssertionError("unreachable")

    def _transact_once(self, name: str, step: Callable[[GroupRecord | None, HeadReader], Decision[R]]) -> Decision[R]:
        with self.engine.begin() as conn:
            query = SELECT_GROUP_FOR_UPDATE if self._pg else SELECT_GROUP
            row = conn.execute(query, {"g_name": name}).first()
            version = 0 if row is None else int(row.version)
            current = None if row is None else self._decode(conn, name, row)
            loaded: dict[TopicPartition, int | None] = {}

            def read_heads(partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
                found = self._heads(conn, name, partitions)
                loaded.update(found)
                return found

            decision = step(current, read_heads)
            new_version = self._persist(conn, name, current, version, decision, loaded)
        with self._lock:
            if decision.deleted:
                self._cache.pop(name, None)
            elif new_version is not None:
                self._cache[name] = (new_version, decision.group)
        return decision

    def _decode(self, conn: Connection, name: str, row: Any) -> GroupRecord:
        cached = self._cache.get(name)
        if cached is not None and cached[0] == row.version:
            return cached[1]
        found = {
            r.member_id: decode_member(r.member_id, r.data, r.partitions)
            for r in conn.execute(SELECT_MEMBERS, {"g": name})
        }
        record = decode_group(name, row.state, row.generation, row.data, found)
        with self._lock:
            self._cache[name] = (int(row.version), record)
        return record

    def _persist(
        self,
        conn: Connection,
        name: str,
        old: GroupRecord | None,
        version: int,
        decision: Decision[Any],
        loaded: dict[TopicPartition, int | None],
    ) -> int | None:
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
        self._persist_members(conn, name, old, new)
        self._persist_ledger(conn, name, decision, loaded)
        if decision.events:
            conn.execute(INSERT_EVENT, [event_row(name, e) for e in decision.events])
        return version + 1

    @staticmethod
    def _persist_members(conn: Connection, name: str, old: GroupRecord | None, new: GroupRecord) -> None:
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

    @staticmethod
    def _persist_ledger(
        conn: Connection, name: str, decision: Decision[Any], loaded: dict[TopicPartition, int | None]
    ) -> None:
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
        conn.execute(
            INSERT_RANGE,
            [
                {
                    "group_name": name,
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
                for e in decision.entries
            ],
        )

    @staticmethod
    def _heads(conn: Connection, name: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        wanted = sorted(set(partitions))
        result: dict[TopicPartition, int | None] = dict.fromkeys(wanted)
        for start in range(0, len(wanted), _CHUNK):
            chunk = wanted[start : start + _CHUNK]
            query = sa.select(heads.c.topic, heads.c.partition, heads.c.next_offset).where(
                heads.c.group_name == name,
                sa.tuple_(heads.c.topic, heads.c.partition).in_([(tp.topic, tp.partition) for tp in chunk]),
            )
            for row in conn.execute(query):
                result[TopicPartition(row.topic, row.partition)] = int(row.next_offset)
        return result

    # ----------------------------------------------------------------------------------------- reads

    def load(self, group: str) -> GroupRecord | None:
        """The group as last committed, or None (no lock taken)."""
        with self._read() as conn:
            row = conn.execute(SELECT_GROUP, {"g_name": group}).first()
            return None if row is None else self._decode(conn, group, row)

    def group_names(self) -> list[str]:
        """All groups, sorted."""
        with self._read() as conn:
            return [r.name for r in conn.execute(sa.select(groups.c.name).order_by(groups.c.name))]

    def committed(self, group: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """Next offset to read per partition (None if never committed)."""
        with self._read() as conn:
            return self._heads(conn, group, partitions)

    def ledger_partitions(self, group: str) -> list[TopicPartition]:
        """The partitions with a committed offset in the group's ledger, sorted."""
        query = sa.select(heads.c.topic, heads.c.partition).where(heads.c.group_name == group)
        with self._read() as conn:
            return sorted(TopicPartition(str(t), int(p)) for t, p in conn.execute(query))

    def history(
        self, group: str, topic: str, partition: int, *, after_id: int = 0, limit: int | None = None
    ) -> list[LedgerEntry]:
        """The entries of the partition's ledger (ranges and resets) made after entry `after_id`, in the order
        they were made: every one, or the first `limit` (page on with the last one's `entry_id`)."""
        query = (
            sa.select(ranges)
            .where(
                ranges.c.group_name == group,
                ranges.c.topic == topic,
                ranges.c.partition == partition,
                ranges.c.id > after_id,
            )
            .order_by(ranges.c.id)
            .limit(limit)
        )
        with self._read() as conn:
            return [_ledger_entry(r) for r in conn.execute(query)]

    def latest_of_kind(self, group: str, kind: str, limit: int) -> list[LedgerEntry]:
        """The group's newest `limit` ledger entries of `kind` (resets, folds), oldest first."""
        query = (
            sa.select(ranges)
            .where(ranges.c.group_name == group, ranges.c.kind == kind)
            .order_by(ranges.c.id.desc())
            .limit(limit)
        )
        with self._read() as conn:
            return [_ledger_entry(r) for r in reversed(conn.execute(query).all())]

    def trail_marks(
        self, group: str, trail: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, TrailMark]:
        """How far each partition's ledger is settled in `trail` (`TrailMark.start` where never checked)."""
        wanted = sorted(set(partitions))
        result = {tp: TrailMark.start(tp.topic, tp.partition) for tp in wanted}
        with self._read() as conn:
            for start in range(0, len(wanted), _CHUNK):
                chunk = wanted[start : start + _CHUNK]
                query = sa.select(trail_marks).where(
                    trail_marks.c.group_name == group,
                    trail_marks.c.trail == trail,
                    sa.tuple_(trail_marks.c.topic, trail_marks.c.partition).in_(
                        [(tp.topic, tp.partition) for tp in chunk]
                    ),
                )
                for r in conn.execute(query):
                    result[TopicPartition(r.topic, r.partition)] = TrailMark(
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
        return result

    def advance_trail_marks(self, group: str, trail: str, marks: Sequence[TrailMark], at: float) -> None:
        """Store the marks that moved forward (a mark never moves back: two runs advancing at once keep the
        furthest)."""
        if not marks:
            return
        for attempt in range(3):
            try:
                with as_store_error(
                    self.engine, f"saving trail marks of group {group!r}", passing=sa.exc.IntegrityError
                ):
                    self._advance_marks_once(group, trail, marks, at)
                return
            except sa.exc.IntegrityError:  # another process inserted the same new mark first: read it and retry
                if attempt == 2:
                    raise

    def _advance_marks_once(self, group: str, trail: str, marks: Sequence[TrailMark], at: float) -> None:
        with self.engine.begin() as conn:
            known: dict[tuple[str, int], tuple[int, int | None]] = {}
            for start in range(0, len(marks), _CHUNK):
                known.update(self._known_marks(conn, group, trail, marks[start : start + _CHUNK]))
            for mark in marks:
                row = {
                    "ledger_id": mark.ledger_id,
                    "event_cursor": mark.event_cursor,
                    "head": mark.head,
                    "ranges": mark.ranges,
                    "gaps": mark.gaps,
                    "resets": mark.resets,
                    "last_commit_at": mark.last_commit_at,
                    "updated_at": at,
                }
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

    @staticmethod
    def _known_marks(
        conn: Connection, group: str, trail: str, marks: Sequence[TrailMark]
    ) -> dict[tuple[str, int], tuple[int, int | None]]:
        query = sa.select(
            trail_marks.c.topic, trail_marks.c.partition, trail_marks.c.ledger_id, trail_marks.c.event_cursor
        ).where(
            trail_marks.c.group_name == group,
            trail_marks.c.trail == trail,
            sa.tuple_(trail_marks.c.topic, trail_marks.c.partition).in_([(m.topic, m.partition) for m in marks]),
        )
        return {(r.topic, r.partition): (int(r.ledger_id), r.event_cursor) for r in conn.execute(query)}

    def apply_retention(
        self, group: str, folds: Sequence[Fold], *, events_before: float | None, keep_events: int
    ) -> int:
        """Fold ledger ranges (`cohort.assignment.ledger.retention.plan_folds`) and drop the group's events older than
        `events_before` but the newest `keep_events`, in one transaction under the group's lock; the number of
        events dropped. A ledger that changed since the plan was made (another fold) refuses the whole step."""
        with (
            as_store_error(self.engine, f"the retention of group {group!r}", passing=FoldConflictError),
            self.engine.begin() as conn,
        ):
            if self._pg:
                conn.execute(SELECT_GROUP_FOR_UPDATE, {"g_name": group}).first()
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
                for start in range(0, len(fold.removed_ids), _CHUNK):
                    chunk = fold.removed_ids[start : start + _CHUNK]
                    removed += conn.execute(
                        sa.delete(ranges).where(ranges.c.group_name == group, ranges.c.id.in_(chunk))
                    ).rowcount
                if kept != 1 or removed != len(fold.removed_ids):
                    raise FoldConflictError(
                        f"the ledger of {e.topic}-{e.partition} in group {group!r} changed while it was folded "
                        "(another retention run?): nothing was changed, run it again"
                    )
            if events_before is None:
                return 0
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

    def settled_through(self, group: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """Through which ledger entry each partition is settled in every audit trail following the group: the
        lowest mark of its trails, 0 where a trail follows the group but has not marked the partition, None for
        every partition when no trail follows the group."""
        query = sa.select(
            trail_marks.c.trail, trail_marks.c.topic, trail_marks.c.partition, trail_marks.c.ledger_id
        ).where(trail_marks.c.group_name == group)
        with self._read() as conn:
            rows = conn.execute(query).all()
        if not rows:
            return dict.fromkeys(partitions)
        trails = {r.trail for r in rows}
        marks = {(r.trail, r.topic, r.partition): int(r.ledger_id) for r in rows}
        return {tp: min(marks.get((t, tp.topic, tp.partition), 0) for t in trails) for tp in partitions}

    def recorded_ranges(
        self, group: str, topic: str, partition: int, wanted: Collection[tuple[int, int]]
    ) -> set[tuple[int, int]]:
        """Which of the (from, until) ranges `wanted` the partition's ledger holds as committed ranges."""
        found: set[tuple[int, int]] = set()
        pairs = sorted(set(wanted))
        with self._read() as conn:
            for start in range(0, len(pairs), _CHUNK):
                chunk = pairs[start : start + _CHUNK]
                query = sa.select(ranges.c.from_offset, ranges.c.until_offset).where(
                    ranges.c.group_name == group,
                    ranges.c.topic == topic,
                    ranges.c.partition == partition,
                    ranges.c.kind != RESET,
                    sa.tuple_(ranges.c.from_offset, ranges.c.until_offset).in_(chunk),
                )
                found.update((int(r.from_offset), int(r.until_offset)) for r in conn.execute(query))
        return found

    def last_ranges(self, group: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, LedgerEntry | None]:
        """The last committed range of each partition (the newest entry ending at its committed offset), None if
        none: the newest entry read through the ledger's order index, whatever the history's length."""
        wanted = sorted(set(partitions))
        result: dict[TopicPartition, LedgerEntry | None] = dict.fromkeys(wanted)
        with self._read() as conn:
            found = self._heads(conn, group, wanted)
            for tp in wanted:
                head = found[tp]
                if head is None:
                    continue
                key = (ranges.c.group_name == group, ranges.c.topic == tp.topic, ranges.c.partition == tp.partition)
                newest = conn.execute(sa.select(ranges).where(*key).order_by(ranges.c.id.desc()).limit(1)).first()
                if newest is not None and int(newest.until_offset) != head:  # not seen in practice: look further
                    newest = conn.execute(
                        sa.select(ranges)
                        .where(*key, ranges.c.until_offset == head)
                        .order_by(ranges.c.id.desc())
                        .limit(1)
                    ).first()
                result[tp] = None if newest is None else _ledger_entry(newest)
        return result

    def run_history(self, group: str, run_id: str) -> list[LedgerEntry]:
        """Every range the run `run_id` committed, in commit order."""
        query = sa.select(ranges).where(ranges.c.group_name == group, ranges.c.run_id == run_id).order_by(ranges.c.id)
        with self._read() as conn:
            return [_ledger_entry(r) for r in conn.execute(query)]

    def last_event_id(self, group: str) -> int:
        """The id of the group's newest event (0 when it has none): where a cursor over its events starts."""
        query = sa.select(sa.func.max(events.c.id)).where(events.c.group_name == group)
        with self._read() as conn:
            return int(conn.execute(query).scalar() or 0)

    def events(self, group: str, after: int = 0) -> list[tuple[int, GroupEvent]]:
        """The group's events with their ids, oldest first, those with id > `after`."""
        query = sa.select(events).where(events.c.group_name == group, events.c.id > after).order_by(events.c.id)
        with self._read() as conn:
            return [(int(r.id), event_from_row(r)) for r in conn.execute(query)]


def _ledger_entry(r: Any) -> LedgerEntry:
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


# ------------------------------------------------------------------------------------ opening a store


def _require_schema(store: SqlGroupStore, shown: str) -> None:
    """Refuse a store that holds no coordinator tables, or tables of another schema version, without
    creating or migrating anything."""
    with store._read() as conn:
        found = None
        if sa.inspect(conn).has_table("cohort_schema_version"):
            query = sa.text("SELECT version FROM cohort_schema_version WHERE component = 'coordinator'")
            found = conn.execute(query).scalar()
    if found is None:
        raise StoreNotFoundError(f"the store {shown} holds no Cohort tables: no group has used it yet")
    if found > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"the store {shown} holds coordinator schema version {found}; this code supports up to {SCHEMA_VERSION}"
        )
    if found < SCHEMA_VERSION:
        raise StoreError(
            f"the store {shown} holds coordinator schema version {found}, older than this code's "
            f"{SCHEMA_VERSION}: a worker of this version upgrades it on its first run"
        )
