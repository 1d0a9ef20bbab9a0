"""The safety properties the chaos simulation checks after every step, over plain snapshots.

A `Snapshot` is what the coordinator itself reports at one instant (`describe_group`, `fetch_offsets`,
`ledger_history`); the `InvariantChecker` compares it with everything it saw before (owners per
generation, heads, the commits the simulation saw accepted). It is pure over its inputs, so a test can
forge a snapshot (a double owner, a ledger gap) and prove that the check catches it.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cohort.assignment.protocol.group_state import GroupState
from cohort.assignment.protocol.messages import LedgerEntry
from cohort.assignment.views import GroupDescription, MemberDescription
from cohort.common.types import TopicPartition

__all__ = ["AcceptedCommit", "InvariantChecker", "InvariantViolation", "Snapshot", "identity"]


class InvariantViolation(Exception):
    """A safety property does not hold; the simulation turns it into an AssertionError naming seed and step."""


@dataclass(frozen=True)
class Snapshot:
    """The coordinator's own view of the group and its ledger at one instant."""

    view: GroupDescription
    heads: Mapping[TopicPartition, int | None]
    histories: Mapping[TopicPartition, Sequence[LedgerEntry]]


@dataclass(frozen=True)
class AcceptedCommit:
    """A range the simulation saw the coordinator accept: what the ledger must hold, in this order."""

    partition: TopicPartition
    from_offset: int
    until_offset: int
    member_id: str
    generation: int


def identity(member: MemberDescription) -> str:
    """Who a member is across incarnations: its static instance id, else its member id."""
    return member.instance_id if member.instance_id is not None else member.member_id


def subscribed_partitions(view: GroupDescription) -> set[TopicPartition]:
    """Every partition of a known topic that at least one member subscribes to (patterns resolved)."""
    topics = {t for m in view.members for t in m.topics}
    return {TopicPartition(t, p) for t, count in view.partitions_per_topic.items() if t in topics for p in range(count)}


@dataclass
class InvariantChecker:
    """Checks snapshots one after another; remembers what must never change afterwards.

    Attributes:
        owners: (generation, partition) -> the identity that owned it in that generation.
        heads: the highest committed offset seen per partition (never goes backward, never vanishes).
        accepted: per partition, the commits the simulation saw accepted (the ledger must be exactly these).
        generation: the highest generation seen.
    """

    owners: dict[tuple[int, TopicPartition], str] = field(default_factory=dict)
    heads: dict[TopicPartition, int] = field(default_factory=dict)
    accepted: dict[TopicPartition, list[AcceptedCommit]] = field(default_factory=dict)
    generation: int = 0

    def record_accepted(self, entries: Sequence[LedgerEntry]) -> None:
        """Note ledger entries a commit call returned (the ledger must contain them, in order)."""
        for e in entries:
            assert e.member_id is not None
            commit = AcceptedCommit(e.topic_partition, e.from_offset, e.until_offset, e.member_id, e.generation)
            self.accepted.setdefault(e.topic_partition, []).append(commit)

    def check(self, snapshot: Snapshot) -> None:
        """Raise InvariantViolation naming the first broken property; then remember this snapshot."""
        self._ownership(snapshot.view)
        self._ledger(snapshot, snapshot.view)

    # ------------------------------------------------------------------------------------- ownership

    def _ownership(self, view: GroupDescription) -> None:
        if view.generation < self.generation:
            raise InvariantViolation(f"generation went back from {self.generation} to {view.generation}")
        self.generation = view.generation
        now_owned: dict[TopicPartition, str] = {}
        for member in view.members:
            for tp in member.owned:
                if tp in now_owned:
                    raise InvariantViolation(
                        f"{tp} owned by two members at once: {now_owned[tp]} and {member.member_id} "
                        f"(state {view.state}, generation {view.generation})"
                    )
                now_owned[tp] = member.member_id
            if view.state is GroupState.STABLE and not set(member.assigned) <= set(member.owned):
                raise InvariantViolation(f"member {member.member_id} is assigned partitions it does not own")
            for tp in set(member.owned) | set(member.assigned):
                who = identity(member)
                before = self.owners.setdefault((view.generation, tp), who)
                if before != who:
                    raise InvariantViolation(
                        f"{tp} owned by {before} and by {who} in the same generation {view.generation}"
                    )
        if view.state is GroupState.STABLE and view.members:
            orphans = sorted(subscribed_partitions(view) - set(now_owned))
            if orphans:
                raise InvariantViolation(
                    f"group Stable in generation {view.generation} but {[str(tp) for tp in orphans]} owned by nobody"
                )

    # ---------------------------------------------------------------------------------------- ledger

    def _ledger(self, snapshot: Snapshot, view: GroupDescription) -> None:
        for tp, head in snapshot.heads.items():
            seen = self.heads.get(tp)
            if seen is not None and (head is None or head < seen):
                raise InvariantViolation(f"committed offset of {tp} went backward: {seen} -> {head}")
            history = list(snapshot.histories.get(tp, ()))
            for before, after in itertools.pairwise(history):
                if before.until_offset != after.from_offset:
                    kind = "gap" if after.from_offset > before.until_offset else "overlap"
                    raise InvariantViolation(
                        f"ledger of {tp} not contiguous: {kind} between [{before.from_offset}, {before.until_offset})"
                        f" and [{after.from_offset}, {after.until_offset})"
                    )
                if after.committed_at < before.committed_at or after.generation < before.generation:
                    raise InvariantViolation(f"ledger of {tp} not monotonic at offset {after.from_offset}")
            if any(e.from_offset > e.until_offset for e in history) or any(
                e.from_offset == e.until_offset for e in history[1:]
            ):  # only the first range may be empty: the partition's starting position
                raise InvariantViolation(f"ledger of {tp} holds an inverted range, or an empty one after its first")
            if head != (history[-1].until_offset if history else None):
                raise InvariantViolation(f"committed offset of {tp} is {head} but its ledger ends elsewhere")
            expected = self.accepted.get(tp, [])
            actual = [
                AcceptedCommit(tp, e.from_offset, e.until_offset, e.member_id or "", e.generation) for e in history
            ]
            if actual != expected:
                raise InvariantViolation(
                    f"ledger of {tp} differs from the accepted commits: {len(actual)} entries, "
                    f"{len(expected)} accepted (lost update or phantom commit)"
                )
            for e in history:  # every entry was committed by the generation's owner
                owner = self.owners.get((e.generation, tp))
                who = e.instance_id if e.instance_id is not None else e.member_id
                if owner != who:
                    raise InvariantViolation(
                        f"ledger of {tp}: range at {e.from_offset} committed by {who} in generation "
                        f"{e.generation}, whose owner was {owner or 'never seen'}"
                    )
            if head is not None:
                self.heads[tp] = head
