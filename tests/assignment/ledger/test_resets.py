"""Offset resets through the ledger: an operator moves a group's committed offsets while it has no members;
each move is a ledger entry of its own (who, why, old and new position) and the history stays contiguous."""

from __future__ import annotations

import pytest

from cohort.assignment.clock import ManualClock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import (
    IllegalGenerationError,
    InvalidOffsetRangeError,
    NonContiguousRangeError,
    NonEmptyGroupError,
    PartitionNotOwnedError,
)
from cohort.assignment.protocol.messages import RESET
from cohort.common.types import OffsetRange
from tests.assignment.scripted_members import Client, tp


def _committed(coordinator: Coordinator, *ranges: OffsetRange) -> None:
    coordinator.standalone_ledger("g").commit(list(ranges), run_id="run-1")


def test_a_reset_moves_the_position_and_is_a_ledger_entry_of_its_own(coordinator: Coordinator, clock: ManualClock):
    _committed(coordinator, OffsetRange("t", 0, 0, 100, records=100), OffsetRange("t", 1, 0, 40, records=40))
    clock.advance(5)
    entries = coordinator.reset_offsets(
        "g", {tp("t", 0): 30, tp("t", 1): 90, tp("t", 2): 7}, actor="ana", reason="replay after a bad transform"
    )
    assert [(e.topic_partition, e.from_offset, e.until_offset, e.kind) for e in entries] == [
        (tp("t", 0), 100, 30, RESET),  # backward: 70 records to read again
        (tp("t", 1), 40, 90, RESET),  # forward: 50 records skipped
        (tp("t", 2), 7, 7, RESET),  # nothing committed before: the reset sets the starting position
    ]
    assert {e.note for e in entries} == {"ana: replay after a bad transform"}
    assert {e.committed_at for e in entries} == {1005.0}
    assert all(e.run_id is None and e.records == 0 and e.is_reset for e in entries)
    assert coordinator.fetch_offsets("g", [tp("t", 0), tp("t", 1), tp("t", 2)]) == {
        tp("t", 0): 30,
        tp("t", 1): 90,
        tp("t", 2): 7,
    }
    history = coordinator.ledger_history("g", "t", 0)
    assert [(e.kind, e.from_offset, e.until_offset) for e in history] == [("commit", 0, 100), (RESET, 100, 30)]
    assert coordinator.last_committed("g", [tp("t", 0)])[tp("t", 0)] == history[-1]


def test_the_next_range_starts_where_the_reset_ended(coordinator: Coordinator):
    _committed(coordinator, OffsetRange("t", 0, 0, 100, records=100))
    coordinator.reset_offsets("g", {tp("t", 0): 30}, actor="ana", reason="replay")
    with pytest.raises(NonContiguousRangeError):
        _committed(coordinator, OffsetRange("t", 0, 100, 120, records=20))
    _committed(coordinator, OffsetRange("t", 0, 30, 120, records=90))  # the replay, and on
    history = coordinator.ledger_history("g", "t", 0)
    assert [(e.kind, e.from_offset, e.until_offset) for e in history] == [
        ("commit", 0, 100),
        (RESET, 100, 30),
        ("commit", 30, 120),
    ]
    assert coordinator.fetch_offsets("g", [tp("t", 0)]) == {tp("t", 0): 120}


def test_a_partition_already_at_the_position_gets_no_entry(coordinator: Coordinator):
    _committed(coordinator, OffsetRange("t", 0, 0, 10, records=10))
    assert coordinator.reset_offsets("g", {tp("t", 0): 10}, actor="ana", reason="no-op") == ()
    assert len(coordinator.ledger_history("g", "t", 0)) == 1


def test_a_reset_is_refused_while_the_group_has_members_and_changes_nothing(coordinator: Coordinator):
    coordinator.report_topic_metadata("g", {"t": 1})
    member = Client(coordinator, "g", "worker-1")
    member.join()
    member.sync()
    member.commit(OffsetRange("t", 0, 0, 10, records=10))
    with pytest.raises(NonEmptyGroupError, match="can only be reset while it has no members, but it has 1"):
        coordinator.reset_offsets("g", {tp("t", 0): 0}, actor="ana", reason="replay")
    assert coordinator.fetch_offsets("g", [tp("t", 0)]) == {tp("t", 0): 10}
    assert [e.kind for e in coordinator.ledger_history("g", "t", 0)] == ["commit"]
    member.leave()
    coordinator.reset_offsets("g", {tp("t", 0): 0}, actor="ana", reason="replay")
    assert coordinator.fetch_offsets("g", [tp("t", 0)]) == {tp("t", 0): 0}


@pytest.mark.parametrize("offset", [-1, 2.5, True, None])
def test_an_offset_that_is_not_a_non_negative_integer_is_refused(coordinator: Coordinator, offset: object):
    _committed(coordinator, OffsetRange("t", 0, 0, 10, records=10))
    with pytest.raises(InvalidOffsetRangeError, match="cannot reset to offset"):
        coordinator.reset_offsets("g", {tp("t", 0): offset}, actor="ana", reason="bad")  # type: ignore[dict-item]
    assert coordinator.fetch_offsets("g", [tp("t", 0)]) == {tp("t", 0): 10}


def test_a_member_resets_only_partitions_it_owns_in_its_generation(coordinator: Coordinator):
    """A replay run resets as a member: fenced like its commits, so no two runs replay one partition."""
    coordinator.report_topic_metadata("g", {"t": 1})
    member = Client(coordinator, "g", "worker-1")
    member.join()
    member.sync()
    owned, other = tp("t", 0), tp("u", 0)
    member.commit(OffsetRange("t", 0, 0, 50, records=50))

    def reset(partition, generation=None):
        return coordinator.reset_offsets(
            "g",
            {partition: 20},
            actor="run-a",
            reason="backfill",
            member_id=member.member_id,
            generation=member.generation if generation is None else generation,
            run_id="run-a",
        )

    entries = reset(owned)
    assert [(e.from_offset, e.until_offset, e.run_id, e.member_id) for e in entries] == [
        (50, 20, "run-a", member.member_id)
    ]
    with pytest.raises(PartitionNotOwnedError):
        reset(other)
    with pytest.raises(IllegalGenerationError):
        reset(owned, generation=member.generation + 1)
    assert coordinator.fetch_offsets("g", [owned, other]) == {owned: 20, other: None}
