"""Read-only descriptions of groups for operators and Dagster sensors (`describe_group`, `list_groups`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from cohort.assignment.protocol.group_state import GroupRecord, GroupState, effective_topics
from cohort.common.types import TopicPartition

__all__ = ["GroupDescription", "GroupListing", "MemberDescription", "describe"]


@dataclass(frozen=True)
class MemberDescription:
    """One member as a sensor sees it.

    Attributes:
        client_id: the opaque client/run id given at join (the Dagster run id); also `run_id`.
        session_deadline: when the member expires without a heartbeat (clock seconds).
        progress_deadline: when it is evicted for holding partitions without progress; None if it holds none.
        assigned: its partitions in the current generation's assignment.
        owned: what it may be processing now (assigned plus partitions it still has to release).
        revoking: owned partitions it must revoke and release by rejoining.
        awaiting_join: in PreparingRebalance, whether it has rejoined already.
    """

    member_id: str
    instance_id: str | None
    client_id: str | None
    topics: tuple[str, ...]
    topic_pattern: str | None
    assignors: tuple[str, ...]
    generation: int
    session_timeout: float
    session_deadline: float
    progress_timeout: float
    progress_deadline: float | None
    assigned: tuple[TopicPartition, ...]
    owned: tuple[TopicPartition, ...]
    revoking: tuple[TopicPartition, ...]
    awaiting_join: bool
    synced: bool

    @property
    def run_id(self) -> str | None:
        """Alias of `client_id` (Cohort passes the Dagster run id there)."""
        return self.client_id


@dataclass(frozen=True)
class GroupDescription:
    """A group's state, generation, assignor, leader and members (`state` Dead for a group that does not
    exist). Members are ordered by join order (the leader first unless it changed).

    `assignor` is the current generation's, None while the group is Empty; `last_assignor` is that of the latest
    generation that had members (the current one's while there are members), and `configured_assignors` the
    assignors its leader declared, in order of preference: an Empty group's keep telling which assignor it
    runs with.
    """

    name: str
    state: GroupState
    generation: int
    assignor: str | None
    rebalance_protocol: str | None
    leader_id: str | None
    members: tuple[MemberDescription, ...] = ()
    partitions_per_topic: Mapping[str, int] = field(default_factory=dict)
    rebalance_deadline: float | None = None
    rebalance_reason: str | None = None
    pending_member_ids: int = 0
    last_assignor: str | None = None
    configured_assignors: tuple[str, ...] = ()

    def member(self, member_id: str) -> MemberDescription:
        """The member with `member_id` (KeyError if absent)."""
        for m in self.members:
            if m.member_id == member_id:
                return m
        raise KeyError(member_id)

    @property
    def assignment(self) -> dict[str, tuple[TopicPartition, ...]]:
        """member id -> assigned partitions."""
        return {m.member_id: m.assigned for m in self.members}


@dataclass(frozen=True)
class GroupListing:
    """One line of `list_groups`."""

    name: str
    state: GroupState
    generation: int
    members: int


def describe(group: GroupRecord | None, name: str) -> GroupDescription:
    """The description of a group record (None: a Dead group)."""
    if group is None:
        return GroupDescription(name, GroupState.DEAD, -1, None, None, None)
    known = group.partitions_per_topic
    members = tuple(
        MemberDescription(
            member_id=m.member_id,
            instance_id=m.instance_id,
            client_id=m.client_id,
            topics=effective_topics(m, known),
            topic_pattern=m.topic_pattern,
            assignors=m.protocols,
            generation=m.generation,
            session_timeout=m.session_timeout,
            session_deadline=m.session_deadline,
            progress_timeout=m.progress_timeout,
            progress_deadline=m.progress_deadline,
            assigned=m.assigned if m.assigned_generation == group.generation else (),
            owned=m.owned,
            revoking=tuple(tp for tp in m.owned if tp not in set(m.assigned)),
            awaiting_join=m.joined,
            synced=m.synced,
        )
        for m in sorted(group.members.values(), key=lambda m: m.join_seq)
    )
    return GroupDescription(
        name=group.name,
        state=group.state,
        generation=group.generation,
        assignor=group.protocol,
        rebalance_protocol=group.rebalance_protocol if group.protocol else None,
        leader_id=group.leader_id,
        members=members,
        partitions_per_topic=dict(known),
        rebalance_deadline=group.rebalance_deadline,
        rebalance_reason=group.rebalance_reason,
        pending_member_ids=len(group.pending),
        last_assignor=group.last_protocol,
        configured_assignors=group.last_protocols,
    )
