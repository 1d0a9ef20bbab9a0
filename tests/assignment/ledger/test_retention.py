"""Ledger retention applied by the in-memory, SQLite and PostgreSQL stores: folds, event pruning, conflicts."""

from __future__ import annotations

import pytest

from cohort.assignment.clock import ManualClock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import FoldConflictError
from cohort.assignment.ledger.retention_run import apply_retention_plan, plan_retention
from cohort.assignment.ledger.trail import TrailMark
from cohort.assignment.protocol.messages import FOLD
from cohort.common.types import OffsetRange
from tests.assignment.scripted_members import Client, tp


def _commit_every_minute(coordinator: Coordinator, clock: ManualClock, count: int, partition: int = 0) -> None:
    ledger = coordinator.standalone_ledger("g", run_id="run")
    for i in range(count):
        ledger.commit([OffsetRange("t", partition, 10 * i, 10 * (i + 1), records=10, content_hash=f"{i:064x}")])
        clock.advance(60)


def test_old_ranges_fold_and_the_ledger_keeps_its_position_and_counts(
    coordinator: Coordinator, clock: ManualClock
) -> None:
    _commit_every_minute(coordinator, clock, 10)
    cutoff = 1000.0 + 60 * 6  # the first six ranges are older
    plan = plan_retention(coordinator, "g", cutoff)
    assert plan.removed == 5
    assert apply_retention_plan(coordinator, plan) == 0
    history = coordinator.ledger_history("g", "t", 0)
    assert [(e.from_offset, e.until_offset, e.kind) for e in history][:2] == [(0, 60, FOLD), (60, 70, "commit")]
    assert len(history) == 5 and sum(e.records for e in history) == 100
    assert coordinator.fetch_offsets("g", [tp("t", 0)]) == {tp("t", 0): 100}
    assert coordinator.last_committed("g", [tp("t", 0)])[tp("t", 0)].until_offset == 100  # type: ignore[union-attr]
    # a second run folds nothing more (the fold is the only old entry) and a later cut-off extends the fold
    assert plan_retention(coordinator, "g", cutoff).removed == 0
    apply_retention_plan(coordinator, plan_retention(coordinator, "g", 1000.0 + 60 * 8))
    assert [(e.from_offset, e.until_offset) for e in coordinator.ledger_history("g", "t", 0)] == [
        (0, 80),
        (80, 90),
        (90, 100),
    ]


def test_nothing_an_audit_trail_has_not_settled_is_folded(coordinator: Coordinator, clock: ManualClock) -> None:
    _commit_every_minute(coordinator, clock, 6)
    third = coordinator.ledger_history("g", "t", 0)[2].entry_id
    coordinator.advance_trail_marks("g", "dagster", [TrailMark("t", 0, ledger_id=third or 0, head=30)])
    plan = plan_retention(coordinator, "g", clock.now())
    assert [(f.entry.from_offset, f.entry.until_offset) for f in plan.folds] == [(0, 30)]
    coordinator.advance_trail_marks("g", "airflow", [TrailMark("t", 0, ledger_id=1)])  # a second, slower trail
    assert plan_retention(coordinator, "g", clock.now()).folds == ()


def test_a_plan_made_stale_by_another_fold_changes_nothing(coordinator: Coordinator, clock: ManualClock) -> None:
    _commit_every_minute(coordinator, clock, 6)
    plan = plan_retention(coordinator, "g", clock.now())
    apply_retention_plan(coordinator, plan)
    before = coordinator.ledger_history("g", "t", 0)
    with pytest.raises(FoldConflictError):
        apply_retention_plan(coordinator, plan)
    assert coordinator.ledger_history("g", "t", 0) == before


def test_old_group_events_are_dropped_but_the_newest_kept(coordinator: Coordinator, clock: ManualClock) -> None:
    coordinator.report_topic_metadata("g", {"t": 2})
    for i in range(3):
        member = Client(coordinator, "g", f"run-{i}")
        member.join()
        member.leave()  # each join and leave is a group event
        clock.advance(60)
    events = coordinator.store.events("g")
    assert len(events) >= 5
    plan = plan_retention(coordinator, "g", clock.now(), keep_events=2)
    assert apply_retention_plan(coordinator, plan) == len(events) - 2
    assert [i for i, _e in coordinator.store.events("g")] == [i for i, _e in events[-2:]]
