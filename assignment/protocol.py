"""The group protocol's decisions: join, sync, heartbeat, leave, evict, metadata, delete, expire.

Each `decide_*` is a pure function `(group, request, ctx) -> Decision`: it first applies the timers
(`advance`), then decides, and never touches a database, a socket or the clock (`ctx.now` is given). The
store-backed `Coordinator` loads the group, calls one of these, and persists the result in one transaction.

Example:
    >>> from assignment.group_state import GroupConfig
    >>> ctx = Context(now=0.0, config=GroupConfig(initial_rebalance_delay=0), new_member_id="m-1")
    >>> decide_join(None, "g", JoinRequest(topics=["t"], assignors=["range"]), ctx).error.code
    'MEMBER_ID_REQUIRED'
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace

from assignment.errors import (
    CoordinatorError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from assignment.group_state import (
    EventKind,
    GroupRecord,
    GroupState,
    MemberRecord,
    Outcome,
    effective_topics,
    new_group,
    static_member_id,
    transition,
)
from assignment.messages import (
    Decision,
    HeartbeatResult,
    JoinComplete,
    JoinPending,
    JoinRequest,
    MemberSubscription,
    SyncComplete,
    SyncPending,
)
from assignment.rebalance import (
    Context,
    advance,
    candidate_assignors,
    maybe_complete_join,
    prepare_rebalance,
    remove_member,
)
from assignment.reconcile import (
    build_subscriptions,
    compute_target,
    reconcile,
    unassigned_partitions,
    validate_assignment,
)
from assignment.types import EAGER, TopicPartition

__all__ = [
    "Context",
    "check_member",
    "decide_delete",
    "decide_evict",
    "decide_expire",
    "decide_heartbeat",
    "decide_join",
    "decide_leave",
    "decide_metadata",
    "decide_sync",
    "start",
]

_S = GroupState


def start(group: GroupRecord | None, name: str, ctx: Context) -> Outcome:
    """The group (a new Empty one if absent) with the clock's due effects applied."""
    return advance(Outcome(group if group is not None else new_group(name, ctx.now)), ctx)


def check_member(
    group: GroupRecord, member_id: str | None, instance_id: str | None, generation: int | None
) -> MemberRecord | CoordinatorError:
    """Kafka's request checks in order: fenced static instance, unknown member, wrong generation."""
    if instance_id is not None:
        holder = static_member_id(group, instance_id)
        if holder is not None and holder != member_id:
            return FencedInstanceIdError(
                f"group {group.name!r}: instance {instance_id!r} is now held by member {holder}; "
                f"member {member_id} was fenced"
            )
    member = group.members.get(member_id) if member_id is not None else None
    if member is None:
        return UnknownMemberIdError(f"group {group.name!r}: member {member_id} is not in the group")
    if generation is not None and generation != group.generation:
        return IllegalGenerationError(
            f"group {group.name!r}: member {member_id} sent generation {generation}; "
            f"the current generation is {group.generation}"
        )
    return member


# ----------------------------------------------------------------------------------------------- join


def _validate_join(group: GroupRecord, req: JoinRequest, ctx: Context) -> CoordinatorError | None:
    cfg = ctx.config
    if not cfg.min_session_timeout <= req.session_timeout <= cfg.max_session_timeout:
        return InvalidSessionTimeoutError(
            f"group {group.name!r}: session timeout {req.session_timeout:g} s is outside "
            f"[{cfg.min_session_timeout:g}, {cfg.max_session_timeout:g}] s"
        )
    if req.effective_rebalance_timeout <= 0 or req.effective_progress_timeout <= 0:
        return InvalidRequestError(f"group {group.name!r}: rebalance and progress timeouts must be > 0")
    if not req.assignors:
        return InconsistentGroupProtocolError(f"group {group.name!r}: the member lists no assignor")
    if req.topic_pattern is not None:
        try:
            re.compile(req.topic_pattern)
        except re.error as exc:
            return InvalidRequestError(f"group {group.name!r}: bad topic pattern {req.topic_pattern!r}: {exc}")
    known = group.members.get(req.member_id) if req.member_id is not None else None
    if known is not None and known.protocols == tuple(dict.fromkeys(req.assignors)):
        return None  # unchanged ballot: it was consistent when admitted, and removals only widen the choice
    ballots = {
        m.protocols
        for m in group.members.values()
        if m.member_id != req.member_id and (req.instance_id is None or m.instance_id != req.instance_id)
    }
    candidates = candidate_assignors(ballots)
    if candidates is not None and not candidates.intersection(req.assignors):
        return InconsistentGroupProtocolError(
            f"group {group.name!r}: the member supports {list(req.assignors)} but the group's members all "
            f"support only {sorted(candidates)}"
        )
    return None


