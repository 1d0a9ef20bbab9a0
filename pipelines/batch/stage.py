"""Staging a batch's output: the reading tasks' Spark job (or Spark's writes), the staged files digested and
counted (in the digest's read, else from their footers), the counts checked and the quarantine's limit applied
(cohort.pipelines.batch.run's steps)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyspark import StorageLevel

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.executor_errors import executor_errors_named
from cohort.pipelines.batch.frames import (
    checked_frame,
    materialize,
    observe_reads,
    quarantine_frame,
    reads_observed,
    sink_frame,
    with_partition_columns,
    written_reports,
)
from cohort.pipelines.batch.results import CountMismatchError
from cohort.pipelines.batch.sink import BatchSink
from cohort.pipelines.planning.plan import BatchPlan
from cohort.pipelines.replay.check import OutputCheck, check_outputs
from cohort.pipelines.sink.counts import OutputShape, StagedCounts, account
from cohort.pipelines.sink.layout import HadoopFs, SinkError, SinkFs, SinkLayout, StagedDirs
from cohort.pipelines.sink.quarantine_limit import refuse_over_limit
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tasks.read_stats import ReadStats
from cohort.pipelines.tasks.transformed_writer import WRITTEN_DDL, TransformedWriter, arrow_writable
from cohort.pipelines.tasks.writer import ArrowFs, ArrowStagedWriter, arrow_compression, arrow_filesystem
from cohort.pipelines.tasks.written import StagedFile, WrittenSpan

Stats = Mapping[TopicPartition, tuple[int, int, float]]
"""Per partition: records and key + value bytes consumed, and the reading tasks' seconds."""

_UNCOMPRESSED_CACHE = {"spark.sql.inMemoryColumnarStorage.compressed": "false"}
"""The batch's cache lives for seconds and is read twice: compressing it costs more CPU than it saves."""


@contextmanager
def _session_conf(spark: Any, settings: Mapping[str, str]) -> Iterator[None]:
    """Set SQL settings for the duration of the block, restoring the session's own values after."""
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


