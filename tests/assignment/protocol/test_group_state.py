"""The group state table, cell by cell (h11 style): every allowed move works, every other one is refused."""

from __future__ import annotations

import itertools

import pytest

from cohort.assignment.protocol.group_state import (
    TRANSITIONS,
    GroupRecord,
    GroupState,
    IllegalStateTransitionError,
    Outcome,
    can_transition,
    format_transition_table,
    transition,
)

E, P, C, S, D = (
    GroupState.EMPTY,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)

ALLOWED = {(E, P), (E, D), (P, C), (P, E), (C, S), (C, P), (S, P)}


@pytest.mark.parametrize(("source", "target"), list(itertools.product(GroupState, GroupState)))
def test_each_cell_of_the_transition_table(source: GroupState, target: GroupState) -> None:
    group = GroupRecord(name="g", state=source, generation=4)
    expected = (source, target) in ALLOWED
    assert can_transition(source, target) is expected
    if expected:
        moved = transition(Outcome(group), target, 12.5, "why")
        assert moved.group.state is target and moved.group.generation == 4
        [event] = moved.events
        assert (event.previous_state, event.state, event.at, event.reason) == (source, target, 12.5, "why")
    else:
        with pytest.raises(IllegalStateTransitionError):
            transition(Outcome(group), target, 0.0, "why")


def test_the_table_has_five_states_and_dead_is_final() -> None:
    assert [s.value for s in GroupState] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]
    assert TRANSITIONS[D] == frozenset()
    assert sum(len(targets) for targets in TRANSITIONS.values()) == len(ALLOWED)


def test_the_table_prints_one_row_per_state() -> None:
    text = format_transition_table()
    lines = text.splitlines()
    assert len(lines) == 6
    assert lines[0].split()[-5:] == [s.value for s in GroupState]
    stable_row = next(line for line in lines if line.startswith("Stable"))
    assert stable_row.split()[1:] == ["-", "x", "-", "-", "-"]
    empty_row = next(line for line in lines if line.startswith("Empty"))
    assert empty_row.split()[1:] == ["-", "x", "-", "-", "x"]
