"""The worker run: one Dagster run of a group's worker job is one member of the group for one batch.

It joins the group as its worker slot (a static member), waits (bounded) for its assignment, heartbeats
while Spark works, runs the batch for exactly its partitions with itself as the fenced ledger, and logs
one `AssetMaterialization` per consumed topic partition with the `cohort/` metadata (docs/metadata.md). The assignment
is only known once the run has joined, so the job's op reports materializations of the topic assets'
partition keys at runtime rather than being launched for a partition key. At the end it leaves the group
or keeps its static membership (`leave_on_finish`).

A rerun the membership sensor requested for a lost run (tag `RERUN_TAG`) first reports, from the ledger,
the ranges that run committed but did not live to report, so the materializations stay a complete audit
trail of the ledger.

A rebalance during the batch (a heartbeat answered REBALANCE_IN_PROGRESS, a refused commit) makes the
worker rejoin and run again on its new assignment, at most `MAX_ATTEMPTS` times; the refused attempt's
output is withdrawn by the sink and its offsets stay uncommitted, so nothing is counted twice.
"""

import contextlib
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import dagster as dg
import sqlalchemy as sa
from pyspark.sql import SparkSession

from cohort.assets.translator import (
    METADATA_PREFIX,
    CohortConfig,
    DagsterCohortTranslator,
    RangeMetadata,
    consumed_offsets,
    safe_name,
)
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    PartitionNotOwnedError,
    RebalanceInProgressError,
)
from cohort.assignment.member import GroupMember
from cohort.common.ledger import OffsetLedger, OffsetMirror
from cohort.common.types import TopicPartition
from cohort.pipelines.batch import run_batch
from cohort.pipelines.results import BatchResult
from cohort.pipelines.spec import PipelineSpec
from cohort.resources.group import CohortGroupResource
from cohort.resources.kafka import KafkaResource
from cohort.resources.spark import SparkResource

__all__ = [
    "GENERATION_TAG",
    "GROUP_TAG",
    "MAX_ATTEMPTS",
    "RERUN_TAG",
    "SLOT_TAG",
    "BatchRunner",
    "WorkerOutcome",
    "build_worker_job",
    "ledger_materializations",
    "materializations",
    "run_worker",
    "worker_run_config",
]

MAX_ATTEMPTS = 3
SLOT_TAG = "cohort/slot"
GROUP_TAG = "cohort/group"
GENERATION_TAG = "cohort/generation"
RERUN_TAG = "cohort/rerun_of"
"""Tag of a run the membership sensor requested to redo the work of a lost run: the lost run's id."""
_REBALANCED = (RebalanceInProgressError, IllegalGenerationError, PartitionNotOwnedError)
"""Refusals after which the member rejoins and runs again. UNKNOWN_MEMBER_ID is not one: the member was
removed (expired, evicted) and the membership sensor reruns its slot; rejoining here would fence that rerun."""


class BatchRunner(Protocol):
    """What the worker calls to run one batch: `cohort.pipelines.batch.run_batch`'s signature (tests and fault
    scenarios pass a wrapper of it)."""

    def __call__(
        self,
        spark: SparkSession,
        spec: PipelineSpec,
        kafka_config: Mapping[str, Any],
        partitions: Sequence[TopicPartition],
        ledger: OffsetLedger,
        *,
        group: str | None = None,
        mirror: OffsetMirror | None = None,
        run_id: str | None = None,
        new_partitions: Collection[TopicPartition] = (),
    ) -> BatchResult: ...


@dataclass(frozen=True)
class WorkerOutcome:
    """What one worker run did: its identity in the group, and the batch result (None if idle)."""

    group: str
    slot: int
    instance_id: str
    member_id: str
    generation: int
    assignment: tuple[TopicPartition, ...]
    result: BatchResult | None
    lag_after: Mapping[TopicPartition, int]
    attempts: int


def worker_run_config(config: CohortConfig, slot: int) -> dict[str, Any]:
    """The run config launching worker slot `slot` of the group's worker job."""
    return {"ops": {_op_name(config): {"config": {"slot": slot}}}}


