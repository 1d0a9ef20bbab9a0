"""A topic grown with CreatePartitions on Apache Kafka (the embedded broker cannot grow one), through the Airflow face
in-process: the group's `GroupWatchTrigger` running as the triggerer runs it (its `run()` from the connection
`kafka_default`) yields the rerun event once the topic grows; the DAG's `slots` task reads the slots from that event
and each slot's task (`run_slot`, the mapped task's body, on real Spark, store and broker) rebalances onto the new
partitions and reads them from their first offset, although the group's reset policy is `latest`. The sink is counted
with DuckDB against the producer's delivery reports, and Kafka's committed offsets carry a slot task's run id.

The trigger and DAG run as Airflow's own processes in tests/airflow/test_airflow_e2e.py (a new pattern topic there).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from cohort.airflow.dag import slots_for
from cohort.airflow.lineage import group_alias
from cohort.airflow.slot import AirflowGroup, SlotReport, ledger_run_id, run_slot
from cohort.airflow.trigger import GroupWatchTrigger, group_settings
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.worker_group import WorkerGroup
from cohort.common.types import TopicPartition
from cohort.pipelines.kafka.mirror import kafka_committed
from cohort.pipelines.spec import PipelineSpec
from cohort.runtime.kafka_access import KafkaAccess
from harness.dagster_group import VALUE_SCHEMA
from tests.support.kafka_records import grow, produce_events, require_kafka, sink_events

GROUP = "orders-airflow-growth"
DAG_ID = "cohort__orders_airflow_growth"


class Event:
    """An asset event as the slot task's accessors hand it: its extra and when it was registered."""

    def __init__(self, extra: dict[str, Any]) -> None:
        self.extra = extra
        self.timestamp = datetime.now(UTC)


class Trail:
    """The group alias's events across task instances: what one task emits (`outlet_events[alias].add`), the next
    reads (`inlet_events[alias]`, filtered by `after` as Airflow's accessor is), as Airflow registers them."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def outlets(self) -> Any:
        trail = self

        class Accessor:
            def add(self, asset: Any, extra: dict[str, Any]) -> None:
                trail.events.append(Event({**extra, "asset": asset.uri}))

        return {group_alias(GROUP): Accessor()}

    def inlets(self) -> Any:
        trail = self

        class Events(list):
            def after(self, when: str) -> Events:
                return Events(e for e in self if e.timestamp >= datetime.fromisoformat(when))

        class Inlets:
            def __getitem__(self, alias: Any) -> Events:
                assert alias == group_alias(GROUP)
                return Events(trail.events)

        return Inlets()


def run_slots(config: AirflowGroup, slots: list[int], run_id: str, trail: Trail) -> list[SlotReport]:
    """The mapped `run_slot` task instances of one DAG run, one after the other (first try each)."""
    return [
        run_slot(
            config,
            slot,
            dag_id=DAG_ID,
            run_id=run_id,
            try_number=1,
            outlet_events=trail.outlets(),
            inlet_events=trail.inlets(),
        )
        for slot in slots
    ]


def ranges(reports: list[SlotReport], trail: Trail, run_id: str) -> dict[int, tuple[int, int]]:
    """partition -> (from, until) of the ranges the run's tasks emitted (an event per consumed partition)."""
    ours = {r.ledger_run_id for r in reports}
    assert all(f"/{run_id}/" in r for r in ours)
    return {
        e.extra["cohort/partition"]: (e.extra["cohort/from_offset"], e.extra["cohort/until_offset"])
        for e in trail.events
        if e.extra["cohort/run_id"] in ours
    }


async def first_signal(trigger: GroupWatchTrigger, looked: threading.Event, change: Callable[[], None]) -> Any:
    """Run the trigger as the triggerer does; once it has taken its first look, make `change`; its next event."""
    events = trigger.run()
    pending = asyncio.ensure_future(anext(events))
    try:
        for _ in range(600):
            if looked.is_set() or pending.done():
                break
            await asyncio.sleep(0.05)
        assert looked.is_set() and not pending.done(), "the trigger took no first look, or signalled before the change"
        await asyncio.to_thread(change)
        return await asyncio.wait_for(asyncio.shield(pending), timeout=60)
    finally:
        if not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pending
        await events.aclose()  # the trigger's own cleanup: its store and Kafka clients closed


