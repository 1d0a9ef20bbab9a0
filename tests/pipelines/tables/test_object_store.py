"""Delta Lake and Iceberg sinks on an S3 API (harness.s3_server, the keys and endpoint from the AWS environment
variables, as a deployment sets them): batches land once, a commit the ledger never saw is adopted and a
quarantine commit whose sink commit never landed is rolled back, as on a local disk (test_sinks.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.spec import PipelineSpec
from harness.tables import duckdb_offsets, table_offsets
from tests.fixtures.s3 import S3Bucket
from tests.support.orders import ORDER_SCHEMA, Order
from tests.support.table_batches import Died, die, expected, hook, records

FORMATS = pytest.mark.parametrize("table_format", ["delta", "iceberg"])


def s3_spec(bucket: S3Bucket, table_format: str, tmp_path: Path, **kwargs: Any) -> PipelineSpec:
    """The orders spec with its tables under the bucket (Iceberg: a SQLite catalog on the local disk)."""
    if table_format == "iceberg":
        kwargs.setdefault("iceberg_catalog", f"sqlite:///{tmp_path / 'catalog.sqlite'}")
    return PipelineSpec(
        sink_path=f"{bucket.root}/orders",
        table_format=table_format,
        value_schema=ORDER_SCHEMA,
        model=Order,
        **kwargs,
    )


@FORMATS
def test_batches_land_on_s3_once(
    table_format, s3_env, tmp_path, spark, kafka_config, topic_factory, produce_records, ledger
) -> None:
    topic = topic_factory(2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    spec = s3_spec(s3_env, table_format, tmp_path)
    produce_records(topic, records(0, 40))
    first = run_batch(spark, spec, kafka_config, tps, ledger)
    produce_records(topic, records(40, 30))
    second = run_batch(spark, spec, kafka_config, tps, ledger)
    sink, bad = expected(70)
    assert table_offsets(spec) == sink == duckdb_offsets(spec)
    assert table_offsets(spec, quarantine=True) == bad
    assert first.records + second.records == len(sink)
    assert ledger.committed_offsets(tps) == {tps[0]: 35, tps[1]: 35}
    keys = s3_env.object_keys("lake/orders/")
    assert any(k.startswith("lake/orders/data/topic=") and k.endswith(".parquet") for k in keys)
    assert not [k for k in keys if "/_staging/" in k and not k.endswith("/")]  # nothing staged is left


@FORMATS
def test_on_s3_a_commit_the_ledger_never_saw_is_adopted(
    table_format, monkeypatch, s3_env, tmp_path, spark, kafka_config, topic_factory, produce_records, ledger
) -> None:
    topic = topic_factory(2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    spec = s3_spec(s3_env, table_format, tmp_path)
    produce_records(topic, records(0, 30))
    hook(monkeypatch, sink={"after": die})
    with pytest.raises(Died):
        run_batch(spark, spec, kafka_config, tps, ledger, run_id="died-after-table")
    assert table_offsets(spec) == expected(30)[0]
    monkeypatch.undo()
    for name, value in s3_env.server.environ().items():  # undo() took the AWS variables too
        monkeypatch.setenv(name, value)
    produce_records(topic, records(30, 10))
    run_batch(spark, spec, kafka_config, tps, ledger, run_id="next")
    sink, bad = expected(40)
    assert table_offsets(spec) == sink and table_offsets(spec, quarantine=True) == bad
    history = ledger.coordinator.run_ledger_history(ledger.group, "died-after-table")
    assert all(e.note == "adopted from the sink table" for e in history) and len(history) == 2


@FORMATS
def test_on_s3_the_tasks_write_the_tables_files_straight_into_place(
    table_format, monkeypatch, s3_env, tmp_path, spark, kafka_config, topic_factory, produce_records, ledger
) -> None:
    """Nothing is staged and copied on an object store: at the sink table's commit every file already sits in its
    data directory; a batch that dies there deletes its uncommitted files, and the next one lands every record once."""
    topic = topic_factory(2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    spec = s3_spec(s3_env, table_format, tmp_path)
    produce_records(topic, records(0, 30))
    seen: list[str] = []

    def look_then_die(change: Any) -> None:
        seen.extend(s3_env.object_keys("lake/orders"))
        die(change)

    hook(monkeypatch, sink={"before": look_then_die})
    with pytest.raises(Died):
        run_batch(spark, spec, kafka_config, tps, ledger, run_id="died-before-sink")
    placed = [k for k in seen if "/data/topic=" in k and k.endswith(".parquet")]
    assert len(placed) >= 2 and all("/partition=" in k for k in placed)  # both partitions' sink files, in place
    assert not [k for k in seen if "/_staging/" in k and not k.endswith("/")]  # nothing went through staging
    left = s3_env.object_keys("lake/orders")
    sink_files = [k for k in placed if not k.startswith("lake/orders/_quarantine")]
    assert sink_files and not set(sink_files) & set(left)  # the failed batch deleted its uncommitted files
    monkeypatch.undo()
    for name, value in s3_env.server.environ().items():  # undo() took the AWS variables too
        monkeypatch.setenv(name, value)
    run_batch(spark, spec, kafka_config, tps, ledger, run_id="next")
    sink, bad = expected(30)
    assert table_offsets(spec) == sink == duckdb_offsets(spec)
    assert table_offsets(spec, quarantine=True) == bad