def _op_name(config: CohortConfig) -> str:
    return f"cohort_worker_op__{safe_name(config.group)}"


def _register_partitions(
    instance: dg.DagsterInstance,
    config: CohortConfig,
    translator: DagsterCohortTranslator,
    tps: Sequence[TopicPartition],
    counts: Mapping[str, int],
) -> None:
    """Make sure every partition of the assigned topics is a key of the topic's dynamic partition set,
    added in numeric order so the UI lists them that way (the topic sensor normally did it already).
    Workers of one group starting together race here; a key another worker added first is fine."""
    for topic in sorted({tp.topic for tp in tps}):
        name = translator.get_partitions_def_name(config.group, topic)
        highest = max([tp.partition for tp in tps if tp.topic == topic] + [counts.get(topic, 0) - 1])
        existing = set(instance.get_dynamic_partitions(name))
        missing = [str(p) for p in range(highest + 1) if str(p) not in existing]
        if not missing:
            continue
        try:
            instance.add_dynamic_partitions(name, missing)
        except sa.exc.IntegrityError:  # another worker of the group added some at the same moment
            for key in missing:
                with contextlib.suppress(sa.exc.IntegrityError):
                    if not instance.has_dynamic_partition(name, key):
                        instance.add_dynamic_partitions(name, [key])


def _new_partitions(
    member: OffsetLedger, assignment: Sequence[TopicPartition], counts: Mapping[str, int]
) -> list[TopicPartition]:
    """Assigned partitions that never had a commit while other partitions of their topic did: partitions
    added to the topic after the group started on it. They start at earliest whatever the reset policy
    (docs/guarantees.md), so records produced before this first batch are not skipped."""
    every = [TopicPartition(t, p) for t in sorted({tp.topic for tp in assignment}) for p in range(counts.get(t, 0))]
    committed = member.committed_offsets(every) if every else {}
    started = {tp.topic for tp, offset in committed.items() if offset is not None}
    return [tp for tp in assignment if tp.topic in started and committed.get(tp) is None]


def _spark_fingerprint(session: Any) -> tuple[int, int] | None:
    """(newest active stage id, completed tasks of active stages), None when Spark cannot tell (Connect)."""
    try:
        tracker = session.sparkContext.statusTracker()
    except Exception:
        return None
    stages = [info for info in (tracker.getStageInfo(i) for i in tracker.getActiveStageIds()) if info is not None]
    return (max((s.stageId for s in stages), default=-1), sum(s.numCompletedTasks for s in stages))


