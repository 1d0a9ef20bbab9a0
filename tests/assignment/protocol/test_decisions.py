"""The protocol's pure decisions with plain values: no store, no clock, no threads."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from cohort.assignment.errors import (
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from cohort.assignment.protocol.decisions import (
    decide_delete,
    decide_evict,
    decide_expire,
    decide_heartbeat,
    decide_join,
    decide_leave,
    decide_metadata,
    decide_sync,
)
from cohort.assignment.protocol.group_state import (
    EventKind,
    GroupConfig,
    GroupRecord,
    GroupState,
    MemberRecord,
    Outcome,
)
from cohort.assignment.protocol.messages import (
    Decision,
    JoinComplete,
    JoinPending,
    JoinRequest,
    SyncComplete,
    SyncPending,
)
from cohort.assignment.protocol.rebalance import Context, advance, default_assignor_resolver, elect_assignor
from cohort.assignment.types import COOPERATIVE, Assignor, Subscription
from cohort.common.types import TopicPartition

S = GroupState


class Sim:
    """Applies decisions to a group record kept in a variable: the whole coordinator minus the store."""

    def __init__(
        self, config: GroupConfig | None = None, now: float = 100.0, assignors: Callable[[str], Assignor] | None = None
    ) -> None:
        self.config = config or GroupConfig(initial_rebalance_delay=0)
        self.assignors = assignors or default_assignor_resolver
        self.now = now
        self.group: GroupRecord | None = None
        self.events: list[Any] = []
        self._ids = itertools.count(1)

    def ctx(self) -> Context:
        return Context(now=self.now, config=self.config, new_member_id=f"m{next(self._ids)}", assignors=self.assignors)

    def apply(self, decision: Decision[Any]) -> Decision[Any]:
        self.group = None if decision.deleted else decision.group
        self.events.extend(decision.events)
        return decision

    def join(self, request: JoinRequest) -> Decision[Any]:
        return self.apply(decide_join(self.group, "g", request, self.ctx()))

    def admit(self, **kwargs: Any) -> str:
        """A dynamic member's two-step first join; returns its id."""
        request = JoinRequest(**{"topics": ["t"], "assignors": ["range"], "session_timeout": 10, **kwargs})
        first = self.join(request)
        assert isinstance(first.error, MemberIdRequiredError)
        self.join(request.with_member_id(first.error.member_id))
        return first.error.member_id

    def rejoin(self, member_id: str, **kwargs: Any) -> Decision[Any]:
        kwargs.setdefault("topics", ["t"])
        kwargs.setdefault("assignors", ["range"])
        kwargs.setdefault("session_timeout", 10)
        return self.join(JoinRequest(member_id=member_id, **kwargs))

    def sync(self, member_id: str, assignment: Any = None, generation: int | None = None) -> Decision[Any]:
        assert self.group is not None
        gen = self.group.generation if generation is None else generation
        return self.apply(decide_sync(self.group, "g", member_id, gen, None, assignment, self.ctx()))

    def state(self) -> GroupState:
        assert self.group is not None
        return self.group.state


def _member(i: int, *protocols: str) -> MemberRecord:
    return MemberRecord(f"m{i}", None, None, ("t",), None, protocols, 10, 10, 10, i, 0.0)


# ------------------------------------------------------------------------------------------- the vote


@pytest.mark.parametrize(
    ("ballots", "winner"),
    [
        ([("range", "roundrobin"), ("roundrobin", "range"), ("roundrobin",)], "roundrobin"),
        ([("sticky", "range"), ("sticky", "range"), ("range", "sticky")], "sticky"),
        # only candidates every member supports count: 'sticky' is not one of them
        ([("sticky", "range"), ("sticky", "range"), ("range",)], "range"),
        # a tie goes to the longest-standing member's preference
        ([("range", "sticky"), ("sticky", "range")], "range"),
        ([("sticky", "range"), ("range", "sticky")], "sticky"),
    ],
)
def test_vote(ballots: list[Sequence[str]], winner: str) -> None:
    assert elect_assignor([_member(i, *b) for i, b in enumerate(ballots)]) == winner


