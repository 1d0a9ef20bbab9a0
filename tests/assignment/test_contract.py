"""The coordinator's contract, run against the in-memory, SQLite and PostgreSQL stores."""

from __future__ import annotations

import pytest

from cohort.assignment.clock import ManualClock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import (
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    NonContiguousRangeError,
    NonEmptyGroupError,
    PartitionNotOwnedError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from cohort.assignment.protocol.group_state import REMEMBERED_CLAIMS, EventKind, GroupConfig, GroupState
from cohort.assignment.protocol.messages import JoinComplete, JoinPending, JoinRequest, SyncComplete
from cohort.assignment.types import COOPERATIVE, EAGER
from cohort.common.names import InvalidNameError
from cohort.common.types import OffsetRange
from tests.assignment.scripted_members import Client, state_path, tp
from tests.fixtures.stores import CoordinatorFactory


def _stable(coordinator: Coordinator, *clients: Client) -> None:
    """Join every client, let the join phase complete, sync leader first."""
    for client in clients:
        client.join()
    for client in clients:
        assert isinstance(client.join(), JoinComplete)
    for client in sorted(clients, key=lambda c: not c.leader):
        assert isinstance(client.sync(), SyncComplete)
    assert coordinator.describe_group(clients[0].group).state is GroupState.STABLE


# ------------------------------------------------------------------------------------ static membership


def test_static_member_restarting_within_its_session_keeps_its_assignment_without_rebalance(
    coordinator: Coordinator, clock: ManualClock
) -> None:
    coordinator.report_topic_metadata("g", {"t": 4})
    slot = Client(coordinator, "g", "run-1", instance_id="g/worker-1")
    other = Client(coordinator, "g", "run-x")
    _stable(coordinator, slot, other)
    before = coordinator.describe_group("g")
    path_before = state_path(coordinator, "g")
    clock.advance(5)
    restarted = Client(coordinator, "g", "run-2", instance_id="g/worker-1")
    answer = restarted.join()
    assert isinstance(answer, JoinComplete) and answer.skip_assignment
    assert answer.generation == before.generation and restarted.member_id != slot.member_id
    assert isinstance(restarted.sync(), SyncComplete)
    assert restarted.owned == slot.owned
    after = coordinator.describe_group("g")
    assert after.state is GroupState.STABLE and after.generation == before.generation
    assert state_path(coordinator, "g") == path_before  # no rebalance at all
    assert after.member(restarted.member_id).client_id == "run-2"  # type: ignore[arg-type]
    # The old run is a zombie now: fenced on every call, and its commit changes nothing.
    with pytest.raises(FencedInstanceIdError):
        slot.heartbeat()
    with pytest.raises(FencedInstanceIdError):
        slot.commit(OffsetRange("t", slot.owned[0].partition, 0, 5, records=5))
    assert coordinator.ledger_history("g", "t", slot.owned[0].partition) == []
    restarted.commit(OffsetRange("t", slot.owned[0].partition, 0, 5, records=5))
    assert coordinator.fetch_offsets("g", [slot.owned[0]]) == {slot.owned[0]: 5}


def test_static_member_returning_after_its_session_expired_causes_a_rebalance(
    coordinator: Coordinator, clock: ManualClock
) -> None:
    coordinator.report_topic_metadata("g", {"t": 2})
    slot = Client(coordinator, "g", "run-1", instance_id="g/worker-1")
    other = Client(coordinator, "g", "run-x")
    _stable(coordinator, slot, other)
    clock.advance(6)
    other.heartbeat()
    clock.advance(6)  # slot silent for 12 s > 10 s: removed, rebalance
    with pytest.raises(RebalanceInProgressError):
        other.heartbeat()
    other.join()
    other.sync()
    assert [m.client_id for m in coordinator.describe_group("g").members] == ["run-x"]
    back = Client(coordinator, "g", "run-2", instance_id="g/worker-1")
    assert isinstance(back.join(), JoinPending)
    assert coordinator.describe_group("g").state is GroupState.PREPARING_REBALANCE
    other.join()
    back.join()
    other.sync()
    back.sync()
    assert len(back.owned) == 1 and back.generation == other.generation == 4


# ----------------------------------------------------------------------------------------------- fencing


def test_commit_from_an_evicted_member_or_an_old_generation_is_refused_and_changes_nothing(
    coordinator: Coordinator,
) -> None:
    coordinator.report_topic_metadata("g", {"t": 2})
    a, b = Client(coordinator, "g", "a"), Client(coordinator, "g", "b")
    _stable(coordinator, a, b)
    owned_by_a = a.owned[0]
    a.commit(OffsetRange("t", owned_by_a.partition, 0, 10, records=10))
    old_generation = a.generation
    coordinator.evict_member("g", b.member_id, "run failed")  # type: ignore[arg-type]
    with pytest.raises(UnknownMemberIdError):
        b.commit(OffsetRange("t", b.owned[0].partition, 0, 10, records=10))
    a.join()
    a.sync()
    with pytest.raises(IllegalGenerationError):
        a.commit(OffsetRange("t", owned_by_a.partition, 10, 20, records=10), generation=old_generation)
    with pytest.raises(NonContiguousRangeError) as overlap:
        a.commit(OffsetRange("t", owned_by_a.partition, 5, 20, records=15))
    assert (overlap.value.expected, overlap.value.given) == (10, 5)
    assert coordinator.fetch_offsets("g", [tp("t", 0), tp("t", 1)]) == {owned_by_a: 10, b.owned[0]: None}
    assert [e.until_offset for e in coordinator.ledger_history("g", "t", owned_by_a.partition)] == [10]


def test_commits_need_ownership_and_are_refused_while_completing_a_rebalance(coordinator: Coordinator) -> None:
    coordinator.report_topic_metadata("g", {"t": 2})
    a, b = Client(coordinator, "g", "a"), Client(coordinator, "g", "b")
    _stable(coordinator, a, b)
    with pytest.raises(PartitionNotOwnedError) as foreign:
        a.commit(OffsetRange("t", b.owned[0].partition, 0, 1, records=1))
    assert foreign.value.partitions == b.owned
    # Eager: during PreparingRebalance a member that has not rejoined still owns its partitions ...
    a.join()
    b.commit(OffsetRange("t", b.owned[0].partition, 0, 3, records=3))
    # ... and gives them up when it rejoins.
    b.join()
    a.join()
    with pytest.raises(RebalanceInProgressError):
        b.commit(OffsetRange("t", b.owned[0].partition, 3, 4, records=1))


def test_standalone_commits_are_for_empty_groups_only(coordinator: Coordinator) -> None:
    ledger = coordinator.standalone_ledger("admin", run_id="reset-1")
    ledger.commit([OffsetRange("t", 0, 100, 150, records=50)])
    assert ledger.committed_offsets([tp("t", 0), tp("t", 1)]) == {tp("t", 0): 150, tp("t", 1): None}
    [entry] = coordinator.ledger_history("admin", "t", 0)
    assert (entry.member_id, entry.generation, entry.run_id) == (None, -1, "reset-1")
    assert coordinator.describe_group("admin").state is GroupState.EMPTY
    coordinator.report_topic_metadata("admin", {"t": 1})
    member = Client(coordinator, "admin", "m")
    member.join()
    with pytest.raises(UnknownMemberIdError):
        ledger.commit([OffsetRange("t", 0, 150, 160, records=10)])
    with pytest.raises(IllegalGenerationError):
        coordinator.commit_offsets("fresh", [OffsetRange("t", 0, 0, 1)], generation=3)
    assert "fresh" not in [g.name for g in coordinator.list_groups()]


def test_ledger_records_gaps_with_a_reason_and_keeps_history(coordinator: Coordinator, clock: ManualClock) -> None:
    coordinator.report_topic_metadata("g", {"t": 1})
    a = Client(coordinator, "g", "a")
    _stable(coordinator, a)
    a.commit(OffsetRange("t", 0, 0, 10, records=9, quarantined=1))
    with pytest.raises(NonContiguousRangeError) as gap:
        a.commit(OffsetRange("t", 0, 50, 60, records=10))
    assert (gap.value.partition, gap.value.expected, gap.value.given) == (tp("t", 0), 10, 50)
    clock.advance(1)
    a.commit(OffsetRange("t", 0, 10, 50, gap_reason="deleted by retention"), OffsetRange("t", 0, 50, 60, records=10))
    history = coordinator.ledger_history("g", "t", 0)
    assert [(e.from_offset, e.until_offset, e.records, e.quarantined, e.gap_reason) for e in history] == [
        (0, 10, 9, 1, None),
        (10, 50, 0, 0, "deleted by retention"),
        (50, 60, 10, 0, None),
    ]
    assert {(e.member_id, e.generation, e.run_id) for e in history} == {(a.member_id, 1, "run-a")}
    assert [e.committed_at for e in history] == [1000.0, 1001.0, 1001.0]


# ------------------------------------------------------------------------------------ vote and protocol


def test_the_assignor_is_elected_by_vote_and_inconsistent_members_are_refused(coordinator: Coordinator) -> None:
    coordinator.report_topic_metadata("g", {"t": 3})
    a = Client(coordinator, "g", "a", assignors=("range", "roundrobin"))
    b = Client(coordinator, "g", "b", assignors=("roundrobin", "range"))
    c = Client(coordinator, "g", "c", assignors=("roundrobin", "sticky", "range"))
    _stable(coordinator, a, b, c)
    assert coordinator.describe_group("g").assignor == "roundrobin"
    intruder = Client(coordinator, "g", "x", assignors=("sticky",))
    with pytest.raises(InconsistentGroupProtocolError):
        intruder.join()
    assert len(coordinator.describe_group("g").members) == 3
    assert coordinator.describe_group("g").state is GroupState.STABLE
    with pytest.raises(InconsistentGroupProtocolError):
        Client(coordinator, "g", "y", assignors=()).join()


def test_an_empty_group_still_tells_its_last_assignor_and_its_leaders_assignors(coordinator: Coordinator) -> None:
    """Emptied, a group has no current assignor (as in Kafka), and still tells the assignor of its last generation
    and the assignors that generation's leader declared, in its order; the next generation elects afresh."""
    coordinator.report_topic_metadata("g", {"t": 2})
    a = Client(coordinator, "g", "a", assignors=("roundrobin", "range"))
    b = Client(coordinator, "g", "b", assignors=("range", "roundrobin"))
    _stable(coordinator, a, b)  # one vote each: the leader's preference wins the tie

    def assignors() -> tuple[GroupState, str | None, str | None, tuple[str, ...]]:
        described = coordinator.describe_group("g")
        return described.state, described.assignor, described.last_assignor, described.configured_assignors

    assert assignors() == (GroupState.STABLE, "roundrobin", "roundrobin", ("roundrobin", "range"))
    a.leave()
    b.leave()
    assert assignors() == (GroupState.EMPTY, None, "roundrobin", ("roundrobin", "range"))
    _stable(coordinator, Client(coordinator, "g", "c", assignors=("range",)))
    assert assignors() == (GroupState.STABLE, "range", "range", ("range",))


def test_session_timeout_bounds_and_group_size(make_coordinator: CoordinatorFactory) -> None:
    coordinator = make_coordinator(GroupConfig(initial_rebalance_delay=0, max_size=2))
    for bad in (5.9, 1800.5):
        with pytest.raises(InvalidSessionTimeoutError):
            Client(coordinator, "g", "a", session_timeout=bad).join()
    Client(coordinator, "g", "a").join()
    Client(coordinator, "g", "b").join()
    with pytest.raises(GroupMaxSizeReachedError):
        Client(coordinator, "g", "c").join()
    with pytest.raises(GroupMaxSizeReachedError):
        Client(coordinator, "g", "d", instance_id="g/w-9").join()
    narrow = make_coordinator(GroupConfig(min_session_timeout=1, max_session_timeout=2))
    Client(narrow, "h", "a", session_timeout=1).join()
    with pytest.raises(InvalidSessionTimeoutError):
        Client(narrow, "h", "b", session_timeout=3).join()


def test_first_dynamic_join_hands_out_a_member_id_that_expires(coordinator: Coordinator, clock: ManualClock) -> None:
    request = JoinRequest(topics=["t"], assignors=["range"], session_timeout=10)
    with pytest.raises(MemberIdRequiredError) as needed:
        coordinator.join("g", request)
    assert coordinator.describe_group("g").pending_member_ids == 1
    clock.advance(10)
    with pytest.raises(UnknownMemberIdError):
        coordinator.join("g", request.with_member_id(needed.value.member_id))
    with pytest.raises(MemberIdRequiredError) as again:
        coordinator.join("g", request)
    assert isinstance(coordinator.join("g", request.with_member_id(again.value.member_id)), JoinComplete)


def test_names_are_validated_on_entry(coordinator: Coordinator) -> None:
    with pytest.raises(InvalidNameError):
        coordinator.describe_group("../etc")
    with pytest.raises(InvalidNameError):
        coordinator.join("g", JoinRequest(topics=["bad topic"]))
    with pytest.raises(InvalidNameError):
        coordinator.join("g", JoinRequest(topics=["t"], instance_id="g/../x"))
    with pytest.raises(InvalidNameError):
        coordinator.commit_offsets("g", [OffsetRange("t/x", 0, 0, 1)])
    with pytest.raises(InvalidNameError):
        coordinator.fetch_offsets("g", [tp("..", 0)])
    with pytest.raises(InvalidNameError):
        coordinator.heartbeat("g", "m", 1, instance_id="w/ok/../x")


# ----------------------------------------------------------------------------------- delete, describe


def test_delete_is_refused_while_live_members_exist(coordinator: Coordinator) -> None:
    coordinator.report_topic_metadata("g", {"t": 1})
    a = Client(coordinator, "g", "a")
    _stable(coordinator, a)
    a.commit(OffsetRange("t", 0, 0, 5, records=5))
    with pytest.raises(NonEmptyGroupError):
        coordinator.delete_group("g")
    assert coordinator.describe_group("g").state is GroupState.STABLE
    a.leave()
    coordinator.delete_group("g")
    assert coordinator.describe_group("g").state is GroupState.DEAD
    assert coordinator.list_groups() == []
    assert coordinator.ledger_history("g", "t", 0) == []
    with pytest.raises(GroupIdNotFoundError):
        coordinator.delete_group("g")


def test_describe_and_list_show_what_sensors_need(coordinator: Coordinator, clock: ManualClock) -> None:
    coordinator.report_topic_metadata("g", {"t": 2})
    a = Client(coordinator, "g", "dagster-run-a", instance_id="g/worker-0", progress_timeout=60)
    b = Client(coordinator, "g", "dagster-run-b")
    _stable(coordinator, a, b)
    described = coordinator.describe_group("g")
    assert (described.state, described.generation, described.assignor, described.leader_id) == (
        GroupState.STABLE,
        2,
        "range",
        a.member_id,
    )
    first = described.member(a.member_id)  # type: ignore[arg-type]
    assert (first.instance_id, first.run_id, first.session_deadline) == ("g/worker-0", "dagster-run-a", 1010.0)
    assert first.progress_deadline == 1060.0 and len(first.assigned) == 1 and first.assigned == a.owned
    assert described.assignment == {a.member_id: a.owned, b.member_id: b.owned}
    assert sorted(a.owned + b.owned) == [tp("t", 0), tp("t", 1)]
    assert [(g.name, g.state, g.generation, g.members) for g in coordinator.list_groups()] == [
        ("g", GroupState.STABLE, 2, 2)
    ]
    clock.advance(10)  # both sessions expired: describe shows it without writing it
    assert coordinator.describe_group("g").state is GroupState.EMPTY
    events = coordinator.expire("g")
    assert sum(1 for e in events if e.member_id in (a.member_id, b.member_id)) == 2
    assert coordinator.list_groups()[0].state is GroupState.EMPTY


def test_a_member_without_progress_is_evicted(coordinator: Coordinator, clock: ManualClock) -> None:
    coordinator.report_topic_metadata("g", {"t": 2})
    a = Client(coordinator, "g", "a", progress_timeout=30)
    b = Client(coordinator, "g", "b", progress_timeout=30)
    _stable(coordinator, a, b)
    for _ in range(5):
        clock.advance(5)
        a.heartbeat()
        b.heartbeat(progress=True)
    b.commit(OffsetRange("t", b.owned[0].partition, 0, 1, records=1))
    clock.advance(5)  # 30 s since a received its partitions with neither commit nor progress
    with pytest.raises(RebalanceInProgressError):
        b.heartbeat()
    assert [m.client_id for m in coordinator.describe_group("g").members] == ["b"]
    removed = [e.reason for _, e in coordinator.group_events("g") if e.member_id == a.member_id]
    assert any("progress" in r for r in removed)


# ------------------------------------------------------------------------------------- metadata triggers


def test_partition_growth_and_new_pattern_topics_trigger_rebalances(coordinator: Coordinator) -> None:
    coordinator.report_topic_metadata("g", {"orders": 2, "other": 1})
    a = Client(coordinator, "g", "a", topics=(), topic_pattern=r"orders(-.*)?")
    _stable(coordinator, a)
    assert a.owned == (tp("orders", 0), tp("orders", 1))
    assert coordinator.report_topic_metadata("g", {"orders": 2, "other": 5}) is False  # not subscribed
    assert coordinator.report_topic_metadata("g", {"orders": 3, "other": 5}) is True
    a.join()
    a.sync()
    assert a.owned == (tp("orders", 0), tp("orders", 1), tp("orders", 2))
    assert coordinator.report_topic_metadata("g", {"orders": 3, "other": 5, "orders-eu": 1}) is True
    a.join()
    a.sync()
    assert tp("orders-eu", 0) in a.owned
    with pytest.raises(InvalidRequestError):
        coordinator.report_topic_metadata("g", {"orders": -1})


# ------------------------------------------------------------------------------------ eager vs cooperative


def _owners(coordinator: Coordinator, group: str) -> dict[object, list[str]]:
    owners: dict[object, list[str]] = {}
    for m in coordinator.describe_group(group).members:
        for partition in m.owned:
            owners.setdefault(partition, []).append(m.member_id)
    return owners


def test_cooperative_rebalance_moves_partitions_in_two_rounds(coordinator: Coordinator) -> None:
    coordinator.report_topic_metadata("g", {"t": 4})
    a = Client(coordinator, "g", "a", assignors=("cooperative-sticky",))
    _stable(coordinator, a)
    assert len(a.owned) == 4 and coordinator.describe_group("g").rebalance_protocol == COOPERATIVE
    b = Client(coordinator, "g", "b", assignors=("cooperative-sticky",))
    assert isinstance(b.join(), JoinPending)
    a.commit(OffsetRange("t", 3, 0, 7, records=7))  # a keeps working during the rebalance
    assert isinstance(a.join(report_owned=True), JoinComplete)
    first = a.sync()
    assert isinstance(first, SyncComplete) and first.rejoin_after_revoke
    kept = first.assignment
    assert len(kept) == 2
    b.join()
    assert b.sync().assignment == ()  # type: ignore[union-attr]  # withheld until a releases them
    assert all(len(owners) == 1 for owners in _owners(coordinator, "g").values())
    revoked = sorted({tp("t", p) for p in range(4)} - set(kept))
    assert coordinator.describe_group("g").member(a.member_id).revoking == tuple(revoked)  # type: ignore[arg-type]
    for partition in revoked:  # a commits before releasing (the revoke hook)
        a.commit(OffsetRange("t", partition.partition, 7 if partition.partition == 3 else 0, 8, records=1))
    assert isinstance(a.join(report_owned=True), JoinPending)  # releasing starts the follow-up round
    with pytest.raises(RebalanceInProgressError):
        b.heartbeat()
    b.join(report_owned=True)
    a.join(report_owned=True)
    a.sync()
    b.sync()
    assert a.owned == kept  # a's kept partitions never moved
    assert sorted(b.owned) == revoked
    assert all(len(owners) == 1 for owners in _owners(coordinator, "g").values())
    with pytest.raises(PartitionNotOwnedError):  # released partitions are b's now
        a.commit(OffsetRange("t", revoked[0].partition, 8, 9, records=1))
    b.commit(OffsetRange("t", revoked[0].partition, 8, 9, records=1))


def test_eager_rebalance_revokes_everything_on_rejoin(coordinator: Coordinator) -> None:
    coordinator.report_topic_metadata("g", {"t": 4})
    a = Client(coordinator, "g", "a", assignors=("sticky",))
    _stable(coordinator, a)
    assert coordinator.describe_group("g").rebalance_protocol == EAGER
    b = Client(coordinator, "g", "b", assignors=("sticky",))
    b.join()
    a.join()
    assert coordinator.describe_group("g").member(a.member_id).owned == ()  # type: ignore[arg-type]
    a.join()
    first = a.sync()
    assert isinstance(first, SyncComplete) and not first.rejoin_after_revoke
    b.join()
    b.sync()
    assert len(a.owned) == 2 and len(b.owned) == 2 and set(a.owned).isdisjoint(b.owned)
    assert set(a.owned) <= {tp("t", p) for p in range(4)}


def test_leader_assignment_is_validated(coordinator: Coordinator) -> None:
    coordinator.report_topic_metadata("g", {"t": 2})
    a, b = Client(coordinator, "g", "a"), Client(coordinator, "g", "b")
    for client in (a, b, a, b):
        client.join()
    assert a.leader
    bad = [
        {a.member_id: [tp("t", 0)], b.member_id: [tp("t", 0), tp("t", 1)]},  # twice
        {a.member_id: [tp("t", 0), tp("t", 1)], "ghost": []},  # unknown member
        {a.member_id: [tp("t", 0), tp("t", 5)], b.member_id: [tp("t", 1)]},  # beyond the count
        {a.member_id: [tp("t", 0)], b.member_id: []},  # t-1 would be lost
    ]
    for assignment in bad:
        with pytest.raises(InvalidRequestError):
            a.sync(assignment)  # type: ignore[arg-type]
        assert coordinator.describe_group("g").state is GroupState.COMPLETING_REBALANCE
    a.sync({a.member_id: [tp("t", 1)], b.member_id: [tp("t", 0)]})  # type: ignore[dict-item]
    assert a.owned == (tp("t", 1),)


# ------------------------------------------------------------------------------------------ rerun claims


def test_one_loss_is_claimed_for_rerun_by_one_holder_across_coordinators(make_coordinator: CoordinatorFactory) -> None:
    host_a, host_b = make_coordinator(), make_coordinator()  # two orchestrators on one store
    host_a.report_topic_metadata("g", {"t": 2})
    a = Client(host_a, "g", "a")
    _stable(host_a, a)
    assert host_b.claim_rerun("g", lost="run-1", slot=1, holder="host-b") == "host-b"
    assert host_a.claim_rerun("g", lost="run-1", slot=1, holder="host-a") == "host-b"
    assert host_b.claim_rerun("g", lost="run-1", slot=1, holder="host-b") == "host-b"  # a repeated tick
    assert host_a.claim_rerun("g", lost="run-2", slot=2, holder="host-a") == "host-a"
    claimed = [e.reason for _, e in host_a.group_events("g") if e.kind is EventKind.RERUN_CLAIMED]
    assert claimed == ["slot 1: rerun of run-1 by host-b", "slot 2: rerun of run-2 by host-a"]
    a.heartbeat()  # the claims changed nothing of the protocol's state
    assert host_a.describe_group("g").state is GroupState.STABLE


def test_rerun_claims_are_bounded_and_need_a_loss_and_a_holder(coordinator: Coordinator) -> None:
    coordinator.report_topic_metadata("g", {"t": 1})
    for n in range(REMEMBERED_CLAIMS + 5):
        coordinator.claim_rerun("g", lost=f"run-{n}", slot=1, holder="h")
    record = coordinator.store.load("g")
    assert record is not None and len(record.rerun_claims) == REMEMBERED_CLAIMS
    assert "run-0" not in record.rerun_claims and f"run-{REMEMBERED_CLAIMS + 4}" in record.rerun_claims
    with pytest.raises(InvalidRequestError):
        coordinator.claim_rerun("g", lost="", slot=1, holder="h")
    assert coordinator.claim_rerun("never-joined", lost="run-x", slot=1, holder="h") == "h"
    assert coordinator.store.load("never-joined") is None
