"""One bounded batch: plan -> read -> decode -> validate -> transform -> sink -> check -> commit -> mirror.

`run_batch` is the whole Spark data path of one member run. It is usable from a plain script: give it a
SparkSession, a PipelineSpec, a librdkafka configuration, the assigned partitions and an `OffsetLedger`
(a `GroupMember`, or a coordinator's standalone ledger).

It is one flow for every sink: the steps where the sinks differ (reconcile before planning, completing an earlier
commit, what the sink holds for the replay digest, the commit, the clean-up) are those of the spec's
`table_format`'s `BatchSink` (cohort.pipelines.batch.sink): Parquet directories
(cohort.pipelines.batch.parquet_sink), or a Delta Lake / Iceberg table pair (cohort.pipelines.batch.table_sink,
whose doc says how its table commits replace the publish below).

The spec goes where its fields are needed, no further: the sinks get the record of their roots and format
(`SinkTarget`, the tables' `TableTarget`), the reader schemas are read for its record sides
(`PipelineSpec.with_readers`), the plan is made within its limits (`PlanLimits`); only the staging reads the whole
spec (cohort.pipelines.batch.stage: what to decode, check, transform and how to write).

Guarantees (docs/guarantees.md), told for the Parquet sink:

- each range is read from Kafka once, by a Spark task that also decodes and validates its records
  (cohort.pipelines.tasks.checked, Arrow); the readers count what they consumed (records and bytes per
  partition) and hand the figures to Spark as rows of their frame (cohort.pipelines.tasks.read_stats.StatsRows),
  which the batch collects;
- with no transform, and a sink pyarrow can write, the tasks write the sink and quarantine rows
  themselves (cohort.pipelines.tasks.writer): one Spark job, no record crosses into the JVM. With a transform they
  write the quarantine themselves and hand the valid rows to the JVM as Arrow batches, and Spark applies the
  transform and writes the sink in the same job (nothing cached, read or decoded twice). With a codec or a root
  only Spark writes, the checked rows are persisted and Spark writes both outputs from them;
- outputs are written to staging, counted from the staged files (the digest's read of them, else their Parquet
  footers: cohort.pipelines.batch.stage), and checked per range:
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
import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from cohort.common.ledger import OffsetLedger, OffsetMirror
from cohort.common.types import TopicPartition
from cohort.pipelines.batch.commit import commit_ranges, mirror_commits, partition_result
from cohort.pipelines.batch.parquet_sink import ParquetSink
from cohort.pipelines.batch.results import BatchResult
from cohort.pipelines.batch.sink import BatchSink, StagedRows
from cohort.pipelines.batch.stage import stage_outputs, timed
from cohort.pipelines.batch.table_sink import TableSink
from cohort.pipelines.planning.batch_plan import plan_within
from cohort.pipelines.planning.plan import BatchPlan
from cohort.pipelines.replay.check import refuse_changed
from cohort.pipelines.sink.layout import SinkError, SinkTarget, attempt_id
from cohort.pipelines.sink.staging_collect import staging_roots, tidy_staging
from cohort.pipelines.spark import is_connect
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tables.batch import owner_of
from cohort.pipelines.tasks.writer import arrow_filesystem

__all__ = ["connect_problem", "open_sink", "plan_for", "run_batch"]


def connect_problem(spark: Any, target: SinkTarget) -> str | None:
    """Why a batch writing to `target` cannot run with `spark` when it is a Spark Connect session, None when it can
    (and always for a classic session); run_batch raises it as a SinkError before anything is read."""
    if not is_connect(spark):
        return None
    for name, root in (("sink", target.sink_root), ("quarantine", target.quarantine_root)):
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


def open_sink(
    spark: Any, spec: PipelineSpec, ledger: OffsetLedger, group: str | None, attempt: str, stages: dict[str, float]
) -> BatchSink:
    """The sink of `spec`'s `table_format` for one attempt: Parquet directories, or a Delta Lake / Iceberg table pair
    (which needs the group's name: `group`, or the ledger's; ValueError without one, said before any table opens)."""
    if spec.table_format == "parquet":
        return ParquetSink.open(spark, spec.sink_target, attempt, stages)
    owner = owner_of(ledger, group)
    return TableSink.open(spec.table_target, owner, attempt, stages)


def plan_for(
    spark: Any,
    spec: PipelineSpec,
    kafka_config: Mapping[str, Any],
    partitions: Sequence[TopicPartition],
    ledger: OffsetLedger,
    *,
    new_partitions: Collection[TopicPartition] = (),
) -> BatchPlan:
    """The batch plan for `partitions` within `spec`'s limits: ledger offsets + Kafka watermarks
    (cohort.pipelines.planning.batch_plan.plan_within)."""
    return plan_within(spark, spec.limits(), kafka_config, partitions, ledger, new_partitions=new_partitions)


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
        TableConflictError: a table sink's partitions were fenced by a newer generation, or diverge
            (cohort.pipelines.tables.store).
    """
    target = spec.sink_target
    problem = connect_problem(spark, target)
    if problem is not None:
        raise SinkError(f"this batch cannot run over Spark Connect: {problem}")
    if (mirror is None) != (group is None):
        raise ValueError("give both `group` and `mirror` to mirror commits to Kafka, or neither")
    run_id = run_id or uuid.uuid4().hex
    attempt = attempt_id(run_id)
    stages: dict[str, float] = {}
    sink = open_sink(spark, spec, ledger, group, attempt, stages)
    spec = spec.with_readers({tp.topic for tp in partitions})  # registry formats: reader schemas, once
    adopted = sink.reconcile(ledger, partitions)
    with timed(stages, "plan"):
        plan = plan_within(spark, spec.limits(), kafka_config, partitions, ledger, new_partitions=new_partitions)
    failed = True
    try:
        warnings = sink.complete(ledger, plan)
        staged = stage_outputs(spark, spec, kafka_config, plan, sink, attempt, stages)
        stats, counts, checks = staged.stats, staged.counts, staged.checks
        if spec.strict_replay:
            refuse_changed(checks)
        ranges = commit_ranges(plan, counts, checks)
        rows = StagedRows(lambda: spec.checker, spec.reshapes, staged.files)
        sink_dirs, quarantine_dirs = sink.commit(ledger, plan, ranges, counts, rows, run_id)
        failed = False
    finally:
        sink.clean_up(plan, failed=failed)
    tidy_staging(sink.fs, staging_roots(target.sink_root, target.quarantine_root, target.table_format), ledger)
    mirror_error = None
    if mirror is not None:
        with timed(stages, "mirror"):
            mirror_error = mirror_commits(plan, ranges, ledger, mirror, group, run_id)
    results = tuple(partition_result(p, stats, counts, warnings.get(p.tp), checks.get(p.tp)) for p in plan.partitions)
    return BatchResult(
        run_id=run_id,
        partitions=results,
        committed=tuple(ranges),
        sink_dirs=sink_dirs,
        quarantine_dirs=quarantine_dirs,
        stage_seconds=stages,
        mirror_error=mirror_error,
        adopted=adopted,
    )
