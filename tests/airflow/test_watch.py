"""The Airflow trigger's decisions and its claims: which slots a group's losses and topic changes run, once.

Pure decisions with values; the claims on a real SQLite store with two watchers (two triggerers); the trigger
serialized and rebuilt as the triggerer rebuilds it.
"""

from dataclasses import replace
from pathlib import Path

import pytest

from cohort.airflow.dag import slots_for
from cohort.airflow.trigger import GroupWatchTrigger, group_settings, worker_group_of
from cohort.airflow.watch import GroupWatch, WatchState, decide_signals
from cohort.assignment.clock import ManualClock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.protocol.group_state import EventKind, GroupEvent, GroupState
from cohort.assignment.protocol.messages import JoinComplete, JoinRequest
from cohort.assignment.worker_group import WorkerGroup

GROUP = WorkerGroup("g", topics=("t",), worker_slots=3, initial_rebalance_delay_s=0.0, session_timeout_s=10.0)


def removed(member: str, reason: str) -> GroupEvent:
    return GroupEvent(1.0, EventKind.MEMBER_REMOVED, GroupState.PREPARING_REBALANCE, 1, member_id=member, reason=reason)


def test_a_member_removed_while_it_held_work_reruns_its_slot_once_per_lost_run():
    seen = WatchState(3, {"m1": (1, "run-a"), "m2": (2, "run-b")}, {"t": 4})
    events = [(4, removed("m1", "session expired")), (5, removed("m2", "left: finished"))]
    signals, state = decide_signals(GROUP, seen, {}, events, {"t": 4})
    assert [(s.slots, s.key) for s in signals] == [((1,), "run-a")]  # a clean leave orphans nothing
    assert state.last_event == 5 and state.members == {}


def test_a_grown_topic_runs_every_slot_but_the_first_sight_does_not():
    signals, state = decide_signals(GROUP, WatchState(counts=None), {}, [], {"t": 4})
    assert signals == [] and state.counts == {"t": 4}
    signals, _ = decide_signals(GROUP, state, {}, [], {"t": 6})
    assert [s.slots for s in signals] == [(1, 2, 3)] and signals[0].key.startswith("topics-")


def test_the_runs_slots_come_from_the_signals_of_their_group():
    class Event:
        def __init__(self, payload):
            self.extra = {"from_trigger": True, "payload": payload}

    events = {"signals": [Event({"group": "g", "slots": [3]}), Event({"group": "g", "slots": [1, 9, "x"]})]}
    assert slots_for(GROUP, events) == [1, 3]
    assert slots_for(GROUP, {"signals": [Event({"group": "other", "slots": [2]})]}) == [1, 2, 3]
    assert slots_for(GROUP, None) == [1, 2, 3]  # a scheduled or manual run: every slot


def test_two_watchers_on_one_store_signal_a_loss_once(tmp_path: Path):
    clock = ManualClock(1000.0)
    url = f"sqlite:///{tmp_path / 'cohort.db'}"
    group = replace(GROUP, store_url=url)
    coordinators = [Coordinator.from_url(url, clock=clock, config=group.group_config()) for _ in range(3)]
    member_side, first, second = coordinators
    try:
        member_side.report_topic_metadata("g", {"t": 4})
        request = JoinRequest(instance_id="g/worker-2", client_id="run-x", topics=("t",), session_timeout=10)
        answer = member_side.join("g", request)
        answer = member_side.join("g", request.with_member_id(answer.member_id))
        assert isinstance(answer, JoinComplete)
        member_side.sync("g", answer.member_id, answer.generation)
        watches = [GroupWatch(group, c, lambda: {"t": 4}, holder=h) for c, h in ((first, "A"), (second, "B"))]
        assert [w.poll() for w in watches] == [[], []]  # the first look takes note
        clock.advance(11)  # the member's session expires
        signals = [w.poll() for w in watches]
        assert [[(s.slots, s.key) for s in found] for found in signals] == [[((2,), "run-x")], []]
        assert [w.poll() for w in watches] == [[], []]
    finally:
        for coordinator in coordinators:
            coordinator.close()


def test_the_trigger_round_trips_without_secrets(monkeypatch: pytest.MonkeyPatch):
    secret = "postgresql+psycopg://u:s3cret@db/cohort"
    group = WorkerGroup("g", topics=("t",), store_url=secret)
    trigger = GroupWatchTrigger(
        group_settings(group, store_url_env="COHORT_STORE_URL"),
        "kafka_default",
        store_url_env="COHORT_STORE_URL",
        poll_interval_s=2.0,
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "cohort.airflow.trigger.GroupWatchTrigger"
    assert "s3cret" not in repr(kwargs)
    rebuilt = GroupWatchTrigger(**kwargs)
    monkeypatch.setenv("COHORT_STORE_URL", secret)
    assert worker_group_of(rebuilt.group, rebuilt.store_url_env) == group
    monkeypatch.delenv("COHORT_STORE_URL")
    with pytest.raises(ValueError, match="'COHORT_STORE_URL'"):
        worker_group_of(rebuilt.group, rebuilt.store_url_env)
