"""The membership sensor's decisions checked as values: (cursor, members, runs, events, now) in, decisions out."""

from __future__ import annotations

from cohort.assets.cursors import GroupCursor
from cohort.assets.membership import (
    REMEMBERED_RERUNS,
    Eviction,
    Note,
    Rerun,
    RunState,
    RunView,
    decide_evictions,
    decide_reruns,
)
from cohort.assignment.protocol.group_state import EventKind, GroupEvent, GroupState


def removed(member_id: str, generation: int, reason: str = "session expired") -> GroupEvent:
    return GroupEvent(
        at=0.0,
        kind=EventKind.MEMBER_REMOVED,
        state=GroupState.PREPARING_REBALANCE,
        generation=generation,
        member_id=member_id,
        reason=reason,
    )


def generation(number: int) -> GroupEvent:
    return GroupEvent(at=0.0, kind=EventKind.GENERATION, state=GroupState.COMPLETING_REBALANCE, generation=number)


# ------------------------------------------------------------------------------------------- evictions


def test_members_of_dead_runs_are_evicted_and_the_clock_waits_for_them() -> None:
    live = {"m-1": (1, "run-a"), "m-2": (2, "run-b"), "m-3": (3, None)}
    runs = {
        "run-a": RunView("run-a", RunState.FAILURE, slots=(1,)),
        "run-b": RunView("run-b", RunState.OTHER, slots=(2,)),
    }
    decided = decide_evictions(live, runs, clock_due=True)
    assert decided.evict == (Eviction("m-1", "run run-a failure"),)
    assert decided.expire is True  # acted on only if no eviction goes through (an eviction applies the clock)


def test_canceled_runs_are_dead_successful_ones_are_not() -> None:
    live = {"m-1": (1, "run-a"), "m-2": (2, "run-b")}
    runs = {"run-a": RunView("run-a", RunState.CANCELED), "run-b": RunView("run-b", RunState.SUCCESS)}
    assert decide_evictions(live, runs, clock_due=False).evict == (Eviction("m-1", "run run-a canceled"),)


def test_nothing_to_do_is_nothing() -> None:
    decided = decide_evictions({"m-1": (1, "run-a")}, {}, clock_due=False)
    assert decided.evict == () and decided.expire is False


# --------------------------------------------------------------------------------------------- reruns


def test_a_member_removed_at_its_deadline_is_rerun_keyed_by_the_member() -> None:
    seen = GroupCursor(last_event=3, members={"orders-worker-1-abcdef123456": (1, "run-a")})
    runs = {"run-a": RunView("run-a", RunState.OTHER, slots=(1,))}
    events = [(4, removed("orders-worker-1-abcdef123456", 2)), (5, generation(3))]
    decided = decide_reruns(seen, {}, runs, events, generation=2, scanned_until=100.0)
    assert decided.reruns == (Rerun(1, 2, "abcdef123456", "session expired", "run-a"),)
    assert decided.cursor == GroupCursor(5, {}, 100.0, ("run-a",))
    assert decided.notes == (Note("info", "slot 1 lost member orders-worker-1-abcdef123456 (session expired)"),)


def test_clean_leaves_and_finished_runs_orphan_nothing() -> None:
    seen = GroupCursor(members={"m-1": (1, "run-a"), "m-2": (2, "run-b")})
    runs = {"run-b": RunView("run-b", RunState.SUCCESS, slots=(2,))}
    events = [(1, removed("m-1", 1, "left: finished")), (2, removed("m-2", 1))]
    decided = decide_reruns(seen, {}, runs, events, generation=1, scanned_until=5.0)
    assert decided.reruns == ()
    assert decided.cursor.members == {} and decided.cursor.last_event == 2


def test_a_dead_run_is_rerun_once_keyed_by_the_run_whatever_path_reported_it() -> None:
    seen = GroupCursor(members={"m-1": (1, "run-dead-0001")})
    runs = {"run-dead-0001": RunView("run-dead-0001", RunState.FAILURE, slots=(1,))}
    events = [(7, removed("m-1", 4, "run run-dead-0001 failure"))]
    decided = decide_reruns(seen, {}, runs, events, generation=4, scanned_until=9.0)
    assert decided.reruns == (Rerun(1, 4, "rerun-run-dead", "run run-dead-0001 failure", "run-dead-0001"),)
    # the same run seen again on a later tick with no new event: the run key is the same, Dagster dedups it
    again = decide_reruns(decided.cursor, {}, runs, [], generation=4, scanned_until=10.0)
    assert [r.key for r in again.reruns] == ["rerun-run-dead"]


def test_a_failed_worker_run_never_seen_as_a_member_is_rerun_for_its_slot() -> None:
    runs = {"run-early-fail": RunView("run-early-fail", RunState.FAILURE, slots=(3,))}
    decided = decide_reruns(GroupCursor(), {}, runs, [], generation=0, scanned_until=1.0)
    assert decided.reruns == (Rerun(3, 0, "rerun-run-earl", "run run-early-fail failure", "run-early-fail"),)


def test_a_failed_rerun_is_not_rerun_again() -> None:
    runs = {"run-x": RunView("run-x", RunState.FAILURE, slots=(2,), rerun_of="run-lost")}
    decided = decide_reruns(GroupCursor(), {}, runs, [], generation=5, scanned_until=1.0)
    assert decided.reruns == ()
    assert decided.notes == (Note("warning", "rerun run-x of slot 2 failure"),)


def test_a_run_rerun_at_its_deadline_is_not_rerun_again_when_it_fails_later() -> None:
    seen = GroupCursor(rerun_runs=("run-a",))
    runs = {"run-a": RunView("run-a", RunState.FAILURE, slots=(1,))}
    assert decide_reruns(seen, {}, runs, [], generation=2, scanned_until=1.0).reruns == ()


def test_runs_of_other_jobs_are_ignored_and_live_members_are_remembered() -> None:
    runs = {"other": RunView("other", RunState.FAILURE, slots=())}
    live = {"m-9": (2, "run-live")}
    decided = decide_reruns(GroupCursor(), live, runs, [], generation=1, scanned_until=3.0)
    assert decided.reruns == ()
    assert decided.cursor.members == {"m-9": (2, "run-live")}


def test_the_cursor_remembers_a_bounded_number_of_reruns() -> None:
    seen = GroupCursor(rerun_runs=tuple(f"old-{i}" for i in range(REMEMBERED_RERUNS)))
    known = {"m-1": (1, "run-new")}
    decided = decide_reruns(
        GroupCursor(members=known, rerun_runs=seen.rerun_runs),
        {},
        {"run-new": RunView("run-new", RunState.OTHER, slots=(1,))},
        [(1, removed("m-1", 1))],
        generation=1,
        scanned_until=1.0,
    )
    assert len(decided.cursor.rerun_runs) == REMEMBERED_RERUNS
    assert decided.cursor.rerun_runs[-1] == "run-new" and "old-0" not in decided.cursor.rerun_runs
