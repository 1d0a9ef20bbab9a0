"""The records of a consumer group and its state machine (docs/protocol.md).

A group is a frozen `GroupRecord` holding frozen `MemberRecord`s; protocol steps produce new records with
`dataclasses.replace` and never mutate. The five states and their allowed transitions are the table
`TRANSITIONS`, printable with `format_transition_table()`; every state change goes through `transition()`,
which refuses a move the table does not allow and records a `GroupEvent`.

Example:
    >>> print(format_transition_table())  # doctest: +ELLIPSIS
    from \\ to ...
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import lru_cache

from cohort.assignment.types import EAGER
from cohort.common.types import TopicPartition
from cohort.common.validation import is_integer, is_number

__all__ = [
    "CLEAN_LEAVE",
    "REMEMBERED_CLAIMS",
    "TRANSITIONS",
    "EventKind",
    "GroupConfig",
    "GroupEvent",
    "GroupRecord",
    "GroupState",
    "IllegalStateTransitionError",
    "MemberRecord",
    "Outcome",
    "can_transition",
    "effective_topics",
    "format_transition_table",
    "new_group",
    "static_member_id",
    "subscribed_counts",
    "transition",
]


CLEAN_LEAVE = "left:"
"""Prefix of the removal reason of a member that left on its own (a clean shutdown: nothing orphaned)."""
REMEMBERED_CLAIMS = 256
"""How many rerun claims a group record keeps (the oldest are dropped: a loss is claimed within a tick)."""


class GroupState(StrEnum):
    """The five states of a classic consumer group (what some texts call "awaiting sync" is CompletingRebalance)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_E, _P, _C, _S, _D = (
    GroupState.EMPTY,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)

TRANSITIONS: Mapping[GroupState, frozenset[GroupState]] = {
    # Empty: the first join starts a join phase; an empty group may be deleted.
    _E: frozenset({_P, _D}),
    # PreparingRebalance: the join phase completes with members (awaiting the leader's sync) or none left.
    _P: frozenset({_C, _E}),
    # CompletingRebalance: the leader's assignment makes it Stable; a join, leave or expiry restarts the phase.
    _C: frozenset({_S, _P}),
    # Stable: any membership or metadata change starts a rebalance.
    _S: frozenset({_P}),
    # Dead: deleted; nothing follows.
    _D: frozenset(),
}
"""from-state -> the states it may move to. Only an Empty group can be deleted (NON_EMPTY_GROUP otherwise)."""


class IllegalStateTransitionError(RuntimeError):
    """A protocol step tried a transition the table forbids: a bug in the coordinator, never user input."""


def can_transition(source: GroupState, target: GroupState) -> bool:
    """Whether the table allows `source` -> `target`."""
    return target in TRANSITIONS[source]


def format_transition_table() -> str:
    """The transition table as fixed-width text: rows are from-states, columns to-states, 'x' = allowed."""
    states = list(GroupState)
    width = max(len(s.value) for s in states) + 2
    lines = ["from \\ to".ljust(width) + "".join(s.value.ljust(width) for s in states)]
    for source in states:
        cells = ("x" if can_transition(source, target) else "-" for target in states)
        lines.append(source.value.ljust(width) + "".join(c.ljust(width) for c in cells))
    return "\n".join(line.rstrip() for line in lines)


@dataclass(frozen=True)
class GroupConfig:
    """Coordinator-side settings, Kafka's broker `group.*` options.

    Attributes:
        initial_rebalance_delay: `group.initial.rebalance.delay.ms` in seconds: an Empty group's first join
            phase waits this long, extended by the same delay while new members keep arriving, capped by
            the rebalance timeout. 0 completes it at once (Kafka before 0.11).
        min_session_timeout: `group.min.session.timeout.ms` in seconds.
        max_session_timeout: `group.max.session.timeout.ms` in seconds.
        max_size: `group.max.size`; None for no limit.
    """

    initial_rebalance_delay: float = 3.0
    min_session_timeout: float = 6.0
    max_session_timeout: float = 1800.0
    max_size: int | None = None

    def __post_init__(self) -> None:
        """Refuse settings no group could run with: NaN and bools are not numbers here (NaN passes every
        `<` check, so each bound is stated positively)."""
        delay = self.initial_rebalance_delay
        if not (is_number(delay) and delay >= 0):
            raise ValueError(f"initial_rebalance_delay must be >= 0 (a number of seconds), got {delay!r}")
        low, high = self.min_session_timeout, self.max_session_timeout
        if not (is_number(low) and is_number(high) and 0 < low <= high):
            raise ValueError(f"need 0 < min_session_timeout <= max_session_timeout, got {low!r} and {high!r}")
        if self.max_size is not None and not (is_integer(self.max_size) and self.max_size >= 1):
            raise ValueError(f"max_size must be >= 1 or None, got {self.max_size!r}")


@dataclass(frozen=True)
class MemberRecord:
    """One member (one run) of a group as the coordinator sees it.

    `assigned` is what the leader's assignment of `assigned_generation` gave the member (fed back to the
    assignor for stickiness). `owned` is what the member may be processing right now: its assignment plus
    partitions it was told to revoke but has not yet released by rejoining (cooperative); commits are
    accepted only for `owned`, and no partition is ever in two members' `owned`.
    """

    member_id: str
    instance_id: str | None
    client_id: str | None
    topics: tuple[str, ...]
    topic_pattern: str | None
    protocols: tuple[str, ...]
    session_timeout: float
    rebalance_timeout: float
    progress_timeout: float
    join_seq: int
    session_deadline: float
    rack: str | None = None
    generation: int = -1
    joined: bool = True
    synced: bool = False
    assigned: tuple[TopicPartition, ...] = ()
    assigned_generation: int = -1
    owned: tuple[TopicPartition, ...] = ()
    progress_deadline: float | None = None

    def same_metadata(self, topics: tuple[str, ...], pattern: str | None, protocols: tuple[str, ...]) -> bool:
        """Whether a rejoin asks for the same subscription and assignors (no rebalance needed for it)."""
        return self.topics == topics and self.topic_pattern == pattern and self.protocols == protocols


