"""Delta Lake and Iceberg sinks through the real data path: the embedded broker, Spark, the SQLite ledger and
the tables' own libraries (deltalake, pyiceberg); rows counted with the format's reader and with DuckDB.

A batch that dies between two of its commits is modelled here by a table store that raises around its real commit
(tests/assets/test_table_fault_matrix.py runs the same boundaries with SIGKILL): the next batch must adopt or roll
back, so that every offset is in the table exactly once.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.member import GroupMember
from cohort.assignment.settings import MemberSettings
from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tables.store import TableCommit, TableConflictError
from harness.tables import duckdb_offsets, table_arrow, table_offsets
from tests.support.orders import ORDER_SCHEMA, Order, order
from tests.support.table_batches import Died, die, expected, forget_history, hook, records, spec_for

FORMATS = pytest.mark.parametrize("table_format", ["delta", "iceberg"])


@FORMATS
def test_batches_land_in_the_table_and_quarantine_table_once(
    table_format, spark, kafka_config, topic_factory, produce_records, ledger, lake
) -> None:
    topic = topic_factory(2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    spec = spec_for(lake, table_format)
    produce_records(topic, records(0, 40))
    first = run_batch(spark, spec, kafka_config, tps, ledger)
    produce_records(topic, records(40, 30))
    second = run_batch(spark, spec, kafka_config, tps, ledger)
    sink, bad = expected(70)
    assert table_offsets(spec) == sink == duckdb_offsets(spec)
    assert table_offsets(spec, quarantine=True) == bad
    assert first.records + second.records == len(sink) and first.quarantined + second.quarantined == len(bad)
    assert ledger.committed_offsets(tps) == {tps[0]: 35, tps[1]: 35}
    assert all("/data/topic=" in d for d in first.sink_dirs) and first.sink_dirs
    rows = table_arrow(spec)
    assert rows is not None and {"id", "user", "amount", "kafka"} <= set(rows.column_names)
    reasons = table_arrow(spec, quarantine=True)
    assert reasons is not None and all("amount" in r for r in reasons.column("reason").to_pylist())
    assert not list((lake / "orders" / "_staging").glob("*/*"))  # nothing staged is left


@FORMATS
def test_a_sink_commit_the_ledger_never_saw_is_adopted(
    table_format, monkeypatch, spark, kafka_config, topic_factory, produce_records, ledger, lake
) -> None:
    topic = topic_factory(2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    spec = spec_for(lake, table_format)
    produce_records(topic, records(0, 30))
    hook(monkeypatch, sink={"after": die})
    with pytest.raises(Died):
        run_batch(spark, spec, kafka_config, tps, ledger, run_id="died-after-table")
    # the ownership check before the table commits pinned the start (an empty first range), nothing more
    assert ledger.committed_offsets(tps) == {tps[0]: 0, tps[1]: 0}
    assert table_offsets(spec) == expected(30)[0]  # in the table, not in the ledger
    monkeypatch.undo()
    produce_records(topic, records(30, 10))
    run_batch(spark, spec, kafka_config, tps, ledger, run_id="next")
    sink, bad = expected(40)
    assert table_offsets(spec) == sink and table_offsets(spec, quarantine=True) == bad
    last = ledger.last_committed(tps)
    history = ledger.coordinator.run_ledger_history(ledger.group, "died-after-table")
    assert [(e.partition, e.from_offset, e.until_offset) for e in history] == [(0, 0, 15), (1, 0, 15)]
    assert all(e.note == "adopted from the sink table" for e in history)
    assert {tp: e.until_offset for tp, e in last.items() if e} == {tps[0]: 20, tps[1]: 20}


@FORMATS
def test_a_quarantine_commit_whose_sink_commit_never_landed_is_rolled_back(
    table_format, monkeypatch, spark, kafka_config, topic_factory, produce_records, ledger, lake
) -> None:
    topic = topic_factory(2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    spec = spec_for(lake, table_format)
    produce_records(topic, records(0, 20))
    run_batch(spark, spec, kafka_config, tps, ledger)
    produce_records(topic, records(20, 20))
    hook(monkeypatch, sink={"before": die})
    with pytest.raises(Died):
        run_batch(spark, spec, kafka_config, tps, ledger)
    assert table_offsets(spec, quarantine=True) == expected(40)[1]  # the orphan quarantine commit
    assert table_offsets(spec) == expected(20)[0]
    monkeypatch.undo()
    run_batch(spark, spec, kafka_config, tps, ledger)
    sink, bad = expected(40)
    assert table_offsets(spec) == sink and table_offsets(spec, quarantine=True) == bad


@FORMATS
def test_a_zombie_fenced_in_the_table_changes_nothing(
    table_format,
    monkeypatch,
    spark,
    kafka_config,
    topic_factory,
    produce_records,
    coordinator: Coordinator,
    group,
    lake,
) -> None:
    """The zombie passed the ledger's ownership check, then lost the partition to a newer member that fenced it
    in both tables and committed the same offsets: the zombie's table commits are refused."""
    topic = topic_factory(1)
    tp = TopicPartition(topic, 0)
    spec = spec_for(lake, table_format)
    produce_records(topic, [(0, None, order(i, amount=5000.0) if i % 4 == 0 else order(i)) for i in range(24)])
    settings = MemberSettings(topics=(topic,), session_timeout=30.0)
    zombie = GroupMember(coordinator, group, settings, topic_metadata=lambda: {topic: 1})
    zombie.ensure_active()
    successor = GroupMember(coordinator, group, settings, topic_metadata=lambda: {topic: 1})

    def lose_partition(_: TableCommit) -> None:
        zombie.close(leave=True)  # its session is gone: the partition goes to the successor
        successor.ensure_active()
        monkeypatch.undo()
        result = run_batch(spark, spec, kafka_config, successor.assignment, successor)
        assert result.records == 18 and result.quarantined == 6
        forget_history(spec)  # apache/iceberg#17551: the zombie comes back after the history expired

    hook(monkeypatch, quarantine={"before": lose_partition})
    try:
        with pytest.raises(TableConflictError, match="generation"):
            run_batch(spark, spec, kafka_config, [tp], zombie)
    finally:
        successor.close()
    assert table_offsets(spec) == [(0, i) for i in range(24) if i % 4]
    assert table_offsets(spec, quarantine=True) == [(0, i) for i in range(0, 24, 4)]
    assert coordinator.fetch_offsets(group, [tp]) == {tp: 24}
    assert len(list((lake / "orders" / "data").glob("topic=*/partition=*/*"))) == 1  # the zombie's files are gone


