"""Scripted members for driving a `Coordinator` step by step with a manual clock (no threads, no sleeps)."""

from __future__ import annotations

from collections.abc import Sequence

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import MemberIdRequiredError
from cohort.assignment.protocol.group_state import EventKind, GroupState
from cohort.assignment.protocol.messages import JoinComplete, JoinPending, JoinRequest, SyncComplete, SyncPending
from cohort.common.types import OffsetRange, TopicPartition

__all__ = ["Client", "state_path", "tp"]


def tp(topic: str, partition: int) -> TopicPartition:
    """Shorthand for a TopicPartition."""
    return TopicPartition(topic, partition)


def state_path(coordinator: Coordinator, group: str) -> list[str]:
    """The states the group went through, from its first state on: e.g. ['Empty', 'PreparingRebalance', ...]."""
    path: list[str] = []
    for _, event in coordinator.group_events(group):
        if event.kind is EventKind.TRANSITION:
            if not path:
                assert event.previous_state is not None
                path.append(event.previous_state.value)
            path.append(event.state.value)
    return path


def count_transitions(coordinator: Coordinator, group: str, target: GroupState) -> int:
    """How many times the group entered `target`."""
    return sum(1 for _, e in coordinator.group_events(group) if e.kind is EventKind.TRANSITION and e.state is target)


class Client:
    """One scripted member: each method is one (or, for the first join, two) coordinator calls."""

    def __init__(
        self,
        coordinator: Coordinator,
        group: str,
        name: str,
        *,
        topics: Sequence[str] = ("t",),
        assignors: Sequence[str] = ("range",),
        session_timeout: float = 10.0,
        rebalance_timeout: float | None = None,
        progress_timeout: float | None = None,
        instance_id: str | None = None,
        topic_pattern: str | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.group = group
        self.name = name
        self.member_id: str | None = None
        self.generation = -1
        self.leader = False
        self.owned: tuple[TopicPartition, ...] = ()
        self.syncs = 0
        self.request = JoinRequest(
            client_id=name,
            instance_id=instance_id,
            topics=tuple(topics),
            topic_pattern=topic_pattern,
            assignors=tuple(assignors),
            session_timeout=session_timeout,
            rebalance_timeout=rebalance_timeout,
            progress_timeout=progress_timeout,
        )

    def join_once(self, *, report_owned: bool = False) -> JoinComplete | JoinPending:
        """One join call with the current member id (raises MEMBER_ID_REQUIRED on a dynamic first join)."""
        request = self.request.with_owned(self.owned) if report_owned else self.request
        if self.member_id is not None:
            request = request.with_member_id(self.member_id)
        answer = self.coordinator.join(self.group, request)
        self.member_id = answer.member_id
        if isinstance(answer, JoinComplete):
            self.generation = answer.generation
            self.leader = answer.is_leader
        return answer

    def join(self, *, report_owned: bool = False) -> JoinComplete | JoinPending:
        """Join, answering MEMBER_ID_REQUIRED with a second call as a real client does."""
        try:
            return self.join_once(report_owned=report_owned)
        except MemberIdRequiredError as needed:
            self.member_id = needed.member_id
            return self.join_once(report_owned=report_owned)

    def sync(self, assignment: dict[str, list[TopicPartition]] | None = None) -> SyncComplete | SyncPending:
        """Sync in the generation of the last completed join."""
        assert self.member_id is not None
        answer = self.coordinator.sync(
            self.group, self.member_id, self.generation, instance_id=self.request.instance_id, assignment=assignment
        )
        if isinstance(answer, SyncComplete):
            self.owned = answer.assignment
            self.syncs += 1
        return answer

    def heartbeat(self, *, progress: bool = False) -> object:
        """One heartbeat."""
        assert self.member_id is not None
        return self.coordinator.heartbeat(
            self.group, self.member_id, self.generation, instance_id=self.request.instance_id, progress=progress
        )

    def leave(self) -> None:
        """Leave the group."""
        assert self.member_id is not None
        self.coordinator.leave(self.group, self.member_id, instance_id=self.request.instance_id)

    def commit(self, *ranges: OffsetRange, generation: int | None = None) -> object:
        """Commit ranges as this member (optionally claiming another generation)."""
        return self.coordinator.commit_offsets(
            self.group,
            ranges,
            member_id=self.member_id,
            generation=self.generation if generation is None else generation,
            instance_id=self.request.instance_id,
            run_id=f"run-{self.name}",
        )