@dataclass(frozen=True)
class GroupRecord:
    """A group's whole protocol state; `members` maps member id -> MemberRecord.

    `pending` maps member ids handed out with MEMBER_ID_REQUIRED (not yet members) to their expiry.
    `rebalance_deadline` and `initial_delay_until` are set only in PreparingRebalance.
    `rerun_claims` maps a lost run (or loss) to the orchestrator that claimed its rerun, the latest
    `REMEMBERED_CLAIMS` in claim order: of several hosts' sensors seeing one loss, one reruns it.
    `last_protocol` is the assignor of the latest generation that had members, and `last_protocols` the assignors
    its leader declared, in order of preference: both stay when the group empties (`protocol` is None then), so
    an Empty group still tells which assignor it runs with.
    """

    name: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol: str | None = None
    rebalance_protocol: str = EAGER
    leader_id: str | None = None
    members: Mapping[str, MemberRecord] = field(default_factory=dict)
    pending: Mapping[str, float] = field(default_factory=dict)
    partitions_per_topic: Mapping[str, int] = field(default_factory=dict)
    rebalance_deadline: float | None = None
    initial_delay_until: float | None = None
    next_seq: int = 0
    rebalance_reason: str | None = None
    created_at: float = 0.0
    rerun_claims: Mapping[str, str] = field(default_factory=dict)
    last_protocol: str | None = None
    last_protocols: tuple[str, ...] = ()

    def with_member(self, member: MemberRecord) -> GroupRecord:
        """A copy with `member` added or replaced."""
        return replace(self, members={**self.members, member.member_id: member})

    def without_member(self, member_id: str) -> GroupRecord:
        """A copy without `member_id` (and a new leader if it led)."""
        members = {k: v for k, v in self.members.items() if k != member_id}
        leader = self.leader_id
        if leader == member_id:
            leader = min(members.values(), key=lambda m: m.join_seq).member_id if members else None
        return replace(self, members=members, leader_id=leader)


def new_group(name: str, now: float) -> GroupRecord:
    """A fresh Empty group."""
    return GroupRecord(name=name, created_at=now)


class EventKind(StrEnum):
    """What a `GroupEvent` records."""

    TRANSITION = "transition"
    MEMBER_JOINED = "member_joined"
    MEMBER_REMOVED = "member_removed"
    MEMBER_FENCED = "member_fenced"
    GENERATION = "generation"
    ASSIGNMENT = "assignment"
    METADATA = "metadata"
    RERUN_CLAIMED = "rerun_claimed"


@dataclass(frozen=True)
class GroupEvent:
    """Something that happened to a group, kept for audits, sensors and the scenario tests."""

    at: float
    kind: EventKind
    state: GroupState
    generation: int
    previous_state: GroupState | None = None
    member_id: str | None = None
    reason: str = ""


@dataclass(frozen=True)
class Outcome:
    """A group record together with the events that produced it; steps chain by returning new Outcomes."""

    group: GroupRecord
    events: tuple[GroupEvent, ...] = ()

    def but(self, group: GroupRecord, *events: GroupEvent) -> Outcome:
        """This outcome with `group` replacing the record and `events` appended."""
        return Outcome(group, self.events + events)

    def event(self, now: float, kind: EventKind, member_id: str | None = None, reason: str = "") -> Outcome:
        """Append an event about the current record."""
        group = self.group
        return self.but(group, GroupEvent(now, kind, group.state, group.generation, None, member_id, reason))


def transition(outcome: Outcome, target: GroupState, now: float, reason: str) -> Outcome:
    """Move the group to `target` if the table allows it, recording the transition; else raise."""
    group = outcome.group
    if not can_transition(group.state, target):
        raise IllegalStateTransitionError(f"group {group.name!r}: {group.state} -> {target} is not allowed")
    moved = replace(group, state=target)
    return outcome.but(
        moved, GroupEvent(now, EventKind.TRANSITION, target, moved.generation, group.state, None, reason)
    )


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def effective_topics(member: MemberRecord, partitions_per_topic: Mapping[str, int]) -> tuple[str, ...]:
    """The member's explicit topics plus the known topics its pattern matches (full match), sorted."""
    if member.topic_pattern is None:
        return member.topics
    regex = _compiled(member.topic_pattern)
    matched = {t for t in partitions_per_topic if regex.fullmatch(t)}
    return tuple(sorted(matched.union(member.topics)))


def subscribed_counts(
    partitions_per_topic: Mapping[str, int], topics: Collection[str], pattern: str | None
) -> dict[str, int]:
    """The counts of the known topics named in `topics` or fully matching `pattern`, sorted by topic."""
    regex = _compiled(pattern) if pattern else None
    return {
        t: n
        for t, n in sorted(partitions_per_topic.items())
        if t in topics or (regex is not None and regex.fullmatch(t))
    }


def static_member_id(group: GroupRecord, instance_id: str) -> str | None:
    """The member id currently holding static `instance_id`, if any."""
    for member in group.members.values():
        if member.instance_id == instance_id:
            return member.member_id
    return None
