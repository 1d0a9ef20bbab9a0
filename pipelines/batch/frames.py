"""The batch's DataFrames when Spark writes the outputs: checked rows, then sink and quarantine frames.

`checked_frame` is the one frame the batch persists: every consumed record as the reading tasks checked it
(cohort.pipelines.tasks.checked: flat Kafka coordinates, decoded value columns, raw value bytes for failures, failure
reason), and after each span's records the span's stats row (what its task read: cohort.pipelines.tasks.reader). The
sink and quarantine frames gather the coordinates into the public `kafka` struct and leave the stats rows out.
Materializing it, the sink write and the quarantine write all read that persisted frame, so each range is
read from Kafka once.

Nothing here needs a SparkContext or the driver's JVM: the frames work the same with a Spark Connect session.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Observation
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StructField, StructType

from cohort.pipelines.formats.decode import KAFKA_COLUMN, KAFKA_FIELDS, RAW_VALUE_COLUMN, REASON_COLUMN, kafka_column
from cohort.pipelines.spark import parallelism
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tasks.arrow_transform import contract_problem
from cohort.pipelines.tasks.read_stats import (
    READ_STATS_COLUMN,
    WRITER_STATS,
    WRITER_STATS_DDL,
    WRITTEN_COLUMN,
    ReadStats,
    StatsRows,
    gather_read_stats,
)
from cohort.pipelines.tasks.reader import SpanProcessor, read_spans
from cohort.pipelines.tasks.spans import OffsetSpan
from cohort.pipelines.tasks.writer import ArrowStagedWriter
from cohort.pipelines.tasks.written import WrittenSpan

__all__ = [
    "TransformError",
    "checked_frame",
    "materialize",
    "quarantine_frame",
    "sink_frame",
    "with_partition_columns",
    "written_reports",
]


class TransformError(ValueError):
    """The user transform returned a frame the sink cannot attribute to offset ranges."""


_READ_STATS_FIELD = StructField(
    READ_STATS_COLUMN,
    StructType(
        [StructField("records", LongType()), StructField("bytes", LongType()), StructField("seconds", DoubleType())]
    ),
)
"""cohort.pipelines.tasks.read_stats.READ_STATS_COLUMN in the checked rows' Spark schema."""


