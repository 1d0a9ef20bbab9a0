"""run_batch over Spark Connect: a real Spark Connect server, the embedded broker and the real coordinator (SQLite).

The remote session lives in a client process (the `connect` fixture, tests/fixtures/spark.py); each batch there runs
on a standalone ledger of the test's SQLite store, and is compared with the same batch on the classic `spark`
session: the same plan (file names carry the spans), sink rows, quarantine rows, ledger entries and content digests."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.protocol.group_state import GroupConfig
from cohort.common.types import TopicPartition
from cohort.pipelines.batch.results import BatchResult
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.sink.layout import SinkError
from cohort.pipelines.spark import is_connect, parallelism
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tasks.reader import read_stats_accumulator
from harness.spark_connect import ConnectClient
from harness.tables import duckdb_offsets, table_arrow, table_offsets
from tests.support.orders import ORDER_SCHEMA, Order, order


def spec_for(root: Path | str, **kwargs: Any) -> PipelineSpec:
    return PipelineSpec(sink_path=str(root), value_schema=ORDER_SCHEMA, model=Order, **kwargs)


def add_cents(frame: Any) -> Any:
    """The transform of the Spark-written path (imported in the client process: its `functions` are Connect's)."""
    from pyspark.sql import functions as F

    return frame.withColumn("cents", F.col("amount") * 100)


def batch_over_connect(
    spark: Any,
    spec: PipelineSpec,
    kafka_config: dict[str, Any],
    partitions: Sequence[TopicPartition],
    sqlite_url: str,
    group: str,
) -> BatchResult:
    """In the client process: run_batch on the Spark Connect session and the group's standalone ledger."""
    assert is_connect(spark)
    coordinator = Coordinator.from_url(sqlite_url, config=GroupConfig(initial_rebalance_delay=0.0))
    try:
        return run_batch(spark, spec, kafka_config, partitions, coordinator.standalone_ledger(group))
    finally:
        coordinator.close()


def session_facts(spark: Any) -> tuple[bool, int, int, str]:
    """In the client process: (is_connect, parallelism twice, what an accumulator says over Connect)."""
    try:
        read_stats_accumulator(spark)
        refused = ""
    except TypeError as exc:
        refused = str(exc)
    return is_connect(spark), parallelism(spark), parallelism(spark), refused


def records(first: int, count: int, partitions: int) -> list[tuple[int, bytes, bytes]]:
    """Orders over the partitions in turn: every 7th has an amount the model refuses, every 11th is no JSON."""
    made = []
    for i in range(first, first + count):
        value = b"not json" if i % 11 == 5 else order(i, amount=5000.0) if i % 7 == 3 else order(i)
        made.append((i % partitions, f"k{i}".encode(), value))
    return made


def parquet_rows(root: Path, pattern: str) -> tuple[pa.Schema | None, list[dict[str, Any]]]:
    """The rows of every Parquet file under `root` matching `pattern`, by (partition, offset), and their schema."""
    tables = [pq.read_table(path) for path in sorted(root.glob(pattern))]
    if not tables:
        return None, []
    table = pa.concat_tables(tables)
    rows = sorted(table.to_pylist(), key=lambda r: (r["kafka"]["partition"], r["kafka"]["offset"]))
    return table.schema, rows


def outputs(root: Path) -> dict[str, Any]:
    """Everything a Parquet sink holds: the files (range directories and the span files in them), and the sink and
    quarantine rows with their schemas."""
    sink = "topic=*/partition=*/*.parquet/*.parquet"
    return {
        "files": sorted(str(p.relative_to(root)) for p in root.glob(sink)),
        "quarantine_files": sorted(str(p.relative_to(root)) for p in root.glob(f"_quarantine/{sink}")),
        "sink": parquet_rows(root, sink),
        "quarantine": parquet_rows(root, f"_quarantine/{sink}"),
        "staged": sorted(str(p) for p in root.glob("**/_staging/*/*")),
    }


def ledger(coordinator: Coordinator, group: str, tps: Sequence[TopicPartition]) -> list[tuple[Any, ...]]:
    """The group's ledger entries, without who made them and when."""
    return [
        (e.kind, e.topic, e.partition, e.from_offset, e.until_offset, e.records, e.quarantined, e.content_hash, e.note)
        for tp in tps
        for e in coordinator.ledger_history(group, tp.topic, tp.partition)
    ]


def summary(result: BatchResult) -> list[tuple[Any, ...]]:
    """What a batch reports per partition, without timings."""
    return [
        (
            p.topic,
            p.partition,
            p.from_offset,
            p.until_offset,
            p.records,
            p.quarantined,
            p.bytes,
            p.start,
            p.content_hash,
        )
        for p in result.partitions
    ]


def exactly_once(out: dict[str, Any], produced: dict[int, int]) -> None:
    """Every produced offset is in the sink or the quarantine, once."""
    seen = sorted(
        (row["kafka"]["partition"], row["kafka"]["offset"]) for side in ("sink", "quarantine") for row in out[side][1]
    )
    assert seen == [(p, o) for p in sorted(produced) for o in range(produced[p])]


@pytest.mark.slow
def test_the_session_is_remote_and_its_parallelism_is_the_servers(connect: ConnectClient) -> None:
    remote, first, again, refused = connect.call(session_facts)
    assert remote and first == again == 2  # the server's local[2]
    assert "need a classic SparkSession" in refused


def test_a_batch_over_connect_lands_like_a_classic_batch_and_the_next_one_continues(
    connect: ConnectClient,
    spark: Any,
    kafka_config: dict[str, Any],
    topic_factory: Callable[..., str],
    produce_records: Callable[..., int],
    coordinator: Coordinator,
    sqlite_url: str,
    tmp_path: Path,
) -> None:
    topic = topic_factory(3)
    tps = [TopicPartition(topic, p) for p in range(3)]
    options = {"max_records_per_task": 30, "min_task_records": 1, "consume_batch_size": 16}  # spans of 30
    roots = {"connect": tmp_path / "connect", "classic": tmp_path / "classic"}
    results: dict[str, list[BatchResult]] = {"connect": [], "classic": []}
    seconds: dict[str, float] = {}
    for first, count in ((0, 240), (240, 60)):
        produce_records(topic, records(first, count, 3), one_per_batch=False)
        started = time.perf_counter()
        results["connect"].append(
            connect.call(batch_over_connect, spec_for(roots["connect"], **options), kafka_config, tps, sqlite_url, "c")
        )
        seconds[f"connect-{first}"] = time.perf_counter() - started
        started = time.perf_counter()
        results["classic"].append(
            run_batch(
                spark, spec_for(roots["classic"], **options), kafka_config, tps, coordinator.standalone_ledger("k")
            )
        )
        seconds[f"classic-{first}"] = time.perf_counter() - started
    print(f"batch seconds: {json.dumps({k: round(v, 2) for k, v in seconds.items()})}")

    first_batch, second_batch = results["connect"]
    assert [(p.from_offset, p.until_offset) for p in first_batch.partitions] == [(0, 80)] * 3
    assert [(p.from_offset, p.until_offset) for p in second_batch.partitions] == [(80, 100)] * 3
    bad = sum(1 for i in range(300) if i % 11 == 5 or i % 7 == 3)
    assert first_batch.records + second_batch.records == 300 - bad
    assert first_batch.quarantined + second_batch.quarantined == bad
    assert "read_and_write" in first_batch.stage_seconds  # the tasks wrote the outputs themselves
    for connect_result, classic_result in zip(results["connect"], results["classic"], strict=True):
        assert summary(connect_result) == summary(classic_result)
        assert connect_result.committed == classic_result.committed  # ranges, counts and content digests
        assert all(p.bytes > 0 and p.seconds > 0 for p in connect_result.partitions)
    assert ledger(coordinator, "c", tps) == ledger(coordinator, "k", tps)
    assert coordinator.standalone_ledger("c").committed_offsets(tps) == dict.fromkeys(tps, 100)

    connect_out, classic_out = outputs(roots["connect"]), outputs(roots["classic"])
    assert connect_out == classic_out
    assert len(connect_out["files"]) == 3 * 4  # per partition: spans [0, 30), [30, 60), [60, 80), [80, 100)
    assert connect_out["staged"] == []
    exactly_once(connect_out, dict.fromkeys(range(3), 100))
    reasons = [row["reason"] for row in connect_out["quarantine"][1]]
    assert len(reasons) == bad and all(reasons)


def test_the_transform_path_over_connect_writes_what_the_classic_one_does(
    connect: ConnectClient,
    spark: Any,
    kafka_config: dict[str, Any],
    topic_factory: Callable[..., str],
    produce_records: Callable[..., int],
    coordinator: Coordinator,
    sqlite_url: str,
    tmp_path: Path,
) -> None:
    """With a transform, the tasks write the quarantine and hand the valid rows to Spark, which transforms and
    writes them in the same job (the stats come back with its Observation); twice, each batch with its own
    Observation in the one session."""
    topic = topic_factory(2)
    tps = [TopicPartition(topic, p) for p in range(2)]
    options = {"transform": add_cents, "max_records_per_task": 20, "min_task_records": 1}
    on_connect, on_classic = [], []
    for first, count in ((0, 90), (90, 20)):
        produce_records(topic, records(first, count, 2), one_per_batch=False)
        on_connect.append(
            connect.call(
                batch_over_connect, spec_for(tmp_path / "connect", **options), kafka_config, tps, sqlite_url, "c"
            )
        )
        on_classic.append(
            run_batch(
                spark, spec_for(tmp_path / "classic", **options), kafka_config, tps, coordinator.standalone_ledger("k")
            )
        )

    assert all("read_and_write" in r.stage_seconds and "write" not in r.stage_seconds for r in on_connect)
    assert [(p.from_offset, p.until_offset) for r in on_connect for p in r.partitions] == [(0, 45)] * 2 + [(45, 55)] * 2
    assert list(map(summary, on_connect)) == list(map(summary, on_classic))
    assert [r.committed for r in on_connect] == [r.committed for r in on_classic]
    assert all(p.bytes > 0 and p.seconds > 0 for r in on_connect for p in r.partitions)
    assert ledger(coordinator, "c", tps) == ledger(coordinator, "k", tps)
    connect_out, classic_out = outputs(tmp_path / "connect"), outputs(tmp_path / "classic")
    assert connect_out["sink"] == classic_out["sink"] and connect_out["quarantine"] == classic_out["quarantine"]
    schema = connect_out["sink"][0]
    assert schema is not None and "cents" in schema.names
    assert connect_out["staged"] == []
    exactly_once(connect_out, {0: 55, 1: 55})


def test_a_delta_sink_over_connect(
    connect: ConnectClient,
    spark: Any,
    kafka_config: dict[str, Any],
    topic_factory: Callable[..., str],
    produce_records: Callable[..., int],
    coordinator: Coordinator,
    sqlite_url: str,
    tmp_path: Path,
) -> None:
    topic = topic_factory(2)
    tps = [TopicPartition(topic, p) for p in range(2)]
    spec = spec_for(tmp_path / "connect" / "orders", table_format="delta")
    classic_spec = spec_for(tmp_path / "classic" / "orders", table_format="delta")
    produce_records(topic, records(0, 40, 2), one_per_batch=False)
    first = connect.call(batch_over_connect, spec, kafka_config, tps, sqlite_url, "c")
    classic = run_batch(spark, classic_spec, kafka_config, tps, coordinator.standalone_ledger("k"))
    produce_records(topic, records(40, 30, 2), one_per_batch=False)
    second = connect.call(batch_over_connect, spec, kafka_config, tps, sqlite_url, "c")

    assert first.committed == classic.committed and summary(first) == summary(classic)
    assert [(p.from_offset, p.until_offset) for p in second.partitions] == [(20, 35)] * 2
    sink = table_offsets(spec)
    bad = table_offsets(spec, quarantine=True)
    assert sink == duckdb_offsets(spec) and sorted(sink + bad) == [(p, o) for p in range(2) for o in range(35)]
    assert len(bad) == first.quarantined + second.quarantined > 0
    assert table_arrow(spec) is not None and table_offsets(classic_spec) == [o for o in sink if o[1] < 20]
    assert coordinator.standalone_ledger("c").committed_offsets(tps) == dict.fromkeys(tps, 35)
    assert not list((tmp_path / "connect" / "orders" / "_staging").glob("*/*"))


@pytest.mark.parametrize(
    ("root", "says"),
    [
        ("file:{tmp}/lake", "only Hadoop's FileSystem reaches, through the driver's JVM"),
        ("relative/lake", "is relative: over Spark Connect"),
    ],
)
def test_what_a_connect_client_cannot_do_is_refused_before_any_io(
    connect: ConnectClient, coordinator: Coordinator, sqlite_url: str, tmp_path: Path, root: str, says: str
) -> None:
    """A Hadoop-only root needs the driver's JVM to move files; a relative root means two places. The broker
    named here does not exist: a batch that planned (or read) before refusing would fail otherwise, later."""
    tp = TopicPartition("orders", 0)
    spec = spec_for(root.format(tmp=tmp_path))
    started = time.perf_counter()
    with pytest.raises(SinkError, match=f"cannot run over Spark Connect: the sink root .*{says}") as refused:
        connect.call(batch_over_connect, spec, {"bootstrap.servers": "127.0.0.1:9"}, [tp], sqlite_url, "c")
    assert "\n" not in str(refused.value)
    assert time.perf_counter() - started < 5
    assert coordinator.ledger_history("c", "orders", 0) == []
    assert not (tmp_path / "lake").exists()