@FORMATS
def test_a_replay_overwrites_exactly_the_offsets_it_reads(
    table_format, spark, kafka_config, topic_factory, produce_records, coordinator: Coordinator, group, lake
) -> None:
    topic = topic_factory(1)
    tp = TopicPartition(topic, 0)
    spec = spec_for(lake, table_format, max_records_per_partition=10)
    produce_records(topic, [(0, None, order(i)) for i in range(30)])
    ledger = coordinator.standalone_ledger(group)
    for _ in range(3):
        run_batch(spark, spec, kafka_config, [tp], ledger)
    coordinator.reset_offsets(group, {tp: 5}, actor="test", reason="replay test")
    replay = run_batch(spark, spec, kafka_config, [tp], ledger)  # [5, 15): cuts [0, 10) and [10, 20)
    assert (replay.committed[0].from_offset, replay.committed[0].until_offset) == (5, 15)
    assert replay.partitions[0].replay_changed is False  # the same output for the offsets it re-read
    assert table_offsets(spec) == [(0, i) for i in range(30)] == duckdb_offsets(spec)
    run_batch(spark, spec, kafka_config, [tp], ledger)  # [15, 25)
    assert table_offsets(spec) == [(0, i) for i in range(30)]


@FORMATS
def test_the_table_gains_a_new_nullable_field(
    table_format, spark, kafka_config, topic_factory, produce_records, ledger, lake
) -> None:
    import json

    import pyspark.sql.types as T

    topic = topic_factory(1)
    tp = TopicPartition(topic, 0)
    spec = spec_for(lake, table_format)
    produce_records(topic, [(0, None, order(i)) for i in range(5)])
    run_batch(spark, spec, kafka_config, [tp], ledger)
    wider = dataclasses.replace(
        spec, value_schema=T.StructType([*ORDER_SCHEMA.fields, T.StructField("country", T.StringType())])
    )
    produce_records(
        topic,
        [
            (0, None, json.dumps({"id": 100 + i, "user": "u", "amount": 1.0, "country": "FR"}).encode())
            for i in range(3)
        ],
    )
    run_batch(spark, wider, kafka_config, [tp], ledger)
    rows = table_arrow(spec)
    assert rows is not None and rows.num_rows == 8
    assert sorted(rows.column("country").to_pylist(), key=str) == ["FR", "FR", "FR", None, None, None, None, None]


