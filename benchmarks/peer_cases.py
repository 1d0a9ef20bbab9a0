"""The cases of benchmarks/peers.py: Spark's own Kafka source (a batch read, Structured Streaming with
`availableNow`) and Cohort's batch, each landing the same offsets of a topic as Parquet, timed with the CPU of the
whole process tree (this process, its Spark JVM and the JVM's Python workers).

A case is a `Case` (what it does, to which output); `land` runs it once on a session and returns a `Landing`. The
peers decode with Spark's own functions (`from_json`, `from_avro` after the 5-byte Confluent header) and drop the
records that do not decode (the malformed ones), as a user of the source would; they validate nothing. Cohort's
cases go through `run_batch` with the benchmark's pandera model, the quarantine, the digests, the ledger (SQLite)
and the Kafka mirror.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from benchmarks.pipeline import _tree_cpu_s
from cohort.common.types import TopicPartition
from cohort.pipelines import PipelineSpec, run_batch
from cohort.pipelines.sink.tree import DUCKDB_GLOB

__all__ = ["Case", "Landing", "Topic", "batch_source", "decoded", "land", "light", "light_arrow", "settle"]

SPARK_BATCH, SPARK_STREAM, COHORT = "spark-batch", "spark-stream", "cohort"


def light(frame: DataFrame) -> DataFrame:
    """The benchmark's light Spark transform: a derived amount and a lower-cased string (two `withColumn`)."""
    return frame.withColumn("amount_cents", (F.col("amount") * 100).cast("long")).withColumn(
        "user_lc", F.lower(F.col("user"))
    )


def light_arrow(rows: pa.Table) -> pa.Table:
    """`light` as an Arrow transform, computed by Cohort's reading tasks."""
    cents = pc.cast(pc.trunc(pc.multiply(rows.column("amount"), 100)), pa.int64())
    return rows.append_column("amount_cents", cents).append_column("user_lc", pc.utf8_lower(rows.column("user")))


@dataclass(frozen=True)
class Topic:
    """A topic the cases land: its name, format, partitions' end offsets and how many rows a landing holds."""

    name: str
    fmt: str
    """`json` or `avro` (Confluent-framed, the schema in `avro_schema`)."""
    ends: Mapping[int, int]
    rows: int
    """Valid records: every landing of the topic holds exactly these rows."""
    spec: PipelineSpec
    """Cohort's spec for it, its sink path to be replaced per landing."""
    spark_schema: Any
    avro_schema: str | None = None

    @property
    def records(self) -> int:
        return sum(self.ends.values())


@dataclass(frozen=True)
class Case:
    """One way of landing a topic: `kind` (SPARK_BATCH, SPARK_STREAM, COHORT) and the transform, if any
    (`transform`: a Spark one, `arrow`: Cohort's Arrow transform)."""

    name: str
    kind: str
    transform: bool = False
    arrow: bool = False

    @property
    def transformed(self) -> bool:
        return self.transform or self.arrow


@dataclass(frozen=True)
class Landing:
    """One run of a case: wall and CPU seconds, the output's root, and Cohort's batch result (None for the peers)."""

    case: str
    seconds: float
    cpu: float
    load: float
    root: str
    stage_seconds: Mapping[str, float]

    @property
    def glob(self) -> str:
        """The output's Parquet files for DuckDB."""
        if self.case.startswith(COHORT):
            return f"{self.root}/{DUCKDB_GLOB}"
        return f"{self.root}/*.parquet"

    @property
    def offset_columns(self) -> tuple[str, str]:
        """How the output names a row's partition and offset."""
        if self.case.startswith(COHORT):
            return "kafka.partition", 'kafka."offset"'
        return "partition", '"offset"'


def decoded(frame: DataFrame, topic: Topic) -> DataFrame:
    """The source's rows decoded into the topic's columns with Spark's functions, beside partition and offset;
    values that do not decode are dropped."""
    value: Column
    if topic.fmt == "json":
        value = F.from_json(F.col("value").cast("string"), topic.spark_schema)
    else:
        from pyspark.sql.avro.functions import from_avro

        value = from_avro(F.expr("substring(value, 6)"), topic.avro_schema or "", {"mode": "PERMISSIVE"})
    parsed = frame.select("partition", "offset", value.alias("v"))
    return parsed.where(F.col("v.id").isNotNull()).select("partition", "offset", "v.*")


