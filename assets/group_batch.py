"""The group's assets as one multi-asset: a run of it is a batch of the group, and Materialize starts one.

The topic assets, the landed-data assets and their checks belong to one op, the group's batch op. Its
`slot` config says which worker slots the run hosts: `all` (the default, what Materialize and a plain
launch use) hosts one member per slot, each on its own thread with the same Spark session, so the whole
group works in parallel in one run; `1`..`N` hosts that slot only (what the schedule and the sensors'
reruns launch, one run per slot). Either way each slot is the group's static member `<group>/worker-<n>`:
it joins, gets its partitions from the assignor, commits through the fenced ledger, and a second run
hosting the same slot fences the first, so no offset is committed twice. A run launched for selected
partition keys still runs the whole group's batch (the protocol, not the selection, decides who reads
what); its materializations name the partitions actually consumed.

The run first tags itself with its group and slots (manual launches included), reports the ranges its
slots committed that no run reported, runs the batch, reports every consumed range, then evaluates the
selected checks. Launched with only checks selected (from the asset page), it runs the checks alone.
"""

import contextlib
import dataclasses
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg

from cohort.assets.checks import AUDIT_TAG, check_results, op_results
from cohort.assets.replay import REPLAY_TAG, Replay
from cohort.assets.translator import (
    METADATA_PREFIX,
    CohortConfig,
    DagsterCohortTranslator,
    landed_columns,
    table_schema,
)
from cohort.assets.worker import (
    ALL_SLOTS,
    GROUP_TAG,
    RERUN_TAG,
    SLOT_TAG,
    BatchRunner,
    WorkerOutcome,
    WorkerSetup,
    landed_root,
    materializations,
    op_name,
    run_worker,
    unreported_materializations,
)
from cohort.assignment.clock import Clock
from cohort.pipelines.formats.registry import RegistryError
from cohort.pipelines.spec import PipelineSpec
from cohort.resources.group import CohortGroupResource
from cohort.resources.kafka import KafkaResource
from cohort.resources.schema_registry import SchemaRegistryResource
from cohort.resources.spark import SparkResource

__all__ = [
    "REGISTRY_RESOURCE_KEY",
    "SlotFailure",
    "build_group_assets",
    "host_slots",
    "needs_registry_resource",
    "slot_config_type",
]

REGISTRY_RESOURCE_KEY = "schema_registry"
TRAIL_READ_LOG = "audit trail read in"
"""How a batch run's log line on its start-up cost begins (the unreported-range report; the soak reads it)."""
"""The Definitions' key of the `SchemaRegistryResource` (groups reading a registry format take it from there)."""


def needs_registry_resource(config: CohortConfig) -> bool:
    """Whether the group's pipeline reads a registry format and names no registry itself."""
    return config.pipeline is not None and config.pipeline.uses_registry and config.pipeline.registry is None


def slot_config_type(config: CohortConfig) -> dg.Enum:
    """`all` or one of the group's slot numbers: Dagster refuses any other value when the run is launched."""
    values = [dg.EnumValue(ALL_SLOTS, python_value=0, description="every worker slot of this host, in this run")]
    values += [
        dg.EnumValue(str(slot), python_value=slot, description=f"worker slot {slot} only")
        for slot in range(1, config.worker_slots + 1)
    ]
    return dg.Enum(f"{op_name(config)}__slot", values)


@dataclass(frozen=True)
class SlotFailure:
    """A hosted slot whose member failed; the others' work stands."""

    slot: int
    error: BaseException


def host_slots(setup: WorkerSetup, slots: Sequence[int]) -> tuple[list[WorkerOutcome], list[SlotFailure]]:
    """Run one member per slot, each on its own thread, and gather the outcomes (one slot: its error is raised).

    The op's thread only waits, so a terminated run's interrupt reaches it at once (a thread interrupted in the
    middle of a Spark call could make no other until that job ended); it then cancels the Spark jobs, the
    members' batches fail, the members leave the group and their threads end (`_stop_members`); members whose
    batch had ended leave too (a later run of the slot reports what they committed).
    """
    context, spark = setup.context, setup.spark
    if len(slots) > 1:
        spark.get_session()  # started once, before the members share it
    outcomes: dict[int, WorkerOutcome] = {}
    failures: list[SlotFailure] = []
    lock = threading.Lock()

    def member(slot: int) -> None:
        try:
            outcome = run_worker(setup, slot)
        except BaseException as exc:  # reported below; a failed slot does not stop the others
            with lock:
                failures.append(SlotFailure(slot, exc))
            return
        with lock:
            outcomes[slot] = outcome

    threads = [threading.Thread(target=member, args=(s,), name=f"cohort-slot-{s}", daemon=True) for s in slots]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=1.0)
    except BaseException as exc:  # the run is being terminated: stop Spark's jobs so the members' batches end
        interrupted = f"run interrupted ({type(exc).__name__})"
        _log_quietly(context, f"{interrupted}: canceling the Spark jobs of slot(s) {list(slots)}")
        _stop_members(spark, threads)
        with lock:
            finished = list(outcomes.values())
        for outcome in finished:  # slots whose batch ended before the interrupt: their runs report nothing now
            with contextlib.suppress(Exception):
                outcome.leave()
        alive = [t.name for t in threads if t.is_alive()]
        _log_quietly(context, f"still running: {alive}" if alive else f"the members of slot(s) {list(slots)} closed")
        raise
    if len(slots) == 1 and failures:
        raise failures[0].error
    return [outcomes[s] for s in sorted(outcomes)], sorted(failures, key=lambda f: f.slot)


