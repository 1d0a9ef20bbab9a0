"""docs/sink.md's recipe for a sink whose schema changed, run as written against a sink of real batches.

Three batches of one group land a topic into one Parquet sink (real broker, the session's Spark, the ledger on
SQLite), each with the value schema of its time: `id int, kind string`; then a new nullable `amount double`;
then `id` widened to `long` (with ids beyond 2**31). After the second and after the third batch, the page's
blocks (the schema, then pyarrow, Spark and DuckDB) run unchanged but for the sink's root, and each reader
returns every row with the newest columns and types. The page's claims about Spark's `mergeSchema` hold
too: it merges the added column and refuses the widened one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyspark.sql.types as T
import pytest

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.protocol.group_state import GroupConfig
from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.spec import PipelineSpec
from tests.support.doc_blocks import replace_all, titled_blocks

READERS = ("the sink's schema", "read with pyarrow", "read with Spark", "read with DuckDB")
DOC_ROOT = "/data/lake/orders"
BIG = 2**40

V1 = T.StructType([T.StructField("id", T.IntegerType()), T.StructField("kind", T.StringType())])
V2 = T.StructType([*V1.fields, T.StructField("amount", T.DoubleType())])
V3 = T.StructType([T.StructField("id", T.LongType()), *V2.fields[1:]])


def _read_as_documented(spark: Any, root: Path) -> dict[str, Any]:
    """Run the page's reading blocks in order, in one namespace (as one script would), on `root`."""
    blocks = titled_blocks("sink.md")
    namespace: dict[str, Any] = {"spark": spark}
    for title in READERS:
        code = blocks[title]
        if title == READERS[0]:  # the block that names the root
            code = replace_all(code, {DOC_ROOT: str(root)}, what=f"docs/sink.md's block {title!r}")
        exec(compile(code, f"docs/sink.md: {title}", "exec"), namespace)
    return namespace


def _rows(namespace: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    """(partition, offset, id, kind, amount) of every row, per reader, sorted."""
    table: pa.Table = namespace["table"]
    kafka = table.column("kafka").combine_chunks()
    by_arrow = list(
        zip(
            table.column("partition").to_pylist(),
            kafka.field("offset").to_pylist(),
            table.column("id").to_pylist(),
            table.column("kind").to_pylist(),
            table.column("amount").to_pylist(),
            strict=True,
        )
    )
    by_spark = [
        (r["partition"], r["kafka"]["offset"], r["id"], r["kind"], r["amount"])
        for r in namespace["frame"].select("partition", "kafka", "id", "kind", "amount").collect()
    ]
    by_duckdb = (
        namespace["relation"].query("rows", 'SELECT "partition", kafka."offset", id, kind, amount FROM rows').fetchall()
    )
    return {"pyarrow": sorted(by_arrow), "spark": sorted(by_spark), "duckdb": sorted(by_duckdb)}


def _types(namespace: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """The type each reader gives id and amount."""
    table: pa.Table = namespace["table"]
    spark_types = dict(namespace["frame"].dtypes)
    duck_types = dict(zip(namespace["relation"].columns, map(str, namespace["relation"].types), strict=True))
    return {
        "pyarrow": (str(table.schema.field("id").type), str(table.schema.field("amount").type)),
        "spark": (spark_types["id"], spark_types["amount"]),
        "duckdb": (duck_types["id"], duck_types["amount"]),
    }


@pytest.mark.timeout(600)
def test_the_documented_readers_read_an_evolved_sink_as_one_dataset(
    spark: Any, kafka_config: dict[str, Any], topic_factory: Any, produce_records: Any, tmp_path: Path
) -> None:
    assert set(READERS) <= set(titled_blocks("sink.md")), "docs/sink.md lost a block of its evolution recipe"
    topic = topic_factory(2, suffix="evolve")
    tps = [TopicPartition(topic, p) for p in range(2)]
    root = tmp_path / "lake"
    coordinator = Coordinator.from_url(f"sqlite:///{tmp_path / 'cohort.db'}", config=GroupConfig())
    ledger = coordinator.standalone_ledger("evolving")
    expected: list[tuple[Any, ...]] = []

    def land(schema: T.StructType, values: list[dict[str, Any]]) -> None:
        """Produce `values` (alternating partitions), land them with `schema`; note what the sink must hold."""
        ends = ledger.committed_offsets(tps)
        produce_records(topic, [(i % 2, None, json.dumps(v).encode()) for i, v in enumerate(values)])
        run_batch(spark, PipelineSpec(sink_path=str(root), value_schema=schema), kafka_config, tps, ledger)
        offsets = {p: ends[tps[p]] or 0 for p in range(2)}
        for i, v in enumerate(values):
            expected.append((i % 2, offsets[i % 2], v["id"], v["kind"], v.get("amount")))
            offsets[i % 2] += 1

    try:
        land(V1, [{"id": i, "kind": "v1"} for i in range(6)])
        land(V2, [{"id": 100 + i, "kind": "v2", "amount": i + 0.5} for i in range(6)])

        # an added nullable column: every reader has it, null in the older rows; mergeSchema merges it
        read = _read_as_documented(spark, root)
        assert _rows(read) == dict.fromkeys(("pyarrow", "spark", "duckdb"), sorted(expected))
        assert _types(read) == {
            "pyarrow": ("int32", "double"),
            "spark": ("int", "double"),
            "duckdb": ("INTEGER", "DOUBLE"),
        }
        merged = spark.read.option("mergeSchema", "true").parquet(str(root))
        assert "amount" in merged.columns and merged.where("amount IS NOT NULL").count() == 6

        land(V3, [{"id": BIG + i, "kind": "v3", "amount": None} for i in range(6)])

        # and an int widened to long: every reader reads the old and the new ids as 64-bit integers
        read = _read_as_documented(spark, root)
        assert _rows(read) == dict.fromkeys(("pyarrow", "spark", "duckdb"), sorted(expected))
        assert _types(read) == {
            "pyarrow": ("int64", "double"),
            "spark": ("bigint", "double"),
            "duckdb": ("BIGINT", "DOUBLE"),
        }
        assert max(row[2] for row in expected) == BIG + 5
        with pytest.raises(Exception, match="CANNOT_MERGE_INCOMPATIBLE_DATA_TYPE"):
            spark.read.option("mergeSchema", "true").parquet(str(root)).collect()
    finally:
        coordinator.close()
