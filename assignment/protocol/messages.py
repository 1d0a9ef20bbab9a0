"""Requests and answers of the group protocol, and the `Decision` a protocol step returns.

Plain frozen values shared by the pure decisions (`protocol`, `ledger`), the store-backed `Coordinator`
and the member client. A join answers `JoinComplete` or `JoinPending` ("call again"); a sync answers
`SyncComplete` or `SyncPending` (a follower whose leader has not submitted the assignment yet).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from cohort.assignment.errors import CoordinatorError
from cohort.assignment.protocol.group_state import GroupEvent, GroupRecord, GroupState, Outcome
from cohort.assignment.types import Subscription
from cohort.common.types import OffsetRange, TopicPartition

__all__ = [
    "COMMIT",
    "DEFAULT_ASSIGNORS",
    "FOLD",
    "RESET",
    "CommitRequest",
    "Decision",
    "HeartbeatResult",
    "JoinComplete",
    "JoinPending",
    "JoinRequest",
    "LedgerEntry",
    "MemberSubscription",
    "ResetRequest",
    "SyncComplete",
    "SyncPending",
]

DEFAULT_ASSIGNORS: tuple[str, ...] = ("cooperative-sticky", "sticky", "range")
"""Assignors a member offers when it names none, in order of preference."""


@dataclass(frozen=True)
class JoinRequest:
    """A member's join: who it is, what it subscribes to, which assignors it supports, its timeouts.

    Attributes:
        member_id: None on a first join (a dynamic member is then answered MEMBER_ID_REQUIRED with an id
            to rejoin with; a static member is admitted at once).
        instance_id: the static identity (worker slot, e.g. "orders-ingest/worker-2"), or None.
        client_id: opaque client/run id (the Dagster run id), shown by `describe_group`.
        topics: explicitly subscribed topics.
        topic_pattern: a regular expression; known topics it fully matches are subscribed too.
        assignors: assignor names in order of preference (the vote's ballot).
        session_timeout: seconds without heartbeat after which the member is removed.
        rebalance_timeout: seconds the join phase waits for this member to rejoin (default 300).
        progress_timeout: seconds the member may hold partitions without committing or reporting
            progress (`max.poll.interval.ms` analog); defaults to the rebalance timeout.
        owned_partitions: what the member holds now (cooperative members report it on rejoin; a rejoin
            that no longer lists a partition it was told to revoke releases it). None: not reported.
        rack: the member's rack, passed to rack-aware assignors.
    """

    member_id: str | None = None
    instance_id: str | None = None
    client_id: str | None = None
    topics: Collection[str] = ()
    topic_pattern: str | None = None
    assignors: Sequence[str] = DEFAULT_ASSIGNORS
    session_timeout: float = 45.0
    rebalance_timeout: float | None = None
    progress_timeout: float | None = None
    owned_partitions: Sequence[TopicPartition] | None = None
    rack: str | None = None

    def with_member_id(self, member_id: str) -> JoinRequest:
        """This request with `member_id` set (the rejoin after MEMBER_ID_REQUIRED)."""
        return replace(self, member_id=member_id)

    def with_owned(self, owned: Sequence[TopicPartition] | None) -> JoinRequest:
        """This request reporting `owned` partitions."""
        return replace(self, owned_partitions=None if owned is None else tuple(owned))

    @property
    def effective_rebalance_timeout(self) -> float:
        """The rebalance timeout, defaulting to 300 s (Kafka's max.poll.interval.ms)."""
        return 300.0 if self.rebalance_timeout is None else float(self.rebalance_timeout)

    @property
    def effective_progress_timeout(self) -> float:
        """The progress timeout, defaulting to the rebalance timeout."""
        return self.effective_rebalance_timeout if self.progress_timeout is None else float(self.progress_timeout)


@dataclass(frozen=True)
class MemberSubscription:
    """One member as the leader sees it in a completed join."""

    member_id: str
    instance_id: str | None
    client_id: str | None
    subscription: Subscription


@dataclass(frozen=True)
class JoinComplete:
    """A completed join: the member's id and generation, the leader, the elected assignor.

    Only the leader gets `members` (every member with its subscription) and `partitions_per_topic`, so it
    can compute the assignment itself; or it syncs with no assignment and the coordinator runs the elected
    assignor for it. `skip_assignment` is set when a static member replaced a previous instance of itself
    in a Stable group: the current assignment stands and no sync assignment is expected.
    """

    member_id: str
    generation: int
    leader_id: str
    protocol: str
    rebalance_protocol: str
    members: tuple[MemberSubscription, ...] = ()
    partitions_per_topic: Mapping[str, int] = field(default_factory=dict)
    skip_assignment: bool = False

    @property
    def is_leader(self) -> bool:
        """Whether this member leads the generation (submits the assignment in sync)."""
        return self.member_id == self.leader_id


@dataclass(frozen=True)
class JoinPending:
    """The join phase is still open: call join again (with `member_id`) shortly."""

    member_id: str
    state: GroupState
    rebalance_deadline: float | None


@dataclass(frozen=True)
class SyncComplete:
    """The member's partitions in `generation`.

    Partitions the member held before and no longer sees here must be revoked (commit, stop) and then
    released by rejoining; `rejoin_after_revoke` is True when this member holds such partitions (their
    new owner gets them in the follow-up round its rejoin starts).
    """

    member_id: str
    generation: int
    protocol: str
    rebalance_protocol: str
    assignment: tuple[TopicPartition, ...]
    rejoin_after_revoke: bool = False


@dataclass(frozen=True)
class SyncPending:
    """The leader has not submitted the assignment yet: call sync again shortly."""

    member_id: str
    generation: int


@dataclass(frozen=True)
class HeartbeatResult:
    """A successful heartbeat: the member is alive until `session_deadline`."""

    generation: int
    state: GroupState
    session_deadline: float


@dataclass(frozen=True)
class CommitRequest:
    """A commit of consumed ranges; `member_id` None with generation -1 is an Empty group's standalone
    commit (admin tools)."""

    ranges: Sequence[OffsetRange]
    member_id: str | None = None
    generation: int = -1
    instance_id: str | None = None
    run_id: str | None = None


COMMIT = "commit"
"""`LedgerEntry.kind` of a consumed range a batch (or a standalone client) committed."""
RESET = "reset"
"""`LedgerEntry.kind` of an offset reset: the position moved from `from_offset` to `until_offset` by hand."""
FOLD = "fold"
"""`LedgerEntry.kind` of old contiguous committed ranges folded into one by retention
(cohort.assignment.ledger.retention): counts added, digests combined, its note says how many ranges and when."""


@dataclass(frozen=True)
class ResetRequest:
    """Move partitions' committed offsets to `positions`; `actor` and `reason` are recorded with each entry.

    Without `member_id`, an operator's reset, allowed while the group has no members. With it, a member's
    reset of partitions it owns in `generation` (a replay run: fenced exactly like its commits)."""

    positions: Mapping[TopicPartition, int]
    actor: str
    reason: str
    member_id: str | None = None
    generation: int = -1
    instance_id: str | None = None
    run_id: str | None = None


@dataclass(frozen=True)
class LedgerEntry:
    """One entry of the offset ledger, with who made it and when: a committed range (`kind` "commit") or an
    offset reset (`kind` "reset": the position moved from `from_offset` to `until_offset`, backward to replay
    or forward to skip; `note` says who and why)."""

    group: str
    topic: str
    partition: int
    from_offset: int
    until_offset: int
    records: int
    quarantined: int
    gap_reason: str | None
    run_id: str | None
    member_id: str | None
    instance_id: str | None
    generation: int
    committed_at: float
    kind: str = COMMIT
    note: str | None = None
    content_hash: str | None = None
    filtered: int = 0
    """Valid records a user transform dropped (no row in the sink)."""
    expanded: int = 0
    """Rows a flattening transform wrote beyond one per record (`records` counts rows)."""
    entry_id: int | None = field(default=None, compare=False)
    """The entry's place in the store's ledger (increasing in the order entries were made); None until stored."""

    @property
    def topic_partition(self) -> TopicPartition:
        """The entry's partition."""
        return TopicPartition(self.topic, self.partition)

    @property
    def consumed(self) -> int:
        """The records of the range that were read: written, quarantined or filtered."""
        return self.records - self.expanded + self.quarantined + self.filtered

    @property
    def is_reset(self) -> bool:
        """An offset reset, not a consumed range: nothing was read, written or materialized."""
        return self.kind == RESET

    @property
    def is_fold(self) -> bool:
        """Old committed ranges folded into one by retention: consumed offsets, written by several batches."""
        return self.kind == FOLD


R = TypeVar("R")


@dataclass(frozen=True)
class Decision(Generic[R]):
    """What a protocol step decided: the new group record and its events, plus an answer or an error.

    The store persists `outcome` (also when `error` is set: timers evaluated on the way and ids handed
    out stay decided) and then returns `response` or raises `error`. `entries`/`heads` are ledger changes
    (commits only); `deleted` removes the group.
    """

    outcome: Outcome
    response: R | None = None
    error: CoordinatorError | None = None
    entries: tuple[LedgerEntry, ...] = ()
    heads: Mapping[TopicPartition, int] = field(default_factory=dict)
    deleted: bool = False

    @property
    def group(self) -> GroupRecord:
        """The group after the step."""
        return self.outcome.group

    @property
    def events(self) -> tuple[GroupEvent, ...]:
        """Events of the step, in order."""
        return self.outcome.events

    def result(self) -> R:
        """The answer, or raise the error (for callers applying decisions in memory)."""
        if self.error is not None:
            raise self.error
        return self.response  # type: ignore[return-value]
