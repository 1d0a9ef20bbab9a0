"""The group coordinator: Kafka's classic group protocol and offset ledger over a store, with injected time.

Members (Dagster runs) are separate processes that call in; they hold no connection, so the join phase is
asynchronous: `join` answers `JoinComplete` or `JoinPending` ("call again"), and every call first applies
what the clock has made due. Each call is one transaction on one group (see `store`), so concurrent
processes never interleave two steps on a group.

Example:
    >>> from cohort.assignment.clock import ManualClock
    >>> from cohort.assignment.protocol.group_state import GroupConfig
    >>> from cohort.assignment.store.memory import MemoryGroupStore
    >>> from cohort.assignment.protocol.messages import JoinRequest
    >>> from cohort.assignment.errors import MemberIdRequiredError
    >>> config = GroupConfig(initial_rebalance_delay=0)
    >>> coordinator = Coordinator(MemoryGroupStore(), clock=ManualClock(), config=config)
    >>> _ = coordinator.report_topic_metadata("orders", {"orders": 4})
    >>> request = JoinRequest(topics=["orders"], assignors=["range"], session_timeout=10)
    >>> try:
    ...     coordinator.join("orders", request)
    ... except MemberIdRequiredError as needed:
    ...     joined = coordinator.join("orders", request.with_member_id(needed.member_id))
    >>> joined.generation, joined.is_leader
    (1, True)
    >>> [str(tp) for tp in coordinator.sync("orders", joined.member_id, joined.generation).assignment]
    ['orders-0', 'orders-1', 'orders-2', 'orders-3']
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

from cohort.assignment.clock import Clock, SystemClock
from cohort.assignment.errors import InvalidRequestError
from cohort.assignment.ledger.ranges import decide_commit, decide_reset
from cohort.assignment.ledger.retention import Fold
from cohort.assignment.ledger.trail import TrailMark
from cohort.assignment.protocol.backlog import LogOffsets, backlog_from_offsets
from cohort.assignment.protocol.decisions import (
    decide_claim_rerun,
    decide_delete,
    decide_evict,
    decide_expire,
    decide_heartbeat,
    decide_join,
    decide_leave,
    decide_metadata,
    decide_sync,
    start,
)
from cohort.assignment.protocol.group_state import GroupConfig, GroupEvent, GroupRecord, GroupState, Outcome
from cohort.assignment.protocol.join import check_join_request
from cohort.assignment.protocol.messages import (
    CommitRequest,
    Decision,
    HeartbeatResult,
    JoinComplete,
    JoinPending,
    JoinRequest,
    LedgerEntry,
    ResetRequest,
    SyncComplete,
    SyncPending,
)
from cohort.assignment.protocol.rebalance import Context, advance, default_assignor_resolver
from cohort.assignment.store.protocol import GroupStore, HeadReader
from cohort.assignment.store.sql import SqlGroupStore
from cohort.assignment.types import Assignor
from cohort.assignment.views import GroupDescription, GroupListing, describe
from cohort.common.names import validate_group_name, validate_instance_id, validate_topic_name
from cohort.common.types import OffsetRange, TopicPartition

__all__ = ["Coordinator", "StandaloneLedger"]

R = TypeVar("R")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _member_id(hint: str | None) -> str:
    """Kafka-style member id: '<client or instance>-<uuid>'."""
    prefix = _UNSAFE.sub("-", hint or "member").strip("-")[:64] or "member"
    return f"{prefix}-{uuid.uuid4().hex}"


def _check_instance(instance_id: str | None) -> None:
    if instance_id is not None:
        validate_instance_id(instance_id)


class Coordinator:
    """Join, sync, heartbeat, leave, commit and fetch offsets, describe, list, delete, report metadata.

    Every method that changes a group is one store transaction on that group and raises a typed
    `CoordinatorError` on refusal; `describe_group` and `list_groups` only read (showing the lazily
    advanced state without writing it), `expire` writes what the clock made due.

    Args:
        store: where groups and ledgers live (`SqlGroupStore`, or `MemoryGroupStore` for simulations).
        clock: the time source (`SystemClock` by default; `ManualClock` in tests). Sensors use the same.
        config: group settings (initial rebalance delay, session timeout bounds, max size).
        assignors: resolves the elected assignor's name when the coordinator assigns for the leader
            (the `assignment` registry by default).
    """

    def __init__(
        self,
        store: GroupStore,
        *,
        clock: Clock | None = None,
        config: GroupConfig | None = None,
        assignors: Callable[[str], Assignor] | None = None,
    ) -> None:
        self.store = store
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.config = config if config is not None else GroupConfig()
        self._assignors = assignors if assignors is not None else default_assignor_resolver

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> Coordinator:
        """A coordinator on a SQL store (`sqlite:///cohort.db`, `postgresql+psycopg://...`).

        Example:
            >>> coordinator = Coordinator.from_url("sqlite:////tmp/cohort.db")  # doctest: +SKIP
        """
        return cls(SqlGroupStore.from_url(url), **kwargs)

    def close(self) -> None:
        """Release the store's resources."""
        self.store.close()

    # --------------------------------------------------------------------------------------- plumbing

    def _context(self, hint: str | None = None) -> Context:
        return Context(
            now=self.clock.now(), config=self.config, new_member_id=_member_id(hint), assignors=self._assignors
        )

    def _run(
        self,
        group: str,
        decide: Callable[[GroupRecord | None, HeadReader, Context], Decision[R]],
        hint: str | None = None,
    ) -> Decision[R]:
        validate_group_name(group)

        def step(current: GroupRecord | None, heads: HeadReader) -> Decision[R]:
            # The time is read after the group's lock is held, so steps are ordered as their clocks are.
            return decide(current, heads, self._context(hint))

        return self.store.transact(group, step)

    # ---------------------------------------------------------------------------------------- protocol

    def join(self, group: str, request: JoinRequest) -> JoinComplete | JoinPending:
        """Join or rejoin `group`; answers `JoinComplete` or `JoinPending` (call again).

        A dynamic member's first join raises MEMBER_ID_REQUIRED (`MemberIdRequiredError.member_id` is
        the id to rejoin with). Other errors: INVALID_SESSION_TIMEOUT, INCONSISTENT_GROUP_PROTOCOL,
        GROUP_MAX_SIZE_REACHED, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, INVALID_REQUEST.

        Example:
            >>> coordinator.join("orders", JoinRequest(member_id=mid, topics=["orders"]))  # doctest: +SKIP
            JoinPending(member_id='member-…', state=<GroupState.PREPARING_REBALANCE: ...>, ...)
        """
        check_join_request(request)  # types first: a string of topics is not a list of names
        if request.instance_id is not None:
            validate_instance_id(request.instance_id)
        for topic in request.topics:
            validate_topic_name(topic)
        hint = request.instance_id or request.client_id
        return self._run(group, lambda g, _h, ctx: decide_join(g, group, request, ctx), hint).result()

    def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        *,
        instance_id: str | None = None,
        assignment: Mapping[str, Sequence[TopicPartition]] | None = None,
        log_offsets: LogOffsets | None = None,
    ) -> SyncComplete | SyncPending:
        """Fetch the member's assignment for `generation`; the leader submits `assignment` (or None to
        have the coordinator run the elected assignor). Followers get `SyncPending` until the leader synced.

        `log_offsets` (the leader's (first, end) offsets per partition, from Kafka) is for a backlog-aware
        assignor (`lag-sticky`): the backlog is computed against the ledger's committed offsets in the sync's
        own transaction (`cohort.assignment.protocol.backlog`), used for this assignment only and never stored.

        Errors: REBALANCE_IN_PROGRESS (rejoin), ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
        INVALID_REQUEST (bad leader assignment or log offsets).
        """
        _check_instance(instance_id)

        def decide(
            current: GroupRecord | None, heads: HeadReader, ctx: Context
        ) -> Decision[SyncComplete | SyncPending]:
            backlog = None
            if (
                log_offsets
                and assignment is None
                and current is not None
                and current.leader_id == member_id
                and current.state is GroupState.COMPLETING_REBALANCE
            ):
                try:
                    wanted = sorted({TopicPartition(tp[0], tp[1]) for tp in log_offsets})
                    backlog = backlog_from_offsets(log_offsets, heads(wanted))
                except ValueError as exc:
                    return Decision(start(current, group, ctx), error=InvalidRequestError(f"group {group!r}: {exc}"))
            return decide_sync(current, group, member_id, generation, instance_id, assignment, ctx, backlog=backlog)

        return self._run(group, decide).result()

    def assignor(self, name: str) -> Assignor:
        """The assignor this coordinator runs for `name` when the leader leaves the assignment to it."""
        return self._assignors(name)

    def heartbeat(
        self,
        group: str,
        member_id: str,
        generation: int,
        *,
        instance_id: str | None = None,
        progress: bool = False,
    ) -> HeartbeatResult:
        """Keep the member's session alive; `progress=True` also resets its progress deadline.

        Raises REBALANCE_IN_PROGRESS when the member must rejoin, or UNKNOWN_MEMBER_ID /
        ILLEGAL_GENERATION / FENCED_INSTANCE_ID when it lost its membership.
        """
        _check_instance(instance_id)
        return self._run(
            group, lambda g, _h, ctx: decide_heartbeat(g, group, member_id, generation, instance_id, progress, ctx)
        ).result()

    def leave(self, group: str, member_id: str, *, instance_id: str | None = None, reason: str = "leaving") -> None:
        """Leave the group now; the rebalance starts without waiting for the session timeout."""
        _check_instance(instance_id)
        self._run(group, lambda g, _h, ctx: decide_leave(g, group, member_id, instance_id, reason, ctx)).result()

    def evict_member(self, group: str, member_id: str, reason: str) -> None:
        """Remove a member for an operator or sensor (e.g. its run failed) and start a rebalance."""
        self._run(group, lambda g, _h, ctx: decide_evict(g, group, member_id, reason, ctx)).result()

    def expire(self, group: str) -> tuple[GroupEvent, ...]:
        """Persist what the clock made due (expired sessions and progress deadlines, a due join phase);
        returns the events it caused. Sensors call it on each tick."""
        return self._run(group, lambda g, _h, ctx: decide_expire(g, group, ctx)).events

    def report_topic_metadata(self, group: str, partitions_per_topic: Mapping[str, int]) -> bool:
        """Record the current partition counts of the topics the group subscribes to (for pattern
        subscriptions, of every topic); returns True if that started a rebalance (a subscribed topic grew,
        or a topic matching a pattern appeared or vanished)."""
        for topic in partitions_per_topic:
            validate_topic_name(topic)
        counts = dict(partitions_per_topic)
        return bool(self._run(group, lambda g, _h, ctx: decide_metadata(g, group, counts, ctx)).result())

    def claim_rerun(self, group: str, *, lost: str, slot: int, holder: str) -> str:
        """Claim the rerun of a lost run (`lost`: its id, or a key naming the loss) of worker slot `slot` for
        `holder` (the orchestrator asking); returns who holds the claim: rerun only when it is `holder`."""
        return str(self._run(group, lambda g, _h, ctx: decide_claim_rerun(g, group, lost, slot, holder, ctx)).result())

    def delete_group(self, group: str) -> None:
        """Delete an Empty group and its ledger; NON_EMPTY_GROUP while it has members."""
        self._run(group, lambda g, _h, ctx: decide_delete(g, group, ctx)).result()

    # ------------------------------------------------------------------------------------------ ledger

    def commit_offsets(
        self,
        group: str,
        ranges: Sequence[OffsetRange],
        *,
        member_id: str | None = None,
        generation: int = -1,
        instance_id: str | None = None,
        run_id: str | None = None,
    ) -> tuple[LedgerEntry, ...]:
        """Record consumed ranges for `member_id` in `generation`, all or nothing.

        With `member_id=None` and `generation=-1` this is a standalone commit, accepted only while the
        group is Empty (admin tools). Errors: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID,
        REBALANCE_IN_PROGRESS (CompletingRebalance), PARTITION_NOT_OWNED, NON_CONTIGUOUS_RANGE,
        INVALID_OFFSET_RANGE.
        """
        _check_instance(instance_id)
        for r in ranges:
            validate_topic_name(r.topic)
        request = CommitRequest(tuple(ranges), member_id, generation, instance_id, run_id)
        partitions = sorted({r.topic_partition for r in ranges})

        def decide(current: GroupRecord | None, heads: HeadReader, ctx: Context) -> Decision[tuple[LedgerEntry, ...]]:
            return decide_commit(current, group, request, heads(partitions) if partitions else {}, ctx)

        return self._run(group, decide).result()

    def reset_offsets(
        self,
        group: str,
        positions: Mapping[TopicPartition, int],
        *,
        actor: str,
        reason: str,
        member_id: str | None = None,
        generation: int = -1,
        instance_id: str | None = None,
        run_id: str | None = None,
    ) -> tuple[LedgerEntry, ...]:
        """Move committed offsets to `positions`, recording who and why as reset entries of the ledger;
        partitions already there get none. Without `member_id` an operator's reset: NON_EMPTY_GROUP while the
        group has members. With it, a member resets partitions it owns (a replay run), fenced as its commits
        are. INVALID_OFFSET_RANGE for a negative offset. Mirroring the new positions to Kafka is the caller's."""
        _check_instance(instance_id)
        wanted = {TopicPartition(validate_topic_name(tp[0]), tp[1]): offset for tp, offset in positions.items()}
        request = ResetRequest(
            wanted,
            actor=actor,
            reason=reason,
            member_id=member_id,
            generation=generation,
            instance_id=instance_id,
            run_id=run_id,
        )
        partitions = sorted(wanted)

        def decide(current: GroupRecord | None, heads: HeadReader, ctx: Context) -> Decision[tuple[LedgerEntry, ...]]:
            return decide_reset(current, group, request, heads(partitions) if partitions else {}, ctx)

        return self._run(group, decide).result()

    def fetch_offsets(self, group: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The next offset to read per partition (None where nothing was committed)."""
        validate_group_name(group)
        wanted = [TopicPartition(validate_topic_name(tp[0]), tp[1]) for tp in partitions]
        return self.store.committed(group, wanted)

    def ledger_partitions(self, group: str) -> list[TopicPartition]:
        """The partitions the group's ledger holds a committed offset for, sorted."""
        return self.store.ledger_partitions(validate_group_name(group))

    def ledger_history(self, group: str, topic: str, partition: int) -> list[LedgerEntry]:
        """Every entry of one partition's ledger in the order they were made (committed ranges and offset
        resets), with run id, member, generation, counts, time."""
        validate_group_name(group)
        validate_topic_name(topic)
        return self.store.history(group, topic, partition)

    def ledger_after(
        self, group: str, topic: str, partition: int, after_id: int, *, limit: int | None = None
    ) -> list[LedgerEntry]:
        """The partition's ledger entries made after entry `after_id` (a `TrailMark.ledger_id`), in order: what
        changed since a mark, read through an index whatever the history's length."""
        validate_group_name(group)
        validate_topic_name(topic)
        return self.store.history(group, topic, partition, after_id=after_id, limit=limit)

    def latest_ledger_entries(self, group: str, kind: str, *, limit: int = 20) -> list[LedgerEntry]:
        """The group's newest `limit` ledger entries of `kind` ("reset", "fold"), oldest first, read through an
        index whatever the ledger's length."""
        return self.store.latest_of_kind(validate_group_name(group), kind, limit)

    def trail_marks(
        self, group: str, trail: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, TrailMark]:
        """How far each partition's ledger is settled in the audit trail `trail` (cohort.assignment.ledger.trail)."""
        return self.store.trail_marks(validate_group_name(group), trail, partitions)

    def advance_trail_marks(self, group: str, trail: str, marks: Sequence[TrailMark]) -> None:
        """Store marks that moved forward (never back), stamped with the coordinator's clock."""
        self.store.advance_trail_marks(validate_group_name(group), trail, marks, self.clock.now())

    def settled_through(self, group: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """Through which ledger entry each partition is settled in every audit trail (None: no trail follows)."""
        return self.store.settled_through(validate_group_name(group), partitions)

    def apply_retention(
        self, group: str, folds: Sequence[Fold], *, events_before: float | None = None, keep_events: int = 0
    ) -> int:
        """Apply folds (`cohort.assignment.ledger.retention.plan_folds`) and drop old group events, in one transaction;
        the number of events dropped."""
        return self.store.apply_retention(
            validate_group_name(group), folds, events_before=events_before, keep_events=keep_events
        )

    def recorded_ranges(
        self, group: str, topic: str, partition: int, wanted: Collection[tuple[int, int]]
    ) -> set[tuple[int, int]]:
        """Which of the (from, until) ranges `wanted` the partition's ledger holds as committed ranges."""
        return self.store.recorded_ranges(validate_group_name(group), topic, partition, wanted)

    def last_committed(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, LedgerEntry | None]:
        """The last committed range per partition (None where nothing was committed): which run committed the
        offsets the partition's committed offset stands on, so a batch can publish that run's output if the
        run died between its commit and its publish."""
        validate_group_name(group)
        wanted = [TopicPartition(validate_topic_name(tp[0]), tp[1]) for tp in partitions]
        return self.store.last_ranges(group, wanted)

    def run_ledger_history(self, group: str, run_id: str) -> list[LedgerEntry]:
        """Every range one run committed (the ledger records the run id), in commit order: what a run that
        died before reporting its work had done."""
        validate_group_name(group)
        return self.store.run_history(group, run_id)

    def standalone_ledger(self, group: str, *, run_id: str | None = None) -> StandaloneLedger:
        """An `OffsetLedger` committing as an Empty group's standalone client (generation -1)."""
        validate_group_name(group)
        return StandaloneLedger(self, group, run_id=run_id)

    # ------------------------------------------------------------------------------------------- reads

    def describe_group(self, group: str) -> GroupDescription:
        """State, generation, assignor, leader and members (session/progress deadlines, assignments) as of
        now; a missing group is described as Dead. Reads only: the clock's due effects are shown, not written."""
        validate_group_name(group)
        return describe(self._current(group), group)

    def list_groups(self) -> list[GroupListing]:
        """Every group with its state, generation and member count (as of now)."""
        listings = []
        for name in self.store.group_names():
            record = self._current(name)
            if record is not None:
                listings.append(GroupListing(name, record.state, record.generation, len(record.members)))
        return listings

    def group_events(self, group: str, *, after: int = 0) -> list[tuple[int, GroupEvent]]:
        """The group's recorded events (state transitions, members joining and leaving, generations,
        assignments) with ids greater than `after`, oldest first: a cursor for sensors."""
        validate_group_name(group)
        return self.store.events(group, after)

    def last_group_event_id(self, group: str) -> int:
        """The id of the group's newest event (0 when it has none): a cursor's start that reads no history."""
        return self.store.last_event_id(validate_group_name(group))

    def _current(self, group: str) -> GroupRecord | None:
        record = self.store.load(group)
        if record is None:
            return None
        return advance(Outcome(record), self._context()).group


class StandaloneLedger:
    """`OffsetLedger` of an Empty group for admin tools: commits with no member and generation -1.

    Example:
        >>> ledger = coordinator.standalone_ledger("orders")  # doctest: +SKIP
        >>> ledger.commit([OffsetRange("orders", 0, 0, 100, records=100)])  # doctest: +SKIP
    """

    def __init__(self, coordinator: Coordinator, group: str, *, run_id: str | None = None) -> None:
        self.coordinator = coordinator
        self.group = group
        self.run_id = run_id

    def committed_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The next offset to read per partition."""
        return self.coordinator.fetch_offsets(self.group, partitions)

    def last_committed(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, LedgerEntry | None]:
        """The last committed range per partition (`Coordinator.last_committed`)."""
        return self.coordinator.last_committed(self.group, partitions)

    def commit(self, ranges: Sequence[OffsetRange], *, run_id: str | None = None) -> None:
        """Record `ranges` (refused with UNKNOWN_MEMBER_ID while the group has members)."""
        self.coordinator.commit_offsets(self.group, ranges, run_id=run_id if run_id is not None else self.run_id)