@contextlib.contextmanager
def _progress_reporter(member: GroupMember, spark: SparkResource, interval_s: float) -> Iterator[None]:
    """Report progress (reset the progress deadline) whenever Spark completes tasks or starts stages.

    A batch stuck in one task (or a driver stuck outside Spark) reports nothing, so the coordinator
    evicts it at the progress deadline, like Kafka's max.poll.interval.ms. With Spark Connect, where task
    progress is not visible, every interval counts as progress.
    """
    stop = threading.Event()

    def loop() -> None:
        last: tuple[int, int] | None = None
        while not stop.wait(interval_s):
            session = spark.started_session()
            current = _spark_fingerprint(session) if session is not None else None
            if session is not None and (current is None or current != last):
                with contextlib.suppress(Exception):  # a lost membership surfaces at commit
                    member.report_progress()
            last = current

    thread = threading.Thread(target=loop, name="cohort-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def run_worker(
    context: dg.OpExecutionContext,
    config: CohortConfig,
    translator: DagsterCohortTranslator,
    group: CohortGroupResource,
    kafka: KafkaResource,
    spark: SparkResource,
    slot: int,
    *,
    runner: BatchRunner | None = None,
) -> WorkerOutcome:
    """Join as `slot`, run the batch on the assignment (rejoining after a rebalance), leave or stay."""
    runner = runner if runner is not None else run_batch
    if config.pipeline is None:
        raise dg.Failure(f"group {config.group!r} has no pipeline: give CohortConfig(..., pipeline=PipelineSpec(...))")
    pipeline = config.pipeline
    member: GroupMember = group.member(
        slot,
        run_id=context.run_id,
        topic_metadata=lambda: kafka.subscribed_partition_counts(group.topics, group.topic_pattern),
    )
    started = time.monotonic()
    attempts = 0
    try:
        assignment = member.join()
        while True:
            attempts += 1
            context.log.info(
                f"group {config.group!r} slot {slot}: member {member.member_id} generation {member.generation}, "
                f"assigned {[str(tp) for tp in assignment]} after {time.monotonic() - started:.1f} s"
            )
            if not assignment:
                result = None
                break
            counts = kafka.partition_counts({tp.topic for tp in assignment})
            _register_partitions(context.instance, config, translator, assignment, counts)
            try:
                with _progress_reporter(member, spark, member.heartbeat_interval):
                    result = runner(
                        spark.get_session(),
                        pipeline,
                        kafka.client_config(),
                        list(assignment),
                        member,
                        mirror=kafka.get_mirror(),
                        run_id=context.run_id,
                        group=config.group,
                        new_partitions=_new_partitions(member, assignment, counts),
                    )
            except _REBALANCED as exc:
                if attempts >= MAX_ATTEMPTS:
                    raise
                context.log.warning(f"group {config.group!r} slot {slot}: {exc.code}; rejoining ({attempts})")
                assignment = member.ensure_active()
                continue
            if result.mirror_error:
                context.log.warning(
                    f"Kafka mirror of the commit failed (the ledger's commit stands): {result.mirror_error}"
                )
            break
        lag_after = kafka.end_offsets([p.topic_partition for p in result.partitions]) if result else {}
        outcome = WorkerOutcome(
            group=config.group,
            slot=slot,
            instance_id=group.instance_id(slot),
            member_id=member.member_id or "",
            generation=member.generation,
            assignment=tuple(assignment),
            result=result,
            lag_after=_lag_after(result, lag_after),
            attempts=attempts,
        )
    except FencedInstanceIdError:
        context.log.error(f"slot {slot} was fenced: another live run holds {group.instance_id(slot)}")
        member.close(leave=False)
        raise
    except BaseException:
        member.close(leave=group.leave_on_finish)
        raise
    member.close(leave=group.leave_on_finish)
    return outcome


