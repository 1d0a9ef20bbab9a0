"""The audit-trail marks and the ledger read after a mark, run against the in-memory, SQLite and PostgreSQL stores."""

from __future__ import annotations

from collections.abc import Sequence

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.ledger.trail import TrailEvent, TrailMark
from cohort.assignment.ledger.trail_reader import read_trail, settle_trail
from cohort.common.types import OffsetRange, TopicPartition
from tests.assignment.scripted_members import tp


class ListTrail:
    """A trail held in a list (the face's events): what the Dagster and Airflow sources return, as values."""

    def __init__(self) -> None:
        self.events: list[TrailEvent] = []
        self.reads: list[int | None] = []

    def show(self, start: int, until: int | None, source: str = "run") -> None:
        self.events.append(TrailEvent(len(self.events) + 1, start, until, source))

    def events_after(self, tp: TopicPartition, cursor: int | None) -> Sequence[TrailEvent]:
        self.reads.append(cursor)
        return [e for e in self.events if cursor is None or e.event_id > cursor]


def _commit(coordinator: Coordinator, *spans: tuple[int, int]) -> None:
    ledger = coordinator.standalone_ledger("g", run_id="run-1")
    for start, until in spans:
        ledger.commit([OffsetRange("t", 0, start, until, records=until - start)])


def test_entries_after_an_id_are_read_in_order_and_paged(coordinator: Coordinator) -> None:
    _commit(coordinator, (0, 1), (1, 2), (2, 3), (3, 4))
    every = coordinator.ledger_history("g", "t", 0)
    ids = [e.entry_id for e in every]
    assert None not in ids and ids == sorted(ids)
    after = coordinator.ledger_after("g", "t", 0, every[1].entry_id or 0)
    assert [(e.from_offset, e.until_offset) for e in after] == [(2, 3), (3, 4)]
    assert [e.from_offset for e in coordinator.ledger_after("g", "t", 0, 0, limit=2)] == [0, 1]


def test_a_mark_moves_forward_only_and_survives_a_new_coordinator(coordinator: Coordinator) -> None:
    assert coordinator.trail_marks("g", "dagster", [tp("t", 0)]) == {tp("t", 0): TrailMark.start("t", 0)}
    far = TrailMark("t", 0, ledger_id=9, event_cursor=12, head=90, ranges=9, last_commit_at=5.0)
    coordinator.advance_trail_marks("g", "dagster", [far])
    coordinator.advance_trail_marks("g", "dagster", [TrailMark("t", 0, ledger_id=3, event_cursor=4, head=30)])
    assert coordinator.trail_marks("g", "dagster", [tp("t", 0)])[tp("t", 0)] == far
    assert coordinator.trail_marks("g", "airflow", [tp("t", 0)])[tp("t", 0)] == TrailMark.start("t", 0)


def test_reading_the_trail_reads_only_what_changed_since_the_mark(coordinator: Coordinator) -> None:
    trail = ListTrail()
    _commit(coordinator, (0, 10), (10, 20))
    trail.show(0, 10)
    trail.show(10, 20)
    first = read_trail(coordinator, "g", "dagster", [tp("t", 0)], trail)[tp("t", 0)]
    assert first.problems == () and first.mark.head == 20 and first.mark.event_cursor == 2
    settle_trail(coordinator, "g", "dagster", {tp("t", 0): first})

    _commit(coordinator, (20, 30))
    again = read_trail(coordinator, "g", "dagster", [tp("t", 0)], trail)[tp("t", 0)]
    assert trail.reads[-1] == 2  # only events after the cursor are asked for
    assert [(e.from_offset, e.until_offset) for e in again.pending] == [(20, 30)]
    assert [(e.from_offset, e.until_offset) for e in again.unshown] == [(20, 30)]
    assert again.mark == first.mark  # nothing settled: the unshown range is looked at again next time
    settle_trail(coordinator, "g", "dagster", {tp("t", 0): again})

    trail.show(20, 30, "reported late")
    settled = read_trail(coordinator, "g", "dagster", [tp("t", 0)], trail)[tp("t", 0)]
    assert settled.problems == () and settled.mark.head == 30 and settled.ranges == 3


def test_a_late_report_of_a_range_before_the_mark_is_no_problem_but_a_foreign_one_is(coordinator: Coordinator) -> None:
    trail = ListTrail()
    _commit(coordinator, (0, 10))
    trail.show(0, 10)
    settle_trail(coordinator, "g", "dagster", read_trail(coordinator, "g", "dagster", [tp("t", 0)], trail))
    trail.show(0, 10, "a second report")
    trail.show(5, 7, "hand-made")
    reading = read_trail(coordinator, "g", "dagster", [tp("t", 0)], trail)[tp("t", 0)]
    assert reading.problems == ("t-0: materialization [5, 7) is not in the ledger",)
    settle_trail(coordinator, "g", "dagster", {tp("t", 0): reading})
    # the cursor stops before the foreign event, so the check stays red until it is removed
    assert read_trail(coordinator, "g", "dagster", [tp("t", 0)], trail)[tp("t", 0)].problems == reading.problems
    full = read_trail(coordinator, "g", "dagster", [tp("t", 0)], trail, full=True)[tp("t", 0)]
    assert full.problems == reading.problems and full.ranges == 1
