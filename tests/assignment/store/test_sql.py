"""The SQL store: schema, engine settings, one transaction per step, per-group serialisation."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from cohort.assignment.clock import ManualClock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import NonContiguousRangeError, UnknownMemberIdError
from cohort.assignment.protocol.group_state import GroupConfig, GroupState
from cohort.assignment.store.sql import SCHEMA_VERSION, SchemaVersionError, SqlGroupStore, create_store_engine
from cohort.common.types import OffsetRange
from tests.assignment.scripted_members import Client, tp

TABLES = {
    "cohort_schema_version",
    "cohort_groups",
    "cohort_group_members",
    "cohort_offsets",
    "cohort_offset_ranges",
    "cohort_group_events",
}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


def _version(engine: sa.Engine, group: str) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(sa.text("SELECT version FROM cohort_groups WHERE name = :n"), {"n": group}).scalar_one()
        )


def test_schema_is_created_idempotently_with_its_version(url: str) -> None:
    first = SqlGroupStore.from_url(url)
    second = SqlGroupStore.from_url(url)  # a second process starting on the same database
    assert set(sa.inspect(first.engine).get_table_names()) >= TABLES
    with first.engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT component, version FROM cohort_schema_version")).all()
    assert [tuple(r) for r in rows] == [("coordinator", SCHEMA_VERSION)]
    with first.engine.begin() as conn:
        conn.execute(sa.text("UPDATE cohort_schema_version SET version = :v"), {"v": SCHEMA_VERSION + 1})
    with pytest.raises(SchemaVersionError):
        SqlGroupStore.from_url(url)
    first.close()
    second.close()


def test_sqlite_runs_in_wal_mode_with_a_busy_timeout(tmp_path: Path) -> None:
    engine = create_store_engine(f"sqlite:///{tmp_path / 'new-dir' / 'cohort.db'}")  # the folder is created
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
    engine.dispose()


def test_each_step_is_one_versioned_write_and_reads_write_nothing(url: str, clock: ManualClock) -> None:
    store = SqlGroupStore.from_url(url)
    coordinator = Coordinator(store, clock=clock, config=GroupConfig(initial_rebalance_delay=0))
    coordinator.report_topic_metadata("g", {"t": 1})
    assert _version(store.engine, "g") == 1
    client = Client(coordinator, "g", "a")
    client.join()  # MEMBER_ID_REQUIRED (writes the handed-out id) + the join
    client.sync()
    assert _version(store.engine, "g") == 4
    coordinator.describe_group("g")
    coordinator.list_groups()
    coordinator.fetch_offsets("g", [tp("t", 0)])
    assert _version(store.engine, "g") == 4
    with pytest.raises(NonContiguousRangeError):
        client.commit(OffsetRange("t", 0, 0, 5), OffsetRange("t", 0, 6, 7))
    assert _version(store.engine, "g") == 4  # refused: nothing written
    client.commit(OffsetRange("t", 0, 0, 5, records=5))
    assert _version(store.engine, "g") == 5
    with pytest.raises(UnknownMemberIdError):
        coordinator.sync("missing", "m", 1)
    assert [g.name for g in coordinator.list_groups()] == ["g"]  # a refused step creates no group
    store.close()


def test_two_stores_on_one_database_see_each_others_steps(url: str, clock: ManualClock) -> None:
    config = GroupConfig(initial_rebalance_delay=0)
    one = Coordinator(SqlGroupStore.from_url(url), clock=clock, config=config)
    two = Coordinator(SqlGroupStore.from_url(url), clock=clock, config=config)
    one.report_topic_metadata("g", {"t": 2})
    a, b = Client(one, "g", "a"), Client(two, "g", "b")
    a.join()
    a.sync()
    assert two.describe_group("g").state is GroupState.STABLE  # `two` caches nothing stale
    b.join()
    a.join()
    b.join()
    a.sync()
    b.sync()
    assert sorted(a.owned + b.owned) == [tp("t", 0), tp("t", 1)]
    assert one.describe_group("g").assignment == two.describe_group("g").assignment
    b.commit(OffsetRange("t", b.owned[0].partition, 0, 3, records=3))
    assert one.fetch_offsets("g", b.owned) == {b.owned[0]: 3}
    one.close()
    two.close()


def test_concurrent_threads_lose_no_update(url: str, clock: ManualClock) -> None:
    """Eight threads race compare-and-set commits on one partition: every accepted range is kept."""
    coordinator = Coordinator(SqlGroupStore.from_url(url), clock=clock)
    accepted: list[int] = []
    lock = threading.Lock()

    def work() -> None:
        ledger = coordinator.standalone_ledger("race")
        for _ in range(15):
            start = ledger.committed_offsets([tp("t", 0)])[tp("t", 0)] or 0
            try:
                ledger.commit([OffsetRange("t", 0, start, start + 1, records=1)])
            except NonContiguousRangeError:
                continue
            with lock:
                accepted.append(start)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    history = coordinator.ledger_history("race", "t", 0)
    assert sorted(accepted) == [e.from_offset for e in history] == list(range(len(history)))
    assert coordinator.fetch_offsets("race", [tp("t", 0)]) == {tp("t", 0): len(accepted)}
    coordinator.close()


def test_postgres_locks_one_group_not_the_others(pg_url: str, clock: ManualClock) -> None:
    coordinator = Coordinator(
        SqlGroupStore.from_url(pg_url), clock=clock, config=GroupConfig(initial_rebalance_delay=0)
    )
    for group in ("locked", "free"):
        coordinator.report_topic_metadata(group, {"t": 1})
    holder = sa.create_engine(pg_url)
    done: list[str] = []
    with holder.connect() as conn:
        tx = conn.begin()
        conn.execute(sa.text("SELECT version FROM cohort_groups WHERE name = 'locked' FOR UPDATE"))
        blocked = threading.Thread(
            target=lambda: done.append(str(coordinator.report_topic_metadata("locked", {"t": 2})))
        )
        blocked.start()
        time.sleep(0.3)
        assert done == []  # waiting for the row lock of its group
        assert coordinator.report_topic_metadata("free", {"t": 2}) is False  # another group is not blocked
        tx.commit()
    blocked.join(10)
    assert done == ["False"]
    assert coordinator.describe_group("locked").partitions_per_topic == {"t": 2}
    holder.dispose()
    coordinator.close()


def test_a_version_1_store_is_migrated_in_place(url: str, clock: ManualClock) -> None:
    """Version 1 kept member partition lists inside the member's JSON; opening it upgrades it."""
    engine = create_store_engine(url)
    v1_member = (
        '{"a":["range"],"ag":1,"as":{"t":[[0,1]]},"c":"run-1","g":1,"i":null,"j":false,"o":{"t":[[0,1]]},'
        '"p":null,"pd":1300.0,"pt":300.0,"q":0,"r":null,"rt":300.0,"s":true,"sd":1010.0,"st":10.0,"t":["t"]}'
    )
    v1_group = (
        '{"created_at":1000.0,"initial_delay_until":null,"leader":"m-1","next_seq":1,"pending":{},'
        '"protocol":"range","reason":null,"rebalance_deadline":null,"rebalance_protocol":"eager","topics":{"t":2}}'
    )
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE cohort_schema_version (component VARCHAR(64) PRIMARY KEY, version INTEGER)"))
        conn.execute(sa.text("INSERT INTO cohort_schema_version VALUES ('coordinator', 1)"))
        conn.execute(
            sa.text(
                "CREATE TABLE cohort_group_members (group_name VARCHAR(255), member_id VARCHAR(255), "
                "data TEXT NOT NULL, PRIMARY KEY (group_name, member_id))"
            )
        )
        conn.execute(sa.text("INSERT INTO cohort_group_members VALUES ('g', 'm-1', :d)"), {"d": v1_member})
        conn.execute(
            sa.text(
                "CREATE TABLE cohort_groups (name VARCHAR(255) PRIMARY KEY, version BIGINT NOT NULL, "
                "state VARCHAR(32) NOT NULL, generation INTEGER NOT NULL, data TEXT NOT NULL, "
                "updated_at FLOAT NOT NULL)"
            )
        )
        conn.execute(sa.text("INSERT INTO cohort_groups VALUES ('g', 7, 'Stable', 1, :d, 0)"), {"d": v1_group})
    engine.dispose()
    coordinator = Coordinator(SqlGroupStore.from_url(url), clock=clock)
    described = coordinator.describe_group("g")
    assert described.state is GroupState.STABLE
    assert described.member("m-1").assigned == (tp("t", 0), tp("t", 1)) == described.member("m-1").owned
    coordinator.heartbeat("g", "m-1", 1)  # and it keeps working
    with SqlGroupStore.from_url(url).engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version FROM cohort_schema_version")).scalar() == SCHEMA_VERSION
    coordinator.close()