def _log_quietly(context: dg.OpExecutionContext, message: str) -> None:
    """A warning in the run's log; the run is ending anyway, so a failure to log is ignored."""
    with contextlib.suppress(Exception):
        context.log.warning(message)


def _stop_members(spark: SparkResource, threads: Sequence[threading.Thread], timeout_s: float = 60.0) -> None:
    """Cancel the Spark jobs until every member thread has ended, at most `timeout_s`: a member that was
    between two jobs (planning, counting) starts the next one after the first cancel. A member still
    joining ends when its join does; its session then expires."""
    deadline = time.monotonic() + timeout_s
    for thread in threads:
        while thread.is_alive() and time.monotonic() < deadline:
            spark.cancel_jobs()
            thread.join(timeout=1.0)


def build_group_assets(
    config: CohortConfig,
    translator: DagsterCohortTranslator,
    *,
    runner: BatchRunner | None = None,
    clock: Clock | None = None,
) -> dg.AssetsDefinition:
    """The group's topic and landed-data assets and their checks, computed by the group's batch op."""
    topics = config.asset_topics
    specs = [translator.get_asset_spec(config, t) for t in topics]
    specs += [translator.get_landed_asset_spec(config, t) for t in topics]
    group_key = config.resource_key
    registry_keys = {REGISTRY_RESOURCE_KEY} if needs_registry_resource(config) else set()

    @dg.multi_asset(
        name=op_name(config),
        specs=specs,
        check_specs=[spec for t in topics for spec in translator.get_check_specs(config, t)],
        can_subset=True,
        backfill_policy=dg.BackfillPolicy.single_run(),  # any partition selection: one run, one group batch
        required_resource_keys={group_key, "kafka", "spark", *registry_keys},
        config_schema={
            "slot": dg.Field(
                slot_config_type(config),
                default_value=ALL_SLOTS,
                description="Which worker slots this run hosts: all of this host's (default), or one (1..N).",
            ),
            "replay_from": dg.Field(
                str,
                default_value="",
                description=(
                    "Replay the run's partitions (a backfill's selection; none selected: all) from 'earliest', "
                    "an offset, or an ISO 8601 time such as 2026-11-23T08:00:00Z. Empty: an ordinary batch."
                ),
            ),
        },
        description=f"A batch of group {config.group!r}: each hosted worker slot joins, consumes, commits.",
        op_tags={GROUP_TAG: config.group},
    )
    def group_batch(context: dg.AssetExecutionContext) -> Iterator[Any]:
        group: CohortGroupResource = getattr(context.resources, group_key)
        kafka: KafkaResource = context.resources.kafka
        spark: SparkResource = context.resources.spark
        op = context.op_execution_context
        slot = int(op.op_config["slot"])
        slots = [slot] if slot else list(config.launched_slots)
        if context.selected_asset_keys:
            replay = _replay(context, str(op.op_config["replay_from"]))
            registry = getattr(context.resources, REGISTRY_RESOURCE_KEY) if registry_keys else None
            setup = WorkerSetup(context.op_execution_context, config, translator, group, kafka, spark, runner, replay)
            yield from _batch(context, setup, slots, registry)
        if context.selected_asset_check_keys:
            full = context.run.tags.get(AUDIT_TAG) == "full"
            for evaluation in check_results(
                context.instance, config, translator, group, kafka, context.selected_asset_check_keys, clock, full=full
            ):
                yield from op_results(context.assets_def, evaluation)

    return group_batch


def _replay(context: dg.AssetExecutionContext, replay_from: str) -> Replay | None:
    """The replay the run's config (or else its `cohort/replay_from` tag) asks for, over the run's partitions
    (all when it targets none)."""
    tags = context.op_execution_context.run.tags
    replay_from = replay_from.strip() or tags.get(REPLAY_TAG, "")
    if not replay_from.strip():
        return None
    partitioned = "dagster/partition" in tags or "dagster/asset_partition_range_start" in tags
    try:
        return Replay.parse(replay_from, context.partition_keys if partitioned else None)
    except ValueError as exc:
        raise dg.Failure(str(exc)) from None