@contextmanager
def timed(stages: dict[str, float], name: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        stages[name] = stages.get(name, 0.0) + time.perf_counter() - started


def stats_of(read: ReadStats) -> Stats:
    return {TopicPartition(topic, partition): figures for (topic, partition), figures in read.items()}


def _unsorted_writes(writers: int) -> dict[str, str]:
    """Settings of a staged write whose tasks hold at most `writers` (topic, partition) directories each: with
    that many concurrent writers per task Spark writes them as rows come instead of sorting every row by
    directory first. Timestamps as INT64 microseconds, the type the tasks' own writer and the table formats use
    (not Spark's legacy INT96)."""
    return {
        "spark.sql.maxConcurrentOutputFileWriters": str(writers),
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    }


_ROWS_TO_ARROW = {"spark.sql.execution.arrow.maxBytesPerBatch": str(2**31 - 1)}
"""Batches of rows for Python bounded by their count only (maxRecordsPerBatch): under a byte limit Spark measures
the batch after every row, and a row with a list (the `kafka` headers) makes that measure walk the whole batch."""

_MAX_WRITERS = 64
"""At most this many open Parquet writers per write task (each buffers a row group); past it Spark sorts."""


def _write_staged(spark: Any, frame: Any, root: str, compression: str, *, writers: int = 4) -> None:
    """Write `frame` under `root`, partitioned by topic and partition."""
    with _session_conf(spark, _unsorted_writes(writers)):
        frame.write.partitionBy("topic", "partition").option("compression", compression).parquet(root)


def _verify(
    plan: BatchPlan,
    stats: Stats,
    written: Mapping[TopicPartition, int],
    quarantined: Mapping[TopicPartition, int],
    shapes: Mapping[TopicPartition, OutputShape] | None = None,
) -> dict[TopicPartition, StagedCounts]:
    """Each range's counts (cohort.pipelines.sink.counts): consumed == written + quarantined, or with a transform
    (`shapes`: its rows by offset) written rows for valid records of the range only; else CountMismatchError
    naming each range."""
    problems = []
    counts: dict[TopicPartition, StagedCounts] = {}
    for p in plan.to_read:
        consumed = stats.get(p.tp, (0, 0, 0.0))[0]
        w, q = written.get(p.tp, 0), quarantined.get(p.tp, 0)
        shape = shapes.get(p.tp, OutputShape(0, 0)) if shapes is not None else None
        counted = account(consumed=consumed, quarantined=q, rows=w, shape=shape, bounds=(p.from_offset, p.until_offset))
        if isinstance(counted, str):
            problems.append(f"{p.tp} [{p.from_offset}, {p.until_offset}): {counted}")
        else:
            counts[p.tp] = counted
        if consumed > p.length:
            problems.append(f"{p.tp} [{p.from_offset}, {p.until_offset}): {consumed} records for {p.length} offsets")
    unplanned = sorted(set(stats) - {p.tp for p in plan.to_read})
    if unplanned:
        problems.append(f"records of partitions outside the plan: {unplanned}")
    if problems:
        raise CountMismatchError("record counts do not add up, nothing was committed: " + "; ".join(problems))
    return counts


@dataclass(frozen=True)
class Staged:
    """A batch's staged output: what was consumed (`stats`), each range's counts and check, and the files the reading
    tasks reported by directory (`files`: empty where Spark wrote, or nothing was read)."""

    stats: Stats
    counts: dict[TopicPartition, StagedCounts]
    checks: dict[TopicPartition, OutputCheck]
    files: Mapping[str, tuple[StagedFile, ...]] = field(default_factory=dict)


NOTHING = StagedCounts(0, 0)
"""The counts of a range nothing was read for (a gap, an empty range)."""


def stage_outputs(
    spark: Any,
    spec: PipelineSpec,
    kafka_config: Mapping[str, Any],
    plan: BatchPlan,
    output: BatchSink,
    attempt: str,
    stages: dict[str, float],
) -> Staged:
    """Read, decode and validate the plan's spans once, write both outputs where the `output` sink has the attempt
    write them (its staging, or where it places them when the reading tasks write both), digest each range's
    staged output against what the sink holds (its `held`: cohort.pipelines.replay.check), count
    the staged outputs' rows in the digest's read (`_staged_rows`; with a transform, its rows by offset too), check
    the counts and the quarantine limit (`Staged`: what was consumed, counted, checked and written). Where the
    reading tasks write, their reports of what they wrote (cohort.pipelines.tasks.written) stand in for reading a
    range's files back."""
    layouts = output.staging(plan, tasks_write=_tasks_write_everything(spec, attempt))
    held, fs = output.held(plan, layouts), output.fs
    if not plan.spans:
        with timed(stages, "verify"):
            return Staged({}, {}, check_outputs(fs, *held, attempt, plan))
    sink, quarantine = layouts
    tasks_write = _tasks_can_write(spec.compression, sink, quarantine, attempt)
    reports: list[WrittenSpan] = []
    if tasks_write and spec.transform is not None:
        writer = ArrowStagedWriter(sink, quarantine, attempt, spec.compression, spec.checker)
        # one job: the tasks write the quarantine and hand the JVM the valid rows, as Arrow, to transform
        with timed(stages, "read_and_write"), executor_errors_named(spark):
            stats = _stream_transform(spark, spec, kafka_config, plan, writer, sink.staging_root(attempt))
    elif tasks_write:
        writer = ArrowStagedWriter(sink, quarantine, attempt, spec.compression, spec.checker, spec.arrow_transform)
        # one job, no record crosses into the JVM: only each span's stats and what its task wrote
        with timed(stages, "read_and_write"), executor_errors_named(spark):
            read, reports = written_reports(
                checked_frame(spark, spec, kafka_config, plan.spans, writer=writer).collect()
            )
        stats = stats_of(read)
    elif spec.arrow_transform is not None:
        raise SinkError(
            f"an arrow_transform runs in the reading tasks, which write with pyarrow: the compression "
            f"{spec.compression!r} or a root pyarrow cannot reach ({spec.sink_path}, {spec.quarantine_root}) needs "
            "Spark's writer; use a codec and roots pyarrow writes, or a Spark transform"
        )
    else:
        stats = _read_then_write(spark, spec, kafka_config, plan, sink, quarantine, attempt, stages)
    with timed(stages, "verify"):
        checks = check_outputs(fs, *held, attempt, plan, _whole_ranges(plan, reports))
        written, quarantined = _staged_rows(fs, sink, quarantine, attempt, plan, checks)
        shapes = None
        if spec.reshapes:
            shapes = {p.tp: _shape(fs, checks.get(p.tp), sink.staged_range_dir(attempt, *p.tp)) for p in plan.to_read}
        counts = _verify(plan, stats, written, quarantined, shapes)
    shares = {tp: (c.quarantined, stats.get(tp, (0, 0, 0.0))[0]) for tp, c in counts.items()}
    refuse_over_limit(spark, spec.quarantine_rule, shares, lambda tp: quarantine.staged_range_dir(attempt, *tp))
    return Staged(stats, counts, checks, _by_directory(reports))


def _whole_ranges(plan: BatchPlan, reports: Iterable[WrittenSpan]) -> dict[TopicPartition, WrittenSpan]:
    """The reports that describe a whole planned range (its one span), by partition: their digests and counts need
    no read-back of the range's files (cohort.pipelines.replay.check)."""
    by_tp: dict[TopicPartition, list[WrittenSpan]] = {}
    for report in reports:
        by_tp.setdefault(TopicPartition(report.topic, report.partition), []).append(report)
    whole = {}
    for p in plan.to_read:
        found = by_tp.get(p.tp, [])
        if len(found) == 1 and (found[0].from_offset, found[0].until_offset) == (p.from_offset, p.until_offset):
            whole[p.tp] = found[0]
    return whole


def _by_directory(reports: Iterable[WrittenSpan]) -> dict[str, tuple[StagedFile, ...]]:
    """The files the tasks reported, by the directory they wrote them into."""
    found: dict[str, list[StagedFile]] = {}
    for report in reports:
        for file in (report.sink, report.quarantine):
            if file is not None:
                found.setdefault(file.directory, []).append(file)
    return {directory: tuple(sorted(files, key=lambda f: f.name)) for directory, files in found.items()}


def _staged_rows(
    fs: SinkFs,
    sink: StagedDirs,
    quarantine: StagedDirs,
    attempt: str,
    plan: BatchPlan,
    checks: Mapping[TopicPartition, OutputCheck],
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Each range's staged (sink, quarantine) rows, counted from the staged files: in the digest's read of them
    when there was one (its rows, not its footers: the same figure, without reading every footer again, which on an
    object store is round trips per file), else from their footers."""
    written: dict[TopicPartition, int] = {}
    quarantined: dict[TopicPartition, int] = {}
    for p in plan.to_read:
        check = checks.get(p.tp)
        if check is not None and check.staged_rows is not None:
            written[p.tp], quarantined[p.tp] = check.staged_rows
        else:
            written[p.tp] = fs.parquet_record_count(sink.staged_range_dir(attempt, *p.tp))
            quarantined[p.tp] = fs.parquet_record_count(quarantine.staged_range_dir(attempt, *p.tp))
    return written, quarantined


def _shape(fs: SinkFs, check: OutputCheck | None, staged: str) -> OutputShape:
    """A range's staged sink rows by offset: from its digest's read when there was one, else read back."""
    return check.shape if check is not None and check.shape is not None else fs.offset_shape(staged)


def sink_file_system(spark: Any, sink: SinkLayout, quarantine: SinkLayout) -> SinkFs:
    """pyarrow for the sink's renames and footer counts when it reaches both roots, else Hadoop's FileSystem
    through the driver's JVM (any scheme Spark can write)."""
    if all(arrow_filesystem(layout.root) is not None for layout in (sink, quarantine)):
        return ArrowFs()
    return HadoopFs(spark)


def _tasks_write_everything(spec: PipelineSpec, attempt: str) -> bool:
    """Whether the reading tasks write both outputs themselves (no Spark transform, and pyarrow writes the codec and
    both roots): the batch's files are then all reported by their writers, and may go where a sink places them."""
    layouts = SinkLayout(spec.sink_path), SinkLayout(spec.quarantine_root)
    return spec.transform is None and _tasks_can_write(spec.compression, *layouts, attempt)


def _tasks_can_write(compression: str, sink: StagedDirs, quarantine: StagedDirs, attempt: str) -> bool:
    """Whether the reading tasks write the outputs themselves (with a transform, the quarantine only): pyarrow
    can write the `compression` codec and both staging roots."""
    return arrow_compression(compression) is not None and all(
        arrow_filesystem(layout.staging_root(attempt)) is not None for layout in (sink, quarantine)
    )


def _stream_transform(
    spark: Any,
    spec: PipelineSpec,
    kafka_config: Mapping[str, Any],
    plan: BatchPlan,
    writer: ArrowStagedWriter,
    root: str,
) -> Stats:
    """The transform path, one Spark job: the reading tasks decode, check and write the quarantine, and hand the
    valid rows to the JVM as Arrow batches; Spark applies the transform and writes the sink's staging under
    `root`. Nothing is cached, read twice or decoded twice, and the stats come back with the job (observed)."""
    checked = checked_frame(spark, spec, kafka_config, plan.spans, writer=writer, valid_only=True)
    observed, observation = observe_reads(checked)
    transformed = sink_frame(observed, spec, partition_columns=False)
    if arrow_writable(transformed.schema):  # Python workers write the sink: Spark's Parquet writer costs most
        sink_writer = TransformedWriter(writer.sink, writer.attempt, spec.compression)
        with _session_conf(spark, _ROWS_TO_ARROW):
            transformed.mapInArrow(sink_writer.write, WRITTEN_DDL).collect()
    else:
        writers = min(max(4, len(plan.to_read)), _MAX_WRITERS)  # a task may hold rows of several partitions
        _write_staged(spark, with_partition_columns(transformed), root, spec.compression, writers=writers)
    return stats_of(reads_observed(observation)[1])


def _read_then_write(
    spark: Any,
    spec: PipelineSpec,
    kafka_config: Mapping[str, Any],
    plan: BatchPlan,
    sink: StagedDirs,
    quarantine: StagedDirs,
    attempt: str,
    stages: dict[str, float],
) -> Stats:
    """The Spark-written path (a transform, or a sink pyarrow cannot write): the checked rows are persisted,
    then Spark writes the sink (through the transform) and the quarantine from them."""
    checked = checked_frame(spark, spec, kafka_config, plan.spans)
    with _session_conf(spark, _UNCOMPRESSED_CACHE):  # read at persist() time
        checked = checked.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        with timed(stages, "read"), executor_errors_named(spark):
            failed, read = materialize(checked)
        stats = stats_of(read)
        with timed(stages, "write"):
            _write_staged(spark, sink_frame(checked, spec), sink.staging_root(attempt), spec.compression)
        if failed:
            with timed(stages, "quarantine"):
                _write_staged(spark, quarantine_frame(checked), quarantine.staging_root(attempt), spec.compression)
    finally:
        checked.unpersist()
    return stats
