"""The factory: from a small `CohortConfig` to assets, the worker job, its schedule, checks and sensors.

`cohort_assets(config)` wires one group's objects (it only builds specs; the work lives in `worker`,
`checks` and `sensors`); `build_cohort_definitions(configs, kafka=..., spark=...)` assembles a whole
`Definitions` with the shared Kafka and Spark resources and one membership and one topic sensor over all
groups.

Example:
    >>> from cohort.pipelines.spec import PipelineSpec  # doctest: +SKIP
    >>> defs = build_cohort_definitions(  # doctest: +SKIP
    ...     [CohortConfig(group="orders-ingest", topics=("orders",), pipeline=PipelineSpec(sink_path="/lake"))],
    ...     kafka=KafkaResource(bootstrap_servers="localhost:9092"),
    ...     spark=SparkResource(),
    ... )
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg

from cohort.assets.checks import build_topic_checks
from cohort.assets.sensors import build_membership_sensor, build_topic_sensor
from cohort.assets.translator import CohortConfig, DagsterCohortTranslator, safe_name
from cohort.assets.worker import GROUP_TAG, SLOT_TAG, BatchRunner, build_worker_job, worker_run_config
from cohort.assignment.clock import Clock
from cohort.resources.group import CohortGroupResource
from cohort.resources.kafka import KafkaResource
from cohort.resources.spark import SparkResource

__all__ = ["CohortDefinitions", "build_cohort_definitions", "build_worker_schedule", "cohort_assets"]


@dataclass(frozen=True)
class CohortDefinitions:
    """One group's Dagster objects."""

    config: CohortConfig
    assets: tuple[dg.AssetSpec, ...]
    checks: tuple[dg.AssetChecksDefinition, ...]
    worker_job: dg.JobDefinition
    checks_job: Any  # an unresolved asset job (dg.define_asset_job)
    schedule: dg.ScheduleDefinition | None
    group_resource: CohortGroupResource

    @property
    def resources(self) -> dict[str, Any]:
        """The group's own resource, under its key."""
        return {self.config.resource_key: self.group_resource}


def build_worker_schedule(
    config: CohortConfig, job: dg.JobDefinition, translator: DagsterCohortTranslator
) -> dg.ScheduleDefinition | None:
    """A schedule launching one run per worker slot on `config.schedule` (stopped by default)."""
    if config.schedule is None:
        return None
    slots = range(1, config.worker_slots + 1)

    @dg.schedule(
        name=f"cohort_batches__{safe_name(config.group)}",
        cron_schedule=config.schedule,
        job=job,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"One batch of group {config.group!r}: a run per worker slot.",
    )
    def worker_schedule(context: dg.ScheduleEvaluationContext) -> list[dg.RunRequest]:
        when = context.scheduled_execution_time.isoformat()
        return [
            dg.RunRequest(
                run_key=f"{config.group}:slot-{slot}:scheduled-{when}",
                run_config=worker_run_config(config, slot),
                tags={GROUP_TAG: config.group, SLOT_TAG: str(slot)},
            )
            for slot in slots
        ]

    return worker_schedule


def cohort_assets(
    config: CohortConfig,
    *,
    translator: DagsterCohortTranslator | None = None,
    runner: BatchRunner | None = None,
) -> CohortDefinitions:
    """The assets (one per topic, dynamic partitions keyed by partition), worker job, schedule and checks."""
    translator = translator or DagsterCohortTranslator()
    topics = config.asset_topics
    specs = tuple(translator.get_asset_spec(config, t) for t in topics)
    checks = tuple(build_topic_checks(config, t, translator) for t in topics)
    job = build_worker_job(config, translator, runner=runner)
    checks_job = dg.define_asset_job(
        translator.get_checks_job_name(config.group),
        selection=dg.AssetSelection.checks_for_assets(*[s.key for s in specs]),
        description=f"Offset audit of group {config.group!r}.",
    )
    return CohortDefinitions(
        config=config,
        assets=specs,
        checks=checks,
        worker_job=job,
        checks_job=checks_job,
        schedule=build_worker_schedule(config, job, translator),
        group_resource=config.group_resource,
    )


def build_cohort_definitions(
    configs: Sequence[CohortConfig],
    *,
    kafka: KafkaResource,
    spark: SparkResource | None = None,
    translator: DagsterCohortTranslator | None = None,
    clock: Clock | None = None,
    runner: BatchRunner | None = None,
    sensor_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING,
) -> dg.Definitions:
    """Definitions for several groups sharing one Kafka and one Spark resource."""
    translator = translator or DagsterCohortTranslator()
    names = [c.group for c in configs]
    if len(set(names)) != len(names):
        raise ValueError(f"each group may appear once, got {names}")
    parts = [cohort_assets(c, translator=translator, runner=runner) for c in configs]
    jobs = [p.worker_job for p in parts]
    resources: dict[str, Any] = {"kafka": kafka, "spark": spark or SparkResource()}
    for part in parts:
        resources.update(part.resources)
    sensors = []
    if configs:
        sensors = [
            build_membership_sensor(configs, jobs, translator=translator, clock=clock, default_status=sensor_status),
            build_topic_sensor(configs, jobs, translator=translator, clock=clock, default_status=sensor_status),
        ]
    return dg.Definitions(
        assets=[spec for p in parts for spec in p.assets],
        asset_checks=[check for p in parts for check in p.checks],
        jobs=[*jobs, *(p.checks_job for p in parts)],
        schedules=[p.schedule for p in parts if p.schedule is not None],
        sensors=sensors,
        resources=resources,
    )
