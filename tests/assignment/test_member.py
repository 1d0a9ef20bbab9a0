"""`GroupMember`: the loop a run needs (join, sync, heartbeat thread, commit, leave, hooks).

The coordinator's time is a ManualClock except where the heartbeat thread's real-time behaviour is the
point; heartbeat and poll intervals are tens of milliseconds so the tests stay short.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence

import pytest

from cohort.assignment.clock import ManualClock, SystemClock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import FencedInstanceIdError, UnknownMemberIdError
from cohort.assignment.member import GroupMember, JoinTimeoutError, RebalanceListener
from cohort.assignment.protocol.group_state import GroupConfig, GroupState
from cohort.assignment.settings import MemberSettings
from cohort.assignment.store.memory import MemoryGroupStore
from cohort.assignment.store.sql import SqlGroupStore
from cohort.assignment.types import EAGER, Subscription
from cohort.common.ledger import OffsetLedger
from cohort.common.types import OffsetRange, TopicPartition
from tests.assignment.scripted_members import tp


class Recorder(RebalanceListener):
    """Records hook calls as (hook, partitions)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[TopicPartition, ...]]] = []

    def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        self.calls.append(("revoked", tuple(revoked)))

    def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        self.calls.append(("assigned", tuple(assigned)))

    def on_partitions_lost(self, lost: Sequence[TopicPartition]) -> None:
        self.calls.append(("lost", tuple(lost)))


@pytest.fixture(params=["memory", "sqlite"])
def make(request: pytest.FixtureRequest, clock: ManualClock) -> Callable[..., Coordinator]:
    url = "memory" if request.param == "memory" else request.getfixturevalue("sqlite_url")
    memory = MemoryGroupStore()

    def build(config: GroupConfig | None = None, use_clock: object = clock) -> Coordinator:
        store = memory if url == "memory" else SqlGroupStore.from_url(url)
        return Coordinator(store, clock=use_clock, config=config or GroupConfig(initial_rebalance_delay=0))  # type: ignore[arg-type]

    return build


def _member(
    coordinator: Coordinator, name: str, listener: RebalanceListener | None = None, **kw: object
) -> GroupMember:
    settings: dict[str, object] = {"topics": ("t",), "session_timeout": 10.0, "heartbeat_interval": 0.02}
    settings["join_timeout"] = 20.0
    for key in [k for k in kw if k in MemberSettings.__dataclass_fields__]:
        settings[key] = kw.pop(key)
    if "assignors" in settings:
        settings["assignors"] = tuple(settings["assignors"])  # type: ignore[arg-type]
    kw.setdefault("poll_interval", 0.01)
    return GroupMember(
        coordinator,
        "g",
        MemberSettings(**settings),  # type: ignore[arg-type]
        client_id=name,
        listener=listener,
        **kw,  # type: ignore[arg-type]
    )


