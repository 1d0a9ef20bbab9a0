"""The worker: one member of the group for one batch, and what it reports to Dagster.

A member joins the group as its worker slot (a static member), runs the batch for exactly its partitions with
itself as the fenced ledger (`cohort.runtime.slot_batch`, shared with the Airflow face), and leaves the group
or keeps its static membership (`leave_on_finish`). The assignment is only known once
the member has joined, so the runs report materializations of the assets' partition keys at runtime
(`materializations`): one of the topic asset (the committed range) and one of the landed asset (its rows)
per consumed partition. `cohort.assets.group_batch` hosts one member per slot in a run.

Before its batch, every run reports the ranges its slots committed to the ledger that no run reported
(`unreported_materializations`): a run killed between its commit and its events leaves such ranges, and
the next run of the slot, a rerun or not, closes the audit gap.
"""

import contextlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import sqlalchemy as sa

from cohort.assets.replay import Replay
from cohort.assets.trail import read_dagster_trail
from cohort.assets.translator import (
    METADATA_PREFIX,
    CohortConfig,
    DagsterCohortTranslator,
    RangeMetadata,
    safe_name,
)
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.member import GroupMember
from cohort.assignment.protocol.messages import LedgerEntry
from cohort.common.types import TopicPartition
from cohort.pipelines.batch.results import BatchResult
from cohort.pipelines.sink.layout import SinkLayout
from cohort.pipelines.spec import PipelineSpec
from cohort.resources.group import CohortGroupResource
from cohort.resources.kafka import KafkaResource
from cohort.resources.spark import SparkResource
from cohort.runtime.lineage import ConsumedRange, consumed_ranges, reported_range, unreported_ranges
from cohort.runtime.offset_reset import apply_reset
from cohort.runtime.slot_batch import MAX_ATTEMPTS, BatchRunner, SlotRun, run_slot_batch

__all__ = [
    "ALL_SLOTS",
    "GENERATION_TAG",
    "GROUP_TAG",
    "MAX_ATTEMPTS",
    "RERUN_TAG",
    "SLOT_TAG",
    "BatchRunner",
    "WorkerOutcome",
    "WorkerSetup",
    "landed_materialization",
    "materializations",
    "op_name",
    "run_worker",
    "unreported_materializations",
    "worker_run_config",
]

SLOT_TAG = "cohort/slot"
GROUP_TAG = "cohort/group"
GENERATION_TAG = "cohort/requested_in_generation"
"""Tag of a run a sensor requested: the group generation it saw; the generation that commits is in the run's
materializations (`cohort/generation`)."""
RERUN_TAG = "cohort/rerun_of"
"""Tag of a run the membership sensor requested to redo the work of a lost run: the lost run's id."""


@dataclass(frozen=True)
class WorkerOutcome:
    """What one member did: its identity in the group, and the batch result (None if idle).

    `member` is still in the group: the caller reports the batch, then calls `leave()`, so a run killed
    before its events were logged is noticed by its session expiring, with no need for Dagster to notice
    the dead run.
    """

    group: str
    slot: int
    instance_id: str
    member_id: str
    generation: int
    assignment: tuple[TopicPartition, ...]
    result: BatchResult | None
    lag_after: Mapping[TopicPartition, int]
    attempts: int
    member: GroupMember | None = field(default=None, compare=False, repr=False)
    leave_on_finish: bool = True
    replayed: frozenset[TopicPartition] = frozenset()
    replay: str | None = None

    def leave(self) -> None:
        """End the membership: leave the group, or keep the static membership (`leave_on_finish=False`)."""
        if self.member is not None:
            self.member.close(leave=self.leave_on_finish)


ALL_SLOTS = "all"
"""The `slot` config value of a run that hosts every worker slot of the group (what Materialize launches)."""


