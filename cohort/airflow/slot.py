"""One worker slot as an Airflow task: join as the slot's static member, run the batch, emit the audit trail, leave.

The body of the DAG's mapped task (`cohort.airflow.dag`): the same group protocol, Spark batch, fenced ledger and
Kafka mirror as a Dagster worker run (`cohort.runtime.slot_batch`), with the Airflow task instance as the
run. Its ledger run id is `airflow:<dag_id>/<run_id>/slot-<n>/try-<k>`: a retry of the mapped task keeps its
slot (Airflow keeps the map index across tries) and gets a new id, so the ledger tells the tries apart. A task
that committed and then died never had its asset events registered (Airflow registers a task's outlet events
when it succeeds): the slot's next task instance, a retry or a later run's, emits them for it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka.admin import AdminClient

from cohort.airflow.connection import bootstrap_of, kafka_config, store_url_from_env
from cohort.airflow.lineage import emit
from cohort.airflow.trail import AIRFLOW_TRAIL, AirflowTrail
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import CoordinatorError
from cohort.assignment.ledger.trail_reader import read_trail, settle_trail, unreported
from cohort.assignment.protocol.group_state import subscribed_counts
from cohort.assignment.worker_group import WorkerGroup
from cohort.common.types import TopicPartition
from cohort.pipelines.kafka.client import read_partition_counts, watermarks
from cohort.pipelines.kafka.mirror import KafkaOffsetMirror
from cohort.pipelines.spark import close_session, open_session
from cohort.pipelines.spec import PipelineSpec
from cohort.runtime.lineage import ConsumedRange, consumed_ranges, reported_range
from cohort.runtime.slot_batch import BatchRunner, run_slot_batch

__all__ = ["AirflowGroup", "SlotReport", "earlier_ranges", "ledger_run_id", "run_slot"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AirflowGroup:
    """A consumer group as an Airflow DAG runs it: the group's settings, its pipeline, where Kafka and Spark are.

    `kafka_conn_id` names the Airflow connection whose `extra` is the librdkafka configuration; a store URL
    holding a password comes from the environment variable `store_url_env` names (read where the tasks and the
    trigger run), else it is `group.store_url`. Spark is local (`spark_master`, default local[2]), a cluster
    master URL, or a Spark Connect server (`spark_remote`, then `spark_master` is ignored: warm runs).
    """

    group: WorkerGroup
    pipeline: PipelineSpec
    kafka_conn_id: str = "kafka_default"
    store_url_env: str | None = None
    spark_master: str | None = "local[2]"
    spark_remote: str | None = None
    spark_conf: Mapping[str, str] = field(default_factory=dict)

    def worker_group(self) -> WorkerGroup:
        """The group's settings with the store URL where it really comes from."""
        if not self.store_url_env:
            return self.group
        return replace(self.group, store_url=store_url_from_env(self.store_url_env))


@dataclass(frozen=True)
class SlotReport:
    """What a slot's task did (its XCom): the member, its partitions and counts, the events it emitted."""

    slot: int
    ledger_run_id: str
    member_id: str
    generation: int
    partitions: tuple[str, ...]
    records: int
    quarantined: int
    events: int

    def as_xcom(self) -> dict[str, Any]:
        """Plain JSON for Airflow's XCom."""
        return {**vars(self), "partitions": list(self.partitions)}


def ledger_run_id(dag_id: str, run_id: str, slot: int, try_number: int) -> str:
    """The id a slot's task instance commits under (one per try)."""
    return f"airflow:{dag_id}/{run_id}/slot-{slot}/try-{try_number}"


def earlier_ranges(
    group: WorkerGroup,
    coordinator: Coordinator,
    counts: Mapping[str, int],
    slot: int,
    inlet_events: Any,
    reported_by: str,
) -> list[ConsumedRange]:
    """Ranges slot `slot` committed that no asset event shows, on the partitions of `counts`: a task instance
    killed between its ledger commit and its success (Airflow registers a task's outlet events when it
    succeeds) leaves them; the slot's next task instance, a retry or a later run's, reports them.

    Only the ledger entries and the group alias's events since each partition's trail mark are read (the marks
    then move on over what the events show: cohort.assignment.ledger.trail), whatever the history's length."""
    partitions = [TopicPartition(topic, p) for topic, count in sorted(counts.items()) for p in range(count)]
    marks = coordinator.trail_marks(group.group, AIRFLOW_TRAIL, partitions)
    source = AirflowTrail(inlet_events, group.group, marks)
    readings = read_trail(coordinator, group.group, AIRFLOW_TRAIL, partitions, source, marks=marks)
    settle_trail(coordinator, group.group, AIRFLOW_TRAIL, readings)
    instance = group.instance_id(slot)
    return [
        reported_range(
            entry,
            group=group.group,
            generation=entry.generation,
            member=entry.member_id or "",
            instance_id=instance,
            run_id=entry.run_id or "",
            reported_by=reported_by,
        )
        for entry in unreported(readings, lambda e: e.instance_id == instance)
    ]