def _wait(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


def test_join_commit_and_close(make: Callable[..., Coordinator]) -> None:
    coordinator = make()
    coordinator.report_topic_metadata("g", {"t": 2})
    hooks = Recorder()
    with _member(coordinator, "run-1", hooks, assignors=["range"]) as member:
        assert isinstance(member, OffsetLedger)
        assert member.assignment == (tp("t", 0), tp("t", 1)) and member.is_leader and member.generation == 1
        assert member.committed_offsets(member.assignment) == {tp("t", 0): None, tp("t", 1): None}
        member.commit([OffsetRange("t", 0, 0, 10, records=10)])
        assert member.committed_offsets([tp("t", 0)]) == {tp("t", 0): 10}
        assert coordinator.ledger_history("g", "t", 0)[0].run_id == "run-1"
        member.report_progress()
    assert hooks.calls == [("assigned", (tp("t", 0), tp("t", 1))), ("revoked", (tp("t", 0), tp("t", 1)))]
    assert coordinator.describe_group("g").state is GroupState.EMPTY


def test_join_polls_through_the_initial_delay_with_an_injected_sleep(make: Callable[..., Coordinator]) -> None:
    clock = ManualClock(0.0)
    coordinator = make(GroupConfig(initial_rebalance_delay=3), clock)
    coordinator.report_topic_metadata("g", {"t": 1})
    member = _member(coordinator, "run-1", sleep=clock.advance, poll_interval=0.5, heartbeat_interval=60)
    assert member.join() == (tp("t", 0),)
    assert clock.now() == 3.0  # six polls of 0.5 s of manual time; no real sleeping
    member.close()


def test_eager_member_revokes_everything_before_rejoining(make: Callable[..., Coordinator]) -> None:
    coordinator = make()
    coordinator.report_topic_metadata("g", {"t": 4})
    first_hooks = Recorder()
    first = _member(coordinator, "first", first_hooks, assignors=["sticky"])
    first.join()
    second = _member(coordinator, "second", assignors=["sticky"])
    joined = threading.Thread(target=second.join)
    joined.start()
    _wait(lambda: first.rebalance_needed)  # the heartbeat thread saw REBALANCE_IN_PROGRESS
    assert first.rebalance_protocol == EAGER
    first.ensure_active()
    joined.join(10)
    assert len(first.assignment) == 2 and len(second.assignment) == 2
    everything = tuple(tp("t", p) for p in range(4))
    assert first_hooks.calls == [("assigned", everything), ("revoked", everything), ("assigned", first.assignment)]
    second.close()
    first.close()


def test_cooperative_member_rebalances_in_the_background_and_keeps_its_partitions(
    make: Callable[..., Coordinator],
) -> None:
    coordinator = make()
    coordinator.report_topic_metadata("g", {"t": 4})
    hooks = Recorder()
    first = _member(coordinator, "first", hooks, assignors=["cooperative-sticky"])
    first.join()
    second = _member(coordinator, "second", assignors=["cooperative-sticky"])
    second.join()  # completes only after first's heartbeat thread rejoined twice on its own
    _wait(lambda: len(second.assignment) == 2)
    kept = first.assignment
    assert len(kept) == 2 and set(kept).isdisjoint(second.assignment)
    moved = tuple(sorted(set(tp("t", p) for p in range(4)) - set(kept)))
    assert ("revoked", moved) in hooks.calls
    assert not any(kind == "revoked" and len(parts) == 4 for kind, parts in hooks.calls)  # never stopped entirely
    first.commit([OffsetRange("t", kept[0].partition, 0, 1, records=1)])  # still a member in good standing
    second.close()
    first.close()


def test_an_evicted_member_loses_its_partitions_and_rejoins_fresh(make: Callable[..., Coordinator]) -> None:
    coordinator = make()
    coordinator.report_topic_metadata("g", {"t": 1})
    hooks = Recorder()
    member = _member(coordinator, "run-1", hooks, assignors=["range"])
    member.join()
    old_id = member.member_id
    coordinator.evict_member("g", old_id, "run failed")  # type: ignore[arg-type]
    with pytest.raises(UnknownMemberIdError):
        member.commit([OffsetRange("t", 0, 0, 1, records=1)])
    _wait(lambda: member.rebalance_needed)
    member.ensure_active()
    assert member.member_id != old_id and member.assignment == (tp("t", 0),)
    assert ("lost", (tp("t", 0),)) in hooks.calls and hooks.calls[-1] == ("assigned", (tp("t", 0),))
    member.close()


def test_a_fenced_static_member_stops(make: Callable[..., Coordinator]) -> None:
    coordinator = make()
    coordinator.report_topic_metadata("g", {"t": 1})
    old = _member(coordinator, "run-1", instance_id="g/worker-1", assignors=["range"])
    old.join()
    new = _member(coordinator, "run-2", instance_id="g/worker-1", assignors=["range"])
    assert new.join() == (tp("t", 0),)
    with pytest.raises(FencedInstanceIdError):
        old.commit([OffsetRange("t", 0, 0, 1, records=1)])
    _wait(lambda: old.rebalance_needed)
    with pytest.raises(FencedInstanceIdError):
        old.ensure_active()
    old.close()  # a static member does not leave: the slot stays with `new`
    new.close()
    assert [m.client_id for m in coordinator.describe_group("g").members] == ["run-2"]


def test_heartbeats_keep_a_short_session_alive_in_real_time(sqlite_url: str) -> None:
    config = GroupConfig(initial_rebalance_delay=0, min_session_timeout=0.1)
    coordinator = Coordinator(SqlGroupStore.from_url(sqlite_url), clock=SystemClock(), config=config)
    coordinator.report_topic_metadata("g", {"t": 1})
    member = _member(coordinator, "run-1", assignors=["range"], session_timeout=0.6, heartbeat_interval=0.1)
    member.join()
    time.sleep(1.5)  # 2.5 sessions: only the heartbeat thread keeps the member in
    described = coordinator.describe_group("g")
    assert (described.state, described.generation, len(described.members)) == (GroupState.STABLE, 1, 1)
    member.close(leave=False)  # stop heartbeating without leaving: the session runs out
    time.sleep(0.8)
    assert coordinator.describe_group("g").members == ()


def test_the_leader_runs_a_local_assignor_the_coordinator_does_not_know(make: Callable[..., Coordinator]) -> None:
    class Reverse:
        name = "reverse"
        protocol = EAGER

        def assign(
            self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
        ) -> dict[str, list[TopicPartition]]:
            (only,) = subscriptions
            return {only: [tp(t, p) for t, n in partitions_per_topic.items() for p in reversed(range(n))]}

    coordinator = make()
    coordinator.report_topic_metadata("g", {"t": 2, "unrelated": 3})
    member = _member(coordinator, "run-1", assignors=["reverse"], local_assignors={"reverse": Reverse()})
    assert member.join() == (tp("t", 0), tp("t", 1))
    assert coordinator.describe_group("g").assignor == "reverse"
    member.close()


def test_join_gives_up_after_its_timeout(make: Callable[..., Coordinator]) -> None:
    coordinator = make()
    coordinator.report_topic_metadata("g", {"t": 1})
    first = _member(coordinator, "first", assignors=["range"], heartbeat_interval=60)
    first.join()  # never heartbeats again within this test, never rejoins
    late = _member(coordinator, "late", assignors=["range"], join_timeout=0.2)
    with pytest.raises(JoinTimeoutError):
        late.join()
    first.close(leave=False)


def test_close_interrupts_a_background_rebalance(make: Callable[..., Coordinator]) -> None:
    coordinator = make()
    coordinator.report_topic_metadata("g", {"t": 2})
    first = _member(coordinator, "first", assignors=["cooperative-sticky"])
    first.join()
    blocker = _member(coordinator, "blocker", assignors=["cooperative-sticky"], heartbeat_interval=60)
    blocker.join()  # completes once first's heartbeat thread rejoined in the background
    coordinator.report_topic_metadata("g", {"t": 3})  # rebalance; blocker will not notice for a minute
    _wait(lambda: first._rebalancing)  # first's heartbeat thread is polling the join, waiting for blocker
    time.sleep(0.1)
    assert first._rebalancing
    started = time.monotonic()
    first.close(leave=False)
    assert time.monotonic() - started < 5  # not its 20 s join timeout
    blocker.close(leave=False)


def test_commit_waits_for_a_background_cooperative_rebalance(make: Callable[..., Coordinator]) -> None:
    from tests.assignment.scripted_members import Client

    coordinator = make()
    coordinator.report_topic_metadata("g", {"t": 2})
    leader = Client(coordinator, "g", "leader", assignors=("cooperative-sticky",))
    leader.join()
    leader.sync()
    member = _member(coordinator, "member", assignors=["cooperative-sticky"])
    joining = threading.Thread(target=member.join)
    joining.start()
    _wait(lambda: coordinator.describe_group("g").state is GroupState.PREPARING_REBALANCE)
    leader.join(report_owned=True)
    leader.sync()  # revokes one partition from the leader
    leader.join(report_owned=True)  # releases it: follow-up round
    _wait(lambda: coordinator.describe_group("g").state is GroupState.COMPLETING_REBALANCE)
    leader.join(report_owned=True)
    leader.sync()
    joining.join(10)
    _wait(lambda: len(member.assignment) == 1 and not member._rebalancing)
    [kept] = member.assignment
    # Another member arrives: `member` rejoins on its heartbeat thread and waits in CompletingRebalance
    # for the (scripted) leader's sync, one generation ahead of what it committed with so far.
    newcomer = Client(coordinator, "g", "newcomer", assignors=("cooperative-sticky",))
    newcomer.join()
    leader.join(report_owned=True)
    _wait(lambda: coordinator.describe_group("g").state is GroupState.COMPLETING_REBALANCE)
    leader.join(report_owned=True)
    _wait(lambda: member._rebalancing)
    time.sleep(0.1)  # it is polling its sync now
    done: list[BaseException | None] = []

    def commit() -> None:
        try:
            member.commit([OffsetRange("t", kept.partition, 0, 3, records=3)])
            done.append(None)
        except BaseException as exc:
            done.append(exc)

    committing = threading.Thread(target=commit)
    committing.start()
    time.sleep(0.2)
    leader.sync()  # the rebalance completes; the commit goes through in the new generation
    committing.join(10)
    assert done == [None]
    [entry] = coordinator.ledger_history("g", "t", kept.partition)
    assert entry.member_id == member.member_id and entry.generation == coordinator.describe_group("g").generation
    member.close(leave=False)


def test_a_partition_moved_away_mid_batch_is_released_only_after_the_batch(
    make: Callable[..., Coordinator],
) -> None:
    """A joiner arrives while the first member's batch reads every partition: the first keeps the two that move
    (its commit of them is accepted) and the joiner gets them only after the batch ended, so no partition is
    read by two members at once."""
    coordinator = make()
    coordinator.report_topic_metadata("g", {"t": 4})
    hooks = Recorder()
    first = _member(coordinator, "first", hooks, assignors=["cooperative-sticky"])
    everything = first.join()
    assert len(everything) == 4
    second = _member(coordinator, "second", assignors=["cooperative-sticky"])
    with first.processing(everything):
        second.join()  # completes once first's heartbeat thread rejoined; first keeps what it reads
        _wait(lambda: first.generation == second.generation)
        assert second.assignment == () and first.assignment == everything
        assert not any(kind == "revoked" for kind, _ in hooks.calls)
        first.commit([OffsetRange("t", p, 0, 5, records=5) for p in range(4)])  # the batch's commit: accepted
        moved_generation = first.generation
    _wait(lambda: len(second.assignment) == 2)  # released when the batch ended: the follow-up round
    assert first.generation > moved_generation and set(first.assignment).isdisjoint(second.assignment)
    assert ("revoked", tuple(sorted(set(everything) - set(first.assignment)))) in hooks.calls
    assert coordinator.fetch_offsets("g", list(everything)) == dict.fromkeys(everything, 5)
    second.close()
    first.close()


def test_an_eager_joiner_waits_in_the_join_phase_while_a_batch_finishes_and_commits(
    make: Callable[..., Coordinator],
) -> None:
    """Eager: a joiner's join phase waits for the busy member to rejoin (within the rebalance timeout); the busy
    member's batch commits meanwhile (accepted) and only its rejoin hands partitions over."""
    coordinator = make()
    coordinator.report_topic_metadata("g", {"t": 4})
    busy = _member(coordinator, "busy", assignors=["range"])
    everything = busy.join()
    joiner = _member(coordinator, "joiner", assignors=["range"])
    joining = threading.Thread(target=joiner.join)
    joining.start()
    _wait(lambda: busy.rebalance_needed)  # its heartbeat saw the join phase; its batch goes on
    assert coordinator.describe_group("g").state is GroupState.PREPARING_REBALANCE
    assert joiner.assignment == () and busy.assignment == everything
    busy.commit([OffsetRange("t", p, 0, 5, records=5) for p in range(4)])  # the batch ends: its commit accepted
    busy.ensure_active()  # the next poll rejoins: the partitions move now
    joining.join(10)
    assert len(joiner.assignment) == 2 and set(joiner.assignment).isdisjoint(busy.assignment)
    assert coordinator.fetch_offsets("g", list(everything)) == dict.fromkeys(everything, 5)
    joiner.close()
    busy.close()
