"""The slot task's audit trail: which ledger ranges no asset event shows yet, and their records.

A real SQLite store and a real member of the slot commit the ranges; the events are plain values shaped like
Airflow's (an `extra` per event, read through the group's alias). tests/airflow/test_airflow_e2e.py runs the
same through Airflow's processes (a try killed after its commit, reported by the next try).
"""

from pathlib import Path

from cohort.airflow.lineage import group_alias, topic_uri
from cohort.airflow.slot import ledger_run_id, shown_ranges, unreported_ranges
from cohort.assignment.worker_group import WorkerGroup
from cohort.common.types import OffsetRange


class Event:
    def __init__(self, **extra):
        self.extra = extra


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
        events = {
            group_alias("g"): [
                Event(
                    **{"cohort/topic": "t", "cohort/partition": 1, "cohort/from_offset": 0, "cohort/until_offset": 5}
                ),
                Event(note="not Cohort's"),
            ]
        }
        shown = shown_ranges(events, "g")
        assert shown == {("t", 1, 0, 5)}
        reporter = ledger_run_id("cohort__g", "signalled-2", 1, 1)
        found = unreported_ranges(group, coordinator, {"t": 2}, 1, shown, reporter)
        counted = [(r.partition, r.from_offset, r.until_offset, r.records, r.quarantined) for r in found]
        assert counted == [(0, 0, 10, 9, 1)]
        extra = found[0].as_extra()
        assert extra["cohort/run_id"] == killed and extra["cohort/reported_by"] == reporter
        assert extra["cohort/instance_id"] == "g/worker-1" and extra["cohort/member"]
        # slot 2 reports nothing of slot 1's; with every range shown, nothing is left
        assert unreported_ranges(group, coordinator, {"t": 2}, 2, shown, "x") == []
        assert unreported_ranges(group, coordinator, {"t": 2}, 1, shown | {("t", 0, 0, 10)}, "x") == []
        assert topic_uri("broker:9092", "t") == "kafka://broker:9092/t"
    finally:
        coordinator.close()