def worker_run_config(config: CohortConfig, slot: int | None = None, *, replay_from: str = "") -> dict[str, Any]:
    """The run config of the group's worker job for worker slot `slot` (None: every slot, in one run);
    `replay_from` makes it a replay of the run's partitions (cohort.assets.replay)."""
    op_config: dict[str, Any] = {"slot": ALL_SLOTS if slot is None else str(slot)}
    if replay_from:
        op_config["replay_from"] = replay_from
    return {"ops": {op_name(config): {"config": op_config}}}


def op_name(config: CohortConfig) -> str:
    """The name of the group's batch op (the multi-asset's node)."""
    return f"cohort_worker_op__{safe_name(config.group)}"


def _register_partitions(
    instance: dg.DagsterInstance,
    config: CohortConfig,
    translator: DagsterCohortTranslator,
    tps: Sequence[TopicPartition],
    counts: Mapping[str, int],
) -> None:
    """Make sure every partition number of the assigned topics is a key of the group's dynamic partition set,
    added in numeric order so the UI lists them that way (the topic sensor normally did it already).
    Workers of one group starting together race here; a key another worker added first is fine."""
    name = translator.get_partitions_def_name(config.group)
    highest = max([tp.partition for tp in tps] + [counts.get(tp.topic, 0) - 1 for tp in tps])
    existing = set(instance.get_dynamic_partitions(name))
    missing = [str(p) for p in range(highest + 1) if str(p) not in existing]
    if missing:
        try:
            instance.add_dynamic_partitions(name, missing)
        except sa.exc.IntegrityError:  # another worker of the group added some at the same moment
            for key in missing:
                with contextlib.suppress(sa.exc.IntegrityError):
                    if not instance.has_dynamic_partition(name, key):
                        instance.add_dynamic_partitions(name, [key])


def _reset_for_replay(
    context: dg.OpExecutionContext,
    group: str,
    member: GroupMember,
    replay: Replay,
    assignment: Sequence[TopicPartition],
    kafka: KafkaResource,
) -> set[TopicPartition]:
    """Reset the replay's partitions among `assignment` that this run has not reset yet, as this member (the
    ledger fences it like a commit) and as `cohort reset-offsets` does (the same ledger entry, Kafka's committed
    offsets moved with it); returns every partition of the assignment this run replays."""
    history = member.coordinator.run_ledger_history(group, context.run_id)
    done = {e.topic_partition for e in history if e.is_reset}
    todo = replay.wanted(assignment, done)
    if todo:
        reset = apply_reset(
            member,
            replay.target,
            todo,
            kafka.client_config(),
            kafka.get_mirror(),
            reason=f"replay run {context.run_id}",
            run_id=context.run_id,
            timeout_s=kafka.request_timeout_s,
        )
        context.log.info(
            f"group {group!r}: replaying from {replay.target.describe()}: "
            + ", ".join(f"{p.tp} {p.current} -> {p.new} ({p.replayed} records again)" for p in reset.plans)
        )
        if reset.mirror_error:
            context.log.warning(
                f"Kafka's committed offsets did not follow the replay's reset (the ledger's reset stands; the "
                f"batch mirrors its commit): {reset.mirror_error}"
            )
        done |= set(todo)
    return {tp for tp in assignment if tp in done}


@dataclass(frozen=True)
class WorkerSetup:
    """What a batch run's slots share, gathered once by the op: the run's context, the group's config and
    translator, the resources, and the run's options (a test runner, a replay)."""

    context: dg.OpExecutionContext
    config: CohortConfig
    translator: DagsterCohortTranslator
    group: CohortGroupResource
    kafka: KafkaResource
    spark: SparkResource
    runner: BatchRunner | None = None
    replay: Replay | None = None


