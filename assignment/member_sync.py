"""A member's two decisions around a sync (cohort.assignment.member): what the leader hands the coordinator (the
assignment its own assignor computes, or Kafka's log offsets for a backlog-aware assignor), and how a completed
sync changes what the member owns (a partition moved away while a batch reads it is held back until it ends)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.protocol.backlog import LogOffsets, backlog_from_offsets, run_assignor, uses_backlog
from cohort.assignment.protocol.messages import JoinComplete
from cohort.assignment.types import Assignor
from cohort.common.types import TopicPartition

__all__ = ["LeaderSync", "Settlement", "leader_sync", "settle_sync"]

log = logging.getLogger("cohort.assignment.member")


@dataclass(frozen=True)
class LeaderSync:
    """What a member hands the coordinator at the sync: the assignment its local assignor computed (None: the
    coordinator runs the elected assignor), and Kafka's log offsets for the coordinator's backlog-aware assignor."""

    assignment: Mapping[str, Sequence[TopicPartition]] | None = None
    log_offsets: LogOffsets | None = None


@dataclass(frozen=True)
class Settlement:
    """How a completed sync changes what the member owns: the partitions revoked and added, what it owns now, and
    the revoked partitions a batch still reads (owned until the batch ends; then revoked and released)."""

    revoked: tuple[TopicPartition, ...]
    added: tuple[TopicPartition, ...]
    owned: tuple[TopicPartition, ...]
    held_back: tuple[TopicPartition, ...] = ()


def settle_sync(
    owned: Sequence[TopicPartition],
    assignment: Sequence[TopicPartition],
    *,
    cooperative: bool,
    in_flight: Sequence[TopicPartition] | frozenset[TopicPartition],
) -> Settlement:
    """The change from `owned` to the sync's `assignment`; under a cooperative protocol, revoked partitions a batch
    reads (`in_flight`) stay owned (all of the revoked ones, as one step)."""
    new, old = set(assignment), set(owned)
    revoked, added = tuple(sorted(old - new)), tuple(sorted(new - old))
    if cooperative and any(tp in in_flight for tp in revoked):
        return Settlement(revoked, added, tuple(sorted(new | set(revoked))), revoked)
    return Settlement(revoked, added, tuple(sorted(new)))


def leader_sync(
    coordinator: Coordinator,
    group: str,
    joined: JoinComplete,
    local_assignors: Mapping[str, Assignor],
    read_log_offsets: Callable[[Sequence[TopicPartition]], LogOffsets] | None,
) -> LeaderSync:
    """What this member hands the coordinator at the sync of `joined`: nothing unless it leads and the join asks
    for an assignment; else the assignment its own assignor for the elected protocol computes (with the backlog
    when that assignor balances it), or, for the coordinator's assignor, the log offsets it balances backlog by."""
    if not joined.is_leader or joined.skip_assignment:
        return LeaderSync()
    subscriptions = {m.member_id: m.subscription for m in joined.members}
    topics = {t for s in subscriptions.values() for t in s.topics}
    counts = {t: n for t, n in joined.partitions_per_topic.items() if t in topics}
    local = local_assignors.get(joined.protocol)
    offsets = _leader_log_offsets(coordinator, group, read_log_offsets, local, joined.protocol, counts)
    if local is None:
        return LeaderSync(log_offsets=offsets)
    backlog = None
    if offsets is not None:
        committed = coordinator.fetch_offsets(group, sorted(offsets))
        backlog = backlog_from_offsets(offsets, committed)
    return LeaderSync(assignment=run_assignor(local, counts, subscriptions, backlog))


def _leader_log_offsets(
    coordinator: Coordinator,
    group: str,
    read_log_offsets: Callable[[Sequence[TopicPartition]], LogOffsets] | None,
    local: Assignor | None,
    protocol: str,
    counts: Mapping[str, int],
) -> LogOffsets | None:
    """Kafka's (first, end) offsets of every subscribed partition when the elected assignor balances
    backlog and this member can read them; None otherwise (or when reading them fails: count balance)."""
    if read_log_offsets is None:
        return None
    try:
        assignor = local if local is not None else coordinator.assignor(protocol)
    except ValueError:  # the coordinator does not know it: the leader's own assignor or nothing
        return None
    if not uses_backlog(assignor):
        return None
    partitions = [TopicPartition(topic, p) for topic in sorted(counts) for p in range(counts[topic])]
    try:
        return dict(read_log_offsets(partitions))
    except Exception as exc:  # Kafka unreachable: assign by partition counts rather than fail the rebalance
        log.warning("group %r: no log offsets for the backlog-aware assignor (%s); balancing counts", group, exc)
        return None
