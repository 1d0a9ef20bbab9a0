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

from cohort.airflow.connection import bootstrap_of, kafka_config, store_url_from_env
from cohort.airflow.lineage import emit
from cohort.airflow.trail import AIRFLOW_TRAIL, AirflowTrail
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import CoordinatorError
from cohort.assignment.ledger.trail_reader import read_trail, settle_trail
from cohort.assignment.member import GroupMember
from cohort.assignment.worker_group import WorkerGroup
from cohort.common.types import TopicPartition
from cohort.pipelines.spark import close_session, open_session
from cohort.pipelines.spec import PipelineSpec
from cohort.runtime.kafka_access import KafkaAccess
from cohort.runtime.lineage import ConsumedRange, consumed_ranges, unreported_ranges
from cohort.runtime.slot_batch import BatchRunner, SlotBatch, SlotRun, run_slot_batch

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
    return unreported_ranges(readings, lambda e: e.instance_id == instance, group=group.group, reported_by=reported_by)


class _Session:
    """The slot's Spark session, opened on first use (after the audit report, before the join) and closed once."""

    def __init__(self, config: AirflowGroup, name: str) -> None:
        self.config, self.name = config, name
        self.owned: Any = None

    def get(self) -> Any:
        if self.owned is None:
            remote = self.config.spark_remote
            master = None if remote else self.config.spark_master
            self.owned = open_session(
                master=master, remote=remote, app_name=self.name, conf=dict(self.config.spark_conf)
            )
        return self.owned.session

    def close(self) -> None:
        if self.owned is not None:
            close_session(self.owned)


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
    kafka = KafkaAccess(kafka_config(config.kafka_conn_id))
    bootstrap = bootstrap_of(kafka.config)
    client_id = ledger_run_id(dag_id, run_id, slot, try_number)
    coordinator = group.open_coordinator()
    spark = _Session(config, f"cohort-{group.group}-slot-{slot}")
    try:
        subscribed_now = kafka.subscribed_partition_counts(group.topics, group.topic_pattern)
        earlier = earlier_ranges(group, coordinator, subscribed_now, slot, inlet_events, client_id)
        emitted = emit(outlet_events, group.group, bootstrap, earlier)
        member = group.member(
            coordinator,
            slot,
            run_id=client_id,
            topic_metadata=lambda: kafka.subscribed_partition_counts(group.topics, group.topic_pattern),
            log_offsets=kafka.watermarks,  # the lag-sticky assignor's backlog
        )
        leave = group.leave_on_finish and not rerun_on_failure
        run = SlotRun(slot, client_id, config.pipeline, kafka, spark.get, log, leave_group=leave, runner=runner)
        done = _run_or_evict(member, run, coordinator, rerun_on_failure)
        try:
            emitted += emit(outlet_events, group.group, bootstrap, _consumed(done, group, slot, client_id))
        finally:
            done.leave(leave_group=group.leave_on_finish)
        result = done.result
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
        spark.close()
        kafka.close()
        coordinator.close()


def _run_or_evict(member: GroupMember, run: SlotRun, coordinator: Coordinator, rerun_on_failure: bool) -> SlotBatch:
    """The slot's batch; when it fails on the slot's last try, the member is evicted (not a clean leave), so the
    group's trigger reruns the slot once."""
    try:
        return run_slot_batch(member, run)
    except Exception as exc:
        if rerun_on_failure and member.member_id is not None:
            reason = f"task {run.run_id} failed on its last try: {type(exc).__name__}"
            with contextlib.suppress(CoordinatorError):
                coordinator.evict_member(member.group, member.member_id, reason)
        raise


def _consumed(done: SlotBatch, group: WorkerGroup, slot: int, run_id: str) -> list[ConsumedRange]:
    """The batch's consumed ranges, as its asset events record them."""
    if done.result is None:
        return []
    return consumed_ranges(
        done.result,
        group=group.group,
        generation=done.generation,
        member=done.member_id,
        instance_id=group.instance_id(slot),
        run_id=run_id,
        lag_after=done.lag_after,
    )
