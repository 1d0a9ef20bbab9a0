"""The slot task's audit trail: which ledger ranges no asset event shows yet, and their records.

A real SQLite store and a real member of the slot commit the ranges; the events are plain values shaped like
Airflow's (an `extra` and a `timestamp` per event, read through the group's alias, filtered by `after` as Airflow's
accessor filters them; Airflow itself is a capability these unit tests leave out). tests/airflow/test_airflow_e2e.py
runs the same through Airflow's processes (a try killed after its commit, reported by the next try).
"""

from datetime import UTC, datetime, timedelta
from pathlib import Path

from cohort.airflow.lineage import group_alias, topic_uri
from cohort.airflow.slot import earlier_ranges, ledger_run_id
from cohort.assignment.worker_group import WorkerGroup
from cohort.common.types import OffsetRange

_START = datetime(2026, 11, 27, tzinfo=UTC)


class Event:
    def __init__(self, second: int, **extra):
        self.extra = extra
        self.timestamp = _START + timedelta(seconds=second)


class Alias(list):
    """The events of one alias; `after` keeps those at or after a time, as Airflow's inlet-events accessor does."""

    def __init__(self, events, asked):
        super().__init__(events)
        self.asked = asked

    def after(self, when):
        self.asked.append(when)
        return Alias([e for e in self if e.timestamp >= datetime.fromisoformat(when)], self.asked)


def test_ranges_the_slot_committed_without_an_event_are_reported_once_by_the_next_task(tmp_path: Path):
    group = WorkerGroup(
        "g", topics=("t",), worker_slots=2, initial_rebalance_delay_s=0.0, store_url=f"sqlite:///{tmp_path / 'c.db'}"
    )
    coordinator = group.open_coordinator()
    try:
        coordinator.report_topic_metadata("g", {"t": 2})
        killed = ledger_run_id("cohort__g", "scheduled-1", 1, 1)
        member = group.member(coordinator, 1, run_id=killed)
        assert len(member.join()) == 2
        member.commit([OffsetRange("t", 0, 0, 10, records=9, quarantined=1)], run_id=killed)
        member.commit([OffsetRange("t", 1, 0, 5, records=5)], run_id=killed)
        member.close(leave=True)

        # the killed task's events never registered; one of another slot's and a foreign event are there
        asked: list[str] = []
        shown_p1 = {"cohort/topic": "t", "cohort/partition": 1, "cohort/from_offset": 0, "cohort/until_offset": 5}
        events = {group_alias("g"): Alias([Event(1, **shown_p1), Event(2, note="not Cohort's")], asked)}
        reporter = ledger_run_id("cohort__g", "signalled-2", 1, 1)
        # slot 2 reports nothing of slot 1's
        assert earlier_ranges(group, coordinator, {"t": 2}, 2, events, "x") == []
        found = earlier_ranges(group, coordinator, {"t": 2}, 1, events, reporter)
        counted = [(r.partition, r.from_offset, r.until_offset, r.records, r.quarantined) for r in found]
        assert counted == [(0, 0, 10, 9, 1)]
        extra = found[0].as_extra()
        assert extra["cohort/run_id"] == killed and extra["cohort/reported_by"] == reporter
        assert extra["cohort/instance_id"] == "g/worker-1" and extra["cohort/member"]
        # the next task sees the reported range's event: nothing is left, and only events since the marks are asked
        shown_p0 = {"cohort/topic": "t", "cohort/partition": 0, "cohort/from_offset": 0, "cohort/until_offset": 10}
        events[group_alias("g")].append(Event(3, **shown_p0))
        assert earlier_ranges(group, coordinator, {"t": 2}, 1, events, "x") == []
        assert earlier_ranges(group, coordinator, {"t": 2}, 1, events, "x") == []
        assert asked[-1] == (_START + timedelta(seconds=1)).isoformat()  # the earliest partition's cursor
        assert topic_uri("broker:9092", "t") == "kafka://broker:9092/t"
    finally:
        coordinator.close()


def test_the_dag_declares_its_topics_assets_where_it_is_parsed(monkeypatch):
    """Airflow creates a DAG's declared assets when it parses the DAG, so two slot tasks never register the same
    new topic asset at once (which fails one of them); without a readable connection nothing is declared."""
    from pyspark.sql import types as T

    from cohort.airflow.dag import cohort_dag, known_topic_assets
    from cohort.airflow.slot import AirflowGroup
    from cohort.pipelines.spec import PipelineSpec

    schema = T.StructType([T.StructField("id", T.LongType())])
    pipeline = PipelineSpec(sink_path="/tmp/unused", value_format="json", value_schema=schema)
    config = AirflowGroup(WorkerGroup("g", topics=("orders", "clicks"), worker_slots=2), pipeline)
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_DEFAULT", raising=False)
    assert known_topic_assets(config) == []
    monkeypatch.setenv(
        "AIRFLOW_CONN_KAFKA_DEFAULT", '{"conn_type": "kafka", "extra": {"bootstrap.servers": "Broker1:9092,b2:9092"}}'
    )
    assert [a.uri for a in known_topic_assets(config)] == [topic_uri("broker1:9092", t) for t in ("orders", "clicks")]
    slots = cohort_dag(config, watch=False).get_task("slots")
    assert {a.uri for a in slots.inlets} == {"kafka://broker1:9092/orders", "kafka://broker1:9092/clicks"}