def test_vote_without_a_common_assignor_is_inconsistent() -> None:
    with pytest.raises(InconsistentGroupProtocolError):
        elect_assignor([_member(0, "range"), _member(1, "sticky")])


# ------------------------------------------------------------------------------------------------ join


def test_member_id_required_then_admitted_as_leader() -> None:
    sim = Sim()
    first = sim.join(JoinRequest(topics=["t"], assignors=["range"], session_timeout=10))
    assert isinstance(first.error, MemberIdRequiredError) and first.error.member_id == "m1"
    assert sim.group is not None and sim.group.pending == {"m1": 110.0} and not sim.group.members
    second = sim.join(JoinRequest(member_id="m1", topics=["t"], assignors=["range"], session_timeout=10))
    answer = second.result()
    assert isinstance(answer, JoinComplete) and answer.is_leader and answer.generation == 1
    assert sim.group.pending == {}
    assert [e.kind for e in second.events] == [
        EventKind.MEMBER_JOINED,
        EventKind.TRANSITION,
        EventKind.TRANSITION,
        EventKind.GENERATION,
    ]


def test_static_member_is_admitted_without_member_id_required() -> None:
    sim = Sim()
    answer = sim.join(JoinRequest(instance_id="g/w-1", topics=["t"], assignors=["range"], session_timeout=10))
    assert isinstance(answer.result(), JoinComplete)


@pytest.mark.parametrize(("timeout", "ok"), [(5.99, False), (6.0, True), (1800.0, True), (1800.01, False)])
def test_session_timeout_bounds(timeout: float, ok: bool) -> None:
    decision = Sim().join(JoinRequest(instance_id="w", topics=["t"], assignors=["range"], session_timeout=timeout))
    assert (decision.error is None) is ok
    if not ok:
        assert isinstance(decision.error, InvalidSessionTimeoutError) and "outside [6, 1800]" in str(decision.error)


def test_bad_pattern_and_timeouts_are_invalid_requests() -> None:
    bad_pattern = JoinRequest(instance_id="w", topic_pattern="(", assignors=["range"], session_timeout=10)
    assert isinstance(Sim().join(bad_pattern).error, InvalidRequestError)
    bad_rebalance = JoinRequest(instance_id="w", assignors=["range"], session_timeout=10, rebalance_timeout=0)
    assert isinstance(Sim().join(bad_rebalance).error, InvalidRequestError)


def test_group_max_size_counts_members_and_handed_out_ids() -> None:
    sim = Sim(GroupConfig(initial_rebalance_delay=0, max_size=2))
    sim.admit()
    pending = sim.join(JoinRequest(topics=["t"], assignors=["range"], session_timeout=10))
    assert isinstance(pending.error, MemberIdRequiredError)
    third = sim.join(JoinRequest(topics=["t"], assignors=["range"], session_timeout=10))
    assert isinstance(third.error, GroupMaxSizeReachedError)


def test_unknown_member_and_expired_pending_id() -> None:
    sim = Sim()
    sim.admit()
    assert isinstance(sim.rejoin("nobody").error, UnknownMemberIdError)
    handed = sim.join(JoinRequest(topics=["t"], assignors=["range"], session_timeout=10)).error
    assert isinstance(handed, MemberIdRequiredError)
    sim.now += 10
    assert isinstance(sim.rejoin(handed.member_id).error, UnknownMemberIdError)


def test_initial_rebalance_delay_is_extended_by_arrivals_and_capped_by_the_rebalance_timeout() -> None:
    sim = Sim(GroupConfig(initial_rebalance_delay=3), now=0.0)
    a = sim.admit(rebalance_timeout=8)
    assert sim.state() is S.PREPARING_REBALANCE and sim.group and sim.group.initial_delay_until == 3.0
    sim.now = 2.0
    b = sim.admit(rebalance_timeout=60)
    assert sim.group.initial_delay_until == 5.0 and sim.group.rebalance_deadline == 8.0
    sim.now = 4.9
    assert isinstance(sim.rejoin(a).result(), JoinPending)
    sim.now = 5.0
    answer = sim.rejoin(b).result()
    assert isinstance(answer, JoinComplete) and answer.generation == 1 and len(sim.group.members) == 2
    # capped: arrivals every 2 s cannot hold the phase open past the first members' rebalance timeout (8 s)
    sim = Sim(GroupConfig(initial_rebalance_delay=3), now=0.0)
    first = sim.admit(rebalance_timeout=8)
    for t in (2.0, 4.0, 6.0):
        sim.now = t
        sim.admit(rebalance_timeout=8)
        assert sim.state() is S.PREPARING_REBALANCE
    sim.now = 8.0
    assert isinstance(sim.rejoin(first, rebalance_timeout=8).result(), JoinComplete)
    assert len(sim.group.members) == 4


