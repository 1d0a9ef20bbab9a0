"""The coordinator's SQL schema, its version and migrations, and the engine set-up (SQLite, PostgreSQL).

Tables: `cohort_groups` (one row per group, with a `version`), `cohort_group_members` (one row per member:
small fields in `data`, partition lists in `partitions`), the ledger's `cohort_offsets` (heads) and
`cohort_offset_ranges` (history), `cohort_group_events`, and `cohort_schema_version`. Statements are built
once here, with bound parameters only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from cohort.assignment.errors import StoreError

__all__ = [
    "BUMP_GROUP",
    "DELETE_MEMBER",
    "INSERT_EVENT",
    "INSERT_GROUP",
    "INSERT_HEAD",
    "INSERT_MEMBER",
    "INSERT_RANGE",
    "SCHEMA_VERSION",
    "SELECT_GROUP",
    "SELECT_GROUP_FOR_UPDATE",
    "SELECT_MEMBERS",
    "UPDATE_GROUP",
    "UPDATE_HEAD",
    "UPDATE_MEMBER",
    "UPDATE_MEMBER_ALL",
    "SchemaVersionError",
    "create_schema",
    "create_store_engine",
    "events",
    "groups",
    "heads",
    "members",
    "metadata",
    "ranges",
    "schema_version",
    "trail_marks",
]

SCHEMA_VERSION = 6
"""Version of the tables below; stored in `cohort_schema_version` under component 'coordinator'.
1: first version; 2: member partition lists in their own column; 3: ledger entries have a kind (commit or
reset) and a note; 4: and the content hash of what a range wrote; 5: audit-trail marks (`cohort_trail_marks`,
a new table `create_all` makes) and indexes that keep reading a partition's newest entries, one run's entries or
the latest resets independent of the history's length; 6: a range's records a transform filtered out, and the
rows a flattening transform added. `_migrate` upgrades in place."""

metadata = sa.MetaData()
_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

schema_version = sa.Table(
    "cohort_schema_version",
    metadata,
    sa.Column("component", sa.String(64), primary_key=True),
    sa.Column("version", sa.Integer, nullable=False),
)
groups = sa.Table(
    "cohort_groups",
    metadata,
    sa.Column("name", sa.String(255), primary_key=True),
    sa.Column("version", sa.BigInteger, nullable=False),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("data", sa.Text, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)
members = sa.Table(
    "cohort_group_members",
    metadata,
    sa.Column("group_name", sa.String(255), primary_key=True),
    sa.Column("member_id", sa.String(255), primary_key=True),
    sa.Column("data", sa.Text, nullable=False),
    sa.Column("partitions", sa.Text, nullable=False),
)
heads = sa.Table(
    "cohort_offsets",
    metadata,
    sa.Column("group_name", sa.String(255), primary_key=True),
    sa.Column("topic", sa.String(255), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("next_offset", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
)
ranges = sa.Table(
    "cohort_offset_ranges",
    metadata,
    sa.Column("id", _ID, primary_key=True, autoincrement=True),
    sa.Column("group_name", sa.String(255), nullable=False),
    sa.Column("topic", sa.String(255), nullable=False),
    sa.Column("partition", sa.Integer, nullable=False),
    sa.Column("from_offset", sa.BigInteger, nullable=False),
    sa.Column("until_offset", sa.BigInteger, nullable=False),
    sa.Column("records", sa.BigInteger, nullable=False),
    sa.Column("quarantined", sa.BigInteger, nullable=False),
    sa.Column("gap_reason", sa.Text),
    sa.Column("run_id", sa.String(255)),
    sa.Column("member_id", sa.String(255)),
    sa.Column("instance_id", sa.String(255)),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("committed_at", sa.Float, nullable=False),
    sa.Column("kind", sa.String(16), nullable=False, server_default="commit"),
    sa.Column("note", sa.Text),
    sa.Column("content_hash", sa.String(64)),
    sa.Column("filtered", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("expanded", sa.BigInteger, nullable=False, server_default="0"),
    sa.Index("ix_cohort_offset_ranges_partition", "group_name", "topic", "partition", "from_offset"),
    sa.Index("ix_cohort_offset_ranges_order", "group_name", "topic", "partition", "id"),
    sa.Index("ix_cohort_offset_ranges_run", "group_name", "run_id"),
    sa.Index("ix_cohort_offset_ranges_kind", "group_name", "kind", "id"),
)
trail_marks = sa.Table(
    "cohort_trail_marks",
    metadata,
    sa.Column("group_name", sa.String(255), primary_key=True),
    sa.Column("trail", sa.String(255), primary_key=True),
    sa.Column("topic", sa.String(255), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("ledger_id", sa.BigInteger, nullable=False),
    sa.Column("event_cursor", sa.BigInteger),
    sa.Column("head", sa.BigInteger),
    sa.Column("ranges", sa.BigInteger, nullable=False),
    sa.Column("gaps", sa.BigInteger, nullable=False),
    sa.Column("resets", sa.BigInteger, nullable=False),
    sa.Column("last_commit_at", sa.Float),
    sa.Column("updated_at", sa.Float, nullable=False),
)
"""How far each partition's ledger is known to be in one audit trail (`cohort.assignment.ledger.trail.TrailMark`)."""
events = sa.Table(
    "cohort_group_events",
    metadata,
    sa.Column("id", _ID, primary_key=True, autoincrement=True),
    sa.Column("group_name", sa.String(255), nullable=False),
    sa.Column("at", sa.Float, nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("state", sa.String(32), nullable=False),
    sa.Column("previous_state", sa.String(32)),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("member_id", sa.String(255)),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Index("ix_cohort_group_events_group", "group_name", "id"),
)

# Statements are built once: building and cache-keying Core constructs per call costs more than SQLite.
SELECT_GROUP = sa.select(groups.c.version, groups.c.state, groups.c.generation, groups.c.data).where(
    groups.c.name == sa.bindparam("g_name")
)
SELECT_GROUP_FOR_UPDATE = SELECT_GROUP.with_for_update()
INSERT_GROUP = sa.insert(groups).values(
    name=sa.bindparam("g_name"),
    version=sa.bindparam("g_new_version"),
    state=sa.bindparam("g_state"),
    generation=sa.bindparam("g_generation"),
    data=sa.bindparam("g_data"),
    updated_at=sa.bindparam("g_updated_at"),
)
UPDATE_GROUP = (
    sa.update(groups)
    .where(groups.c.name == sa.bindparam("g_name"), groups.c.version == sa.bindparam("g_version"))
    .values(
        version=sa.bindparam("g_new_version"),
        state=sa.bindparam("g_state"),
        generation=sa.bindparam("g_generation"),
        data=sa.bindparam("g_data"),
        updated_at=sa.bindparam("g_updated_at"),
    )
)
BUMP_GROUP = (
    sa.update(groups)
    .where(groups.c.name == sa.bindparam("g_name"), groups.c.version == sa.bindparam("g_version"))
    .values(version=sa.bindparam("g_new_version"), updated_at=sa.bindparam("g_updated_at"))
)
MEMBER_KEY = sa.and_(members.c.group_name == sa.bindparam("g"), members.c.member_id == sa.bindparam("m"))
SELECT_MEMBERS = sa.select(members.c.member_id, members.c.data, members.c.partitions).where(
    members.c.group_name == sa.bindparam("g")
)
INSERT_MEMBER = sa.insert(members).values(
    group_name=sa.bindparam("g"), member_id=sa.bindparam("m"), data=sa.bindparam("d"), partitions=sa.bindparam("p")
)
UPDATE_MEMBER = sa.update(members).where(MEMBER_KEY).values(data=sa.bindparam("d"))
UPDATE_MEMBER_ALL = sa.update(members).where(MEMBER_KEY).values(data=sa.bindparam("d"), partitions=sa.bindparam("p"))
DELETE_MEMBER = sa.delete(members).where(MEMBER_KEY)
HEAD_KEY = (
    heads.c.group_name == sa.bindparam("g"),
    heads.c.topic == sa.bindparam("t"),
    heads.c.partition == sa.bindparam("p"),
)
UPDATE_HEAD = sa.update(heads).where(*HEAD_KEY).values(next_offset=sa.bindparam("n"), updated_at=sa.bindparam("at"))
INSERT_HEAD = sa.insert(heads).values(
    group_name=sa.bindparam("g"),
    topic=sa.bindparam("t"),
    partition=sa.bindparam("p"),
    next_offset=sa.bindparam("n"),
    updated_at=sa.bindparam("at"),
)
INSERT_RANGE = sa.insert(ranges)
INSERT_EVENT = sa.insert(events)

_SCHEMA_LOCK_KEY = 0x636F686F7274  # "cohort": the advisory lock that serialises schema creation on PostgreSQL


class SchemaVersionError(StoreError, RuntimeError):
    """The database holds a newer coordinator schema than this code understands."""

    code = "UNSUPPORTED_VERSION"


def create_store_engine(url: str | sa.URL, **kwargs: Any) -> Engine:
    """An engine set up for the coordinator.

    SQLite: WAL journal, a 30 s busy timeout, `synchronous=NORMAL`, and pysqlite's own transaction
    handling replaced so that every write transaction starts with `BEGIN IMMEDIATE` (the file's write lock
    is taken before the group is read, so two processes never interleave two steps). PostgreSQL
    (`postgresql+psycopg://`): pre-ping, and with psycopg a 10 s connect timeout unless the URL sets
    `connect_timeout` (an unreachable host fails in bounded time); the group lock is `SELECT ... FOR UPDATE`.
    """
    parsed = sa.make_url(url)
    if parsed.get_backend_name() != "sqlite":
        kwargs.setdefault("pool_pre_ping", True)
        if parsed.get_driver_name() in ("psycopg", "psycopg2") and "connect_timeout" not in parsed.query:
            kwargs["connect_args"] = {"connect_timeout": 10, **kwargs.get("connect_args", {})}
        return sa.create_engine(parsed, **kwargs)
    if parsed.database and parsed.database != ":memory:" and not parsed.database.startswith("file:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)  # e.g. sqlite:///.cohort/cohort.db
    connect_args = dict(kwargs.pop("connect_args", {}))
    connect_args.setdefault("timeout", 30.0)
    connect_args.setdefault("check_same_thread", False)
    engine = sa.create_engine(parsed, connect_args=connect_args, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        try:
            if parsed.database and parsed.database != ":memory:":
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        read_only = conn.get_execution_options().get("cohort_read_only", False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def create_schema(engine: Engine) -> None:
    """Create the tables if missing and record the schema version; safe to run from many processes."""
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(sa.select(sa.func.pg_advisory_xact_lock(_SCHEMA_LOCK_KEY)))
        metadata.create_all(conn, checkfirst=True)
        found = conn.execute(
            sa.select(schema_version.c.version).where(schema_version.c.component == "coordinator")
        ).scalar()
        if found is None:
            conn.execute(sa.insert(schema_version).values(component="coordinator", version=SCHEMA_VERSION))
        elif found > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"the store holds coordinator schema version {found}; this code supports up to {SCHEMA_VERSION}"
            )
        elif found < SCHEMA_VERSION:
            _migrate(conn, found)
            conn.execute(
                sa.update(schema_version)
                .where(schema_version.c.component == "coordinator")
                .values(version=SCHEMA_VERSION)
            )


def _migrate(conn: Connection, found: int) -> None:
    """Upgrade an older schema in place (inside the schema lock)."""
    if found < 2:
        # Version 1 kept a member's partition lists inside its `data` JSON; version 2 has a column for them.
        conn.execute(sa.text("ALTER TABLE cohort_group_members ADD COLUMN partitions TEXT NOT NULL DEFAULT '{}'"))
        rows = conn.execute(sa.select(members.c.group_name, members.c.member_id, members.c.data)).all()
        for row in rows:
            data = json.loads(row.data)
            parts = {"as": data.pop("as", {}), "o": data.pop("o", {})}
            conn.execute(
                sa.update(members)
                .where(members.c.group_name == row.group_name, members.c.member_id == row.member_id)
                .values(data=json.dumps(data, separators=(",", ":"), sort_keys=True), partitions=json.dumps(parts))
            )

    if found < 3:
        # Version 3 records offset resets in the ledger: an entry's kind, a note (who and why). The table may
        # be new (create_all just made it with these columns).
        present = {c["name"] for c in sa.inspect(conn).get_columns("cohort_offset_ranges")}
        if "kind" not in present:
            conn.execute(
                sa.text("ALTER TABLE cohort_offset_ranges ADD COLUMN kind VARCHAR(16) NOT NULL DEFAULT 'commit'")
            )
        if "note" not in present:
            conn.execute(sa.text("ALTER TABLE cohort_offset_ranges ADD COLUMN note TEXT"))
    if found < 4:
        # Version 4 records the digest of what each range wrote (cohort.pipelines.sink.digest).
        present = {c["name"] for c in sa.inspect(conn).get_columns("cohort_offset_ranges")}
        if "content_hash" not in present:
            conn.execute(sa.text("ALTER TABLE cohort_offset_ranges ADD COLUMN content_hash VARCHAR(64)"))
    if found < 5:
        # Version 5 reads a partition's entries after an id and a run's entries through their own indexes.
        for index in ranges.indexes:
            index.create(conn, checkfirst=True)
    if found < 6:
        # Version 6 counts what a transform filtered out and the rows a flattening one added (0 before).
        present = {c["name"] for c in sa.inspect(conn).get_columns("cohort_offset_ranges")}
        for column in ("filtered", "expanded"):
            if column not in present:
                conn.execute(sa.text(f"ALTER TABLE cohort_offset_ranges ADD COLUMN {column} BIGINT NOT NULL DEFAULT 0"))
