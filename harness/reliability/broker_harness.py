"""Shared harness of the zombie and broker-fault scenarios: one group on a real broker, run through Dagster.

A `FaultGroup` is a fresh topic (produced with JSON events, a few malformed), a group `Setup` (as in
harness/dagster_group.py, so a worker subprocess rebuilds the same Definitions), the assignor, and the
helpers every scenario needs: Definitions for a bootstrap address and a clock, running a worker slot
in-process, ticking the membership sensor, reading what a run failed with, and snapshots of the ledger,
Kafka's committed offsets and the sink, so a scenario can prove a faulty run changed none of them.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from cohort.assets.factory import build_cohort_definitions
from cohort.assets.translator import CohortConfig, DagsterCohortTranslator
from cohort.assignment.clock import Clock
from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.devtools.topics import create_topic, produce
from cohort.pipelines.sink.layout import SinkLayout, parse_range_dir
from cohort.resources import KafkaResource, SparkResource
from harness.dagster_group import Setup, config_for, json_records
from harness.reliability.outcome import DeliveryAudit, audit_delivery
from harness.reliability.zombie_worker import SPARK_CONF, SPARK_MASTER

__all__ = ["FaultGroup", "GroupSnapshot", "error_text", "group_config", "prepare_group", "run_failure_text"]

T = DagsterCohortTranslator()

Transform = Callable[[Any], Any]


def group_config(setup: Setup, assignor: str, *, transform: Transform | None = None, **spec: Any) -> CohortConfig:
    """The group's CohortConfig: harness.dagster_group's, with one assignor and pipeline overrides."""
    config = config_for(setup)
    pipeline = dataclasses.replace(config.pipeline, transform=transform, **spec)
    group = config.group_resource.model_copy(update={"assignors": [assignor]})
    return dataclasses.replace(config, group_resource=group, pipeline=pipeline)


def definitions(config: CohortConfig, bootstrap: str, *, clock: Clock | None = None) -> dg.Definitions:
    """The group's Definitions against `bootstrap` (sensors read `clock`)."""
    return build_cohort_definitions(
        [config],
        kafka=KafkaResource(bootstrap_servers=bootstrap),
        spark=SparkResource(master=SPARK_MASTER, conf=SPARK_CONF),
        clock=clock,
    )


def error_text(info: Any) -> str:
    """One line per error of a SerializableErrorInfo chain (the error, its causes and contexts)."""
    lines: list[str] = []
    stack = [info]
    while stack:
        current = stack.pop()
        if current is None:
            continue
        lines.append(f"{current.cls_name}: {current.message.strip()}")
        stack.extend([current.context, current.cause])
    return "\n".join(lines)


def run_failure_text(instance: dg.DagsterInstance, run_id: str) -> str:
    """Everything the run's failed steps raised (empty when no step failed)."""
    records = instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    return "\n".join(error_text(r.dagster_event.step_failure_data.error) for r in records if r.dagster_event)


@dataclass(frozen=True)
class GroupSnapshot:
    """What a run may change: the ledger's ranges, Kafka's committed offsets and the sink's directories."""

    ledger: Mapping[int, tuple[tuple[int, int, str | None], ...]]
    kafka_committed: Mapping[int, int | None]
    sink_dirs: tuple[str, ...]


