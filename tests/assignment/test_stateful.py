"""A hypothesis state machine driving the coordinator with random members, crashes, pauses, clock jumps,
topic growth and commits, checking the group's safety properties after every step.

Members behave like `GroupMember` (rejoin on REBALANCE_IN_PROGRESS, eager members revoke everything
first, cooperative members release revoked partitions by rejoining), except that they act only when the
machine tells them to, so any interleaving can happen. Their assignors always share "range", and the
vote may elect an eager or a cooperative assignor from one generation to the next. Some members have a
progress timeout shorter than the join phase, so progress deadlines also pass while members wait in it.

After every rule the timer evaluation (`advance`) is checked to be idempotent over the reached state, now
and at every instant where one of its deadlines comes due.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from cohort.assignment.clock import ManualClock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import (
    CoordinatorError,
    FencedInstanceIdError,
    IllegalGenerationError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from cohort.assignment.protocol.group_state import GroupConfig, GroupState, Outcome
from cohort.assignment.protocol.messages import JoinComplete, JoinRequest, SyncComplete
from cohort.assignment.protocol.rebalance import Context, advance
from cohort.assignment.store.memory import MemoryGroupStore
from cohort.assignment.types import COOPERATIVE, EAGER
from cohort.common.types import OffsetRange, TopicPartition

GROUP, TOPIC = "g", "t"
BALLOTS = {
    "cooperative": [("cooperative-sticky", "range")],
    "eager": [("sticky", "range"), ("range",), ("roundrobin", "range")],
    "mixed": [("cooperative-sticky", "range"), ("range",), ("sticky", "range"), ("roundrobin", "range")],
}


class SimMember:
    """A member process driven step by step."""

    def __init__(
        self,
        coordinator: Coordinator,
        name: str,
        ballot: tuple[str, ...],
        instance_id: str | None,
        progress_timeout: float = 40,
    ) -> None:
        self.coordinator = coordinator
        self.request = JoinRequest(
            client_id=name,
            instance_id=instance_id,
            topics=[TOPIC],
            assignors=ballot,
            session_timeout=10,
            rebalance_timeout=15,
            progress_timeout=progress_timeout,
        )
        self.member_id: str | None = None
        self.generation = -1
        self.protocol = EAGER
        self.owned: tuple[TopicPartition, ...] = ()
        self.phase = "join"  # join -> sync -> stable
        self.fenced = False

    def _lost(self) -> None:
        self.member_id, self.generation, self.owned, self.phase = None, -1, (), "join"

    def _rejoin(self) -> None:
        if self.protocol != COOPERATIVE:
            self.owned = ()  # eager: revoke everything before rejoining
        self.phase = "join"

    def step(self) -> None:
        """The next thing a real member would do."""
        try:
            if self.phase == "join":
                request = self.request.with_owned(self.owned)
                if self.member_id is not None:
                    request = request.with_member_id(self.member_id)
                try:
                    answer = self.coordinator.join(GROUP, request)
                except MemberIdRequiredError as needed:
                    self.member_id = needed.member_id
                    return
                self.member_id = answer.member_id
                if isinstance(answer, JoinComplete):
                    self.generation, self.phase = answer.generation, "sync"
            elif self.phase == "sync":
                assert self.member_id is not None
                synced = self.coordinator.sync(
                    GROUP, self.member_id, self.generation, instance_id=self.request.instance_id
                )
                if isinstance(synced, SyncComplete):
                    revoked = set(self.owned) - set(synced.assignment)
                    self.owned, self.protocol, self.phase = synced.assignment, synced.rebalance_protocol, "stable"
                    if revoked:
                        self.phase = "join"  # release the revoked partitions by rejoining
            else:
                assert self.member_id is not None
                self.coordinator.heartbeat(GROUP, self.member_id, self.generation, instance_id=self.request.instance_id)
        except (RebalanceInProgressError, IllegalGenerationError):
            self._rejoin()
        except UnknownMemberIdError:
            self._lost()
        except FencedInstanceIdError:
            self.fenced = True


class GroupMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock(0.0)
        self.coordinator = Coordinator(MemoryGroupStore(), clock=self.clock)
        self.members: list[SimMember] = []
        self.zombies: list[SimMember] = []
        self.partitions = 3
        self.names = itertools.count()
        self.last_generation = 0
        self.accepted = 0
        self.ballots = BALLOTS["mixed"]

    @initialize(
        delay=st.sampled_from([0.0, 2.0]),
        partitions=st.integers(1, 6),
        style=st.sampled_from(["cooperative", "cooperative", "eager", "mixed"]),
    )
    def setup(self, delay: float, partitions: int, style: str) -> None:
        self.coordinator.config = GroupConfig(initial_rebalance_delay=delay)
        self.ballots = BALLOTS[style]
        self.partitions = partitions
        self.coordinator.report_topic_metadata(GROUP, {TOPIC: partitions})

    # ------------------------------------------------------------------------------------------ rules

    @precondition(lambda self: len(self.members) < 6)
    @rule(
        data=st.data(),
        slot=st.sampled_from([None, None, "g/w-0", "g/w-1"]),
        progress_timeout=st.sampled_from([40, 40, 8]),
    )
    def start_member(self, data: st.DataObject, slot: str | None, progress_timeout: float) -> None:
        ballot = data.draw(st.sampled_from(self.ballots))
        member = SimMember(self.coordinator, f"run-{next(self.names)}", ballot, slot, progress_timeout)
        self.members.append(member)
        member.step()

    @precondition(lambda self: self.members)
    @rule(data=st.data(), times=st.integers(1, 4))
    def act(self, data: st.DataObject, times: int) -> None:
        member = data.draw(st.sampled_from(self.members))
        for _ in range(times):
            member.step()
            self.check()
        if member.fenced:
            self.members.remove(member)
            self.zombies.append(member)

    @precondition(lambda self: self.members)
    @rule(rounds=st.integers(1, 8))
    def everyone_acts(self, rounds: int) -> None:
        """Every live member takes its next step, `rounds` times (the group tends to settle)."""
        for _ in range(rounds):
            for member in list(self.members):
                member.step()
                if member.fenced:
                    self.members.remove(member)
                    self.zombies.append(member)
                self.check()  # every intermediate state too, not only between rules

    @precondition(lambda self: self.members)
    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        member = data.draw(st.sampled_from(self.members))
        self.members.remove(member)
        if member.member_id is not None:
            with contextlib.suppress(CoordinatorError):
                self.coordinator.leave(GROUP, member.member_id, instance_id=member.request.instance_id)

    @precondition(lambda self: self.members)
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        """The process dies (or hangs) without leaving; it may come back later as a zombie."""
        member = data.draw(st.sampled_from(self.members))
        self.members.remove(member)
        self.zombies.append(member)

    @rule(seconds=st.sampled_from([0.5, 2.0, 6.0, 11.0, 16.0, 45.0]))
    def pause(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @precondition(lambda self: self.partitions < 10)
    @rule(extra=st.integers(1, 3))
    def grow_topic(self, extra: int) -> None:
        self.partitions += extra
        self.coordinator.report_topic_metadata(GROUP, {TOPIC: self.partitions})

    @precondition(lambda self: self.members or self.zombies)
    @rule(data=st.data(), length=st.integers(0, 5), shift=st.sampled_from([0, 0, 0, -1, 1]))
    def commit(self, data: st.DataObject, length: int, shift: int) -> None:
        """A commit by a live member or a zombie, of an owned partition or any; accepted exactly when the
        committer owns the partition in the current generation and the range is contiguous."""
        member = data.draw(st.sampled_from(self.members + self.zombies))
        if member.member_id is None:
            return
        choices = list(member.owned) + [TopicPartition(TOPIC, p) for p in range(self.partitions)]
        partition = data.draw(st.sampled_from(choices))
        head = self.coordinator.fetch_offsets(GROUP, [partition])[partition]
        start = max(0, (head or 0) + shift)
        view = self.coordinator.describe_group(GROUP)
        current = {m.member_id: m for m in view.members}
        holder = next((m.member_id for m in view.members if m.instance_id == member.request.instance_id), None)
        expected = (
            member.member_id in current
            and (member.request.instance_id is None or holder == member.member_id)
            and member.generation == view.generation
            and view.state is not GroupState.COMPLETING_REBALANCE
            and partition in current[member.member_id].owned
            and (head is None or start == head)
        )
        try:
            self.coordinator.commit_offsets(
                GROUP,
                [OffsetRange(TOPIC, partition.partition, start, start + length, records=length)],
                member_id=member.member_id,
                generation=member.generation,
                instance_id=member.request.instance_id,
            )
        except CoordinatorError:
            assert not expected, "a commit that should have been accepted was refused"
            return
        assert expected, f"a stale or foreign commit was accepted: {member.member_id} gen {member.generation}"
        self.accepted += 1

    # ------------------------------------------------------------------------------------- invariants

    @invariant()
    def invariants(self) -> None:
        self.check()

    @invariant()
    def timers_are_idempotent(self) -> None:
        """Evaluating the timers twice at one instant changes nothing and records nothing, so what
        `describe_group` shows (one evaluation, not written) is what the next call sees. Checked now, at
        every deadline of the stored record (the `<=` boundaries) and just after it."""
        record = self.coordinator.store.load(GROUP)
        if record is None:
            return
        now = self.clock.now()
        deadlines = [record.rebalance_deadline, record.initial_delay_until, *record.pending.values()]
        for m in record.members.values():
            deadlines += [m.session_deadline, m.progress_deadline]
        instants = {now, *(t + d for t in deadlines if t is not None and now <= t < math.inf for d in (0.0, 0.5))}
        for at in sorted(instants):
            ctx = Context(now=at, config=self.coordinator.config)
            once = advance(Outcome(record), ctx)
            twice = advance(Outcome(once.group), ctx)
            assert twice.events == (), f"a second evaluation at t={at} did more: {twice.events}"
            assert twice.group == once.group, f"a second evaluation at t={at} changed the group"

    def check(self) -> None:
        """All safety properties; run after every rule and every member step."""
        self.no_partition_has_two_owners()
        self.generations_only_grow()
        self.ledger_is_contiguous_and_monotonic()

    def no_partition_has_two_owners(self) -> None:
        view = self.coordinator.describe_group(GROUP)
        seen: dict[TopicPartition, str] = {}
        for member in view.members:
            if view.state is GroupState.STABLE:  # (eager members give their assignment up when they rejoin)
                assert set(member.assigned) <= set(member.owned)
            for partition in member.owned:
                assert partition not in seen, f"{partition} owned by {seen[partition]} and {member.member_id}"
                seen[partition] = member.member_id
        if view.state is GroupState.STABLE and view.members:
            everything = {TopicPartition(TOPIC, p) for p in range(self.partitions)}
            assert set(seen) == everything, f"unowned in Stable: {sorted(everything - set(seen))}"

    def generations_only_grow(self) -> None:
        generation = self.coordinator.describe_group(GROUP).generation
        assert generation >= self.last_generation
        self.last_generation = max(self.last_generation, generation)

    def ledger_is_contiguous_and_monotonic(self) -> None:
        partitions = [TopicPartition(TOPIC, p) for p in range(self.partitions)]
        heads = self.coordinator.fetch_offsets(GROUP, partitions)
        for partition in partitions:
            history = self.coordinator.ledger_history(GROUP, TOPIC, partition.partition)
            for before, after in itertools.pairwise(history):
                assert before.until_offset == after.from_offset and after.committed_at >= before.committed_at
            assert all(e.from_offset < e.until_offset for e in history[1:])  # only a starting position is empty
            assert heads[partition] == (history[-1].until_offset if history else None)


GroupMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("COHORT_HYPOTHESIS_EXAMPLES", "150")),
    stateful_step_count=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGroupProtocol = GroupMachine.TestCase