def _member_from(req: JoinRequest, member_id: str, seq: int, now: float) -> MemberRecord:
    return MemberRecord(
        member_id=member_id,
        instance_id=req.instance_id,
        client_id=req.client_id,
        topics=tuple(sorted(set(req.topics))),
        topic_pattern=req.topic_pattern,
        protocols=tuple(dict.fromkeys(req.assignors)),
        session_timeout=float(req.session_timeout),
        rebalance_timeout=req.effective_rebalance_timeout,
        progress_timeout=req.effective_progress_timeout,
        join_seq=seq,
        session_deadline=now + req.session_timeout,
        rack=req.rack,
    )


def _join_answer(group: GroupRecord, member_id: str, skip_assignment: bool = False) -> JoinComplete | JoinPending:
    if group.state is _S.PREPARING_REBALANCE:
        return JoinPending(member_id, group.state, group.rebalance_deadline)
    assert group.leader_id is not None and group.protocol is not None
    is_leader = member_id == group.leader_id and not skip_assignment
    members: tuple[MemberSubscription, ...] = ()
    if is_leader:
        subs = build_subscriptions(group)
        members = tuple(
            MemberSubscription(m.member_id, m.instance_id, m.client_id, subs[m.member_id])
            for m in sorted(group.members.values(), key=lambda m: m.join_seq)
        )
    return JoinComplete(
        member_id=member_id,
        generation=group.generation,
        leader_id=group.leader_id,
        protocol=group.protocol,
        rebalance_protocol=group.rebalance_protocol,
        members=members,
        partitions_per_topic=dict(group.partitions_per_topic) if is_leader else {},
        skip_assignment=skip_assignment,
    )


def _mark_joined(outcome: Outcome, member_id: str, req: JoinRequest | None) -> Outcome:
    """Set the member as rejoined for this phase; eager members released everything before rejoining,
    cooperative ones keep what they hold (less what their report no longer lists)."""
    group = outcome.group
    member = group.members[member_id]
    owned = member.owned
    if group.rebalance_protocol == EAGER:
        owned = ()
    elif req is not None and req.owned_partitions is not None:
        reported = set(req.owned_partitions)
        owned = tuple(tp for tp in owned if tp in reported)
    member = replace(member, joined=True, owned=owned, progress_deadline=member.progress_deadline if owned else None)
    return outcome.but(group.with_member(member))


def _admit(outcome: Outcome, member_id: str, req: JoinRequest, ctx: Context) -> Decision[JoinComplete | JoinPending]:
    group = outcome.group
    member = _member_from(req, member_id, group.next_seq, ctx.now)
    group = replace(group.with_member(member), next_seq=group.next_seq + 1)
    if group.leader_id is None:
        group = replace(group, leader_id=member_id)
    outcome = outcome.but(group).event(ctx.now, EventKind.MEMBER_JOINED, member_id, "new member")
    if group.state is _S.PREPARING_REBALANCE:
        if group.initial_delay_until is not None and group.rebalance_deadline is not None:
            extended = min(ctx.now + ctx.config.initial_rebalance_delay, group.rebalance_deadline)
            outcome = outcome.but(replace(group, initial_delay_until=max(extended, group.initial_delay_until)))
    else:
        outcome = prepare_rebalance(outcome, ctx, f"member {member_id} joined")
    outcome = maybe_complete_join(_mark_joined(outcome, member_id, None), ctx)
    return Decision(outcome, response=_join_answer(outcome.group, member_id))


