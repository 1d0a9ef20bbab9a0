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
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from cohort.assignment.errors import (
    FoldConflictError,
    StaleGroupVersionError,
    StoreTransactionError,
    StoreUnavailableError,
)
from cohort.assignment.ledger.retention import Fold
from cohort.assignment.ledger.trail import TrailMark
from cohort.assignment.protocol.group_state import GroupEvent, GroupRecord
from cohort.assignment.protocol.messages import RESET, Decision, LedgerEntry
from cohort.assignment.store.codec import decode_group, decode_member, event_from_row
from cohort.assignment.store.engines import as_store_error, error_cause, open_engine, shown_url
from cohort.assignment.store.protocol import HeadReader
from cohort.assignment.store.required_schema import check_schema_version, schema_version_found
from cohort.assignment.store.schema import (
    SCHEMA_VERSION,
    SELECT_GROUP,
    SELECT_GROUP_FOR_UPDATE,
    SELECT_MEMBERS,
    SchemaVersionError,
    create_schema,
    create_store_engine,
    events,
    groups,
    heads,
    ranges,
    trail_marks,
)
from cohort.assignment.store.sql_persist import persist_decision, read_heads
from cohort.assignment.store.sql_retention import apply_folds, drop_old_events
from cohort.assignment.store.sql_rows import chunks, ledger_entry
from cohort.assignment.store.sql_trail import advance_marks, lowest_marks, read_marks
from cohort.common.types import TopicPartition

__all__ = ["SCHEMA_VERSION", "SchemaVersionError", "SqlGroupStore", "create_store_engine"]

R = TypeVar("R")


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
                with store._read() as conn:
                    found = schema_version_found(conn)
                check_schema_version(found, shown_url(url))
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
        """A read-only transaction, its database errors as the store's errors."""
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
        """One attempt: lock and load the group, run the step, write its decision, then cache what was written."""
        with self.engine.begin() as conn:
            query = SELECT_GROUP_FOR_UPDATE if self._pg else SELECT_GROUP
            row = conn.execute(query, {"g_name": name}).first()
            version = 0 if row is None else int(row.version)
            current = None if row is None else self._decode(conn, name, row)
            loaded: dict[TopicPartition, int | None] = {}

            def heads_read(partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
                found = read_heads(conn, name, partitions)
                loaded.update(found)
                return found

            decision = step(current, heads_read)
            new_version = persist_decision(conn, name, current, version, decision, loaded)
        with self._lock:
            if decision.deleted:
                self._cache.pop(name, None)
            elif new_version is not None:
                self._cache[name] = (new_version, decision.group)
        return decision

    def _decode(self, conn: Connection, name: str, row: Any) -> GroupRecord:
        """The group of `row` with its members: the cached record while the row's version is the cached one."""
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
            return read_heads(conn, group, partitions)

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
            return [ledger_entry(r) for r in conn.execute(query)]

    def latest_of_kind(self, group: str, kind: str, limit: int) -> list[LedgerEntry]:
        """The group's newest `limit` ledger entries of `kind` (resets, folds), oldest first."""
        query = (
            sa.select(ranges)
            .where(ranges.c.group_name == group, ranges.c.kind == kind)
            .order_by(ranges.c.id.desc())
            .limit(limit)
        )
        with self._read() as conn:
            return [ledger_entry(r) for r in reversed(conn.execute(query).all())]

    def trail_marks(
        self, group: str, trail: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, TrailMark]:
        """How far each partition's ledger is settled in `trail` (`TrailMark.start` where never checked)."""
        with self._read() as conn:
            return read_marks(conn, group, trail, partitions)

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
        """One attempt at storing the marks, in one transaction."""
        with self.engine.begin() as conn:
            advance_marks(conn, group, trail, marks, at)

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
            apply_folds(conn, group, folds)
            if events_before is None:
                return 0
            return drop_old_events(conn, group, events_before, keep_events)

    def settled_through(self, group: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """Through which ledger entry each partition is settled in every audit trail following the group: the
        lowest mark of its trails, 0 where a trail follows the group but has not marked the partition, None for
        every partition when no trail follows the group."""
        query = sa.select(
            trail_marks.c.trail, trail_marks.c.topic, trail_marks.c.partition, trail_marks.c.ledger_id
        ).where(trail_marks.c.group_name == group)
        with self._read() as conn:
            rows = conn.execute(query).all()
        return lowest_marks(rows, partitions)

    def recorded_ranges(
        self, group: str, topic: str, partition: int, wanted: Collection[tuple[int, int]]
    ) -> set[tuple[int, int]]:
        """Which of the (from, until) ranges `wanted` the partition's ledger holds as committed ranges."""
        found: set[tuple[int, int]] = set()
        pairs = sorted(set(wanted))
        with self._read() as conn:
            for chunk in chunks(pairs):
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
            found = read_heads(conn, group, wanted)
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
                result[tp] = None if newest is None else ledger_entry(newest)
        return result

    def run_history(self, group: str, run_id: str) -> list[LedgerEntry]:
        """Every range the run `run_id` committed, in commit order."""
        query = sa.select(ranges).where(ranges.c.group_name == group, ranges.c.run_id == run_id).order_by(ranges.c.id)
        with self._read() as conn:
            return [ledger_entry(r) for r in conn.execute(query)]

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