def test_table_sink_settings_are_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def spec(**kwargs: Any) -> PipelineSpec:
        return PipelineSpec(sink_path=str(tmp_path / "orders"), value_format="utf8", **kwargs)

    with pytest.raises(ValueError, match="table_format must be one of parquet, delta, iceberg"):
        spec(table_format="hudi")
    with pytest.raises(ValueError, match=r"namespace\.table"):
        spec(table_format="iceberg", iceberg_table="a.b.c")
    with pytest.raises(ValueError, match="needs iceberg_catalog"):
        PipelineSpec(sink_path="s3://bucket/orders", value_format="utf8", table_format="iceberg")
    made = spec(table_format="iceberg", iceberg_catalog="postgresql+psycopg://u:secret@h/db")
    assert "secret" not in repr(made) and made.iceberg_identifiers == ("cohort.orders", "cohort.orders_quarantine")
    with pytest.raises(ValueError, match="not both"):
        spec(table_format="iceberg", iceberg_catalog="sqlite://", iceberg_catalog_env="X")
    from_env = spec(table_format="iceberg", iceberg_catalog_env="COHORT_TEST_CATALOG_URL")
    with pytest.raises(ValueError, match=r"'COHORT_TEST_CATALOG_URL' .* is not set"):
        from_env.iceberg_catalog_url  # noqa: B018
    monkeypatch.setenv("COHORT_TEST_CATALOG_URL", "postgresql+psycopg://u:secret@h/db")
    assert from_env.iceberg_catalog_url.endswith("@h/db") and "secret" not in repr(from_env)