def _lag_after(result: BatchResult | None, ends: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Records left behind per consumed partition once the batch committed (0 when caught up)."""
    if result is None:
        return {}
    return {tp: max(0, end - result.partition(tp.topic, tp.partition).until_offset) for tp, end in ends.items()}


def materializations(
    outcome: WorkerOutcome, translator: DagsterCohortTranslator, run_id: str
) -> Iterator[dg.AssetMaterialization]:
    """One materialization per consumed topic partition, with numeric offset metadata (docs/metadata.md)."""
    if outcome.result is None:
        return
    for part in outcome.result.partitions:
        tp = part.topic_partition
        metadata = RangeMetadata(
            topic=part.topic,
            partition=part.partition,
            from_offset=part.from_offset,
            until_offset=part.until_offset,
            records=part.records,
            quarantined=part.quarantined,
            group=outcome.group,
            generation=outcome.generation,
            member=outcome.member_id,
            instance_id=outcome.instance_id,
            run_id=run_id,
            lag_after=outcome.lag_after.get(tp, 0),
            start=part.start,
            gap=None
            if part.gap is None
            else f"[{part.gap.from_offset}, {part.gap.until_offset}) {part.gap.gap_reason}",
        )
        yield dg.AssetMaterialization(
            asset_key=translator.get_asset_key(outcome.group, part.topic),
            partition=str(part.partition),
            description=f"{tp} [{part.from_offset}, {part.until_offset}) by {outcome.instance_id}",
            metadata=metadata.to_metadata(),
        )


def ledger_materializations(
    instance: dg.DagsterInstance,
    coordinator: Coordinator,
    group: str,
    lost_run_id: str,
    translator: DagsterCohortTranslator,
    run_id: str,
) -> Iterator[dg.AssetMaterialization]:
    """Materializations of the ranges run `lost_run_id` committed to the ledger but never reported.

    A run killed after its ledger commit and before its materialization events leaves committed ranges
    with no entry in the audit trail; its rerun (tagged `RERUN_TAG`) reports them from the ledger, which
    records the run id, with the committing run's generation, member and counts.
    """
    reported = set()
    for record in instance.get_records_for_run(lost_run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records:
        event = record.event_log_entry.asset_materialization
        offsets = consumed_offsets(event.metadata) if event is not None else None
        if event is not None and offsets is not None:
            reported.add((event.asset_key, event.partition, *offsets))
    for entry in coordinator.run_ledger_history(group, lost_run_id):
        key = translator.get_asset_key(group, entry.topic)
        if entry.gap_reason is not None or entry.until_offset <= entry.from_offset:
            continue  # gaps are shown on the range after them; empty ranges are not recorded
        if (key, str(entry.partition), entry.from_offset, entry.until_offset) in reported:
            continue
        yield dg.AssetMaterialization(
            asset_key=key,
            partition=str(entry.partition),
            description=(
                f"{entry.topic_partition} [{entry.from_offset}, {entry.until_offset}) committed by run "
                f"{lost_run_id}, which ended before reporting it (reported from the ledger by run {run_id})"
            ),
            metadata=RangeMetadata(
                topic=entry.topic,
                partition=entry.partition,
                from_offset=entry.from_offset,
                until_offset=entry.until_offset,
                records=entry.records,
                quarantined=entry.quarantined,
                group=group,
                generation=entry.generation,
                member=entry.member_id or "",
                instance_id=entry.instance_id or "",
                run_id=lost_run_id,
                reported_by=run_id,
            ).to_metadata(),
        )


def build_worker_job(
    config: CohortConfig,
    translator: DagsterCohortTranslator,
    *,
    runner: BatchRunner | None = None,
) -> dg.JobDefinition:
    """The group's worker job: one op that is one member for one batch; the slot comes from run config."""
    group_key = config.resource_key

    @dg.op(
        name=_op_name(config),
        required_resource_keys={group_key, "kafka", "spark"},
        config_schema={"slot": dg.Field(int, description="Worker slot (1-based); its static instance id.")},
        description=f"Join group {config.group!r} as a worker slot, consume the assigned partitions, commit.",
        tags={GROUP_TAG: config.group},
    )
    def cohort_worker(context: dg.OpExecutionContext) -> Iterator[Any]:
        group: CohortGroupResource = getattr(context.resources, group_key)
        lost_run_id = context.run.tags.get(RERUN_TAG)
        if lost_run_id:
            yield from ledger_materializations(
                context.instance, group.get_coordinator(), config.group, lost_run_id, translator, context.run_id
            )
        outcome = run_worker(
            context,
            config,
            translator,
            group,
            context.resources.kafka,
            context.resources.spark,
            int(context.op_config["slot"]),
            runner=runner,
        )
        yield from materializations(outcome, translator, context.run_id)
        yield dg.Output(
            None,
            metadata={
                f"{METADATA_PREFIX}generation": dg.MetadataValue.int(outcome.generation),
                f"{METADATA_PREFIX}partitions": dg.MetadataValue.int(len(outcome.assignment)),
                f"{METADATA_PREFIX}records": dg.MetadataValue.int(outcome.result.records if outcome.result else 0),
                f"{METADATA_PREFIX}attempts": dg.MetadataValue.int(outcome.attempts),
            },
        )

    @dg.job(
        name=translator.get_job_name(config.group),
        description=f"One member of group {config.group!r} for one batch (launch one run per worker slot).",
        tags={GROUP_TAG: config.group},
    )
    def worker_job() -> None:
        cohort_worker()

    return worker_job