def test_rebalance_timeout_is_the_largest_among_members_and_laggards_are_removed() -> None:
    sim = Sim()
    a = sim.admit(rebalance_timeout=10)
    sim.sync(a)
    b = sim.admit(rebalance_timeout=5)  # timeouts of 10 s and 5 s -> the join waits up to 10 s
    assert sim.group and sim.group.rebalance_deadline == 110.0
    sim.now = 108.0
    assert isinstance(decide_heartbeat(sim.group, "g", a, 1, None, False, sim.ctx()).error, RebalanceInProgressError)
    sim.apply(decide_heartbeat(sim.group, "g", a, 1, None, False, sim.ctx()))  # alive, but never rejoins
    assert sim.state() is S.PREPARING_REBALANCE
    sim.now = 110.0
    answer = sim.rejoin(b).result()
    assert isinstance(answer, JoinComplete) and answer.is_leader and list(sim.group.members) == [b]
    removed = [e for e in sim.events if e.kind is EventKind.MEMBER_REMOVED]
    assert [(e.member_id, e.reason) for e in removed] == [(a, "did not rejoin within the rebalance timeout")]


def test_leader_is_the_first_member_and_is_replaced_when_it_leaves() -> None:
    sim = Sim()
    a, b, c = sim.admit(), sim.admit(), sim.admit()
    assert sim.group and sim.group.leader_id == a
    sim.apply(decide_leave(sim.group, "g", a, None, "bye", sim.ctx()))
    assert sim.group.leader_id == b
    sim.rejoin(b)
    answer = sim.rejoin(c).result()
    assert isinstance(answer, JoinComplete) and answer.leader_id == b


def test_rejoin_with_new_subscription_rebalances_but_a_follower_poll_does_not() -> None:
    sim = Sim()
    a = sim.admit()
    b = sim.admit()
    sim.rejoin(a)
    sim.rejoin(b)
    sim.sync(a)
    assert sim.state() is S.STABLE
    assert isinstance(sim.rejoin(b).result(), JoinComplete) and sim.state() is S.STABLE
    assert isinstance(sim.rejoin(b, topics=["t", "u"]).result(), JoinPending)
    assert sim.state() is S.PREPARING_REBALANCE


def test_a_second_process_claiming_an_instance_id_fences_the_first() -> None:
    sim = Sim()
    request = JoinRequest(instance_id="g/w-1", topics=["t"], assignors=["range"], session_timeout=10)
    old = sim.join(request).result().member_id
    sim.sync(old)
    new = sim.join(request).result()
    assert new.member_id != old and new.skip_assignment
    assert sim.group and list(sim.group.members) == [new.member_id] and sim.group.leader_id == new.member_id
    zombie = decide_heartbeat(sim.group, "g", old, 1, "g/w-1", False, sim.ctx())
    assert isinstance(zombie.error, FencedInstanceIdError)
    rejoin = sim.join(JoinRequest(member_id=old, instance_id="g/w-1", topics=["t"], assignors=["range"]))
    assert isinstance(rejoin.error, FencedInstanceIdError)


def test_inconsistent_protocol_is_checked_against_the_other_members_only() -> None:
    sim = Sim()
    a = sim.admit()
    # The only member may change its assignors freely: nobody else constrains it.
    assert sim.rejoin(a, assignors=["sticky"]).error is None
    other = sim.join(JoinRequest(instance_id="w", topics=["t"], assignors=["range"], session_timeout=10))
    assert isinstance(other.error, InconsistentGroupProtocolError)


