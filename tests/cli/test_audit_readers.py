"""`cohort audit` (the command in a subprocess) sees what readers of the sink see: after a real batch (broker,
Spark, the SQLite ledger), copies of range directories under names no commit accounts for are read twice by
Spark, pyarrow and DuckDB, and the audit names each one with its path; whatever those readers read is either a
committed range's data file or a named path."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.dataset as ds
from pyspark.sql import functions as F

from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.pipelines import PipelineSpec, run_batch
from cohort.pipelines.sink.layout import range_dir_name
from cohort.pipelines.sink.tree import DUCKDB_GLOB
from tests.support.audit_command import cohort_audit
from tests.support.orders import ORDER_SCHEMA, order


def _read_by_spark(spark: Any, root: Path) -> set[str]:
    files = spark.read.parquet(str(root)).select(F.input_file_name().alias("f")).distinct().collect()
    return {row.f.removeprefix("file://") for row in files}


def _read_by_pyarrow(root: Path) -> set[str]:
    return set(ds.dataset(str(root), format="parquet", partitioning="hive").files)


def _read_by_duckdb(root: Path) -> set[str]:
    query = f"SELECT DISTINCT filename FROM read_parquet('{root}/{DUCKDB_GLOB}', hive_partitioning=true, filename=true)"
    return {name for (name,) in duckdb.sql(query).fetchall()}


def _offsets_by_spark(spark: Any, root: Path) -> list[tuple[int, int]]:
    rows = spark.read.parquet(str(root)).select("kafka.partition", "kafka.offset").collect()
    return sorted((r.partition, r.offset) for r in rows)


def test_the_audit_names_every_copy_readers_read_whatever_its_name(
    spark: Any,
    kafka_config: dict[str, Any],
    topic_factory: Any,
    produce_records: Any,
    coordinator: Coordinator,
    sqlite_url: str,
    group: str,
    lake: Path,
) -> None:
    topic = topic_factory(2, suffix="readers")
    produce_records(topic, [(i % 2, None, order(i) if i != 5 else b"{") for i in range(40)])
    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA)
    tps = [TopicPartition(topic, p) for p in range(2)]
    run_batch(spark, spec, kafka_config, tps, coordinator.standalone_ledger(group))
    args = [group, "--store-url", sqlite_url, "--sink", str(lake)]
    code, report, _ = cohort_audit(*args)
    assert (code, report["ok"]) == (0, True), report
    committed = _offsets_by_spark(spark, lake)
    assert len(committed) == 39
    partition_0, partition_1 = (lake / f"topic={topic}" / f"partition={p}" for p in (0, 1))
    committed_dirs = {str(d) for d in (*partition_0.iterdir(), *partition_1.iterdir())}

    # an operator's copies: beside the range (a "-copy.parquet" name), in the other partition's folder, inside it,
    # and of the quarantine's range
    live = partition_0 / range_dir_name(topic, 0, 0, 20)
    copies = [
        partition_0 / f"{topic}-0-0-20-copy.parquet",
        partition_1 / range_dir_name(topic, 0, 0, 20),
        live / "backup",
    ]
    for copy in copies:
        shutil.copytree(live, copy)
    quarantined = lake / "_quarantine" / f"topic={topic}" / "partition=1" / range_dir_name(topic, 1, 0, 20)
    quarantine_copy = quarantined.parent / f"{topic}-1-0-20.parquet.bak"
    shutil.copytree(quarantined, quarantine_copy)
    seen = _offsets_by_spark(spark, lake)
    assert len(seen) == 39 + 3 * 20 and set(seen) == set(committed)  # partition 0's offsets, read four times

    code, report, _ = cohort_audit(*args)
    assert (code, report["ok"]) == (1, False), report
    named = {
        (p["partition"], x["where"], x["problem"].split(" (")[0], x["repair"])
        for p in report["partitions"]
        for x in p["problems"]
    }
    assert named == {
        (0, "sink", str(copies[0]), None),
        (1, "sink", str(copies[1]), None),
        (0, "sink", str(copies[2]), None),
        (1, "quarantine", str(quarantine_copy), None),
    }
    problems = {x["problem"] for p in report["partitions"] for x in p["problems"]}
    assert any(f"{copies[1]} (" in m and "range directory of partition 0" in m for m in problems), problems
    assert report["elsewhere"] == []

    # what every reader reads is a committed range's file or lies under a named path
    named_paths = [str(c) for c in copies]
    for reader, files in {
        "Spark": _read_by_spark(spark, lake),
        "pyarrow": _read_by_pyarrow(lake),
        "DuckDB": _read_by_duckdb(lake),
    }.items():
        unexplained = {
            f
            for f in files
            if not any(f.startswith(f"{p}/") for p in named_paths) and f.rsplit("/", 1)[0] not in committed_dirs
        }
        assert not unexplained, (reader, unexplained)
        assert any(f.startswith(f"{copies[1]}/") for f in files), reader  # each reader reads a named copy

    for copy in [*copies, quarantine_copy]:
        shutil.rmtree(copy)
    code, report, _ = cohort_audit(*args)
    assert (code, report["ok"]) == (0, True), report
    assert _offsets_by_spark(spark, lake) == committed