def run_slot(
    config: AirflowGroup,
    slot: int,
    *,
    dag_id: str,
    run_id: str,
    try_number: int,
    outlet_events: Any,
    inlet_events: Any = None,
    rerun_on_failure: bool = False,
    runner: BatchRunner | None = None,
) -> SlotReport:
    """Run worker slot `slot`'s batch as this task instance, emit its asset events and end its membership.

    First, the ranges the slot committed that no asset event shows (`inlet_events`: the group alias's events)
    are reported, so the events tile the ledger even after a task was killed between its commit and its end.
    With `rerun_on_failure` (the slot's last try, in a run no rerun signal started), a failure evicts the member
    instead of leaving: the group's trigger sees a loss and reruns the slot once; a rerun that fails is left for
    a person (the next scheduled run)."""
    group = config.worker_group()
    kafka = kafka_config(config.kafka_conn_id)
    bootstrap = bootstrap_of(kafka)
    client_id = ledger_run_id(dag_id, run_id, slot, try_number)
    coordinator = group.open_coordinator()
    owned = None
    try:
        admin = AdminClient(kafka)
        subscribed_now = subscribed_counts(read_partition_counts(admin), set(group.topics), group.topic_pattern)
        earlier = earlier_ranges(group, coordinator, subscribed_now, slot, inlet_events, client_id)
        emitted = emit(outlet_events, group.group, bootstrap, earlier)

        def partition_counts(topics: set[str]) -> dict[str, int]:
            return read_partition_counts(admin, topics)

        def subscribed() -> dict[str, int]:
            return subscribed_counts(read_partition_counts(admin), set(group.topics), group.topic_pattern)

        member = group.member(
            coordinator,
            slot,
            run_id=client_id,
            topic_metadata=subscribed,
            log_offsets=lambda partitions: watermarks(kafka, partitions),  # the lag-sticky assignor's backlog
        )

        def session() -> Any:
            nonlocal owned
            if owned is None:
                owned = open_session(
                    master=None if config.spark_remote else config.spark_master,
                    remote=config.spark_remote,
                    app_name=f"cohort-{group.group}-slot-{slot}",
                    conf=dict(config.spark_conf),
                )
            return owned.session

        try:
            done = run_slot_batch(
                member,
                slot,
                spark=session,
                pipeline=config.pipeline,
                kafka_config=kafka,
                partition_counts=partition_counts,
                run_id=client_id,
                log=log,
                mirror=KafkaOffsetMirror(kafka),
                runner=runner,
                leave_group=group.leave_on_finish and not rerun_on_failure,
            )
        except Exception as exc:
            if rerun_on_failure and member.member_id is not None:
                # the slot's last try failed: evicted (not a clean leave), so the group's trigger reruns it once
                reason = f"task {client_id} failed on its last try: {type(exc).__name__}"
                with contextlib.suppress(CoordinatorError):
                    coordinator.evict_member(group.group, member.member_id, reason)
            raise
        try:
            result = done.result
            ranges: list[ConsumedRange] = []
            if result is not None:
                tps = [p.topic_partition for p in result.partitions]
                lag = result.lag_after({tp: end for tp, (_low, end) in watermarks(kafka, tps).items()})
                ranges = consumed_ranges(
                    result,
                    group=group.group,
                    generation=done.generation,
                    member=done.member_id,
                    instance_id=group.instance_id(slot),
                    run_id=client_id,
                    lag_after=lag,
                )
            emitted += emit(outlet_events, group.group, bootstrap, ranges)
        finally:
            done.leave(leave_group=group.leave_on_finish)
        return SlotReport(
            slot=slot,
            ledger_run_id=client_id,
            member_id=done.member_id,
            generation=done.generation,
            partitions=tuple(str(tp) for tp in done.assignment),
            records=result.records if result is not None else 0,
            quarantined=result.quarantined if result is not None else 0,
            events=emitted,
        )
    finally:
        if owned is not None:
            close_session(owned)
        coordinator.close()