# ------------------------------------------------------------------------------------------------ sync


def test_followers_wait_for_the_leader_and_bad_generations_are_refused() -> None:
    sim = Sim()
    a, b = sim.admit(), sim.admit()
    sim.rejoin(a)
    sim.rejoin(b)
    assert isinstance(sim.sync(b).result(), SyncPending)
    assert isinstance(sim.sync(a, generation=1).error, IllegalGenerationError)
    assert isinstance(sim.sync("ghost").error, UnknownMemberIdError)
    assert isinstance(sim.sync(a).result(), SyncComplete)
    assert sim.state() is S.STABLE


def test_sync_in_preparing_rebalance_is_refused() -> None:
    sim = Sim()
    a = sim.admit()
    sim.admit()
    assert isinstance(sim.sync(a, generation=1).error, RebalanceInProgressError)


def test_unknown_assignor_needs_a_leader_assignment() -> None:
    sim = Sim()
    request = JoinRequest(instance_id="w", topics=["t"], assignors=["custom"], session_timeout=10)
    leader = sim.join(request).result()
    assert leader.protocol == "custom" and leader.rebalance_protocol == "eager"
    assert isinstance(sim.sync(leader.member_id).error, InvalidRequestError)
    assert isinstance(sim.sync(leader.member_id, {leader.member_id: []}).result(), SyncComplete)


# ------------------------------------------------------------------------------- heartbeat, leave, evict


def test_heartbeat_keeps_the_session_and_progress_alive() -> None:
    sim = Sim()
    a = sim.admit(progress_timeout=20)
    sim.apply(decide_metadata(sim.group, "g", {"t": 1}, sim.ctx()))
    sim.rejoin(a, progress_timeout=20)
    sim.sync(a)
    assert sim.group and sim.group.members[a].progress_deadline == 120.0
    for step in range(1, 6):
        sim.now = 100.0 + 9.9 * step
        result = sim.apply(decide_heartbeat(sim.group, "g", a, sim.group.generation, None, True, sim.ctx()))
        assert result.error is None and result.response.session_deadline == sim.now + 10
    assert sim.group.members[a].progress_deadline == sim.now + 20
    sim.now += 10.0
    assert isinstance(decide_heartbeat(sim.group, "g", a, 2, None, False, sim.ctx()).error, UnknownMemberIdError)


def test_leave_of_a_handed_out_id_and_eviction() -> None:
    sim = Sim()
    pending = sim.join(JoinRequest(topics=["t"], assignors=["range"], session_timeout=10)).error
    assert isinstance(pending, MemberIdRequiredError)
    assert sim.apply(decide_leave(sim.group, "g", pending.member_id, None, "bye", sim.ctx())).error is None
    assert sim.group and sim.group.pending == {}
    a = sim.admit()
    evicted = sim.apply(decide_evict(sim.group, "g", a, "run failed", sim.ctx()))
    assert evicted.error is None and sim.state() is S.EMPTY
    assert [e.reason for e in sim.events if e.kind is EventKind.MEMBER_REMOVED] == ["evicted: run failed"]
    assert isinstance(decide_evict(sim.group, "g", a, "again", sim.ctx()).error, UnknownMemberIdError)


def test_delete_only_when_empty() -> None:
    sim = Sim()
    a = sim.admit()
    assert decide_delete(sim.group, "g", sim.ctx()).error is not None
    sim.apply(decide_leave(sim.group, "g", a, None, "bye", sim.ctx()))
    deleted = sim.apply(decide_delete(sim.group, "g", sim.ctx()))
    assert deleted.deleted and deleted.group.state is S.DEAD and sim.group is None


def test_metadata_changes_rebalance_only_stable_or_completing_groups() -> None:
    sim = Sim()
    assert sim.apply(decide_metadata(None, "g", {"t": 2}, sim.ctx())).result() is False
    a = sim.admit()
    assert sim.state() is S.COMPLETING_REBALANCE
    assert sim.apply(decide_metadata(sim.group, "g", {"t": 3}, sim.ctx())).result() is True
    assert sim.state() is S.PREPARING_REBALANCE
    assert sim.apply(decide_metadata(sim.group, "g", {"t": 4}, sim.ctx())).result() is False  # already rebalancing
    sim.rejoin(a)
    sim.sync(a)
    assert sim.group and sim.group.members[a].assigned == tuple(TopicPartition("t", p) for p in range(4))


