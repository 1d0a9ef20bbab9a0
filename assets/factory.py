"""The factory: from a `CohortConfig` to the group's assets, worker job, schedule, checks and sensors.

`cohort_assets(config)` wires one group's objects (the work lives in `group_batch`, `worker`, `checks` and
`sensors`); `build_cohort_definitions(configs, kafka=..., spark=...)` assembles a whole `Definitions` with
the shared Kafka and Spark resources, each group's resource, and one membership and one topic sensor over
all groups (or a pair per group, `sensors_per_group`); `build_group_definitions` the same without the shared
resources. The worker job is the asset job of the group's assets: the schedule and the sensors launch it,
and the asset pages list them as the assets' automations. Materialize runs the same op through Dagster's
implicit asset job.

Example:
    >>> from cohort.pipelines import PipelineSpec
    >>> from cohort.resources import CohortGroupResource, KafkaResource, SparkResource
    >>> group = CohortGroupResource(group="orders-ingest", topics=["orders"], store_url="sqlite:///cohort.db")
    >>> defs = build_cohort_definitions(
    ...     [CohortConfig(group, pipeline=PipelineSpec(sink_path="/lake/orders"))],
    ...     kafka=KafkaResource(bootstrap_servers="localhost:9092"),
    ...     spark=SparkResource(),
    ... )
    >>> defs.resolve_job_def("cohort_worker__orders_ingest").name
    'cohort_worker__orders_ingest'
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import (
    UnresolvedAssetJobDefinition as AssetJob,  # what dg.define_asset_job returns; not re-exported by dagster
)

from cohort.assets.busy_slots import busy_slots
from cohort.assets.checks import AUDIT_TAG
from cohort.assets.group_batch import REGISTRY_RESOURCE_KEY, build_group_assets, needs_registry_resource
from cohort.assets.sensors import build_membership_sensor, build_topic_sensor
from cohort.assets.slot_runs import live_member_runs, runs_in_flight
from cohort.assets.translator import CohortConfig, DagsterCohortTranslator, safe_name
from cohort.assets.worker import GROUP_TAG, SLOT_TAG, BatchRunner, worker_run_config
from cohort.assignment.clock import Clock
from cohort.resources.group import CohortGroupResource
from cohort.resources.kafka import KafkaResource
from cohort.resources.schema_registry import SchemaRegistryResource
from cohort.resources.spark import SparkResource

__all__ = [
    "CohortDefinitions",
    "build_audit_schedule",
    "build_cohort_definitions",
    "build_group_definitions",
    "build_worker_schedule",
    "cohort_assets",
]


@dataclass(frozen=True)
class CohortDefinitions:
    """One group's Dagster objects."""

    config: CohortConfig
    assets: dg.AssetsDefinition
    worker_job: AssetJob
    checks_job: AssetJob
    schedule: dg.ScheduleDefinition | None
    audit_schedule: dg.ScheduleDefinition | None = None

    @property
    def resources(self) -> dict[str, Any]:
        """The group's own resource, under its key."""
        return {self.config.resource_key: self.config.group_resource}


def build_worker_schedule(
    config: CohortConfig,
    job: AssetJob,
    translator: DagsterCohortTranslator,
    *,
    clock: Clock | None = None,
    default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.STOPPED,
) -> dg.ScheduleDefinition | None:
    """A schedule launching one run per worker slot of this host (`config.launched_slots`) on
    `config.schedule` (stopped unless `default_status` says RUNNING: a deployment that should batch from its
    first start, with no one to turn it on). A slot whose previous run is still in flight is skipped
    (`cohort.assets.busy_slots`): an overloaded group slows down instead of fencing its own runs."""
    if config.schedule is None:
        return None
    slots = config.launched_slots

    @dg.schedule(
        name=f"cohort_batches__{safe_name(config.group)}",
        cron_schedule=config.schedule,
        job=job,
        default_status=default_status,
        required_resource_keys={config.resource_key},
        description=(
            f"One batch of group {config.group!r}: a run per worker slot, except slots whose previous batch is "
            "still in flight (a second run of a slot would fence the first)."
        ),
    )
    def worker_schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest] | dg.SkipReason:
        when = context.scheduled_execution_time.isoformat()
        group: CohortGroupResource = getattr(context.resources, config.resource_key)
        coordinator = group.get_coordinator(clock)
        now = coordinator.clock.now()
        busy = busy_slots(
            runs_in_flight(context.instance, config.group, job.name, slots),
            live_member_runs(coordinator.store.load(config.group), now),
            now,
        )
        for slot, why in sorted(busy.items()):
            context.log.info(f"group {config.group!r}: slot {slot} skipped, its batch is in flight ({why})")
        launch = [slot for slot in slots if slot not in busy]
        if not launch:
            return dg.SkipReason(f"every slot of group {config.group!r} has a batch in flight")
        return [
            dg.RunRequest(
                run_key=f"{config.group}:slot-{slot}:scheduled-{when}",
                run_config=worker_run_config(config, slot),
                tags={GROUP_TAG: config.group, SLOT_TAG: str(slot)},
            )
            for slot in launch
        ]

    return worker_schedule