def _replace_static(
    outcome: Outcome, old_id: str, req: JoinRequest, ctx: Context
) -> Decision[JoinComplete | JoinPending]:
    """A static member restarted (or a second process claims its instance id): the new member id takes
    over the old member's place, assignment and holdings; the old id is fenced."""
    group = outcome.group
    old = group.members[old_id]
    new_id = ctx.new_member_id
    fresh = _member_from(req, new_id, old.join_seq, ctx.now)
    member = replace(
        fresh,
        generation=old.generation,
        joined=old.joined,
        synced=False,
        assigned=old.assigned,
        assigned_generation=old.assigned_generation,
        owned=old.owned,
        progress_deadline=old.progress_deadline,
    )
    members = {k: v for k, v in group.members.items() if k != old_id}
    members[new_id] = member
    group = replace(group, members=members, leader_id=new_id if group.leader_id == old_id else group.leader_id)
    outcome = outcome.but(group).event(
        ctx.now, EventKind.MEMBER_FENCED, old_id, f"instance {req.instance_id!r} rejoined as {new_id}"
    )
    same = old.same_metadata(member.topics, member.topic_pattern, member.protocols)
    if group.state is _S.STABLE and same:
        return Decision(outcome, response=_join_answer(outcome.group, new_id, skip_assignment=True))
    if group.state is not _S.PREPARING_REBALANCE:
        outcome = prepare_rebalance(outcome, ctx, f"static member {req.instance_id!r} rejoined as {new_id}")
    outcome = maybe_complete_join(_mark_joined(outcome, new_id, req), ctx)
    return Decision(outcome, response=_join_answer(outcome.group, new_id))


def _rejoin(
    outcome: Outcome, member: MemberRecord, req: JoinRequest, ctx: Context
) -> Decision[JoinComplete | JoinPending]:
    group = outcome.group
    fresh = _member_from(req, member.member_id, member.join_seq, ctx.now)
    updated = replace(
        member,
        client_id=fresh.client_id,
        topics=fresh.topics,
        topic_pattern=fresh.topic_pattern,
        protocols=fresh.protocols,
        session_timeout=fresh.session_timeout,
        rebalance_timeout=fresh.rebalance_timeout,
        progress_timeout=fresh.progress_timeout,
        rack=fresh.rack,
        session_deadline=fresh.session_deadline,
    )
    same = member.same_metadata(fresh.topics, fresh.topic_pattern, fresh.protocols)
    revoking = set(member.owned).difference(member.assigned)
    releases = req.owned_partitions is not None and bool(revoking.difference(req.owned_partitions))
    outcome = outcome.but(group.with_member(updated))
    if group.state is _S.COMPLETING_REBALANCE and same and not releases:
        return Decision(outcome, response=_join_answer(outcome.group, member.member_id))
    if group.state is _S.STABLE and same and not releases and member.member_id != group.leader_id:
        return Decision(outcome, response=_join_answer(outcome.group, member.member_id))
    if group.state is not _S.PREPARING_REBALANCE:
        why = (
            "released revoked partitions"
            if same and releases
            else "changed its subscription or assignors"
            if not same
            else "is the leader and rejoined"
        )
        outcome = prepare_rebalance(outcome, ctx, f"member {member.member_id} {why}")
    outcome = maybe_complete_join(_mark_joined(outcome, member.member_id, req), ctx)
    return Decision(outcome, response=_join_answer(outcome.group, member.member_id))


