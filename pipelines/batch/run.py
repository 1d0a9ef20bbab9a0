"""One bounded batch: plan -> read -> decode -> validate -> transform -> sink -> check -> commit -> mirror.

`run_batch` is the whole Spark data path of one member run. It is usable from a plain script: give it a
SparkSession, a PipelineSpec, a librdkafka configuration, the assigned partitions and an `OffsetLedger`
(a `GroupMember`, or a coordinator's standalone ledger).

Guarantees (docs/guarantees.md):

- each range is read from Kafka once, by a Spark task that also decodes and validates its records
  (cohort.pipelines.tasks.checked, Arrow); the readers count what they consumed (records and bytes per partition) and
  hand the figures to Spark as rows of their frame (cohort.pipelines.tasks.reader.stats_row), which the batch collects;
- with no transform, and a sink pyarrow can write, the tasks write the sink and quarantine rows
  themselves (cohort.pipelines.tasks.writer): one Spark job, no record crosses into the JVM. With a transform they
  write the quarantine themselves and hand the valid rows to the JVM as Arrow batches, and Spark applies the
  transform and writes the sink in the same job (nothing cached, read or decoded twice). With a codec or a root
  only Spark writes, the checked rows are persisted and Spark writes both outputs from them;
- outputs are written to staging, counted from the staged Parquet footers, and checked per range:
  consumed == written + quarantined (with a transform: its rows by offset, cohort.pipelines.sink.counts),
  else CountMismatchError and nothing is published or committed; a batch
  past the spec's quarantine limit fails there too (QuarantineLimitError, cohort.pipelines.sink.quarantine_limit);
- the ranges are committed to the ledger in one call before anything is published: a member expired,
  fenced or left behind by a rebalance while its batch ran (a zombie) is refused there, its staged output
  is deleted and the typed error propagates; it never moves or deletes anything readers see;
- only then are the staged ranges moved into place by directory renames (cohort.pipelines.sink.layout). A batch
  that dies between its commit and its publish leaves its staged output marked with its attempt and its
  offsets; the next batch of the partition publishes it first, found through the ledger's last committed
  range and the run that committed it (with a ledger that reports it, `RangeLedger`);
- the Kafka mirror runs after the ledger commit, for the batch's ranges and the ledger's head of every
  other planned partition (so Kafka catches up with a commit whose mirror never ran); its failure is
  reported in the result, never raised.

The session may be classic or Spark Connect (`SparkSession.builder.remote("sc://...")`): the data path uses
DataFrames, SQL settings, caching, Observations and Python tasks only, never a SparkContext or the driver's
JVM. What a Spark Connect client cannot do is refused before anything is read (`connect_problem`): moving files
under a root only Hadoop's FileSystem reaches (that needs the driver JVM in this process), and a relative root
(this process and the Spark server would resolve it against different working directories). Over Spark Connect
the sink's roots must be ones both this process (pyarrow: renames, footer counts, digests) and the Spark cluster
(the tasks' or Spark's writes) reach as the same place.

Example:
    >>> coordinator = Coordinator.from_url("sqlite:////tmp/cohort.db")  # doctest: +SKIP
    >>> result = run_batch(spark, spec, {"bootstrap.servers": "localhost:9092"},  # doctest: +SKIP
    ...                    [TopicPartition("orders", 0)], coordinator.standalone_ledger("ingest"))
    >>> result.records, result.quarantined  # doctest: +SKIP
    (1000, 3)
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal

from pyspark import StorageLevel

from cohort.common.ledger import OffsetLedger, OffsetMirror
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.batch.executor_errors import executor_errors_named
from cohort.pipelines.batch.frames import (
    checked_frame,
    materialize,
    observe_reads,
    quarantine_frame,
    reads_observed,
    sink_frame,
    with_partition_columns,
)
from cohort.pipelines.batch.results import BatchResult, CountMismatchError, PartitionResult
from cohort.pipelines.formats.readers import resolve_readers
from cohort.pipelines.planning.plan import BatchPlan, PartitionPlan, plan_batch
from cohort.pipelines.planning.positions import RangeLedger, gather_positions
from cohort.pipelines.replay.check import HeldOutput, OutputCheck, check_outputs, refuse_changed
from cohort.pipelines.sink.counts import OutputShape, StagedCounts, account
from cohort.pipelines.sink.layout import HadoopFs, SinkError, SinkFs, SinkLayout, attempt_id
from cohort.pipelines.sink.quarantine_limit import refuse_over_limit
from cohort.pipelines.sink.staging_collect import staging_roots, tidy_staging
from cohort.pipelines.spark import is_connect, parallelism
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tasks.reader import ReadStats, gather_read_stats
from cohort.pipelines.tasks.transformed_writer import WRITTEN_DDL, TransformedWriter, arrow_writable
from cohort.pipelines.tasks.writer import ArrowFs, ArrowStagedWriter, arrow_compression, arrow_filesystem

__all__ = ["connect_problem", "plan_for", "run_batch"]

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
def _timed(stages: dict[str, float], name: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        stages[name] = stages.get(name, 0.0) + time.perf_counter() - started


def plan_for(
    spark: Any,
    spec: PipelineSpec,
    kafka_config: Mapping[str, Any],
    partitions: Sequence[TopicPartition],
    ledger: OffsetLedger,
    *,
    new_partitions: Collection[TopicPartition] = (),
) -> BatchPlan:
    """The batch plan for `partitions`: ledger offsets + Kafka watermarks through `cohort.pipelines.planning.plan`."""
    positions = gather_positions(kafka_config, ledger, partitions, spec.limits().reset, new_partitions=new_partitions)
    return plan_batch(positions, spec.limits(target_tasks=parallelism(spark)))


def connect_problem(spark: Any, spec: PipelineSpec) -> str | None:
    """Why `spec`'s batch cannot run with `spark` when it is a Spark Connect session, None when it can (and
    always for a classic session); run_batch raises it as a SinkError before anything is read."""
    if not is_connect(spark):
        return None
    for name, root in (("sink", spec.sink_path), ("quarantine", spec.quarantine_root)):
        if arrow_filesystem(root) is None:
            return (
                f"the {name} root {root} is one only Hadoop's FileSystem reaches, through the driver's JVM, which a "
                "Spark Connect client does not have: use a root pyarrow reaches (a local path, file://, s3://, "
                "gs://, hdfs://, ...) or a classic SparkSession"
            )
        if "://" not in root and not os.path.isabs(root):
            return (
                f"the {name} root {root!r} is relative: over Spark Connect this process and the Spark server "
                "would resolve it against different working directories; give an absolute path or a URI"
            )
    return None


def _stats(read: ReadStats) -> Stats:
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


_NOTHING = StagedCounts(0, 0)
"""The counts of a range nothing was read for (a gap, an empty range)."""


def _commit_ranges(
    plan: BatchPlan,
    counts: Mapping[TopicPartition, StagedCounts],
    checks: Mapping[TopicPartition, OutputCheck] | None = None,
) -> list[OffsetRange]:
    ranges: list[OffsetRange] = []
    for p in plan.partitions:
        if not p.must_commit:
            continue
        if p.gap is not None:
            ranges.append(p.gap)
        ranges.append(
            OffsetRange(
                p.tp.topic,
                p.tp.partition,
                p.from_offset,
                p.until_offset,
                records=(counted := counts.get(p.tp, _NOTHING)).written,
                quarantined=counted.quarantined,
                filtered=counted.filtered,
                expanded=counted.expanded,
                content_hash=check.content_hash if (check := (checks or {}).get(p.tp)) else None,
                note=check.note if check else None,
            )
        )
    return ranges


def _commit(ledger: OffsetLedger, ranges: Sequence[OffsetRange], run_id: str) -> None:
    """Commit `ranges`, the fencing point of the batch. A commit that raised although the ledger holds it (its
    answer was lost with the connection) counts as done: its output must be published, not deleted."""
    try:
        ledger.commit(ranges, run_id=run_id)
    except Exception:
        if not _landed(ledger, ranges, run_id):
            raise


def _landed(ledger: OffsetLedger, ranges: Sequence[OffsetRange], run_id: str) -> bool:
    """Whether every partition's last committed range is this run's last range of it (needs a RangeLedger)."""
    if not isinstance(ledger, RangeLedger):
        return False
    ends = {r.topic_partition: r.until_offset for r in ranges}
    try:
        last = ledger.last_committed(sorted(ends))
    except Exception:
        return False
    return all(
        (entry := last.get(tp)) is not None and entry.run_id == run_id and entry.until_offset == until
        for tp, until in ends.items()
    )


def _complete_committed(
    ledger: OffsetLedger, plan: BatchPlan, sink: SinkLayout, quarantine: SinkLayout, fs: SinkFs
) -> dict[TopicPartition, str]:
    """Publish each planned partition's last committed range if its run died between its commit and its
    publish (its output waits in that run's staging); a warning per partition whose committed output is
    neither in place nor staged. Runs before this batch commits, so only a partition's last range can ever
    be waiting: every commit follows the publish of the range before it."""
    if not isinstance(ledger, RangeLedger) or not plan.partitions:
        return {}
    warnings: dict[TopicPartition, str] = {}
    for tp, last in sorted(ledger.last_committed([p.tp for p in plan.partitions]).items()):
        if last is None or last.run_id is None:
            continue
        for layout, count in ((sink, last.records), (quarantine, last.quarantined)):
            if count and not layout.complete(fs, last.run_id, tp, last.from_offset, last.until_offset, count):
                warnings[tp] = (
                    f"{tp}: committed range [{last.from_offset}, {last.until_offset}) of run {last.run_id} has no "
                    f"directory under {layout.root} and no staged output left to publish"
                )
    return warnings


def _mirror_ranges(plan: BatchPlan, ranges: Sequence[OffsetRange], ledger: OffsetLedger) -> list[OffsetRange]:
    """What Kafka's committed offsets must become: this batch's ranges, plus the ledger's head of every other
    planned partition that has one. A run that died between its ledger commit and its mirror left Kafka
    behind the ledger; without new records no later batch would commit those partitions again."""
    done = {r.topic_partition for r in ranges}
    idle = [p.tp for p in plan.partitions if p.tp not in done]
    heads = ledger.committed_offsets(idle) if idle else {}
    return [
        *ranges,
        *(OffsetRange(tp.topic, tp.partition, at, at) for tp, at in sorted(heads.items()) if at is not None),
    ]


def _mirror(
    plan: BatchPlan,
    ranges: Sequence[OffsetRange],
    ledger: OffsetLedger,
    mirror: OffsetMirror | None,
    group: str | None,
    run_id: str,
) -> str | None:
    """Copy the ledger's heads to Kafka (`_mirror_ranges`); the error, if any: the ledger's commit stands, so a
    failed mirror is reported, not raised."""
    if mirror is None or group is None:
        return None
    try:
        heads = _mirror_ranges(plan, ranges, ledger)
        if heads:
            mirror.mirror(group, heads, run_id=run_id)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def _partition_result(
    p: PartitionPlan,
    stats: Stats,
    counts: Mapping[TopicPartition, StagedCounts],
    warning: str | None = None,
    check: OutputCheck | None = None,
) -> PartitionResult:
    _, size, seconds = stats.get(p.tp, (0, 0, 0.0))
    warnings = [w for w in (p.warning, warning) if w]
    return PartitionResult(
        topic=p.tp.topic,
        partition=p.tp.partition,
        from_offset=p.from_offset,
        until_offset=p.until_offset,
        records=(counted := counts.get(p.tp, _NOTHING)).written,
        quarantined=counted.quarantined,
        filtered=counted.filtered,
        expanded=counted.expanded,
        bytes=size,
        seconds=seconds,
        start=p.start,
        gap=p.gap,
        warning="; ".join(warnings) or None,
        content_hash=check.content_hash if check else None,
        replay_changed=check.changed if check else None,
    )


def _stage(
    spark: Any,
    spec: PipelineSpec,
    kafka_config: Mapping[str, Any],
    plan: BatchPlan,
    fs: SinkFs,
    attempt: str,
    stages: dict[str, float],
    held: tuple[HeldOutput, HeldOutput],
) -> tuple[Stats, dict[TopicPartition, StagedCounts], dict[TopicPartition, OutputCheck]]:
    """Read, decode and validate the plan's spans once, write both outputs to staging, digest each range's
    staged output against what the sink `held` (sink, quarantine) holds (cohort.pipelines.replay.check), count
    the outputs from the staged footers (with a transform, its rows by offset too, from the digest's read), check
    the counts and the quarantine limit; returns (consumed stats, each range's counts, each range's check)."""
    if not plan.spans:
        with _timed(stages, "verify"):
            return {}, {}, check_outputs(fs, *held, attempt, plan)
    sink, quarantine = SinkLayout(spec.sink_path), SinkLayout(spec.quarantine_root)
    tasks_write = _tasks_can_write(spec, sink, quarantine, attempt)
    if tasks_write and spec.transform is not None:
        writer = ArrowStagedWriter(sink, quarantine, attempt, spec.compression, spec.checker)
        # one job: the tasks write the quarantine and hand the JVM the valid rows, as Arrow, to transform
        with _timed(stages, "read_and_write"), executor_errors_named(spark):
            stats = _stream_transform(spark, spec, kafka_config, plan, writer, sink.staging_root(attempt))
    elif tasks_write:
        writer = ArrowStagedWriter(sink, quarantine, attempt, spec.compression, spec.checker, spec.arrow_transform)
        # one job, no record crosses into the JVM: only each span's stats
        with _timed(stages, "read_and_write"), executor_errors_named(spark):
            read = checked_frame(spark, spec, kafka_config, plan.spans, writer=writer).collect()
        stats = _stats(gather_read_stats(read))
    elif spec.arrow_transform is not None:
        raise SinkError(
            f"an arrow_transform runs in the reading tasks, which write with pyarrow: the compression "
            f"{spec.compression!r} or a root pyarrow cannot reach ({spec.sink_path}, {spec.quarantine_root}) needs "
            "Spark's writer; use a codec and roots pyarrow writes, or a Spark transform"
        )
    else:
        stats = _read_then_write(spark, spec, kafka_config, plan, sink, quarantine, attempt, stages)
    with _timed(stages, "verify"):
        checks = check_outputs(fs, *held, attempt, plan)
        written = {
            p.tp: fs.parquet_record_count(sink.staged_range_dir(attempt, p.tp.topic, p.tp.partition))
            for p in plan.to_read
        }
        quarantined = {
            p.tp: fs.parquet_record_count(quarantine.staged_range_dir(attempt, p.tp.topic, p.tp.partition))
            for p in plan.to_read
        }
        shapes = None
        if spec.reshapes:
            shapes = {p.tp: _shape(fs, checks.get(p.tp), sink.staged_range_dir(attempt, *p.tp)) for p in plan.to_read}
        counts = _verify(plan, stats, written, quarantined, shapes)
    shares = {tp: (c.quarantined, stats.get(tp, (0, 0, 0.0))[0]) for tp, c in counts.items()}
    refuse_over_limit(spark, spec.quarantine_rule, shares, lambda tp: quarantine.staged_range_dir(attempt, *tp))
    return stats, counts, checks


def _shape(fs: SinkFs, check: OutputCheck | None, staged: str) -> OutputShape:
    """A range's staged sink rows by offset: from its digest's read when there was one, else read back."""
    return check.shape if check is not None and check.shape is not None else fs.offset_shape(staged)


def _file_system(spark: Any, sink: SinkLayout, quarantine: SinkLayout) -> SinkFs:
    """pyarrow for the sink's renames and footer counts when it reaches both roots, else Hadoop's FileSystem
    through the driver's JVM (any scheme Spark can write)."""
    if all(arrow_filesystem(layout.root) is not None for layout in (sink, quarantine)):
        return ArrowFs()
    return HadoopFs(spark)


def _tasks_can_write(spec: PipelineSpec, sink: SinkLayout, quarantine: SinkLayout, attempt: str) -> bool:
    """Whether the reading tasks write the outputs themselves (with a transform, the quarantine only): pyarrow
    can write the codec and both staging roots."""
    return arrow_compression(spec.compression) is not None and all(
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
    return _stats(reads_observed(observation)[1])


def _read_then_write(
    spark: Any,
    spec: PipelineSpec,
    kafka_config: Mapping[str, Any],
    plan: BatchPlan,
    sink: SinkLayout,
    quarantine: SinkLayout,
    attempt: str,
    stages: dict[str, float],
) -> Stats:
    """The Spark-written path (a transform, or a sink pyarrow cannot write): the checked rows are persisted,
    then Spark writes the sink (through the transform) and the quarantine from them."""
    checked = checked_frame(spark, spec, kafka_config, plan.spans)
    with _session_conf(spark, _UNCOMPRESSED_CACHE):  # read at persist() time
        checked = checked.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        with _timed(stages, "read"), executor_errors_named(spark):
            failed, read = materialize(checked)
        stats = _stats(read)
        with _timed(stages, "write"):
            _write_staged(spark, sink_frame(checked, spec), sink.staging_root(attempt), spec.compression)
        if failed:
            with _timed(stages, "quarantine"):
                _write_staged(spark, quarantine_frame(checked), quarantine.staging_root(attempt), spec.compression)
    finally:
        checked.unpersist()
    return stats


def run_batch(
    spark: Any,
    spec: PipelineSpec,
    kafka_config: Mapping[str, Any],
    partitions: Sequence[TopicPartition],
    ledger: OffsetLedger,
    *,
    group: str | None = None,
    mirror: OffsetMirror | None = None,
    run_id: str | None = None,
    new_partitions: Collection[TopicPartition] = (),
) -> BatchResult:
    """Run one batch over `partitions` and commit it (see the module doc).

    Args:
        spark: a SparkSession (cohort.pipelines.spark.build_session), classic or Spark Connect.
        spec: what to decode, validate, transform and where to write.
        kafka_config: librdkafka settings for planning and the executor-side consumers.
        partitions: the partitions assigned to this run.
        ledger: where committed offsets are read and the batch's ranges committed.
        group, mirror: when both are given, committed offsets are mirrored to Kafka under `group`.
        run_id: recorded with the commit (and as Kafka commit metadata); generated when omitted.
        new_partitions: partitions added to their topic after the group started; they start at earliest.

    Raises:
        SinkError: over Spark Connect, a sink root the client cannot handle (`connect_problem`), before any I/O.
        OffsetOutOfRangeError: committed offsets are gone and `spec.fail_on_data_loss` is set.
        ReadingTaskError: a reading task failed on an executor (a range could not be read: its ReadError);
            RegistryError, ExecutorDependencyError: the same, by their cause (cohort.pipelines.batch.executor_errors).
        CountMismatchError: consumed != written + quarantined for some range.
        QuarantineLimitError: the batch quarantined more than `spec.quarantine_limit` allows.
        CoordinatorError: the ledger refused the commit (fenced, stale generation, non-contiguous); nothing
            was published and the staged output is deleted.
    """
    problem = connect_problem(spark, spec)
    if problem is not None:
        raise SinkError(f"this batch cannot run over Spark Connect: {problem}")
    if spec.table_format != "parquet":  # Delta Lake or Iceberg: the table commits (cohort.pipelines.tables.batch)
        from cohort.pipelines.tables.batch import run_table_batch

        return run_table_batch(
            spark, spec, kafka_config, partitions, ledger,
            group=group, mirror=mirror, run_id=run_id, new_partitions=new_partitions,
        )  # fmt: skip
    if (mirror is None) != (group is None):
        raise ValueError("give both `group` and `mirror` to mirror commits to Kafka, or neither")
    run_id = run_id or uuid.uuid4().hex
    attempt = attempt_id(run_id)
    stages: dict[str, float] = {}
    spec = resolve_readers(spec, {tp.topic for tp in partitions})  # registry formats: reader schemas, once
    with _timed(stages, "plan"):
        plan = plan_for(spark, spec, kafka_config, partitions, ledger, new_partitions=new_partitions)
    sink, quarantine = SinkLayout(spec.sink_path), SinkLayout(spec.quarantine_root)
    fs = _file_system(spark, sink, quarantine)
    step: Literal["staging", "committing", "refused", "committed", "published"] = "staging"
    try:
        with _timed(stages, "publish"):
            warnings = _complete_committed(ledger, plan, sink, quarantine, fs)
        stats, counts, checks = _stage(spark, spec, kafka_config, plan, fs, attempt, stages, (sink, quarantine))
        if spec.strict_replay:
            refuse_changed(checks)
        ranges = _commit_ranges(plan, counts, checks)
        to_publish = {p.tp: (p.from_offset, p.until_offset) for p in plan.partitions if p.must_commit}
        if ranges:
            with _timed(stages, "commit"):
                sink.prepare(fs, attempt, to_publish)
                quarantine.prepare(fs, attempt, to_publish)
                step = "committing"
                try:
                    _commit(ledger, ranges, run_id)
                except Exception:
                    step = "refused"  # the ledger does not hold it (as far as it can tell)
                    raise
            step = "committed"
        with _timed(stages, "publish"):
            sink_dirs = tuple(sink.publish(fs, attempt, to_publish))
            quarantine_dirs = tuple(quarantine.publish(fs, attempt, to_publish))
        step = "published"
    finally:
        # Committed (or perhaps committed) and not published: the staged output waits for the next batch.
        if step in ("staging", "refused", "published"):
            sink.discard_staging(fs, attempt)
            quarantine.discard_staging(fs, attempt)
    tidy_staging(fs, staging_roots(spec.sink_path, spec.quarantine_root), ledger)
    mirror_error = None
    if mirror is not None:
        with _timed(stages, "mirror"):
            mirror_error = _mirror(plan, ranges, ledger, mirror, group, run_id)
    return BatchResult(
        run_id=run_id,
        partitions=tuple(
            _partition_result(p, stats, counts, warnings.get(p.tp), checks.get(p.tp)) for p in plan.partitions
        ),
        committed=tuple(ranges),
        sink_dirs=sink_dirs,
        quarantine_dirs=quarantine_dirs,
        stage_seconds=stages,
        mirror_error=mirror_error,
    )