@FORMATS
def test_a_restart_mid_commit_duplicates_nothing(
    table_format, monkeypatch, spark, kafka_config, topic_factory, produce_records, ledger, lake
) -> None:
    """apache/iceberg#17340: a task restarted mid-commit appended its files again. Here the sink table's commit
    lands but its answer is lost (the store raises after its commit): the batch keeps the files it committed and
    fails; the restarted run adopts the commit instead of writing the offsets a second time."""
    topic = topic_factory(2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    spec = spec_for(lake, table_format)
    produce_records(topic, records(0, 30))

    def lost_answer(_: TableCommit) -> None:
        raise ConnectionResetError("the catalog's answer was lost")

    hook(monkeypatch, sink={"after": lost_answer})
    with pytest.raises(ConnectionResetError):
        run_batch(spark, spec, kafka_config, tps, ledger, run_id="restarted")
    monkeypatch.undo()
    assert table_offsets(spec) == expected(30)[0]  # its files stayed: they are the committed table's
    for _ in range(2):  # the restart, then a batch with nothing new
        run_batch(spark, spec, kafka_config, tps, ledger, run_id="restarted")
    sink, bad = expected(30)
    assert table_offsets(spec) == sink == duckdb_offsets(spec) and table_offsets(spec, quarantine=True) == bad
    assert ledger.committed_offsets(tps) == {tps[0]: 15, tps[1]: 15}


@FORMATS
def test_a_transform_lands_through_spark_into_the_table(
    table_format, spark, kafka_config, topic_factory, produce_records, ledger, lake
) -> None:
    """With a transform, Spark writes the staged files (not the reading tasks): timestamps as microseconds, the
    columns the transform made; the table takes them the same way."""
    from pyspark.sql import functions as F

    topic = topic_factory(2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    spec = spec_for(lake, table_format, transform=lambda frame: frame.withColumn("cents", F.col("amount") * 100))
    produce_records(topic, records(0, 30))
    run_batch(spark, spec, kafka_config, tps, ledger)
    produce_records(topic, records(30, 10))
    run_batch(spark, spec, kafka_config, tps, ledger)
    sink, bad = expected(40)
    assert table_offsets(spec) == sink == duckdb_offsets(spec) and table_offsets(spec, quarantine=True) == bad
    rows = table_arrow(spec)
    assert rows is not None and "cents" in rows.column_names
    assert str(rows.schema.field("kafka").type.field("timestamp").type).startswith("timestamp[us")


@FORMATS
def test_a_strict_replay_whose_output_changed_commits_nothing(
    table_format, spark, kafka_config, topic_factory, produce_records, coordinator: Coordinator, group, lake
) -> None:
    from pyspark.sql import functions as F

    from cohort.pipelines.replay.check import ReplayChangedError

    topic = topic_factory(1)
    tp = TopicPartition(topic, 0)
    spec = spec_for(lake, table_format, transform=lambda frame: frame.withColumn("cents", F.col("amount") * 100))
    produce_records(topic, [(0, None, order(i)) for i in range(10)])
    ledger = coordinator.standalone_ledger(group)
    run_batch(spark, spec, kafka_config, [tp], ledger)
    coordinator.reset_offsets(group, {tp: 0}, actor="test", reason="replay test")
    changed = dataclasses.replace(
        spec, strict_replay=True, transform=lambda frame: frame.withColumn("cents", F.col("amount") * 1000)
    )
    with pytest.raises(ReplayChangedError, match=r"\[0, 10\)"):
        run_batch(spark, changed, kafka_config, [tp], ledger)
    rows = table_arrow(spec)
    assert rows is not None and sorted(rows.column("cents").to_pylist()) == [100.0 * (i % 100) for i in range(10)]
    assert coordinator.fetch_offsets(group, [tp]) == {tp: 0}
    loose = run_batch(spark, dataclasses.replace(changed, strict_replay=False), kafka_config, [tp], ledger)
    assert loose.partitions[0].replay_changed is True and loose.committed[0].note == "replay of [0, 10): output changed"
    assert table_offsets(spec) == [(0, i) for i in range(10)]


def test_an_iceberg_sink_with_a_postgresql_catalog_from_the_environment(
    monkeypatch, spark, kafka_config, topic_factory, produce_records, ledger, lake, pg_url, capfd
) -> None:
    """The catalog several hosts share: PostgreSQL, its URL (with a password) only in an environment variable."""
    monkeypatch.setenv("COHORT_TEST_ICEBERG_CATALOG", pg_url)
    topic = topic_factory(2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    spec = PipelineSpec(
        sink_path=str(lake / "orders"),
        table_format="iceberg",
        iceberg_catalog_env="COHORT_TEST_ICEBERG_CATALOG",
        iceberg_table="lake.orders",
        value_schema=ORDER_SCHEMA,
        model=Order,
    )
    produce_records(topic, records(0, 30))
    run_batch(spark, spec, kafka_config, tps, ledger)
    produce_records(topic, records(30, 10))
    run_batch(spark, spec, kafka_config, tps, ledger)
    sink, bad = expected(40)
    assert table_offsets(spec) == sink and table_offsets(spec, quarantine=True) == bad
    assert not (lake / "orders" / "_catalog.sqlite").exists()
    import sqlalchemy as sa

    with sa.create_engine(pg_url).connect() as conn:
        names = {r[0] for r in conn.execute(sa.text("SELECT table_name FROM iceberg_tables"))}
    assert names == {"orders", "orders_quarantine"}
    password = sa.engine.make_url(pg_url).password
    assert not password or password not in capfd.readouterr().out