def run_worker(setup: WorkerSetup, slot: int) -> WorkerOutcome:
    """Join as `slot`, run the batch on the assignment (rejoining after a rebalance), leave or stay. With a
    replay, first reset the selected partitions it owns to the replay's start (cohort.assets.replay)."""
    context, config, group, kafka, replay = setup.context, setup.config, setup.group, setup.kafka, setup.replay
    if config.pipeline is None:
        raise dg.Failure(f"group {config.group!r} has no pipeline: give CohortConfig(..., pipeline=PipelineSpec(...))")
    member: GroupMember = group.member(
        slot,
        run_id=context.run_id,
        topic_metadata=lambda: kafka.subscribed_partition_counts(group.topics, group.topic_pattern),
        log_offsets=kafka.watermarks,  # the leader's view of each partition's backlog, for lag-sticky
    )

    def on_assignment(assignment: Sequence[TopicPartition], counts: Mapping[str, int]) -> None:
        _register_partitions(context.instance, config, setup.translator, assignment, counts)

    def before_batch(member: GroupMember, assignment: Sequence[TopicPartition]) -> set[TopicPartition]:
        assert replay is not None
        return _reset_for_replay(context, config.group, member, replay, assignment, kafka)

    run = SlotRun(
        slot=slot,
        run_id=context.run_id,
        pipeline=config.pipeline,
        kafka=kafka.access(),
        spark=setup.spark.get_session,
        log=context.log,
        leave_group=group.leave_on_finish,
        runner=setup.runner,
        on_assignment=on_assignment,
        before_batch=before_batch if replay is not None else None,
    )
    done = run_slot_batch(member, run)
    return WorkerOutcome(
        group=config.group,
        slot=slot,
        instance_id=group.instance_id(slot),
        member_id=done.member_id,
        generation=done.generation,
        assignment=done.assignment,
        result=done.result,
        lag_after=done.lag_after,
        attempts=done.attempts,
        member=member,
        leave_on_finish=group.leave_on_finish,
        replayed=done.replayed,
        replay=replay.target.describe() if replay is not None else None,
    )  # the caller reports, then leaves


def materializations(
    outcome: WorkerOutcome,
    translator: DagsterCohortTranslator,
    run_id: str,
    sink_root: str | None = None,
    columns: dg.TableSchema | None = None,
) -> Iterator[dg.AssetMaterialization]:
    """Per consumed topic partition: the topic asset's materialization (the committed range) and the landed
    asset's (its rows in the sink, and the sink's `columns` when known). A partition with nothing new (an
    empty range) is not reported: the ledger records no range for it either."""
    if outcome.result is None:
        return
    yield from _adopted_materializations(outcome, translator, run_id, sink_root)
    consumed = consumed_ranges(
        outcome.result,
        group=outcome.group,
        generation=outcome.generation,
        member=outcome.member_id,
        instance_id=outcome.instance_id,
        run_id=run_id,
        lag_after=outcome.lag_after,
        replay=outcome.replay,
        replayed=outcome.replayed,
    )
    for part in consumed:
        tp = TopicPartition(part.topic, part.partition)
        yield dg.AssetMaterialization(
            asset_key=translator.get_asset_key(outcome.group, part.topic),
            partition=str(part.partition),
            description=f"{tp} [{part.from_offset}, {part.until_offset}) by {outcome.instance_id}",
            metadata=RangeMetadata.of(part).to_metadata(),
        )
        yield landed_materialization(
            translator, outcome.group, tp, part.records, part.quarantined, run_id, sink_root, columns
        )


def _reported_range(
    translator: DagsterCohortTranslator, part: ConsumedRange, description: str, sink_root: str | None
) -> Iterator[dg.AssetMaterialization]:
    """The topic and landed materializations of a range one run read and a later run reports (the reading run
    ended before reporting it, or before its ledger commit)."""
    yield dg.AssetMaterialization(
        asset_key=translator.get_asset_key(part.group, part.topic),
        partition=str(part.partition),
        description=description,
        metadata=RangeMetadata.of(part).to_metadata(),
    )
    tp = TopicPartition(part.topic, part.partition)
    yield landed_materialization(translator, part.group, tp, part.records, part.quarantined, part.run_id, sink_root)


