"""Simulated members for the chaos simulation: small state machines calling the real `Coordinator`.

A `SimMember` does, one call at a time, what `GroupMember` does in a run: join (answering
MEMBER_ID_REQUIRED and "pending" by calling again), sync, heartbeat, rejoin when told to (eager members
give up everything first, cooperative members keep what they hold and release revoked partitions by
rejoining), start over when its membership is lost, and stop for good when fenced. The simulation decides
when each member acts, so any interleaving with crashes, pauses and clock jumps can happen.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from cohort.assignment.protocol.messages import JoinComplete, JoinRequest, SyncComplete
from cohort.assignment.types import COOPERATIVE, EAGER
from cohort.common.types import TopicPartition

__all__ = ["Phase", "SimMember", "Status"]


class Phase(StrEnum):
    """Where a member is in the protocol."""

    JOIN = "join"
    SYNC = "sync"
    STABLE = "stable"


class Status(StrEnum):
    """What the member's process is doing."""

    LIVE = "live"
    PAUSED = "paused"  # stopped calling (GC pause, SIGSTOP); resumes as a possible zombie
    CRASHED = "crashed"  # stopped calling for good, without leaving
    LEFT = "left"  # left cleanly
    FENCED = "fenced"  # told FENCED_INSTANCE_ID: stops for good


@dataclass(frozen=True)
class StepResult:
    """What one member step did, for the event log."""

    call: str
    outcome: str


class SimMember:
    """One simulated run. `owned` is what the member believes it may process (its last sync's assignment)."""

    def __init__(
        self,
        coordinator: Coordinator,
        group: str,
        name: str,
        request: JoinRequest,
    ) -> None:
        self.coordinator = coordinator
        self.group = group
        self.name = name
        self.request = request
        self.member_id: str | None = None
        self.generation = -1
        self.protocol = EAGER
        self.owned: tuple[TopicPartition, ...] = ()
        self.phase = Phase.JOIN
        self.status = Status.LIVE
        self.paused_until = 0.0

    @property
    def instance_id(self) -> str | None:
        """The static instance id, or None for a dynamic member."""
        return self.request.instance_id

    def _lost(self) -> None:
        self.member_id, self.generation, self.owned, self.phase = None, -1, (), Phase.JOIN

    def _rejoin(self) -> None:
        if self.protocol != COOPERATIVE:
            self.owned = ()  # eager: revoke everything before rejoining
        self.phase = Phase.JOIN

    def step(self, *, progress: bool = False) -> StepResult:
        """The next call a real member would make; errors are handled as `GroupMember` handles them."""
        try:
            if self.phase is Phase.JOIN:
                return self._join()
            if self.phase is Phase.SYNC:
                return self._sync()
            assert self.member_id is not None
            beat = self.coordinator.heartbeat(
                self.group, self.member_id, self.generation, instance_id=self.instance_id, progress=progress
            )
            return StepResult("heartbeat", f"ok gen={beat.generation}")
        except (RebalanceInProgressError, IllegalGenerationError) as exc:
            self._rejoin()
            return StepResult(self.phase.value, f"{exc.code} -> rejoin")
        except UnknownMemberIdError as exc:
            self._lost()
            return StepResult(self.phase.value, f"{exc.code} -> start over")
        except FencedInstanceIdError as exc:
            self.status = Status.FENCED
            return StepResult(self.phase.value, f"{exc.code} -> stop")

    def _join(self) -> StepResult:
        request = self.request.with_owned(self.owned)
        if self.member_id is not None:
            request = request.with_member_id(self.member_id)
        try:
            answer = self.coordinator.join(self.group, request)
        except MemberIdRequiredError as needed:
            self.member_id = needed.member_id
            return StepResult("join", "MEMBER_ID_REQUIRED")
        self.member_id = answer.member_id
        if isinstance(answer, JoinComplete):
            self.generation, self.phase = answer.generation, Phase.SYNC
            role = "leader" if answer.is_leader else "follower"
            return StepResult("join", f"complete gen={answer.generation} {role} {answer.protocol}")
        return StepResult("join", "pending")

    def _sync(self) -> StepResult:
        assert self.member_id is not None
        answer = self.coordinator.sync(self.group, self.member_id, self.generation, instance_id=self.instance_id)
        if not isinstance(answer, SyncComplete):
            return StepResult("sync", "pending")
        revoked = set(self.owned) - set(answer.assignment)
        self.owned, self.protocol, self.phase = answer.assignment, answer.rebalance_protocol, Phase.STABLE
        if revoked or answer.rejoin_after_revoke:
            self.phase = Phase.JOIN  # release the revoked partitions by rejoining
        return StepResult("sync", f"gen={answer.generation} {len(answer.assignment)} partitions")

    def leave(self) -> str:
        """Leave cleanly (as `GroupMember.close(leave=True)`); the member stops."""
        self.status = Status.LEFT
        if self.member_id is None:
            return "never joined"
        try:
            self.coordinator.leave(self.group, self.member_id, instance_id=self.instance_id, reason="chaos leave")
        except (UnknownMemberIdError, FencedInstanceIdError) as exc:
            return exc.code
        return "left"
