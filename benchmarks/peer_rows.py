"""What benchmarks/peers.py checks and breaks down: the rows each case landed (DuckDB over the outputs) and the CPU
per 1M records of the plain path's stages beside the Spark source's."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.peer_cases import SPARK_BATCH, Case, Landing, Topic, batch_source, decoded, spark_batch
from benchmarks.pipeline import _tree_cpu_s

__all__ = ["fingerprints", "stage_breakdown"]

Fingerprint = tuple[int, int, int]
"""(rows, distinct (partition, offset) pairs, the sum of every row's hash): equal for equal sets of rows."""


def fingerprints(landed: Mapping[str, Landing], columns: Mapping[str, Sequence[str]]) -> dict[str, Fingerprint]:
    """Each landing's fingerprint over its partition, offset and `columns[case]`, read by DuckDB from its files."""
    import duckdb

    con = duckdb.connect()
    found: dict[str, Fingerprint] = {}
    for name, landing in landed.items():
        partition, offset = landing.offset_columns
        values = ", ".join(f'"{column}"' for column in columns[name])
        row = con.execute(
            f"SELECT count(*), count(DISTINCT ({partition}, {offset})), "
            f"sum(hash({partition}, {offset}, {values})::HUGEINT) "
            f"FROM read_parquet(?, hive_partitioning = false)",
            [landing.glob],
        ).fetchone()
        assert row is not None
        found[name] = (int(row[0]), int(row[1]), int(row[2] or 0))
    con.close()
    return found


def _cpu_of(job: Any) -> float:
    before = _tree_cpu_s(os.getpid())
    job()
    return _tree_cpu_s(os.getpid()) - before


def stage_breakdown(spark: Any, bootstrap: str, topic: Topic) -> dict[str, dict[str, float]]:
    """CPU s per 1M of the plain path's stages (benchmarks/stages.py, redone in this process) and of the Spark
    source's: `read` (the values' lengths summed: every record fetched), `decode` (read and decode, every value
    column hashed, less the read), `write` (the whole batch read of case (a), less both)."""
    from pyspark.sql import functions as F

    from benchmarks.stages import stage_cpu
    from cohort.pipelines.tasks.spans import OffsetSpan

    per_1m = 1_000_000 / topic.records
    read = _cpu_of(lambda: batch_source(spark, bootstrap, topic).select(F.sum(F.length("value"))).collect())
    columns = [F.col(name) for name in topic.spark_schema.names]
    source = batch_source(spark, bootstrap, topic)
    decode = _cpu_of(lambda: decoded(source, topic).select(F.sum(F.hash(*columns))).collect())
    with tempfile.TemporaryDirectory(prefix="cohort-peers-stages-") as tmp:
        whole = _cpu_of(lambda: spark_batch(spark, bootstrap, topic, Case("stages", SPARK_BATCH), f"{tmp}/out"))
    spark_stages = {"read": read, "decode": max(0.0, decode - read), "write": max(0.0, whole - decode)}
    spans = [OffsetSpan(topic.name, p, 0, end) for p, end in sorted(topic.ends.items())]
    cohort_stages = stage_cpu(topic.spec.with_readers([topic.name]), {"bootstrap.servers": bootstrap}, spans)
    return {
        "spark": {name: round(cpu * per_1m, 2) for name, cpu in spark_stages.items()},
        "cohort": {name: round(cpu * per_1m, 2) for name, cpu in cohort_stages.items()},
    }