def decide_join(
    group: GroupRecord | None, name: str, req: JoinRequest, ctx: Context
) -> Decision[JoinComplete | JoinPending]:
    """A member's join (see `JoinRequest`); answers `JoinComplete` or `JoinPending`.

    A dynamic member's first join (no member id) is refused with MEMBER_ID_REQUIRED carrying the id to
    rejoin with; the id is held for one session timeout and counts towards the group's size. A static
    member's first join is admitted at once; if its instance id is held, the older member is fenced and,
    in a Stable group with unchanged metadata, the new one takes over its assignment without a rebalance.
    An existing member's rejoin in CompletingRebalance or (for a follower) Stable with unchanged
    metadata just answers the current generation (the "missed join answer" case); otherwise it starts a
    rebalance.
    """
    outcome = start(group, name, ctx)
    current = outcome.group
    error = _validate_join(current, req, ctx)
    if error is not None:
        return Decision(outcome, error=error)
    if req.instance_id is not None:
        holder = static_member_id(current, req.instance_id)
        if holder is not None and req.member_id is not None and holder != req.member_id:
            return Decision(outcome, error=check_member(current, req.member_id, req.instance_id, None))  # type: ignore[arg-type]
        if req.member_id is None:
            if holder is not None:
                return _replace_static(outcome, holder, req, ctx)
            return _admit_checked(outcome, ctx.new_member_id, req, ctx)
    if req.member_id is None:
        limit = ctx.config.max_size
        if limit is not None and len(current.members) + len(current.pending) >= limit:
            return Decision(outcome, error=_full(current, limit))
        pending = {**current.pending, ctx.new_member_id: ctx.now + req.session_timeout}
        return Decision(
            outcome.but(replace(current, pending=pending)),
            error=MemberIdRequiredError(
                f"group {name!r}: rejoin with member id {ctx.new_member_id}", member_id=ctx.new_member_id
            ),
        )
    if req.member_id in current.pending:
        pending = {k: v for k, v in current.pending.items() if k != req.member_id}
        return _admit_checked(outcome.but(replace(current, pending=pending)), req.member_id, req, ctx)
    member = current.members.get(req.member_id)
    if member is None:
        return Decision(
            outcome, error=UnknownMemberIdError(f"group {name!r}: member {req.member_id} is not in the group")
        )
    return _rejoin(outcome, member, req, ctx)


def _full(group: GroupRecord, limit: int) -> GroupMaxSizeReachedError:
    return GroupMaxSizeReachedError(f"group {group.name!r} already has its maximum of {limit} members")


def _admit_checked(
    outcome: Outcome, member_id: str, req: JoinRequest, ctx: Context
) -> Decision[JoinComplete | JoinPending]:
    limit = ctx.config.max_size
    if limit is not None and len(outcome.group.members) >= limit:
        return Decision(outcome, error=_full(outcome.group, limit))
    return _admit(outcome, member_id, req, ctx)


# ----------------------------------------------------------------------------------------------- sync


def decide_sync(
    group: GroupRecord | None,
    name: str,
    member_id: str,
    generation: int,
    instance_id: str | None,
    assignment: Mapping[str, Sequence[TopicPartition]] | None,
    ctx: Context,
) -> Decision[SyncComplete | SyncPending]:
    """A member's sync: the leader's assignment is stored and the group becomes Stable.

    The leader passes `assignment` (member id -> partitions) or None to have the coordinator run the
    elected assignor. Followers get `SyncPending` until the leader has synced. The stored assignment is
    reconciled: a partition still held by another member is withheld until that member releases it.
    Errors: UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS (the group
    is in PreparingRebalance: rejoin), INVALID_REQUEST (a bad leader assignment; nothing is stored).
    """
    if group is None:
        return Decision(start(None, name, ctx), error=UnknownMemberIdError(f"group {name!r} does not exist"))
    outcome = start(group, name, ctx)
    current = outcome.group
    checked = check_member(current, member_id, instance_id, generation)
    if isinstance(checked, CoordinatorError):
        return Decision(outcome, error=checked)
    if current.state is _S.PREPARING_REBALANCE:
        return Decision(outcome, error=RebalanceInProgressError(f"group {name!r} is rebalancing: rejoin"))
    member = replace(checked, session_deadline=ctx.now + checked.session_timeout)
    outcome = outcome.but(current.with_member(member))
    if current.state is _S.COMPLETING_REBALANCE:
        if member_id != current.leader_id:
            return Decision(outcome, response=SyncPending(member_id, current.generation))
        try:
            outcome = _store_assignment(outcome, assignment, ctx)
        except CoordinatorError as error:
            return Decision(outcome, error=error)
    group_now = outcome.group
    member = group_now.members[member_id]
    progress = ctx.now + member.progress_timeout if member.owned else None
    member = replace(member, synced=True, progress_deadline=progress)
    outcome = outcome.but(group_now.with_member(member))
    assert group_now.protocol is not None
    revoking = len(member.owned) > len(member.assigned)  # owned = assigned + partitions still to release
    return Decision(
        outcome,
        response=SyncComplete(
            member_id,
            group_now.generation,
            group_now.protocol,
            group_now.rebalance_protocol,
            member.assigned,
            rejoin_after_revoke=revoking,
        ),
    )


