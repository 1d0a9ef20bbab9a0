"""The ledger's positions on every store (memory, SQLite, PostgreSQL): a partition's first position, pinned by an
empty first range, and the last committed range a batch completes after a crash."""

from __future__ import annotations

import pytest

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import NonContiguousRangeError
from cohort.cli.ops import describe_rows
from cohort.common.types import OffsetRange
from tests.assignment.scripted_members import Client, tp


def test_an_empty_first_range_pins_the_position_for_fetch_describe_and_history(coordinator: Coordinator) -> None:
    coordinator.report_topic_metadata("g", {"t": 2})
    ledger = coordinator.standalone_ledger("g", run_id="run-latest")
    ledger.commit([OffsetRange("t", 0, 40, 40)])  # a `latest` start that found nothing
    assert coordinator.fetch_offsets("g", [tp("t", 0), tp("t", 1)]) == {tp("t", 0): 40, tp("t", 1): None}
    assert ledger.committed_offsets([tp("t", 0)]) == {tp("t", 0): 40}
    assert [(r.partition, r.current_offset) for r in describe_rows(coordinator, "g")] == [(0, 40), (1, None)]
    [pin] = coordinator.ledger_history("g", "t", 0)
    assert (pin.from_offset, pin.until_offset, pin.records, pin.gap_reason, pin.run_id) == (
        40,
        40,
        0,
        None,
        "run-latest",
    )

    ledger.commit([OffsetRange("t", 0, 40, 40)])  # nothing new: accepted, not recorded again
    with pytest.raises(NonContiguousRangeError):
        ledger.commit([OffsetRange("t", 0, 55, 55)])  # the position is held: no reset past it
    ledger.commit([OffsetRange("t", 0, 40, 47, records=7)])
    assert [(e.from_offset, e.until_offset) for e in coordinator.ledger_history("g", "t", 0)] == [(40, 40), (40, 47)]
    assert coordinator.fetch_offsets("g", [tp("t", 0)]) == {tp("t", 0): 47}


def test_a_members_empty_first_range_is_fenced_and_recorded(coordinator: Coordinator) -> None:
    coordinator.report_topic_metadata("g", {"t": 1})
    member = Client(coordinator, "g", "a")
    member.join()
    member.join()
    member.sync()
    member.commit(OffsetRange("t", 0, 9, 9))
    [pin] = coordinator.ledger_history("g", "t", 0)
    assert (pin.until_offset, pin.member_id, pin.generation, pin.run_id) == (9, member.member_id, 1, "run-a")
    assert coordinator.fetch_offsets("g", [tp("t", 0)]) == {tp("t", 0): 9}


def test_the_last_committed_range_of_each_partition(coordinator: Coordinator) -> None:
    ledger = coordinator.standalone_ledger("g")
    parts = [tp("t", 0), tp("t", 1), tp("t", 2), tp("u", 0)]
    assert coordinator.last_committed("g", parts) == dict.fromkeys(parts)
    ledger.commit([OffsetRange("t", 0, 0, 10, records=10), OffsetRange("t", 1, 5, 5)], run_id="run-1")
    ledger.commit(
        [OffsetRange("t", 0, 10, 30, gap_reason="retention"), OffsetRange("t", 0, 30, 42, records=9, quarantined=3)],
        run_id="run-2",
    )
    ledger.commit([OffsetRange("t", 1, 5, 5), OffsetRange("t", 2, 0, 0)], run_id="run-3")
    last = coordinator.last_committed("g", parts)
    assert {
        part: None if e is None else (e.from_offset, e.until_offset, e.records, e.quarantined, e.run_id)
        for part, e in last.items()
    } == {
        tp("t", 0): (30, 42, 9, 3, "run-2"),
        tp("t", 1): (5, 5, 0, 0, "run-1"),  # the pin: run-3's empty range was not recorded
        tp("t", 2): (0, 0, 0, 0, "run-3"),
        tp("u", 0): None,
    }
    assert ledger.last_committed([tp("t", 0)]) == {tp("t", 0): last[tp("t", 0)]}
    assert coordinator.last_committed("other", [tp("t", 0)]) == {tp("t", 0): None}