class MoveHighest:
    """A tiny cooperative assignor: everyone keeps what it claims, except that the member with the most
    gives its highest claimed partition to the member with the fewest, which (cooperatively) does not
    receive it in this round if someone claims it; unclaimed partitions go to the member with the fewest."""

    name = "move-highest"
    protocol = COOPERATIVE

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, list[TopicPartition]]:
        claims = {m: sorted(s.owned_partitions) for m, s in subscriptions.items()}
        claimed = {tp for parts in claims.values() for tp in parts}
        result = {m: list(parts) for m, parts in claims.items()}
        for p in range(partitions_per_topic.get("t", 0)):
            if TopicPartition("t", p) not in claimed:
                min(result.values(), key=len).append(TopicPartition("t", p))
        most = max(result, key=lambda m: len(result[m]))
        fewest = min(result, key=lambda m: len(result[m]))
        if len(result[most]) - len(result[fewest]) > 1:
            moving = result[most].pop()
            if moving not in claimed:
                result[fewest].append(moving)
        return {m: sorted(parts) for m, parts in result.items()}


def test_cooperative_assignors_see_what_members_hold_not_what_they_were_last_assigned() -> None:
    """Regression (found by the contention test): a member assigned a new partition that rejoins before
    syncing never held it. Had the assignor been told it owns it, the partition would be withheld from
    its new owner and left to nobody."""
    sim = Sim(assignors=lambda name: MoveHighest())
    sim.apply(decide_metadata(None, "g", {"t": 2}, sim.ctx()))
    ballot = {"assignors": ["move-highest"]}
    x = sim.admit(**ballot)
    sim.sync(x)  # x holds t-0 and t-1
    sim.apply(decide_metadata(sim.group, "g", {"t": 3}, sim.ctx()))
    sim.rejoin(x, owned_partitions=[TopicPartition("t", 0), TopicPartition("t", 1)], **ballot)
    sim.sync(x)
    assert sim.group and sim.group.members[x].owned == tuple(TopicPartition("t", p) for p in range(3))
    # A new member arrives; x rejoins reporting only t-0 and t-1: it never learned about t-2.
    c = sim.admit(**ballot)
    sim.rejoin(x, owned_partitions=[TopicPartition("t", 0), TopicPartition("t", 1)], **ballot)
    assert sim.group.members[x].owned == (TopicPartition("t", 0), TopicPartition("t", 1))
    answer = sim.sync(x)
    assert answer.error is None, answer.error
    owners = {tp: m.member_id for m in sim.group.members.values() for tp in m.owned}
    assert owners == {TopicPartition("t", 0): x, TopicPartition("t", 1): x, TopicPartition("t", 2): c}


# ------------------------------------------------------------------------------------ input checks


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"assignors": "range"}, "JoinRequest.assignors must be a collection of names, not a string"),
        ({"assignors": ["range", None]}, "assignor names (str), got None"),
        ({"topics": "t"}, "JoinRequest.topics must be a collection of names, not a string"),
        ({"session_timeout": "10"}, "the session timeout must be a number of seconds, got str '10'"),
        ({"session_timeout": None}, "the session timeout must be a number of seconds, got NoneType"),
        ({"rebalance_timeout": True}, "the rebalance timeout must be a number of seconds, got bool"),
        ({"progress_timeout": "20"}, "the progress timeout must be a number of seconds, got str"),
    ],
)
def test_join_fields_of_the_wrong_type_raise_type_error_naming_the_field(fields: dict[str, Any], fragment: str) -> None:
    request = JoinRequest(
        **{"instance_id": "w", "topics": ["t"], "assignors": ["range"], "session_timeout": 10, **fields}
    )
    with pytest.raises(TypeError, match=re.escape(fragment)):
        decide_join(None, "g", request, Sim().ctx())


