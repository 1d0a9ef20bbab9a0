"""Classic consumer-group scenarios through the coordinator's state machine, on every store.

Members joining together, staggered or one at a time; a follower or the leader missing its join answer; a
sync refused during a rebalance; leaves in each state; a session expiring. Kafka 0.10's new groups started
in Stable; since Kafka 0.11 they start in Empty, as here, so every state path below begins with Empty. The
coordinator runs with no initial rebalance delay unless a test sets one, and the scripted clients answer
MEMBER_ID_REQUIRED as real ones do, which adds no state change. "One rebalance" is one assignment (one entry
into Stable), which is what a consumer's rebalance listener counts.
"""

from __future__ import annotations

import pytest

from cohort.assignment.clock import ManualClock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import RebalanceInProgressError, UnknownMemberIdError
from cohort.assignment.protocol.group_state import GroupConfig, GroupState
from cohort.assignment.protocol.messages import JoinComplete, JoinPending, SyncComplete, SyncPending
from tests.assignment.scripted_members import Client, count_transitions, state_path
from tests.fixtures.stores import CoordinatorFactory

E, P, C, S = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable"


def _clients(coordinator: Coordinator, *names: str) -> list[Client]:
    coordinator.report_topic_metadata("g", {"t": 3})
    return [Client(coordinator, "g", name) for name in names]


def test_three_members_joining_together_cause_one_rebalance(coordinator: Coordinator) -> None:
    c3, c2, c1 = _clients(coordinator, "consumer-3", "consumer-2", "consumer-1")
    # (1)(2) consumer-3 is processed first; the delayed join completes at once: CompletingRebalance.
    first = c3.join()
    assert isinstance(first, JoinComplete) and first.is_leader and first.generation == 1
    # (3) consumer-2's join moves the group back to PreparingRebalance; the phase cannot complete.
    assert isinstance(c2.join(), JoinPending)
    # (4) consumer-1's join cannot complete it either; consumer-3's sync is refused.
    assert isinstance(c1.join(), JoinPending)
    with pytest.raises(RebalanceInProgressError):
        c3.sync()
    # (5)(6) consumer-3 rejoins: everyone has joined, the phase completes for all three.
    rejoined = c3.join()
    assert isinstance(rejoined, JoinComplete) and rejoined.is_leader and len(rejoined.members) == 3
    assert all(isinstance(c.join(), JoinComplete) for c in (c2, c1))
    assert {c.generation for c in (c3, c2, c1)} == {2}
    # (7)(8) followers' syncs wait for the leader's; then every member has its assignment: Stable.
    assert isinstance(c2.sync(), SyncPending)
    assert isinstance(c3.sync(), SyncComplete)
    assert isinstance(c2.sync(), SyncComplete) and isinstance(c1.sync(), SyncComplete)
    assert state_path(coordinator, "g") == [E, P, C, P, C, S]
    assert count_transitions(coordinator, "g", GroupState.STABLE) == 1
    assert [c.syncs for c in (c3, c2, c1)] == [1, 1, 1]
    assert sorted(tp.partition for c in (c3, c2, c1) for tp in c.owned) == [0, 1, 2]
    # (9) the application closes: the group ends Empty.
    for client in (c3, c2, c1):
        client.leave()
    assert coordinator.describe_group("g").state is GroupState.EMPTY