def checked_frame(
    spark: Any,
    spec: PipelineSpec,
    kafka_config: Mapping[str, Any],
    spans: Sequence[OffsetSpan],
    read_stats: Any = None,
    *,
    writer: ArrowStagedWriter | None = None,
    valid_only: bool = False,
) -> DataFrame:
    """Read `spans`, decode and validate in the reading tasks: one row per consumed record, and after each span's
    records its stats row (`materialize` gathers them; `sink_frame` and `quarantine_frame` leave them out).

    With a `writer`, the tasks write the checked rows to its staging areas themselves and hand Spark only
    what they read and wrote: the frame's rows are each span's report row and its stats row
    (cohort.pipelines.tasks.read_stats.WRITER_STATS; `written_reports` of what `collect()` returns), and computing
    it is the whole batch's reading and writing. A span that held no record (only holes) has no stats row: there
    is nothing to count. `read_stats`, an
    accumulator of `read_stats_accumulator` (classic sessions only), is added to as well.

    With a `writer` and `valid_only`, the tasks write only the quarantine themselves and hand Spark the valid
    checked rows (without their raw values) and the stats rows, for a transform (`stream_transform`).
    """
    checker = spec.checker

    def check(_span: OffsetSpan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for raw in batches:
            yield checker.check(raw)

    process: SpanProcessor = check
    schema: StructType | str = StructType([*checker.spark_schema.fields, _READ_STATS_FIELD])
    stats = StatsRows.after(checker.arrow_schema, kafka_column("topic"), kafka_column("partition"))
    if writer is not None and valid_only:
        passing = writer

        def pass_valid(span: OffsetSpan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            return passing.pass_valid(span, map(checker.check, batches))

        process = pass_valid
    elif writer is not None:
        staged = writer

        def write(span: OffsetSpan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            report = staged.write_span(span, map(checker.check, batches))
            columns: list[pa.Array[Any]] = [
                pa.array([span.topic]),
                pa.array([span.partition], pa.int32()),
                pa.array([report.to_bytes()]),
            ]
            yield pa.RecordBatch.from_arrays(columns, schema=_WRITTEN_ROW)

        process, schema, stats = write, WRITER_STATS_DDL, WRITER_STATS

    return read_spans(
        spark,
        {**kafka_config, **spec.consumer_config},
        spans,
        read_stats=read_stats,
        process=process,
        schema=schema,
        stats_rows=stats,
        tasks=parallelism(spark),
        batch_size=spec.consume_batch_size,
        read_timeout_s=spec.read_timeout_s,
    )


_WRITTEN_ROW = pa.schema([f for f in WRITER_STATS.schema if f.name != READ_STATS_COLUMN])
"""A writing task's report row before the reader adds its (null) stats column."""


def written_reports(rows: Sequence[Any]) -> tuple[ReadStats, list[WrittenSpan]]:
    """What the writing tasks read (their stats rows, gathered) and wrote (their report rows), from the collected
    rows of `checked_frame(writer=...)`."""
    read = gather_read_stats((row["topic"], row["partition"], row[READ_STATS_COLUMN]) for row in rows)
    return read, [WrittenSpan.from_bytes(row[WRITTEN_COLUMN]) for row in rows if row[WRITTEN_COLUMN] is not None]


def kafka_struct() -> Column:
    """The public `kafka` struct from the flat coordinates; the timestamp becomes a Spark timestamp."""
    fields = [
        (F.timestamp_millis(F.col(kafka_column(f))) if f == "timestamp" else F.col(kafka_column(f))).alias(f)
        for f in KAFKA_FIELDS
    ]
    return F.struct(*fields).alias(KAFKA_COLUMN)


def materialize(checked: DataFrame) -> tuple[int, ReadStats]:
    """Compute (and so cache, if persisted) every row of `checked`; returns how many failed, and what the
    reading tasks read (their spans' stats rows, gathered).

    A no-op write of the observed frame: one job with no shuffle, and the failure count and the stats rows come
    back with it (Spark's Observation, counted once per successful task like an accumulator).
    """
    observed, observation = observe_reads(checked)
    observed.write.format("noop").mode("overwrite").save()
    return reads_observed(observation)


def observe_reads(checked: DataFrame) -> tuple[DataFrame, Observation]:
    """`checked` observed: once an action computed it, the observation holds how many rows failed and the stats
    rows (`reads_observed`), whatever the action keeps of the rows after the observation."""
    stats = F.when(
        F.col(READ_STATS_COLUMN).isNotNull(),
        F.struct(F.col(kafka_column("topic")), F.col(kafka_column("partition")), F.col(READ_STATS_COLUMN)),
    )
    observation = Observation("cohort-checked")
    observed = checked.observe(observation, F.count(REASON_COLUMN).alias("failed"), F.collect_list(stats).alias("read"))
    return observed, observation


def reads_observed(observation: Observation) -> tuple[int, ReadStats]:
    """How many rows failed and what the reading tasks read, from an `observe_reads` observation (after its action)."""
    metrics = observation.get
    return int(metrics["failed"]), gather_read_stats(metrics["read"])


def with_partition_columns(frame: DataFrame) -> DataFrame:
    """`frame` with `topic` and `partition` columns from its `kafka` struct, for a write partitioned by them."""
    return frame.withColumn("topic", F.col(f"{KAFKA_COLUMN}.topic")).withColumn(
        "partition", F.col(f"{KAFKA_COLUMN}.partition")
    )


def sink_frame(checked: DataFrame, spec: PipelineSpec, *, partition_columns: bool = True) -> DataFrame:
    """Valid records through the user transform, plus (with `partition_columns`) `topic`/`partition` for a
    Spark write of the staging layout."""
    valid = checked.filter(F.col(REASON_COLUMN).isNull() & F.col(READ_STATS_COLUMN).isNull()).select(
        kafka_struct(), *[F.col(f"`{name}`") for name in spec.checker.output_names]
    )
    if spec.transform is not None:
        valid = spec.transform(valid)
        if not isinstance(valid, DataFrame):
            raise TransformError(f"the transform returned {type(valid).__name__}, not a Spark DataFrame")
        kafka_type = valid.schema[KAFKA_COLUMN].dataType if KAFKA_COLUMN in valid.columns else None
        fields = kafka_type.names if isinstance(kafka_type, StructType) else None
        problem = contract_problem("transform", valid.columns, fields)
        if problem is not None:
            raise TransformError(problem)
    return with_partition_columns(valid) if partition_columns else valid


def quarantine_frame(checked: DataFrame) -> DataFrame:
    """Failed records: `kafka` coordinates, the raw `value` bytes and the `reason` (a stats row has none)."""
    failed = checked.filter(F.col(REASON_COLUMN).isNotNull()).select(
        kafka_struct(), F.col(RAW_VALUE_COLUMN).alias("value"), F.col(REASON_COLUMN).alias("reason")
    )
    return with_partition_columns(failed)
