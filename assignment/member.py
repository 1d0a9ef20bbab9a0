"""The member side: `GroupMember` wraps what one run needs to take part in a group.

Join until the join phase completes (answering MEMBER_ID_REQUIRED and "pending" by calling again), sync
(running a local assignor if the member leads and has one, else letting the coordinator assign), a
heartbeat thread that keeps the session alive while the run works, commits that carry the member and
generation (it is an `OffsetLedger`), leave, and rebalance hooks (`RebalanceListener`).

Protocols, as in Kafka's consumer:

* **eager**: before rejoining, the member revokes everything (`on_partitions_revoked(all)`); after the
  sync it is assigned its new partitions (`on_partitions_assigned(all)`).
* **cooperative**: the member keeps consuming through the rebalance; after the sync,
  `on_partitions_revoked(moved away)` then `on_partitions_assigned(newly added)`. If it had to revoke
  anything it rejoins at once, releasing those partitions, so their new owner gets them in the follow-up
  round. With `background_rejoin` (default) the heartbeat thread performs cooperative rebalances itself,
  so a run whose partitions do not move is never interrupted; hooks then run on that thread. A partition
  moved away while a batch reads it (`processing`) is released only once that batch ends, as a Kafka
  consumer revokes only between polls: its new owner gets it after the batch's commit, never during it.
* **lost**: if the membership is gone (session expired, evicted), `on_partitions_lost(owned)` is called
  before rejoining: the partitions may already belong to someone else, so nothing may be committed.

Example:
    >>> from cohort.assignment.coordinator import Coordinator
    >>> coordinator = Coordinator.from_url("sqlite:////tmp/cohort.db")  # doctest: +SKIP
    >>> from cohort.assignment.settings import MemberSettings
    >>> settings = MemberSettings(topics=("orders",))
    >>> with GroupMember(coordinator, "orders", settings, client_id=run_id) as member:  # doctest: +SKIP
    ...     start = member.committed_offsets(member.assignment)
    ...     ...  # read and write [start, end) per partition
    ...     member.commit([OffsetRange("orders", 0, start[tp0] or 0, end, records=n)])
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import (
    CoordinatorError,
    FencedInstanceIdError,
    IllegalGenerationError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from cohort.assignment.member_sync import leader_sync, settle_sync
from cohort.assignment.protocol.backlog import LogOffsets
from cohort.assignment.protocol.messages import (
    JoinComplete,
    JoinPending,
    LedgerEntry,
    SyncComplete,
    SyncPending,
)
from cohort.assignment.rebalance_hooks import RebalanceListener
from cohort.assignment.settings import MemberSettings
from cohort.assignment.types import COOPERATIVE, EAGER, Assignor
from cohort.common.types import OffsetRange, TopicPartition

__all__ = ["GroupMember", "JoinTimeoutError", "RebalanceListener"]

log = logging.getLogger(__name__)


class JoinTimeoutError(TimeoutError):
    """The join phase did not complete within the member's `join_timeout`."""


class _Stopped(Exception):
    """Internal: the member is closing; a background rebalance gives up."""