def _with_reader_schemas(
    config: CohortConfig, registry: SchemaRegistryResource | None, topics: Collection[str]
) -> CohortConfig:
    """The group's config for this run: the registry resource's connection in its pipeline, and the reader
    schemas read from the registry once, so every slot of the run decodes into the same columns."""
    pipeline = config.pipeline
    if pipeline is None or not pipeline.uses_registry:
        return config
    if pipeline.registry is None and registry is not None:
        pipeline = dataclasses.replace(pipeline, registry=registry.connection())
    if topics:  # no topic yet: no member reads anything
        try:
            pipeline = pipeline.with_readers(topics)
        except (ValueError, RegistryError) as exc:
            raise dg.Failure(f"group {config.group!r}: {exc}") from None
    return dataclasses.replace(config, pipeline=pipeline)


def _landed_schema(pipeline: PipelineSpec) -> dg.TableSchema | None:
    """The sink's columns this run landed (its reader schemas resolved); None with a transform, whose output
    columns are known only to Spark."""
    return table_schema(landed_columns(pipeline)) if not pipeline.reshapes else None


def _batch(
    context: dg.AssetExecutionContext,
    setup: WorkerSetup,
    slots: Sequence[int],
    registry: SchemaRegistryResource | None,
) -> Iterator[Any]:
    """The batch of the hosted `slots`: tag the run, report earlier unreported ranges, run the members, report
    what they consumed, then let them leave."""
    config, translator, group, kafka, replay = setup.config, setup.translator, setup.group, setup.kafka, setup.replay
    op = context.op_execution_context
    tags = {GROUP_TAG: config.group, SLOT_TAG: ",".join(str(s) for s in slots)}
    if replay is not None:
        tags[REPLAY_TAG] = replay.target.describe()
    missing = {k: v for k, v in tags.items() if op.run.tags.get(k) != v}
    if missing:  # manual launches too: every batch run names its group and slots
        context.instance.add_run_tags(op.run_id, missing)
    run_tags = op.run.tags
    chosen = run_tags.get("dagster/partition") or run_tags.get("dagster/asset_partition_range_start")
    if chosen is not None and replay is None:
        context.log.info(
            f"launched for partition {chosen}{'...' if 'dagster/asset_partition_range_start' in run_tags else ''}: "
            f"this runs the batch of the whole group {config.group!r}; the assignor decides which member reads "
            "which partition"
        )
    counts = kafka.subscribed_partition_counts(group.topics, group.topic_pattern)
    instance_ids = {group.instance_id(s) for s in slots}
    began = time.perf_counter()
    earlier = list(
        unreported_materializations(
            context.instance,
            group.get_coordinator(),
            config,
            translator,
            instance_ids,
            counts,
            op.run_id,
            rerun_of=run_tags.get(RERUN_TAG),
        )
    )
    context.log.info(f"{TRAIL_READ_LOG} {(time.perf_counter() - began) * 1000:.0f} ms: {len(earlier)} earlier ranges")
    yield from earlier
    config = _with_reader_schemas(config, registry, counts.keys())  # after the report of earlier commits
    outcomes, failures = host_slots(dataclasses.replace(setup, config=config), slots)
    pipeline = config.pipeline
    sink_root = landed_root(pipeline)
    columns = _landed_schema(pipeline) if pipeline is not None and pipeline.uses_registry else None
    try:
        for outcome in outcomes:
            yield from materializations(outcome, translator, op.run_id, sink_root, columns)
    finally:  # the members leave once their batch is reported (killed before: their sessions expire)
        for outcome in outcomes:
            outcome.leave()
    summary = {
        f"{METADATA_PREFIX}slots": ",".join(str(s) for s in slots),
        f"{METADATA_PREFIX}generation": ",".join(str(o.generation) for o in outcomes) or "-",
        f"{METADATA_PREFIX}partitions": dg.MetadataValue.int(sum(len(o.assignment) for o in outcomes)),
        f"{METADATA_PREFIX}records": dg.MetadataValue.int(sum(o.result.records for o in outcomes if o.result)),
        f"{METADATA_PREFIX}attempts": dg.MetadataValue.int(sum(o.attempts for o in outcomes)),
    }
    context.log.info(f"group {config.group!r} batch: {summary}")
    if failures:
        first = failures[0]
        names = ", ".join(f"slot {f.slot}: {type(f.error).__name__}: {f.error}" for f in failures)
        raise dg.Failure(f"group {config.group!r}: {len(failures)} slot(s) failed ({names})") from first.error