def _adopted_materializations(
    outcome: WorkerOutcome, translator: DagsterCohortTranslator, run_id: str, sink_root: str | None
) -> Iterator[dg.AssetMaterialization]:
    """The ranges this batch adopted into the ledger (a table sink's commit whose run died before its ledger
    commit): reported here, as the run that read them would have reported them."""
    assert outcome.result is not None
    for adopted in outcome.result.adopted:
        entry = adopted.range
        if entry.gap_reason is not None or entry.until_offset == entry.from_offset:
            continue
        read_by = adopted.run_id or "unknown"
        description = (
            f"{entry.topic_partition} [{entry.from_offset}, {entry.until_offset}) landed in the sink table by run "
            f"{read_by}, which ended before its ledger commit; adopted into the ledger by run {run_id}"
        )
        part = reported_range(
            entry,
            group=outcome.group,
            generation=outcome.generation,
            member=outcome.member_id,
            instance_id=outcome.instance_id,
            run_id=read_by,
            reported_by=run_id,
        )
        yield from _reported_range(translator, part, description, sink_root)


def landed_root(pipeline: PipelineSpec | None) -> str | None:
    """Where a partition's landed folders are: the Parquet sink's root, or a table's data folder."""
    if pipeline is None:
        return None
    return pipeline.sink_path if pipeline.table_format == "parquet" else f"{pipeline.sink_path.rstrip('/')}/data"


def landed_materialization(
    translator: DagsterCohortTranslator,
    group: str,
    tp: TopicPartition,
    records: int,
    quarantined: int,
    run_id: str,
    sink_root: str | None,
    columns: dg.TableSchema | None = None,
) -> dg.AssetMaterialization:
    """The landed asset's materialization for rows a range added to the sink (and to the quarantine)."""
    metadata: dict[str, Any] = {
        "dagster/row_count": dg.MetadataValue.int(records),
        f"{METADATA_PREFIX}quarantined": dg.MetadataValue.int(quarantined),
        f"{METADATA_PREFIX}run_id": dg.MetadataValue.dagster_run(run_id),
    }
    if columns is not None:
        metadata["dagster/column_schema"] = columns
    if sink_root is not None:
        metadata["dagster/uri"] = SinkLayout(sink_root).partition_dir(tp.topic, tp.partition)
    return dg.AssetMaterialization(
        asset_key=translator.get_landed_asset_key(group, tp.topic),
        partition=str(tp.partition),
        description=f"{records} rows of {tp} landed ({quarantined} quarantined)",
        metadata=metadata,
    )


def unreported_materializations(
    instance: dg.DagsterInstance,
    coordinator: Coordinator,
    config: CohortConfig,
    translator: DagsterCohortTranslator,
    instance_ids: Collection[str],
    counts: Mapping[str, int],
    run_id: str,
    rerun_of: str | None = None,
) -> Iterator[dg.AssetMaterialization]:
    """Materializations of ledger ranges that no run reported: those the slots `instance_ids` committed,
    those committed outside any member (an empty group's standalone commits), and those of `rerun_of`.

    A run killed between its ledger commit and its materialization events (or a rerun that died the same
    way) leaves committed ranges with no entry in the audit trail; every later run of the slot reports
    them from the ledger, which records the committing run, generation, member and counts. Only what changed
    since each partition's trail mark is read (cohort.assignment.ledger.trail), so the cost does not grow with history.
    """
    sink_root = landed_root(config.pipeline)
    partitions = [TopicPartition(topic, p) for topic, count in sorted(counts.items()) for p in range(count)]
    readings = read_dagster_trail(
        instance,
        coordinator,
        config.group,
        lambda topic: translator.get_asset_key(config.group, topic),
        partitions,
        host_slots=config.host_slots,
    )

    def ours(entry: LedgerEntry) -> bool:
        return (
            entry.instance_id is None
            or entry.instance_id in instance_ids
            or bool(rerun_of and entry.run_id == rerun_of)
        )

    for part in unreported_ranges(readings, ours, group=config.group, reported_by=run_id):
        description = (
            f"{TopicPartition(part.topic, part.partition)} [{part.from_offset}, {part.until_offset}) committed by run "
            f"{part.run_id} in generation {part.generation}, which ended before reporting it "
            f"(reported from the ledger by run {run_id})"
        )
        yield from _reported_range(translator, part, description, sink_root)