class GroupMember:
    """One member of a group: join, sync, heartbeat, commit, leave, with rebalance hooks.

    Thread-safe. Methods that change the membership: `join`, `ensure_active`, `close`; `commit` records
    offsets; the heartbeat thread only keeps the session alive and notes when a rebalance is needed
    (and, for cooperative rebalances with `background_rejoin`, performs it).

    Args:
        coordinator: the group coordinator.
        group: the group name.
        settings: the subscription, assignors and timeouts (`MemberSettings`).
        instance_id: static identity (worker slot); a static member does not leave on close, so the next
            run of the slot rejoins with the same assignment if it comes within the session timeout.
        client_id: opaque id shown to operators (the Dagster run id); default run id of commits.
        listener: rebalance hooks.
        local_assignors: assignors this member runs itself when it leads (e.g. a custom one the
            coordinator does not know); otherwise the coordinator assigns for the leader.
        topic_metadata: optional callable returning current partition counts, reported before each join.
        log_offsets: optional callable returning Kafka's (first, end) offsets of the partitions it is given;
            the leader calls it at the sync when the elected assignor balances backlog (`lag-sticky`). If it
            raises, the leader syncs without a backlog (the assignor then balances partition counts).
        poll_interval: seconds between polls of a pending join or sync.
        background_rejoin: let the heartbeat thread perform cooperative rebalances.
        sleep / monotonic: time functions for polling (tests pass a function advancing a ManualClock).
    """

    def __init__(
        self,
        coordinator: Coordinator,
        group: str,
        settings: MemberSettings,
        *,
        instance_id: str | None = None,
        client_id: str | None = None,
        listener: RebalanceListener | None = None,
        local_assignors: Mapping[str, Assignor] | None = None,
        topic_metadata: Callable[[], Mapping[str, int]] | None = None,
        log_offsets: Callable[[Sequence[TopicPartition]], LogOffsets] | None = None,
        poll_interval: float = 0.1,
        background_rejoin: bool = True,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.coordinator = coordinator
        self.group = group
        self.settings = settings
        self.instance_id = instance_id
        self.client_id = client_id
        self.listener = listener if listener is not None else RebalanceListener()
        self.heartbeat_interval = settings.effective_heartbeat_interval
        self.poll_interval = poll_interval
        self.join_timeout = settings.join_timeout
        self.background_rejoin = background_rejoin
        self._request = settings.join_request(instance_id=instance_id, client_id=client_id)
        self._local_assignors = dict(local_assignors or {})
        self._topic_metadata = topic_metadata
        self._log_offsets = log_offsets
        self._sleep = sleep
        self._monotonic = monotonic
        # Membership state, guarded by _state; _rebalance_lock serialises whole rebalances.
        self._state = threading.Lock()
        self._rebalance_lock = threading.RLock()
        self._member_id: str | None = None
        self._generation = -1
        self._leader_id: str | None = None
        self._protocol = EAGER
        self._owned: tuple[TopicPartition, ...] = ()
        self._epoch = 0
        self._rebalancing = False
        self._needs_rejoin = False
        self._lost: CoordinatorError | None = None
        self._background_error: BaseException | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._in_flight: frozenset[TopicPartition] = frozenset()
        self._held_back: tuple[TopicPartition, ...] = ()  # moved away mid-batch: released when it ends

    # ------------------------------------------------------------------------------------- properties

    @property
    def member_id(self) -> str | None:
        """The member id given by the coordinator (None before the first join)."""
        return self._member_id

    @property
    def generation(self) -> int:
        """The generation of the current assignment (-1 before the first sync)."""
        return self._generation

    @property
    def assignment(self) -> tuple[TopicPartition, ...]:
        """The partitions this member owns now."""
        return self._owned

    @property
    def is_leader(self) -> bool:
        """Whether this member led the last completed join."""
        return self._member_id is not None and self._member_id == self._leader_id

    @property
    def rebalance_protocol(self) -> str:
        """EAGER or COOPERATIVE, as elected for the current generation."""
        return self._protocol

    @property
    def rebalance_needed(self) -> bool:
        """True when a heartbeat found a rebalance in progress or the membership lost: call `ensure_active`."""
        return self._needs_rejoin

    # ------------------------------------------------------------------------------------- membership

    def join(self) -> tuple[TopicPartition, ...]:
        """Join the group (until the join phase completes), sync, run the hooks, start heartbeating;
        return the assigned partitions. Raises FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL,
        INVALID_SESSION_TIMEOUT, GROUP_MAX_SIZE_REACHED, or JoinTimeoutError."""
        self._rebalance()
        self._start_heartbeat()
        return self._owned

    def ensure_active(self) -> tuple[TopicPartition, ...]:
        """Rejoin if a rebalance is needed (eager revocation, lost membership), then return the assignment."""
        self._raise_background_error()
        if self._needs_rejoin or self._member_id is None:
            self._rebalance()
            self._start_heartbeat()
        return self._owned

    def close(self, *, leave: bool | None = None) -> None:
        """Stop heartbeating and, for a dynamic member (or `leave=True`), revoke and leave the group now.

        A static member does not leave by default: the next run of its slot takes its place without a
        rebalance if it joins within the session timeout.
        """
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._thread = None
        if leave is None:
            leave = self.instance_id is None
        member_id = self._member_id
        if not leave or member_id is None:
            return
        with self._rebalance_lock:
            if self._owned and self._lost is None:
                self.listener.on_partitions_revoked(self._owned)
            with contextlib.suppress(UnknownMemberIdError, FencedInstanceIdError):
                self.coordinator.leave(self.group, member_id, instance_id=self.instance_id, reason="closed")
            self._reset(lost=False)

    def __enter__(self) -> GroupMember:
        self.join()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------ ledger

    def committed_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The next offset to read per partition (None where nothing was committed)."""
        return self.coordinator.fetch_offsets(self.group, partitions)

    def last_committed(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, LedgerEntry | None]:
        """The last committed range per partition, with the run that committed it (None where nothing was)."""
        return self.coordinator.last_committed(self.group, partitions)

    def reset_offsets(
        self, positions: Mapping[TopicPartition, int], *, reason: str, actor: str | None = None
    ) -> tuple[LedgerEntry, ...]:
        """Move the committed offsets of partitions this member owns (a replay), as reset entries of the
        ledger recording this member's run and `actor` (default: its client id); fenced as its commits are
        (PARTITION_NOT_OWNED...)."""
        self._raise_background_error()
        member_id, generation = self._member_id, self._generation
        if member_id is None:
            raise UnknownMemberIdError(f"group {self.group!r}: this member has not joined")
        return self.coordinator.reset_offsets(
            self.group,
            positions,
            actor=actor or self.client_id or member_id,
            reason=reason,
            member_id=member_id,
            generation=generation,
            instance_id=self.instance_id,
            run_id=self.client_id,
        )

    def commit(self, ranges: Sequence[OffsetRange], *, run_id: str | None = None) -> None:
        """Commit consumed ranges as this member in its generation (`OffsetLedger.commit`).

        Raises ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, PARTITION_NOT_OWNED or a
        LedgerError (NON_CONTIGUOUS_RANGE...) and records nothing when refused. If a (cooperative)
        rebalance is completing on the heartbeat thread, it waits for it and retries once in the new
        generation: partitions the member keeps stay committable through a cooperative rebalance.
        """
        self._raise_background_error()
        for attempt in (0, 1):
            member_id, generation = self._member_id, self._generation
            if member_id is None:
                raise UnknownMemberIdError(f"group {self.group!r}: this member has not joined")
            try:
                self.coordinator.commit_offsets(
                    self.group,
                    ranges,
                    member_id=member_id,
                    generation=generation,
                    instance_id=self.instance_id,
                    run_id=run_id if run_id is not None else self.client_id,
                )
                return
            except (RebalanceInProgressError, IllegalGenerationError):
                if attempt == 1:
                    raise
                if self._rebalancing:
                    with self._rebalance_lock:  # wait for the rebalancing thread to finish
                        pass
                if self._member_id != member_id or self._generation == generation:
                    raise  # no new generation of this membership to commit in: a genuine refusal

    def report_progress(self) -> None:
        """Tell the coordinator the run is making progress (resets the progress deadline)."""
        member_id = self._member_id
        if member_id is None:
            raise UnknownMemberIdError(f"group {self.group!r}: this member has not joined")
        self.coordinator.heartbeat(self.group, member_id, self._generation, instance_id=self.instance_id, progress=True)

    # --------------------------------------------------------------------------------------- internals

    def _raise_background_error(self) -> None:
        error, self._background_error = self._background_error, None
        if error is not None:
            raise error

    def _reset(self, *, lost: bool) -> None:
        owned = self._owned
        with self._state:
            self._member_id = None
            self._generation = -1
            self._leader_id = None
            self._owned = ()
            self._epoch += 1
        if lost and owned:
            self.listener.on_partitions_lost(owned)

    @contextlib.contextmanager
    def processing(self, partitions: Sequence[TopicPartition]) -> Iterator[None]:
        """Mark `partitions` as read by a batch until the block ends. A cooperative rebalance meanwhile that moves
        any of them away keeps them owned (their new owner waits; this member's commit of them is accepted) and
        releases them, by rejoining, when the block ends without an error (with one, the caller closes)."""
        with self._state:
            self._in_flight = frozenset(partitions)
        try:
            yield
        finally:
            with self._state:
                self._in_flight = frozenset()
                held = bool(self._held_back)
        if held and not self._stop.is_set():
            self._rebalance()

    def _release_held_back(self) -> None:
        """Let go of the partitions a batch kept through a cooperative rebalance: revoked now, released by the
        rejoin that follows."""
        with self._state:
            held, self._held_back = self._held_back, ()
            self._owned = tuple(tp for tp in self._owned if tp not in held)
        if held:
            self.listener.on_partitions_revoked(held)

    def _rebalance(self) -> None:
        with self._rebalance_lock:
            self._rebalancing = True
            try:
                self._rebalance_locked()
            finally:
                self._rebalancing = False

    def _rebalance_locked(self) -> None:
        lost, self._lost = self._lost, None
        if isinstance(lost, FencedInstanceIdError):
            raise lost
        if lost is not None:
            self._reset(lost=True)
        self._release_held_back()
        if self._protocol != COOPERATIVE and self._owned:
            self.listener.on_partitions_revoked(self._owned)
            with self._state:
                self._owned = ()
        deadline = None if self.join_timeout is None else self._monotonic() + self.join_timeout
        if self._topic_metadata is not None:
            self.coordinator.report_topic_metadata(self.group, self._topic_metadata())
        while True:
            self._needs_rejoin = False
            joined = self._join_until_complete(deadline)
            synced = self._sync_until_complete(joined, deadline)
            if synced is None:
                continue
            with self._state:
                self._generation = synced.generation
                self._leader_id = joined.leader_id
                self._protocol = synced.rebalance_protocol
                self._epoch += 1
                cooperative = self._protocol == COOPERATIVE
                settled = settle_sync(
                    self._owned, synced.assignment, cooperative=cooperative, in_flight=self._in_flight
                )
            if settled.held_back:  # a batch reads them: keep them owned until it ends (`processing` releases them)
                with self._state:
                    self._held_back = settled.held_back
                    self._owned = settled.owned
                self.listener.on_partitions_assigned(list(settled.added))
                return
            if settled.revoked:
                self.listener.on_partitions_revoked(list(settled.revoked))
            with self._state:
                self._owned = settled.owned
            self.listener.on_partitions_assigned(list(settled.added))
            if not settled.revoked:
                return
            # Release the revoked partitions by rejoining: their new owner gets them in the follow-up round.

    def _check_deadline(self, deadline: float | None) -> None:
        if self._stop.is_set() and threading.current_thread() is self._thread:
            raise _Stopped  # close() was called while the heartbeat thread was rebalancing
        if deadline is not None and self._monotonic() > deadline:
            raise JoinTimeoutError(f"group {self.group!r}: the join did not complete in {self.join_timeout} s")

    def _join_until_complete(self, deadline: float | None) -> JoinComplete:
        while True:
            self._check_deadline(deadline)
            request = self._request.with_owned(self._owned)
            if self._member_id is not None:
                request = request.with_member_id(self._member_id)
            try:
                answer = self.coordinator.join(self.group, request)
            except MemberIdRequiredError as needed:
                with self._state:
                    self._member_id = needed.member_id
                    self._epoch += 1
                continue
            except UnknownMemberIdError:
                self._reset(lost=True)
                continue
            if self._member_id != answer.member_id:
                with self._state:
                    self._member_id = answer.member_id
                    self._epoch += 1
            if isinstance(answer, JoinPending):
                self._sleep(self.poll_interval)
                continue
            return answer

    def _sync_until_complete(self, joined: JoinComplete, deadline: float | None) -> SyncComplete | None:
        """Sync until the assignment is ready (the leader hands in its part first); None when the generation
        moved on or the membership was lost meanwhile (rejoin)."""
        handed = leader_sync(self.coordinator, self.group, joined, self._local_assignors, self._log_offsets)
        while True:
            self._check_deadline(deadline)
            try:
                answer = self.coordinator.sync(
                    self.group,
                    joined.member_id,
                    joined.generation,
                    instance_id=self.instance_id,
                    assignment=handed.assignment,
                    log_offsets=handed.log_offsets,
                )
            except (RebalanceInProgressError, IllegalGenerationError):
                return None
            except UnknownMemberIdError:
                self._reset(lost=True)
                return None
            if isinstance(answer, SyncPending):
                self._sleep(self.poll_interval)
                continue
            return answer

    def _start_heartbeat(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._heartbeat_loop, name=f"cohort-heartbeat-{self.group}", daemon=True)
        self._thread.start()

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_interval):
            try:
                self._heartbeat_once()
            except Exception as exc:  # keep heartbeating through transient store errors
                log.warning("group %r: heartbeat failed: %s", self.group, exc)

    def _heartbeat_once(self) -> None:
        with self._state:
            member_id, generation, epoch = self._member_id, self._generation, self._epoch
        if member_id is None or generation < 0:
            return
        try:
            self.coordinator.heartbeat(self.group, member_id, generation, instance_id=self.instance_id)
        except RebalanceInProgressError:
            if self._rebalancing or epoch != self._epoch:
                return
            self._needs_rejoin = True
            if self.background_rejoin and self._protocol == COOPERATIVE and not self._stop.is_set():
                self._background_rebalance()
        except (UnknownMemberIdError, IllegalGenerationError, FencedInstanceIdError) as lost:
            with self._state:
                if epoch == self._epoch and not self._rebalancing:
                    self._lost = lost
                    self._needs_rejoin = True

    def _background_rebalance(self) -> None:
        try:
            self._rebalance()
        except _Stopped:
            pass
        except BaseException as exc:
            log.warning("group %r: background rebalance failed: %s", self.group, exc)
            self._background_error = exc