def test_the_trigger_signals_a_grown_topic_and_the_slots_read_the_new_partitions_from_their_first_offset(
    tmp_path: Path, kafka_config, topic_factory, spark, monkeypatch: pytest.MonkeyPatch
):
    # `spark`: the session's Spark, which the slot tasks share (a task stops only a session it started)
    require_kafka("CreatePartitions, commit metadata")
    bootstrap = kafka_config["bootstrap.servers"]
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT", json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}})
    )
    topic = topic_factory(2, suffix="afgrow")
    store = f"sqlite:///{tmp_path / 'cohort.db'}"
    group = WorkerGroup(GROUP, topics=(topic,), worker_slots=2, initial_rebalance_delay_s=0.0, store_url=store)
    sink = tmp_path / "lake"
    pipeline = PipelineSpec(sink_path=str(sink), value_format="json", value_schema=VALUE_SCHEMA, reset="latest")
    config = AirflowGroup(group, pipeline, kafka_conn_id="kafka_default")
    trail = Trail()

    # the group starts on the empty topic ('latest': each partition's first, empty range pins its position)
    run_slots(config, [1, 2], "scheduled__1", trail)
    produced = produce_events(kafka_config, topic, range(0, 20), partition=lambda i: i % 2)
    first = run_slots(config, [1, 2], "scheduled__2", trail)
    assert ranges(first, trail, "scheduled__2") == {0: (0, 10), 1: (0, 10)}

    # the trigger looks once, the topic grows to 4 partitions with records in the new ones, the trigger signals
    looked = threading.Event()
    counted = KafkaAccess.subscribed_partition_counts

    def spied(self: KafkaAccess, *args: Any, **kwargs: Any) -> dict[str, int]:
        counts = counted(self, *args, **kwargs)
        if counts.get(topic) == 2:
            looked.set()
        return counts

    monkeypatch.setattr(KafkaAccess, "subscribed_partition_counts", spied)
    trigger = GroupWatchTrigger(group_settings(group), "kafka_default", poll_interval_s=0.2)

    def change() -> None:
        grow(kafka_config, topic, 4)
        produced.extend(produce_events(kafka_config, topic, range(20, 60), partition=lambda i: i % 4))

    signal = asyncio.run(first_signal(trigger, looked, change))

    payload = signal.payload
    assert (payload["group"], payload["slots"]) == (GROUP, [1, 2]) and payload["key"].startswith("topics-")
    assert payload["reason"] == f"subscribed topics changed to {{'{topic}': 4}}"
    coordinator = Coordinator.from_url(store)
    assert coordinator.describe_group(GROUP).partitions_per_topic == {topic: 4}

    # the DAG run the signal's asset event schedules: its slots from the event, then each slot's task
    asset_event = Event({"from_trigger": True, "payload": payload})
    slots = slots_for(group, {"cohort-orders-airflow-growth-signals": [asset_event]})
    assert slots == [1, 2]
    signalled = run_slots(config, slots, "asset_triggered__3", trail)
    assert ranges(signalled, trail, "asset_triggered__3") == {0: (10, 20), 1: (10, 20), 2: (0, 10), 3: (0, 10)}
    assert {p for r in signalled for p in r.partitions} == {f"{topic}-{p}" for p in range(4)}

    produced.extend(produce_events(kafka_config, topic, range(60, 80), partition=lambda i: i % 4))
    last = run_slots(config, [1, 2], "scheduled__4", trail)
    assert ranges(last, trail, "scheduled__4") == {0: (20, 25), 1: (20, 25), 2: (10, 15), 3: (10, 15)}

    assert sink_events(sink) == sorted(produced), "every record produced since the group started, once"
    tps = [TopicPartition(topic, p) for p in range(4)]
    ends = dict(zip(tps, (25, 25, 15, 15), strict=True))
    try:
        assert coordinator.fetch_offsets(GROUP, tps) == ends
        committers = {tp: [*coordinator.ledger_history(GROUP, topic, tp.partition)][-1].run_id for tp in tps}
    finally:
        coordinator.close()
    # Kafka's committed offsets carry, as metadata, the id of the last task that mirrored them: slot 1's task read
    # and committed every partition, then slot 2's (nothing left to read) mirrored the ledger's heads again
    assert set(committers.values()) == {ledger_run_id(DAG_ID, "scheduled__4", 1, 1)}
    mirrored = ledger_run_id(DAG_ID, "scheduled__4", 2, 1)
    assert kafka_committed(kafka_config, GROUP, tps) == {tp: (ends[tp], mirrored) for tp in tps}