def build_audit_schedule(
    config: CohortConfig,
    checks_job: AssetJob,
    *,
    default_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.STOPPED,
) -> dg.ScheduleDefinition | None:
    """A schedule running the group's checks in full (tagged `cohort/audit: full`) on `config.audit_schedule`:
    the checks after each batch read only what changed since their marks, so what happened to older output (a
    range directory copied or removed by hand) is found by this pass."""
    if config.audit_schedule is None:
        return None
    return dg.ScheduleDefinition(
        name=f"cohort_full_audit__{safe_name(config.group)}",
        cron_schedule=config.audit_schedule,
        job=checks_job,
        default_status=default_status,
        tags={GROUP_TAG: config.group, AUDIT_TAG: "full"},
        description=f"The full audit of group {config.group!r}: every check over the whole ledger and sink.",
    )


def cohort_assets(
    config: CohortConfig,
    *,
    translator: DagsterCohortTranslator | None = None,
    runner: BatchRunner | None = None,
    clock: Clock | None = None,
    schedule_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.STOPPED,
) -> CohortDefinitions:
    """The group's assets (topic and landed data, partitioned by Kafka partition) with their checks, the
    worker job, the checks job and the schedule (its default status `schedule_status`)."""
    translator = translator or DagsterCohortTranslator()
    assets = build_group_assets(config, translator, runner=runner, clock=clock)
    keys = [spec.key for spec in assets.specs]
    job = dg.define_asset_job(
        translator.get_job_name(config.group),
        selection=dg.AssetSelection.assets(*keys),
        description=(
            f"A batch of group {config.group!r}: by default one run hosts every worker slot; the schedule and "
            "the sensors launch one run per slot (config slot: 1..N). The offset checks run after the batch."
        ),
        tags={GROUP_TAG: config.group},
        # the batch op is the job's one step: running it in the run's own process saves a second interpreter,
        # the imports and the job's rebuild (about 2 s of a warm run); a terminate still reaches the op
        executor_def=dg.in_process_executor,
    )
    checks_job = dg.define_asset_job(
        translator.get_checks_job_name(config.group),
        selection=dg.AssetSelection.checks_for_assets(*keys),
        description=f"Offset audit of group {config.group!r}.",
        tags={GROUP_TAG: config.group},
    )
    return CohortDefinitions(
        config=config,
        assets=assets,
        worker_job=job,
        checks_job=checks_job,
        schedule=build_worker_schedule(config, job, translator, clock=clock, default_status=schedule_status),
        audit_schedule=build_audit_schedule(config, checks_job, default_status=schedule_status),
    )


