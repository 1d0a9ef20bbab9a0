"""The offset ledger: generation-fenced, contiguous committed ranges per partition.

A commit carries the member, its generation and, per partition, the consumed range [from, until) with
its record counts (`OffsetRange`). It is accepted only

* from the partition's owner in the current generation (or as an Empty group's standalone commit), and
* if each range starts where the partition's last committed range ended. The first range of a partition
  may start anywhere: that is the offset the reset policy chose. A *gap* (records deleted by retention) is
  committed as a range of its own, [last until, first available), with a `gap_reason` and no records, so
  every partition's history stays contiguous with no hole and no overlap.

A commit is all or nothing: one refused range refuses the whole call and changes nothing. An empty range
(from == until) passes the same checks. It is recorded only as a partition's *first* range, when the commit
brings nothing else for that partition: that pins the position the reset policy chose (a `latest` start
that found nothing), so the next batch starts there instead of applying the policy again and skipping the
records written in between. Later empty ranges are accepted and not recorded. The committed offset of a
partition is the `until` of its last range (the next offset to read).

`OffsetLedger` is what the pipeline codes against (`GroupMember` and `StandaloneLedger` implement it);
`OffsetMirror` is what `cohort.pipelines.kafka.mirror` implements to copy accepted commits to Kafka, called by
the pipeline after a successful ledger commit; the coordinator never calls Kafka.

Example:
    >>> from cohort.common.types import OffsetRange, TopicPartition
    >>> plan_ranges("g", {TopicPartition("t", 0): 10}, [OffsetRange("t", 0, 10, 25, records=15)])
    {TopicPartition(topic='t', partition=0): 25}
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import replace

from cohort.assignment.errors import (
    CoordinatorError,
    IllegalGenerationError,
    InvalidOffsetRangeError,
    NonContiguousRangeError,
    NonEmptyGroupError,
    PartitionNotOwnedError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from cohort.assignment.protocol.group_state import GroupRecord, GroupState
from cohort.assignment.protocol.messages import RESET, CommitRequest, Decision, LedgerEntry, ResetRequest
from cohort.assignment.protocol.rebalance import Context, check_member, start
from cohort.common.types import OffsetRange, TopicPartition

__all__ = ["decide_commit", "decide_reset", "plan_ranges"]


def plan_ranges(
    group: str, heads: Mapping[TopicPartition, int | None], ranges: Sequence[OffsetRange]
) -> dict[TopicPartition, int]:
    """The partitions' new committed offsets after `ranges`, checked for contiguity; pure.

    Raises NonContiguousRangeError (naming partition, expected and given offsets) for a gap or an overlap,
    InvalidOffsetRangeError for a gap range that claims records.
    """
    new_heads: dict[TopicPartition, int] = {}
    for r in ranges:
        tp = r.topic_partition
        if r.gap_reason is not None and (r.records or r.quarantined or r.filtered):
            raise InvalidOffsetRangeError(
                f"group {group!r}: gap {tp} [{r.from_offset}, {r.until_offset}) ({r.gap_reason}) "
                f"cannot hold records ({r.records} records, {r.quarantined} quarantined)"
            )
        if r.gap_reason is not None and not r.gap_reason.strip():
            raise InvalidOffsetRangeError(f"group {group!r}: gap {tp} needs a non-blank reason")
        expected = new_heads.get(tp, heads.get(tp))
        if expected is not None and r.from_offset != expected:
            kind = "overlaps the committed" if r.from_offset < expected else "leaves a gap after the committed"
            raise NonContiguousRangeError(
                f"group {group!r}: range [{r.from_offset}, {r.until_offset}) of {tp} {kind} offset {expected}; "
                f"expected a range starting at {expected}, got {r.from_offset} (record a gap with a reason "
                "if the offsets no longer exist)",
                partition=tp,
                expected=expected,
                given=r.from_offset,
            )
        new_heads[tp] = r.until_offset
    return new_heads


def _contains(ordered: Sequence[TopicPartition], tp: TopicPartition) -> bool:
    i = bisect_left(ordered, tp)
    return i < len(ordered) and ordered[i] == tp


def _fence(group: GroupRecord, req: CommitRequest) -> CoordinatorError | None:
    if req.member_id is None:
        if group.members:
            return UnknownMemberIdError(
                f"group {group.name!r} has {len(group.members)} members: a commit without a member id is "
                "accepted only while the group is Empty"
            )
        if req.generation != -1:
            return IllegalGenerationError(
                f"group {group.name!r}: a standalone commit must use generation -1, got {req.generation}"
            )
        return None
    checked = check_member(group, req.member_id, req.instance_id, req.generation)
    if isinstance(checked, CoordinatorError):
        return checked
    if group.state is GroupState.COMPLETING_REBALANCE:
        return RebalanceInProgressError(
            f"group {group.name!r} is completing a rebalance: commit after the sync of generation {group.generation}"
        )
    owned = checked.owned  # sorted: bisect instead of building a set of a possibly huge assignment
    foreign = tuple(sorted({tp for r in req.ranges if not _contains(owned, tp := r.topic_partition)}))
    if foreign:
        return PartitionNotOwnedError(
            f"group {group.name!r}: member {req.member_id} does not own {[str(tp) for tp in foreign[:10]]} "
            f"in generation {group.generation}",
            partitions=foreign,
        )
    return None


def _recorded(ranges: Sequence[OffsetRange], heads: Mapping[TopicPartition, int | None]) -> list[OffsetRange]:
    """The ranges the ledger keeps: every non-empty one, and the empty first range of a partition that has
    nothing committed and gets nothing else in this commit (its starting position)."""
    with_offsets = {r.topic_partition for r in ranges if r.until_offset > r.from_offset}
    kept: list[OffsetRange] = []
    pinned: set[TopicPartition] = set()
    for r in ranges:
        tp = r.topic_partition
        if r.until_offset > r.from_offset:
            kept.append(r)
        elif heads.get(tp) is None and tp not in with_offsets and tp not in pinned:
            pinned.add(tp)
            kept.append(r)
    return kept


def decide_commit(
    group: GroupRecord | None,
    name: str,
    req: CommitRequest,
    heads: Mapping[TopicPartition, int | None],
    ctx: Context,
) -> Decision[tuple[LedgerEntry, ...]]:
    """Accept or refuse a commit; `heads` are the partitions' committed offsets read under the group lock.

    On success the decision carries the new ledger entries and heads, and the member's progress deadline
    moves forward. On refusal it carries only the clock's due effects.
    """
    outcome = start(group, name, ctx)
    current = outcome.group
    error = _fence(current, req)
    if error is not None:
        return Decision(outcome, error=error)
    try:
        new_heads = plan_ranges(name, heads, req.ranges)
    except CoordinatorError as exc:
        return Decision(outcome, error=exc)
    member = current.members.get(req.member_id) if req.member_id is not None else None
    run_id = req.run_id if req.run_id is not None else (member.client_id if member is not None else None)
    generation = current.generation if member is not None else -1
    recorded_ranges = _recorded(req.ranges, heads)
    entries = tuple(
        LedgerEntry(
            group=name,
            topic=r.topic,
            partition=r.partition,
            from_offset=r.from_offset,
            until_offset=r.until_offset,
            records=r.records,
            quarantined=r.quarantined,
            filtered=r.filtered,
            expanded=r.expanded,
            gap_reason=r.gap_reason,
            run_id=run_id,
            member_id=req.member_id,
            instance_id=member.instance_id if member is not None else None,
            generation=generation,
            committed_at=ctx.now,
            note=r.note,
            content_hash=r.content_hash,
        )
        for r in recorded_ranges
    )
    recorded = {e.topic_partition for e in entries}
    changed = {tp: until for tp, until in new_heads.items() if tp in recorded}
    if member is not None and entries:
        member = replace(member, progress_deadline=ctx.now + member.progress_timeout)
        outcome = outcome.but(current.with_member(member))
    return Decision(outcome, response=entries, entries=entries, heads=changed)


def decide_reset(
    group: GroupRecord | None,
    name: str,
    req: ResetRequest,
    heads: Mapping[TopicPartition, int | None],
    ctx: Context,
) -> Decision[tuple[LedgerEntry, ...]]:
    """Move committed offsets to `req.positions`, one reset entry per partition whose position changes.

    An operator's reset is refused with NON_EMPTY_GROUP while the group has members (as Kafka refuses a
    reset of an active group): a live member would go on committing from where it stands. A member's reset
    (a replay run) is fenced as its commits are: only partitions it owns, in the current generation. A reset
    entry runs from the old position to the new one, so the ledger's history stays contiguous: the next
    range starts where the reset ended. A partition with nothing committed gets an entry from its new
    position to itself.
    """
    outcome = start(group, name, ctx)
    current = outcome.group
    member = None
    if req.member_id is not None:
        ranges = tuple(OffsetRange(tp.topic, tp.partition, 0, 0) for tp in sorted(req.positions))
        fenced = _fence(current, CommitRequest(ranges, req.member_id, req.generation, req.instance_id))
        if fenced is not None:
            return Decision(outcome, error=fenced)
        member = current.members[req.member_id]
    elif current.members:
        return Decision(
            outcome,
            error=NonEmptyGroupError(
                f"offsets of group {name!r} can only be reset while it has no members, but it has "
                f"{len(current.members)} (state {current.state}): stop its runs, or wait for them to finish"
            ),
        )
    for tp, offset in req.positions.items():
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            return Decision(outcome, error=InvalidOffsetRangeError(f"{tp}: cannot reset to offset {offset!r}"))
    note = f"{req.actor}: {req.reason}"
    entries = tuple(
        LedgerEntry(
            group=name,
            topic=tp.topic,
            partition=tp.partition,
            from_offset=heads[tp] if heads.get(tp) is not None else offset,  # type: ignore[arg-type]
            until_offset=offset,
            records=0,
            quarantined=0,
            gap_reason=None,
            run_id=req.run_id,
            member_id=req.member_id,
            instance_id=member.instance_id if member is not None else None,
            generation=current.generation if member is not None else -1,
            committed_at=ctx.now,
            kind=RESET,
            note=note,
        )
        for tp, offset in sorted(req.positions.items())
        if heads.get(tp) != offset
    )
    moved = {e.topic_partition: e.until_offset for e in entries}
    return Decision(outcome, response=entries, entries=entries, heads=moved)