@dataclass
class FaultGroup:
    """One scenario's group: topic, records, setup and assignor, with the helpers around them."""

    setup: Setup
    topic: str
    partitions: int
    produced: int
    assignor: str
    workdir: Path

    @property
    def group(self) -> str:
        return self.setup.group

    def config(self, *, transform: Transform | None = None, **spec: Any) -> CohortConfig:
        return group_config(self.setup, self.assignor, transform=transform, **spec)

    def definitions(self, bootstrap: str | None = None, *, clock: Clock | None = None, **spec: Any) -> dg.Definitions:
        return definitions(self.config(**spec), bootstrap or self.setup.bootstrap, clock=clock)

    def instance(self) -> dg.DagsterInstance:
        """The scenario's persistent Dagster instance (worker subprocesses open the same one)."""
        return dg.DagsterInstance.local_temp(tempdir=self.setup.dagster_home)

    def coordinator(self) -> Coordinator:
        return Coordinator.from_url(self.setup.store_url)

    @property
    def tps(self) -> list[TopicPartition]:
        return [TopicPartition(self.topic, p) for p in range(self.partitions)]

    @property
    def produced_map(self) -> dict[str, dict[int, int]]:
        """{topic: {partition: records}}, as outcome.audit_delivery takes it (json_records is round-robin)."""
        per = {p: len(range(p, self.produced, self.partitions)) for p in range(self.partitions)}
        return {self.topic: per}

    def run_slot(
        self,
        defs: dg.Definitions,
        instance: dg.DagsterInstance,
        slot: int = 1,
        *,
        request: dg.RunRequest | None = None,
    ) -> dg.ExecuteInProcessResult:
        """Run worker slot `slot` (or a sensor's run request) in this process; failures are returned."""
        from cohort.assets.worker import worker_run_config

        job = defs.resolve_job_def(T.get_job_name(self.group))
        run_config = request.run_config if request is not None else worker_run_config(self.config(), slot)
        tags = dict(request.tags) if request is not None else {"cohort/slot": str(slot)}
        return job.execute_in_process(run_config=run_config, tags=tags, instance=instance, raise_on_error=False)

    def tick_membership(
        self, defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None = None
    ) -> dg.SensorResult:
        """One evaluation of the group's membership sensor."""
        sensor = defs.resolve_sensor_def("cohort_membership_sensor")
        with dg.build_sensor_context(instance=instance, resources=defs.resources, cursor=cursor) as context:
            return sensor.evaluate_tick(context)

    def snapshot(self, coordinator: Coordinator, kafka: KafkaResource) -> GroupSnapshot:
        """The ledger, Kafka's committed offsets and the sink's range directories (with their markers)."""
        ledger = {
            tp.partition: tuple(
                (e.from_offset, e.until_offset, e.gap_reason) for e in coordinator.ledger_history(self.group, *tp)
            )
            for tp in self.tps
        }
        in_kafka = kafka.committed_offsets(self.group, self.tps)
        return GroupSnapshot(ledger, {tp.partition: in_kafka.get(tp) for tp in self.tps}, self.sink_listing())

    def sink_listing(self) -> tuple[str, ...]:
        """Every range directory of the sink and the quarantine, with the files inside (markers included)."""
        found = []
        for layout in (SinkLayout(self.setup.sink), SinkLayout(f"{self.setup.sink}/_quarantine")):
            root = Path(layout.root)
            for p in range(self.partitions):
                base = Path(layout.partition_dir(self.topic, p))
                if not base.is_dir():
                    continue
                for directory in sorted(base.iterdir()):
                    if parse_range_dir(directory.name) is not None:
                        names = sorted(f.name for f in directory.iterdir())
                        found.append(f"{directory.relative_to(root.parent)}: {' '.join(names)}")
        return tuple(found)

    def audit(self, spark: Any, kafka: KafkaResource, instance: dg.DagsterInstance | None) -> DeliveryAudit:
        """outcome.audit_delivery over this group: lost, duplicated, ledger vs Kafka vs materializations."""
        coordinator = self.coordinator()
        try:
            return audit_delivery(
                spark,
                sink=self.setup.sink,
                produced=self.produced_map,
                coordinator=coordinator,
                group=self.group,
                kafka=kafka,
                instance=instance,
            )
        finally:
            coordinator.close()


def prepare_group(
    bootstrap: str,
    workdir: Path,
    *,
    name: str,
    partitions: int = 2,
    records: int = 40,
    malformed: frozenset[int] = frozenset({5}),
    assignor: str = "cooperative-sticky",
    slots: int = 1,
    settings: Mapping[str, Any] | None = None,
) -> FaultGroup:
    """Create a topic on `bootstrap`, produce `records` JSON events, and set up a group consuming it."""
    tag = uuid.uuid4().hex[:8]
    topic = f"{name}-{tag}"
    kafka_config = {"bootstrap.servers": bootstrap}
    create_topic(kafka_config, topic, partitions)
    produce(kafka_config, topic, json_records(records, partitions, malformed=set(malformed)))
    workdir.mkdir(parents=True, exist_ok=True)
    home = workdir / "dagster"
    home.mkdir(exist_ok=True)
    setup = Setup(
        bootstrap=bootstrap,
        group=f"{name}-{tag}",
        topics=(topic,),
        sink=str(workdir / "lake"),
        store_url=f"sqlite:///{workdir / 'cohort.db'}",
        dagster_home=str(home),
        slots=slots,
        settings={"initial_rebalance_delay_s": 0.0, **(settings or {})},
    )
    return FaultGroup(setup, topic, partitions, records, assignor, workdir)
