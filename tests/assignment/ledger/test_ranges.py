"""The offset ledger's decisions: contiguity, gaps, fencing, all-or-nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cohort.assignment.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    InvalidOffsetRangeError,
    NonContiguousRangeError,
    PartitionNotOwnedError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from cohort.assignment.ledger.ranges import decide_commit, plan_ranges
from cohort.assignment.protocol.group_state import GroupRecord, GroupState, MemberRecord
from cohort.assignment.protocol.messages import CommitRequest
from cohort.assignment.protocol.rebalance import Context
from cohort.common.ledger import OffsetLedger, OffsetMirror
from cohort.common.types import OffsetRange
from cohort.common.types import TopicPartition as TP

T0, T1 = TP("t", 0), TP("t", 1)


def test_ranges_must_continue_where_the_last_one_ended() -> None:
    assert plan_ranges("g", {T0: 10, T1: None}, [OffsetRange("t", 0, 10, 20), OffsetRange("t", 1, 7, 9)]) == {
        T0: 20,
        T1: 9,
    }
    assert plan_ranges("g", {T0: 10}, [OffsetRange("t", 0, 10, 15), OffsetRange("t", 0, 15, 30)]) == {T0: 30}
    for start, word in ((9, "overlaps"), (11, "gap")):
        with pytest.raises(NonContiguousRangeError, match=word) as error:
            plan_ranges("g", {T0: 10}, [OffsetRange("t", 0, start, 30)])
        assert (error.value.partition, error.value.expected, error.value.given) == (T0, 10, start)
        assert error.value.code == "NON_CONTIGUOUS_RANGE" and "t-0" in str(error.value)
    with pytest.raises(NonContiguousRangeError):  # within one call, too
        plan_ranges("g", {}, [OffsetRange("t", 0, 0, 5), OffsetRange("t", 0, 6, 8)])


def test_gaps_are_ranges_with_a_reason_and_no_records() -> None:
    assert plan_ranges("g", {T0: 10}, [OffsetRange("t", 0, 10, 40, gap_reason="retention")]) == {T0: 40}
    with pytest.raises(InvalidOffsetRangeError):
        plan_ranges("g", {T0: 10}, [OffsetRange("t", 0, 10, 40, records=3, gap_reason="retention")])
    with pytest.raises(InvalidOffsetRangeError):
        plan_ranges("g", {T0: 10}, [OffsetRange("t", 0, 10, 40, gap_reason=" ")])


def _group(state: GroupState = GroupState.STABLE) -> GroupRecord:
    owner = MemberRecord("a", "g/w-0", "run-7", ("t",), None, ("range",), 10, 10, 30, 0, 50.0, generation=3)
    owner = replace(owner, assigned=(T0,), assigned_generation=3, owned=(T0,), progress_deadline=60.0)
    other = MemberRecord("b", None, None, ("t",), None, ("range",), 10, 10, 30, 1, 50.0, generation=3)
    other = replace(other, assigned=(T1,), assigned_generation=3, owned=(T1,), progress_deadline=60.0)
    return GroupRecord(
        name="g", state=state, generation=3, protocol="range", leader_id="a", members={"a": owner, "b": other}
    )


CTX = Context(now=45.0)


def test_owner_commit_is_recorded_and_moves_the_progress_deadline() -> None:
    request = CommitRequest((OffsetRange("t", 0, 5, 9, records=3, quarantined=1),), "a", 3, "g/w-0")
    decision = decide_commit(_group(), "g", request, {T0: 5}, CTX)
    [entry] = decision.result()
    assert (entry.member_id, entry.instance_id, entry.run_id, entry.generation, entry.committed_at) == (
        "a",
        "g/w-0",
        "run-7",
        3,
        45.0,
    )
    assert decision.heads == {T0: 9}
    assert decision.group.members["a"].progress_deadline == 75.0


@pytest.mark.parametrize(
    ("request_", "state", "error"),
    [
        (CommitRequest((OffsetRange("t", 0, 5, 9),), "a", 2), GroupState.STABLE, IllegalGenerationError),
        (CommitRequest((OffsetRange("t", 0, 5, 9),), "zz", 3), GroupState.STABLE, UnknownMemberIdError),
        (CommitRequest((OffsetRange("t", 0, 5, 9),), "zz", 3, "g/w-0"), GroupState.STABLE, FencedInstanceIdError),
        (CommitRequest((OffsetRange("t", 1, 0, 9),), "a", 3), GroupState.STABLE, PartitionNotOwnedError),
        (
            CommitRequest((OffsetRange("t", 0, 5, 9),), "a", 3),
            GroupState.COMPLETING_REBALANCE,
            RebalanceInProgressError,
        ),
        (CommitRequest((OffsetRange("t", 0, 5, 9),)), GroupState.STABLE, UnknownMemberIdError),
        (CommitRequest((OffsetRange("t", 0, 6, 9),), "a", 3), GroupState.STABLE, NonContiguousRangeError),
    ],
)
def test_refused_commits_change_nothing(request_: CommitRequest, state: GroupState, error: type[Exception]) -> None:
    group = _group(state)
    decision = decide_commit(group, "g", request_, {T0: 5, T1: None}, CTX)
    assert isinstance(decision.error, error)
    assert decision.group == group and decision.entries == () and decision.heads == {}


def test_all_or_nothing_across_partitions() -> None:
    group = replace(_group(), members={**_group().members, "a": replace(_group().members["a"], owned=(T0, T1))})
    request = CommitRequest((OffsetRange("t", 0, 5, 9), OffsetRange("t", 1, 3, 4)), "a", 3)
    decision = decide_commit(group, "g", request, {T0: 5, T1: 0}, CTX)
    assert isinstance(decision.error, NonContiguousRangeError) and decision.heads == {}


def test_standalone_commit_on_an_empty_or_missing_group_and_empty_ranges() -> None:
    request = CommitRequest((OffsetRange("t", 0, 0, 4, records=4), OffsetRange("t", 1, 2, 2)), run_id="admin")
    decision = decide_commit(None, "fresh", request, {T0: None, T1: None}, CTX)
    assert [(e.topic_partition, e.generation, e.run_id) for e in decision.result()] == [
        (T0, -1, "admin"),
        (T1, -1, "admin"),  # the empty first range is T1's starting position
    ]
    assert decision.heads == {T0: 4, T1: 2}
    stale = CommitRequest((OffsetRange("t", 0, 0, 4),), generation=2)
    assert isinstance(decide_commit(None, "fresh", stale, {T0: None}, CTX).error, IllegalGenerationError)


def test_protocols_are_runtime_checkable() -> None:
    class Ledger:
        def committed_offsets(self, partitions: object) -> dict[TP, int | None]:
            return {}

        def commit(self, ranges: object, *, run_id: str | None = None) -> None:
            return None

    class Mirror:
        def mirror(self, group: str, ranges: object, *, run_id: str | None) -> None:
            return None

    assert isinstance(Ledger(), OffsetLedger) and not isinstance(Mirror(), OffsetLedger)
    assert isinstance(Mirror(), OffsetMirror)


class _Int64:
    """An int-like that is not an int (as numpy.int64 is): usable as an index, so as an offset."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"from_offset": 0.5, "until_offset": 1.5}, "from_offset (an offset) of t-2 must be an integer, got float 0.5"),
        ({"until_offset": 2.0}, "until_offset (an offset) of t-2 must be an integer, got float 2.0"),
        ({"until_offset": float("nan")}, "until_offset (an offset) of t-2 must be an integer, got float nan"),
        ({"until_offset": True}, "until_offset (an offset) of t-2 must be an integer, got bool True"),
        ({"until_offset": "5"}, "until_offset (an offset) of t-2 must be an integer, got str '5'"),
        ({"until_offset": 2**63}, f"until_offset (an offset) of t-2 is {2**63}, beyond the largest allowed value"),
        ({"records": 1.0}, "records (a record count) of t-2 must be an integer"),
        ({"quarantined": 2**63}, "quarantined (a record count) of t-2 is"),
        ({"partition": 2.0}, "partition of topic 't' must be an integer, got float 2.0"),
        ({"partition": 2**31}, "partition of topic 't' is 2147483648, beyond the largest allowed value"),
    ],
)
def test_offset_ranges_hold_only_int64_offsets_and_counts(fields: dict[str, object], fragment: str) -> None:
    values: dict[str, object] = {"topic": "t", "partition": 2, "from_offset": 0, "until_offset": 1, **fields}
    with pytest.raises(ValueError) as refused:
        OffsetRange(**values)  # type: ignore[arg-type]
    assert fragment in str(refused.value)


def test_offset_ranges_take_int_likes_as_plain_ints_up_to_int64() -> None:
    r = OffsetRange("t", _Int64(1), _Int64(0), _Int64(2**63 - 1), records=_Int64(3))  # type: ignore[arg-type]
    assert (r.partition, r.from_offset, r.until_offset, r.records) == (1, 0, 2**63 - 1, 3)
    assert all(type(v) is int for v in (r.partition, r.from_offset, r.until_offset, r.records, r.quarantined))