def _store_assignment(
    outcome: Outcome, assignment: Mapping[str, Sequence[TopicPartition]] | None, ctx: Context
) -> Outcome:
    group = outcome.group
    assert group.protocol is not None
    if assignment is None:
        try:
            assignor = ctx.assignors(group.protocol)
        except (ValueError, KeyError) as exc:
            raise InvalidRequestError(
                f"group {group.name!r}: the coordinator cannot run assignor {group.protocol!r} ({exc}); "
                "the leader must submit the assignment"
            ) from exc
        assignment = compute_target(group, assignor)
    target = validate_assignment(group, assignment)
    held = {mid: m.owned for mid, m in group.members.items()}
    lost = unassigned_partitions(group, target, held)
    if lost:
        raise InvalidRequestError(
            f"group {group.name!r}: the assignment leaves {len(lost)} subscribed partitions to nobody, "
            f"e.g. {[str(tp) for tp in lost[:5]]}"
        )
    plan = reconcile(target, held)
    members = {}
    for mid, m in group.members.items():
        share = plan[mid]
        owned = tuple(sorted(set(m.owned).union(share.assigned)))
        members[mid] = replace(
            m,
            assigned=share.assigned,
            assigned_generation=group.generation,
            owned=owned,
            progress_deadline=ctx.now + m.progress_timeout if owned else None,
        )
    withheld = sum(len(p.withheld) for p in plan.values())
    outcome = outcome.but(replace(group, members=members))
    outcome = transition(outcome, _S.STABLE, ctx.now, "leader submitted the assignment")
    reason = f"{sum(len(p.assigned) for p in plan.values())} assigned, {withheld} withheld for a follow-up round"
    return outcome.event(ctx.now, EventKind.ASSIGNMENT, group.leader_id, reason)


# ------------------------------------------------------------------------------------- heartbeat, leave


def decide_heartbeat(
    group: GroupRecord | None,
    name: str,
    member_id: str,
    generation: int,
    instance_id: str | None,
    progress: bool,
    ctx: Context,
) -> Decision[HeartbeatResult]:
    """Keep the member alive (and, with `progress`, its progress deadline).

    In PreparingRebalance the member is kept alive but answered REBALANCE_IN_PROGRESS: it must rejoin.
    """
    if group is None:
        return Decision(start(None, name, ctx), error=UnknownMemberIdError(f"group {name!r} does not exist"))
    outcome = start(group, name, ctx)
    current = outcome.group
    in_rebalance = current.state is _S.PREPARING_REBALANCE
    checked = check_member(current, member_id, instance_id, None if in_rebalance else generation)
    if isinstance(checked, CoordinatorError):
        return Decision(outcome, error=checked)
    member = replace(checked, session_deadline=ctx.now + checked.session_timeout)
    if progress and member.owned:
        member = replace(member, progress_deadline=ctx.now + member.progress_timeout)
    outcome = outcome.but(current.with_member(member))
    if in_rebalance:
        return Decision(outcome, error=RebalanceInProgressError(f"group {name!r} is rebalancing: rejoin"))
    return Decision(outcome, response=HeartbeatResult(current.generation, current.state, member.session_deadline))


def _remove_and_rebalance(outcome: Outcome, member_id: str, ctx: Context, reason: str) -> Outcome:
    outcome = remove_member(outcome, member_id, ctx, reason)
    if outcome.group.state in (_S.STABLE, _S.COMPLETING_REBALANCE):
        outcome = prepare_rebalance(outcome, ctx, f"member {member_id} removed: {reason}")
    return maybe_complete_join(outcome, ctx)