@pytest.mark.parametrize(
    ("fields", "error", "fragment"),
    [
        ({"assignors": [""]}, InconsistentGroupProtocolError, "empty assignor name"),
        ({"assignors": ["range", ""]}, InconsistentGroupProtocolError, "empty assignor name"),
        ({"rebalance_timeout": float("nan")}, InvalidRequestError, "timeouts must be > 0"),
        ({"progress_timeout": float("nan")}, InvalidRequestError, "timeouts must be > 0"),
        ({"progress_timeout": -1}, InvalidRequestError, "timeouts must be > 0"),
        ({"session_timeout": float("nan")}, InvalidSessionTimeoutError, "outside [6, 1800]"),
    ],
)
def test_unusable_join_values_are_refused_by_the_decision(
    fields: dict[str, Any], error: type[Exception], fragment: str
) -> None:
    request = JoinRequest(
        **{"instance_id": "w", "topics": ["t"], "assignors": ["range"], "session_timeout": 10, **fields}
    )
    decision = Sim().join(request)
    assert isinstance(decision.error, error) and fragment in str(decision.error)


def test_infinite_rebalance_and_progress_timeouts_mean_no_limit() -> None:
    sim = Sim()
    a = sim.admit(rebalance_timeout=float("inf"), progress_timeout=float("inf"))
    sim.apply(decide_metadata(sim.group, "g", {"t": 2}, sim.ctx()))
    sim.rejoin(a, rebalance_timeout=float("inf"), progress_timeout=float("inf"))
    sim.sync(a)
    assert sim.group and sim.group.members[a].progress_deadline == float("inf")
    sim.now += 1e9
    result = sim.apply(decide_heartbeat(sim.group, "g", a, sim.group.generation, None, False, sim.ctx()))
    assert isinstance(result.error, UnknownMemberIdError)  # the session still expires; progress never does


@pytest.mark.parametrize("count", [True, False, 2.0, -1, 2**31, "3", None])
def test_metadata_refuses_counts_that_are_not_partition_counts(count: object) -> None:
    decision = decide_metadata(None, "g", {"t": count}, Sim().ctx())  # type: ignore[dict-item]
    assert isinstance(decision.error, InvalidRequestError) and f"bad partition count {count!r}" in str(decision.error)


# ----------------------------------------------------------------------------- timers at one instant


def test_a_completed_join_phase_restarts_the_progress_deadline_of_members_that_rejoined() -> None:
    """A cooperative member rejoins in time and waits while its progress deadline passes; the evaluation
    that completes the phase keeps it with a fresh progress deadline, and a second evaluation at the same
    instant changes nothing (chaos seed 2: the second one used to evict it for 'no progress')."""
    sim = Sim()
    timeouts = {"assignors": ["cooperative-sticky"], "rebalance_timeout": 30, "progress_timeout": 20}
    sim.apply(decide_metadata(None, "g", {"t": 4}, sim.ctx()))
    a = sim.admit(**timeouts)
    sim.sync(a)
    b = sim.admit(**timeouts)
    assert isinstance(sim.rejoin(a, **timeouts).result(), JoinComplete)
    sim.sync(a)
    sim.sync(b)
    assert sim.state() is S.STABLE and sim.group and sim.group.members[a].owned
    assert sim.group.members[a].progress_deadline == 120.0
    sim.now = 101.0
    sim.admit(**timeouts)  # c: PreparingRebalance until 131
    assert isinstance(sim.rejoin(a, **timeouts).result(), JoinPending)  # a rejoins in time, b stays silent
    sim.now = 131.0  # b's session and the phase end; a's progress deadline (120) passed while it waited
    once = sim.apply(decide_expire(sim.group, "g", sim.ctx()))
    assert once.group.state is S.COMPLETING_REBALANCE and b not in once.group.members
    kept = once.group.members[a]
    assert kept.owned and kept.progress_deadline == 131.0 + 20 and kept.session_deadline == 131.0 + 10
    twice = advance(Outcome(once.group), sim.ctx())
    assert twice.events == () and twice.group == once.group