def _source_options(bootstrap: str, topic: Topic) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": bootstrap,
        "assign": json.dumps({topic.name: sorted(topic.ends)}),
        "kafka.isolation.level": "read_committed",
    }


def batch_source(spark: Any, bootstrap: str, topic: Topic) -> DataFrame:
    """Spark's Kafka source over exactly the planned offsets: every partition from 0 to its end, read_committed."""
    ending = {topic.name: {str(p): end for p, end in topic.ends.items()}}
    starting = {topic.name: {str(p): 0 for p in topic.ends}}
    return (
        spark.read.format("kafka")
        .options(**_source_options(bootstrap, topic))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .load()
    )


def spark_batch(spark: Any, bootstrap: str, topic: Topic, case: Case, out: str) -> None:
    """Case (a): a batch read of exactly the planned offsets, decoded, (transformed,) written by Spark."""
    rows = decoded(batch_source(spark, bootstrap, topic), topic)
    (light(rows) if case.transform else rows).write.mode("errorifexists").parquet(out)


def spark_stream(spark: Any, bootstrap: str, topic: Topic, case: Case, out: str) -> None:
    """Case (b): Structured Streaming, `trigger(availableNow=True)`, a checkpoint beside the output: the first run
    reads the backlog, a later one on the same checkpoint what came since."""
    frame = spark.readStream.format("kafka").options(**_source_options(bootstrap, topic))
    rows = decoded(frame.option("startingOffsets", "earliest").load(), topic)
    query = (
        (light(rows) if case.transform else rows)
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", f"{out}.checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise SystemExit(f"{case.name}: the streaming query failed: {query.exception()}")


@dataclass
class CohortRun:
    """What Cohort's cases need beside the session: the Kafka config, a coordinator and a mirror."""

    config: Mapping[str, Any]
    coordinator: Any
    mirror: Any


def cohort_batch(spark: Any, run: CohortRun, topic: Topic, case: Case, out: str, group: str) -> Mapping[str, float]:
    """Cases (c), (d), (f): Cohort's `run_batch` over every partition into the sink `out`, in `group`'s ledger
    (a new group reads from the start; the same group again reads what came since). Returns its stage seconds."""
    spec = dataclasses.replace(
        topic.spec,
        sink_path=out,
        transform=light if case.transform else None,
        arrow_transform=light_arrow if case.arrow else None,
    )
    ledger = run.coordinator.standalone_ledger(group)
    partitions = [TopicPartition(topic.name, p) for p in sorted(topic.ends)]
    result = run_batch(spark, spec, run.config, partitions, ledger, group=group, mirror=run.mirror)
    if result.mirror_error:
        raise SystemExit(f"{case.name}: the Kafka mirror failed: {result.mirror_error}")
    return dict(result.stage_seconds)


def settle(spark: Any, quiet_share: float = 0.1, most_s: float = 15.0) -> None:
    """Collect the JVM's garbage and wait (at most `most_s`) until this process tree uses under `quiet_share` of a
    core: what the previous case left running (the JIT compiling what it just ran, a collection) is not billed to
    the next."""
    spark.sparkContext._jvm.java.lang.System.gc()
    deadline = time.monotonic() + most_s
    before = _tree_cpu_s(os.getpid())
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = _tree_cpu_s(os.getpid())
        if now - before < quiet_share * 0.5:
            return
        before = now


def land(
    spark: Any,
    bootstrap: str,
    cohort: CohortRun,
    topic: Topic,
    case: Case,
    out: str,
    group: str,
) -> Landing:
    """Run `case` once into `out`, timed: wall seconds and the CPU seconds of this process's tree."""
    runner: Callable[[], Mapping[str, float] | None]
    if case.kind == SPARK_BATCH:
        runner = lambda: spark_batch(spark, bootstrap, topic, case, out)  # noqa: E731
    elif case.kind == SPARK_STREAM:
        runner = lambda: spark_stream(spark, bootstrap, topic, case, out)  # noqa: E731
    else:
        runner = lambda: cohort_batch(spark, cohort, topic, case, out, group)  # noqa: E731
    settle(spark)
    load = os.getloadavg()[0]
    cpu = _tree_cpu_s(os.getpid())
    started = time.perf_counter()
    stages = runner() or {}
    seconds = time.perf_counter() - started
    return Landing(case.name, seconds, _tree_cpu_s(os.getpid()) - cpu, load, out, stages)