def decide_leave(
    group: GroupRecord | None, name: str, member_id: str, instance_id: str | None, reason: str, ctx: Context
) -> Decision[None]:
    """A member leaves at once (clean shutdown) so the rebalance does not wait for its session timeout."""
    if group is None:
        return Decision(start(None, name, ctx), error=UnknownMemberIdError(f"group {name!r} does not exist"))
    outcome = start(group, name, ctx)
    current = outcome.group
    if member_id in current.pending:
        pending = {k: v for k, v in current.pending.items() if k != member_id}
        return Decision(outcome.but(replace(current, pending=pending)))
    checked = check_member(current, member_id, instance_id, None)
    if isinstance(checked, CoordinatorError):
        return Decision(outcome, error=checked)
    return Decision(_remove_and_rebalance(outcome, member_id, ctx, f"left: {reason}"))


def decide_evict(group: GroupRecord | None, name: str, member_id: str, reason: str, ctx: Context) -> Decision[None]:
    """An operator or sensor removes a member (e.g. its run failed); static members are removed too."""
    if group is None:
        return Decision(start(None, name, ctx), error=GroupIdNotFoundError(f"group {name!r} does not exist"))
    outcome = start(group, name, ctx)
    if member_id not in outcome.group.members:
        return Decision(outcome, error=UnknownMemberIdError(f"group {name!r}: member {member_id} is not in the group"))
    return Decision(_remove_and_rebalance(outcome, member_id, ctx, f"evicted: {reason}"))


def decide_expire(group: GroupRecord | None, name: str, ctx: Context) -> Decision[None]:
    """Apply the clock: expire sessions and progress deadlines, complete a due join phase."""
    if group is None:
        return Decision(start(None, name, ctx), error=GroupIdNotFoundError(f"group {name!r} does not exist"))
    return Decision(start(group, name, ctx))


# ---------------------------------------------------------------------------------- metadata, delete


def _subscribed_view(group: GroupRecord, known: Mapping[str, int]) -> dict[str, int]:
    topics: set[str] = set()
    for member in group.members.values():
        topics.update(effective_topics(member, known))
    return {t: known.get(t, 0) for t in topics}


def decide_metadata(
    group: GroupRecord | None, name: str, partitions_per_topic: Mapping[str, int], ctx: Context
) -> Decision[bool]:
    """Record the topics' partition counts (every topic the group may subscribe to, or all topics for
    pattern subscriptions); answer True if a rebalance started because a subscribed topic's count
    changed or the topics matching a member's pattern changed."""
    for topic, count in partitions_per_topic.items():
        if not isinstance(count, int) or count < 0:
            return Decision(
                start(group, name, ctx), error=InvalidRequestError(f"topic {topic!r}: bad partition count {count!r}")
            )
    outcome = start(group, name, ctx)
    current = outcome.group
    new_known = dict(sorted(partitions_per_topic.items()))
    before = _subscribed_view(current, current.partitions_per_topic)
    after = _subscribed_view(current, new_known)
    outcome = outcome.but(replace(current, partitions_per_topic=new_known))
    if before == after:
        return Decision(outcome, response=False)
    changed = sorted(t for t in set(before) | set(after) if before.get(t) != after.get(t))
    outcome = outcome.event(ctx.now, EventKind.METADATA, reason=f"subscribed topics changed: {changed[:10]}")
    if outcome.group.state in (_S.STABLE, _S.COMPLETING_REBALANCE):
        outcome = prepare_rebalance(outcome, ctx, f"topic metadata changed: {changed[:10]}")
        return Decision(outcome, response=True)
    return Decision(outcome, response=False)


def decide_delete(group: GroupRecord | None, name: str, ctx: Context) -> Decision[None]:
    """Delete an Empty group (state Dead; the store drops its rows and ledger). NON_EMPTY_GROUP while
    members exist; GROUP_ID_NOT_FOUND if there is no such group."""
    if group is None:
        return Decision(start(None, name, ctx), error=GroupIdNotFoundError(f"group {name!r} does not exist"))
    outcome = start(group, name, ctx)
    current = outcome.group
    if current.members:
        return Decision(
            outcome,
            error=NonEmptyGroupError(
                f"group {name!r} has {len(current.members)} live members (state {current.state}); "
                "they must leave or expire first"
            ),
        )
    outcome = transition(outcome, _S.DEAD, ctx.now, "deleted")
    return Decision(outcome, deleted=True)
