"""The ledger's first position: an empty first range pins where a partition starts; later empty ranges do not."""

from __future__ import annotations

from dataclasses import replace

from cohort.assignment.ledger.ranges import decide_commit
from cohort.assignment.protocol.group_state import GroupRecord, GroupState, MemberRecord
from cohort.assignment.protocol.messages import CommitRequest
from cohort.assignment.protocol.rebalance import Context
from cohort.common.types import OffsetRange
from cohort.common.types import TopicPartition as TP

T0, T1 = TP("t", 0), TP("t", 1)
CTX = Context(now=45.0)


def _owner_group() -> GroupRecord:
    owner = MemberRecord("a", "g/w-0", "run-7", ("t",), None, ("range",), 10, 10, 30, 0, 50.0, generation=3)
    owner = replace(owner, assigned=(T0, T1), assigned_generation=3, owned=(T0, T1), progress_deadline=60.0)
    return GroupRecord(
        name="g", state=GroupState.STABLE, generation=3, protocol="range", leader_id="a", members={"a": owner}
    )


def test_an_empty_first_range_becomes_the_partitions_committed_position() -> None:
    """A `latest` (or timestamp) start that found nothing: [end, end) is the first range, so the next batch
    starts there instead of applying the reset policy again."""
    request = CommitRequest((OffsetRange("t", 0, 12, 12),), run_id="run-1")
    decision = decide_commit(None, "g", request, {T0: None}, CTX)
    assert [(e.topic_partition, e.from_offset, e.until_offset, e.records, e.run_id) for e in decision.result()] == [
        (T0, 12, 12, 0, "run-1")
    ]
    assert decision.heads == {T0: 12}


def test_later_empty_ranges_are_accepted_and_not_recorded() -> None:
    request = CommitRequest((OffsetRange("t", 0, 12, 12), OffsetRange("t", 1, 3, 3)), run_id="run-2")
    decision = decide_commit(None, "g", request, {T0: 12, T1: 3}, CTX)
    assert decision.result() == () and decision.heads == {}


def test_an_empty_range_followed_by_records_in_one_commit_records_only_the_records() -> None:
    request = CommitRequest((OffsetRange("t", 0, 4, 4), OffsetRange("t", 0, 4, 9, records=5)), run_id="run-3")
    decision = decide_commit(None, "g", request, {T0: None}, CTX)
    assert [(e.from_offset, e.until_offset) for e in decision.result()] == [(4, 9)]
    assert decision.heads == {T0: 9}


def test_a_members_first_position_is_fenced_like_any_commit_and_counts_as_progress() -> None:
    pinned = decide_commit(_owner_group(), "g", CommitRequest((OffsetRange("t", 1, 7, 7),), "a", 3), {T1: None}, CTX)
    [entry] = pinned.result()
    assert (entry.topic_partition, entry.until_offset, entry.member_id, entry.generation) == (T1, 7, "a", 3)
    assert pinned.heads == {T1: 7} and pinned.group.members["a"].progress_deadline == 75.0
    stale = decide_commit(_owner_group(), "g", CommitRequest((OffsetRange("t", 1, 7, 7),), "a", 2), {T1: None}, CTX)
    assert stale.error is not None and stale.entries == () and stale.heads == {}