def build_cohort_definitions(
    configs: Sequence[CohortConfig],
    *,
    kafka: KafkaResource,
    spark: SparkResource | None = None,
    schema_registry: SchemaRegistryResource | None = None,
    translator: DagsterCohortTranslator | None = None,
    clock: Clock | None = None,
    runner: BatchRunner | None = None,
    sensor_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING,
    schedule_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.STOPPED,
    membership_interval_s: int = 15,
    topic_interval_s: int = 30,
    sensors_per_group: bool = False,
) -> dg.Definitions:
    """Definitions for several groups sharing one Kafka and one Spark resource (and the Schema Registry of
    the groups reading Avro, Protobuf or JSON Schema): the sensors start running (`sensor_status`), the
    schedules stopped (`schedule_status`) unless told otherwise. The membership sensor looks for lost members
    every `membership_interval_s` (at most: the daemon's tick), the topic sensor for grown topics every
    `topic_interval_s`. With `sensors_per_group`, each group gets its own pair of sensors, named after it."""
    registry_groups = [c.group for c in configs if needs_registry_resource(c)]
    if registry_groups and schema_registry is None:
        raise ValueError(
            f"group(s) {registry_groups} read a Schema Registry format: give "
            "build_cohort_definitions(..., schema_registry=SchemaRegistryResource(url=...))"
        )
    resources: dict[str, Any] = {"kafka": kafka, "spark": spark or SparkResource()}
    if schema_registry is not None:
        resources[REGISTRY_RESOURCE_KEY] = schema_registry
    groups = build_group_definitions(
        configs,
        translator=translator,
        clock=clock,
        runner=runner,
        sensor_status=sensor_status,
        schedule_status=schedule_status,
        membership_interval_s=membership_interval_s,
        topic_interval_s=topic_interval_s,
        sensors_per_group=sensors_per_group,
    )
    return groups.with_resources(resources)


def build_group_definitions(
    configs: Sequence[CohortConfig],
    *,
    translator: DagsterCohortTranslator | None = None,
    clock: Clock | None = None,
    runner: BatchRunner | None = None,
    sensor_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING,
    schedule_status: dg.DefaultScheduleStatus = dg.DefaultScheduleStatus.STOPPED,
    membership_interval_s: int = 15,
    topic_interval_s: int = 30,
    sensors_per_group: bool = False,
) -> dg.Definitions:
    """`build_cohort_definitions` without the shared resources (`kafka`, `spark`, `schema_registry`): the
    groups' objects and their own resources, for Definitions merged with others that carry those (a dg
    component's, a project's resources file)."""
    translator = translator or DagsterCohortTranslator()
    names = [c.group for c in configs]
    if len(set(names)) != len(names):
        raise ValueError(f"each group may appear once, got {names}")
    parts = [
        cohort_assets(c, translator=translator, runner=runner, clock=clock, schedule_status=schedule_status)
        for c in configs
    ]
    resources: dict[str, Any] = {}
    for part in parts:
        resources.update(part.resources)
    sensor_sets = [[p] for p in parts] if sensors_per_group else [parts] if parts else []
    sensors = [
        sensor
        for members in sensor_sets
        for sensor in _sensors(
            members,
            translator,
            clock=clock,
            status=sensor_status,
            intervals=(membership_interval_s, topic_interval_s),
            suffix=f"__{safe_name(members[0].config.group)}" if sensors_per_group else "",
        )
    ]
    return dg.Definitions(
        assets=[p.assets for p in parts],
        jobs=[*(p.worker_job for p in parts), *(p.checks_job for p in parts)],
        schedules=[s for p in parts for s in (p.schedule, p.audit_schedule) if s is not None],
        sensors=sensors,
        resources=resources,
    )


def _sensors(
    parts: Sequence[CohortDefinitions],
    translator: DagsterCohortTranslator,
    *,
    clock: Clock | None,
    status: dg.DefaultSensorStatus,
    intervals: tuple[int, int],
    suffix: str,
) -> list[dg.SensorDefinition]:
    """The membership and the topic sensor over `parts`' groups, their names ending in `suffix`."""
    configs = [p.config for p in parts]
    jobs = [p.worker_job for p in parts]
    return [
        build_membership_sensor(
            configs,
            jobs,
            translator=translator,
            clock=clock,
            name=f"cohort_membership_sensor{suffix}",
            default_status=status,
            minimum_interval_seconds=intervals[0],
        ),
        build_topic_sensor(
            configs,
            jobs,
            translator=translator,
            clock=clock,
            name=f"cohort_topic_sensor{suffix}",
            default_status=status,
            minimum_interval_seconds=intervals[1],
        ),
    ]
