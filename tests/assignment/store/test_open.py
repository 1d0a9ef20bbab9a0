"""Opening the coordinator's store: every problem with the URL or the database is a `StoreError` with a
one-line message naming the store (password hidden), and `create=False` (the operator's tools) creates
nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import (
    CoordinatorError,
    InvalidStoreUrlError,
    StoreError,
    StoreNotFoundError,
    StoreTransactionError,
    StoreUnavailableError,
)
from cohort.assignment.store.sql import SCHEMA_VERSION, SchemaVersionError, SqlGroupStore
from cohort.common.types import OffsetRange, TopicPartition

UNREACHABLE = "postgresql+psycopg://cohort:s3cret@127.0.0.1:1/cohort"  # nothing listens on port 1


@pytest.mark.parametrize(
    ("url", "error", "message"),
    [
        (
            UNREACHABLE,
            StoreUnavailableError,
            "cannot open the store postgresql+psycopg://cohort:***@127.0.0.1:1/cohort",
        ),
        ("not a url", InvalidStoreUrlError, "the store URL 'not a url' is not a SQLAlchemy URL"),
        ("postgresql+psycopg://u@host:port/db", InvalidStoreUrlError, "is not a SQLAlchemy URL"),
        ("foo://x", InvalidStoreUrlError, "names a database SQLAlchemy does not know ('foo')"),
        ("postgresql+psycopg2://u:s3cret@h/db", InvalidStoreUrlError, "needs a database driver that is not installed"),
        ("sqlite:////etc/hostname", StoreUnavailableError, "file is not a database"),
    ],
)
@pytest.mark.parametrize("create", [True, False])
def test_a_store_that_cannot_be_opened_raises_a_store_error_naming_it(url, error, message, create):
    started = time.monotonic()
    with pytest.raises(error) as raised:
        Coordinator.from_url(url) if create else SqlGroupStore.from_url(url, create=False)
    assert time.monotonic() - started < 15
    assert isinstance(raised.value, StoreError) and isinstance(raised.value, CoordinatorError)
    assert message in raised.value.message
    assert "\n" not in raised.value.message and "s3cret" not in str(raised.value)


def test_without_create_a_missing_sqlite_store_is_not_created(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'missing' / 'cohort.db'}"
    with pytest.raises(StoreNotFoundError, match=r"does not exist: there is no file .*missing/cohort.db"):
        SqlGroupStore.from_url(url, create=False)
    assert list(tmp_path.iterdir()) == []
    SqlGroupStore.from_url(url).close()  # a worker creates it, directory included
    store = SqlGroupStore.from_url(url, create=False)
    assert store.group_names() == []
    store.close()


def test_without_create_a_database_with_no_cohort_tables_is_refused(tmp_path: Path):
    path = tmp_path / "other.db"
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE something (x INTEGER)"))
    engine.dispose()
    with pytest.raises(StoreNotFoundError, match="holds no Cohort tables: no group has used it yet"):
        SqlGroupStore.from_url(f"sqlite:///{path}", create=False)
    assert sa.inspect(sa.create_engine(f"sqlite:///{path}")).get_table_names() == ["something"]  # untouched


@pytest.mark.parametrize(
    ("version", "error", "message"), [(1, StoreError, "older than"), (SCHEMA_VERSION + 1, SchemaVersionError, "up to")]
)
def test_without_create_another_schema_version_is_refused_untouched(tmp_path: Path, version, error, message):
    url = f"sqlite:///{tmp_path / 'cohort.db'}"
    SqlGroupStore.from_url(url).close()
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE cohort_schema_version SET version = :v"), {"v": version})
    with pytest.raises(error, match=message):
        SqlGroupStore.from_url(url, create=False)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version FROM cohort_schema_version")).scalar() == version
    assert issubclass(SchemaVersionError, StoreError)


@pytest.mark.parametrize(
    ("url", "timeout"), [("postgresql+psycopg://u@h/db", 10), ("postgresql+psycopg://u@h/db?connect_timeout=3", "3")]
)
def test_postgresql_connections_give_up_after_a_connect_timeout(url, timeout):
    """A host that drops packets would otherwise hang the caller for minutes; the URL may set its own."""
    from cohort.assignment.store.schema import create_store_engine

    engine = create_store_engine(url)
    seen: dict[str, object] = {}

    @sa.event.listens_for(engine, "do_connect")
    def capture(_dialect, _record, _args, params):
        seen.update(params)
        raise RuntimeError("captured")

    with pytest.raises(RuntimeError, match="captured"):
        engine.connect()
    assert seen["connect_timeout"] == timeout
    engine.dispose()


def test_a_failed_transaction_is_a_store_error_naming_the_store_and_group_and_applies_nothing(pg_url: str):
    """A transaction the database refuses (here a trigger on the ledger's insert) surfaces as one line that
    names the store, the group and the database's reason; nothing of it is applied, and the next one works."""
    coordinator = Coordinator.from_url(pg_url)
    ledger = coordinator.standalone_ledger("orders")
    ledger.commit([OffsetRange("t", 0, 0, 5, records=5)])
    engine = sa.create_engine(pg_url)
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'ledger insert refused'; END $$ "
            "LANGUAGE plpgsql; CREATE TRIGGER refuse BEFORE INSERT ON cohort_offset_ranges FOR EACH ROW "
            "EXECUTE FUNCTION refuse();"
        )
    with pytest.raises(StoreTransactionError) as raised:
        ledger.commit([OffsetRange("t", 0, 5, 9, records=4)])
    message = str(raised.value)
    assert "\n" not in message and "postgresql+psycopg://" in message, message
    assert "group 'orders'" in message and "ledger insert refused" in message, message
    assert isinstance(raised.value, StoreError) and raised.value.retriable
    assert coordinator.fetch_offsets("orders", [TopicPartition("t", 0)]) == {TopicPartition("t", 0): 5}
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TRIGGER refuse ON cohort_offset_ranges")
    ledger.commit([OffsetRange("t", 0, 5, 9, records=4)])
    assert coordinator.fetch_offsets("orders", [TopicPartition("t", 0)]) == {TopicPartition("t", 0): 9}
    engine.dispose()
    coordinator.close()