def test_staggered_joins_cause_two_rebalances(coordinator: Coordinator) -> None:
    c1, c2, c3 = _clients(coordinator, "consumer-1", "consumer-2", "consumer-3")
    assert isinstance(c1.join(), JoinComplete)
    assert isinstance(c1.sync(), SyncComplete) and len(c1.owned) == 3  # first rebalance: all three
    assert isinstance(c2.join(), JoinPending)
    assert isinstance(c3.join(), JoinPending)
    with pytest.raises(RebalanceInProgressError):
        c1.heartbeat()  # consumer-1 stops fetching and must rejoin
    assert isinstance(c1.join(), JoinComplete)
    assert isinstance(c1.sync(), SyncComplete)
    for client in (c2, c3):
        assert isinstance(client.join(), JoinComplete)
        assert isinstance(client.sync(), SyncComplete)
    assert state_path(coordinator, "g") == [E, P, C, S, P, C, S]
    assert count_transitions(coordinator, "g", GroupState.STABLE) == 2
    assert [c.syncs for c in (c1, c2, c3)] == [2, 1, 1]
    assert [len(c.owned) for c in (c1, c2, c3)] == [1, 1, 1]


def test_one_member_at_a_time_causes_three_rebalances(coordinator: Coordinator) -> None:
    c1, c2, c3 = _clients(coordinator, "consumer-1", "consumer-2", "consumer-3")
    c1.join()
    c1.sync()
    assert isinstance(c2.join(), JoinPending)
    assert isinstance(c1.join(), JoinComplete)  # consumer-1 rejoins: the phase completes for two
    c1.sync()
    c2.join()
    c2.sync()
    assert isinstance(c3.join(), JoinPending)
    c1.join()
    assert isinstance(c2.join(), JoinComplete)
    for client in (c1, c2, c3):
        client.join()
        client.sync()
    assert state_path(coordinator, "g") == [E, P, C, S, P, C, S, P, C, S]
    assert count_transitions(coordinator, "g", GroupState.STABLE) == 3
    assert [c.syncs for c in (c1, c2, c3)] == [3, 2, 1]
    assert coordinator.describe_group("g").generation == 3


def _three_in_one_phase(make_coordinator: CoordinatorFactory, clock: ManualClock) -> tuple[Coordinator, list[Client]]:
    """Three members joining inside the initial delay complete one join phase together."""
    coordinator = make_coordinator(GroupConfig(initial_rebalance_delay=3))
    clients = _clients(coordinator, "leader", "follower-1", "follower-2")
    for client in clients:
        assert isinstance(client.join(), JoinPending)
    clock.advance(3)
    assert isinstance(clients[0].join(), JoinComplete)
    return coordinator, clients


def test_a_follower_missing_its_join_answer_gets_it_again_without_a_rebalance(
    make_coordinator: CoordinatorFactory, clock: ManualClock
) -> None:
    coordinator, (leader, f1, f2) = _three_in_one_phase(make_coordinator, clock)
    assert isinstance(f1.join(), JoinComplete)
    f2.join()  # completed, but the answer is lost on its way to follower-2
    assert isinstance(f1.sync(), SyncPending)
    assert isinstance(leader.sync(), SyncComplete)
    assert isinstance(f1.sync(), SyncComplete)
    again = f2.join()  # the group is Stable: the join is answered at once, no rebalance
    assert isinstance(again, JoinComplete) and again.generation == 1 and not again.is_leader
    assert isinstance(f2.sync(), SyncComplete) and len(f2.owned) == 1
    assert state_path(coordinator, "g") == [E, P, C, S]


def test_the_leader_missing_its_join_answer_rejoins_in_completing_rebalance(
    make_coordinator: CoordinatorFactory, clock: ManualClock
) -> None:
    coordinator, (leader, f1, f2) = _three_in_one_phase(make_coordinator, clock)
    for follower in (f1, f2):
        follower.join()
        assert isinstance(follower.sync(), SyncPending)
    again = leader.join()  # still CompletingRebalance: answered at once, with the members to assign
    assert isinstance(again, JoinComplete) and again.is_leader and len(again.members) == 3
    assert coordinator.describe_group("g").state is GroupState.COMPLETING_REBALANCE
    assert isinstance(leader.sync(), SyncComplete)
    assert all(isinstance(f.sync(), SyncComplete) for f in (f1, f2))
    assert state_path(coordinator, "g") == [E, P, C, S]
    assert coordinator.describe_group("g").generation == 1