def test_racing_creations_of_one_group_all_succeed(url: str, clock: ManualClock) -> None:
    """Several processes' first calls on a new group race to insert its row; the losers retry."""
    stores = [SqlGroupStore.from_url(url) for _ in range(6)]
    barrier = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def first_call(store: SqlGroupStore, index: int) -> None:
        coordinator = Coordinator(store, clock=clock)
        barrier.wait()
        try:
            coordinator.commit_offsets("born-racing", [OffsetRange("t", index, 0, 1, records=1)])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=first_call, args=(s, i)) for i, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    heads = Coordinator(stores[0], clock=clock).fetch_offsets("born-racing", [tp("t", i) for i in range(6)])
    assert set(heads.values()) == {1}
    for store in stores:
        store.close()


@pytest.mark.parametrize("version", [2, 3, 4, 5])
def test_an_older_ledger_table_is_migrated_in_place_and_its_ranges_read_as_commits(url: str, version: int) -> None:
    """Version 2 had no entry kind or note, version 3 no content hash, version 4 no trail marks nor the ledger's
    order and run indexes, version 5 no filtered and expanded counts: opening upgrades the tables in place and
    existing ranges read as commits that filtered nothing."""
    engine = create_store_engine(url)
    SqlGroupStore(engine)  # today's schema, then taken back to the older one
    dropped = {2: ["kind", "note", "content_hash"], 3: ["content_hash"], 4: [], 5: []}[version]
    dropped += ["filtered", "expanded"]
    with engine.begin() as conn:
        if version < 5:
            conn.execute(sa.text("DROP TABLE cohort_trail_marks"))
            conn.execute(sa.text("DROP INDEX ix_cohort_offset_ranges_order"))
            conn.execute(sa.text("DROP INDEX ix_cohort_offset_ranges_run"))
            conn.execute(sa.text("DROP INDEX ix_cohort_offset_ranges_kind"))
        for column in dropped:
            conn.execute(sa.text(f"ALTER TABLE cohort_offset_ranges DROP COLUMN {column}"))
        conn.execute(sa.text("UPDATE cohort_schema_version SET version = :v"), {"v": version})
        conn.execute(
            sa.text(
                "INSERT INTO cohort_offset_ranges (group_name, topic, partition, from_offset, until_offset, records, "
                "quarantined, run_id, generation, committed_at) VALUES ('g', 't', 0, 0, 10, 10, 0, 'run-1', 1, 5.0)"
            )
        )
    engine.dispose()
    store = SqlGroupStore.from_url(url)
    [entry] = store.history("g", "t", 0)
    assert (entry.kind, entry.note, entry.content_hash, entry.until_offset) == ("commit", None, None, 10)
    assert (entry.filtered, entry.expanded, entry.consumed) == (0, 0, 10)
    with store.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version FROM cohort_schema_version")).scalar() == SCHEMA_VERSION == 6
    indexes = {i["name"] for i in sa.inspect(store.engine).get_indexes("cohort_offset_ranges")}
    assert {"ix_cohort_offset_ranges_order", "ix_cohort_offset_ranges_run", "ix_cohort_offset_ranges_kind"} <= indexes
    assert store.trail_marks("g", "dagster", [tp("t", 0)])[tp("t", 0)].ledger_id == 0
    store.close()