def test_sync_during_preparing_rebalance_is_refused_then_the_leader_rejoins(coordinator: Coordinator) -> None:
    first, second = _clients(coordinator, "first", "second")
    first.join()  # CompletingRebalance; the leader is still assigning
    assert isinstance(second.join(), JoinPending)  # the new member moves the group to PreparingRebalance
    with pytest.raises(RebalanceInProgressError):
        first.sync()
    assert isinstance(first.join(), JoinComplete)
    first.sync()
    second.join()
    assert isinstance(second.sync(), SyncComplete)
    assert state_path(coordinator, "g") == [E, P, C, P, C, S]


def _stable_pair(coordinator: Coordinator) -> tuple[Client, Client]:
    a, b = _clients(coordinator, "a", "b")
    a.join()
    b.join()
    a.join()
    b.join()
    a.sync()
    b.sync()
    assert coordinator.describe_group("g").state is GroupState.STABLE
    return a, b


def test_leave_in_stable_rebalances_to_the_remaining_member(coordinator: Coordinator) -> None:
    a, b = _stable_pair(coordinator)
    b.leave()
    assert coordinator.describe_group("g").state is GroupState.PREPARING_REBALANCE
    assert isinstance(a.join(), JoinComplete)
    a.sync()
    assert len(a.owned) == 3
    with pytest.raises(UnknownMemberIdError):
        b.heartbeat()


def test_leave_in_completing_rebalance_restarts_the_join_phase(coordinator: Coordinator) -> None:
    a, b = _stable_pair(coordinator)
    a.join()  # the leader rejoins: PreparingRebalance
    b.join()  # everyone is in: CompletingRebalance, generation 3
    assert isinstance(a.join(), JoinComplete) and a.generation == 3
    assert coordinator.describe_group("g").state is GroupState.COMPLETING_REBALANCE
    b.leave()
    assert coordinator.describe_group("g").state is GroupState.PREPARING_REBALANCE
    with pytest.raises(RebalanceInProgressError):
        a.sync()
    a.join()
    a.sync()
    assert state_path(coordinator, "g")[-4:] == [C, P, C, S]


def test_leave_in_preparing_rebalance_lets_the_join_phase_complete(coordinator: Coordinator) -> None:
    a, b = _stable_pair(coordinator)
    a.join()  # leader rejoins: PreparingRebalance, waiting for b
    assert coordinator.describe_group("g").state is GroupState.PREPARING_REBALANCE
    b.leave()  # the only member that had not rejoined leaves: nothing left to wait for
    assert coordinator.describe_group("g").state is GroupState.COMPLETING_REBALANCE
    assert isinstance(a.join(), JoinComplete)


def test_the_last_member_leaving_empties_the_group(coordinator: Coordinator) -> None:
    (a,) = _clients(coordinator, "a")
    a.join()
    a.sync()
    a.leave()
    assert state_path(coordinator, "g") == [E, P, C, S, P, E]
    assert coordinator.describe_group("g").members == ()
    with pytest.raises(UnknownMemberIdError):  # leaving an Empty group: nobody to remove
        a.leave()


def test_session_expiry_removes_a_silent_member(coordinator: Coordinator, clock: ManualClock) -> None:
    a, b = _stable_pair(coordinator)
    for _ in range(2):
        clock.advance(4)
        b.heartbeat()  # b is alive; a is silent
    clock.advance(2)  # a's last call was 10 s ago: its session (10 s) has just expired
    with pytest.raises(RebalanceInProgressError):
        b.heartbeat()
    assert [m.client_id for m in coordinator.describe_group("g").members] == ["b"]
    b.join()
    b.sync()
    assert len(b.owned) == 3
    with pytest.raises(UnknownMemberIdError):
        a.heartbeat()
    reasons = [e.reason for _, e in coordinator.group_events("g") if e.member_id == a.member_id]
    assert any("session timeout" in r for r in reasons)
