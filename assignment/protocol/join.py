"""The join decision: admitting members, MEMBER_ID_REQUIRED, static replacement, rejoins.

`decide_join(group, name, request, ctx)` is pure, like every decision: it applies the clock's due effects
first (`start`), then answers `JoinComplete` or `JoinPending`, or an error, with the new group record.

Example:
    >>> from cohort.assignment.protocol.group_state import GroupConfig
    >>> ctx = Context(now=0.0, config=GroupConfig(initial_rebalance_delay=0), new_member_id="m-1")
    >>> decide_join(None, "g", JoinRequest(topics=["t"], assignors=["range"]), ctx).error.code
    'MEMBER_ID_REQUIRED'
"""

from __future__ import annotations

import re
from dataclasses import replace
from numbers import Real

from cohort.assignment.errors import (
    CoordinatorError,
    GroupMaxSizeReachedError,
    InconsistentGroupProtocolError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    UnknownMemberIdError,
)
from cohort.assignment.protocol.group_state import (
    EventKind,
    GroupRecord,
    GroupState,
    MemberRecord,
    Outcome,
    static_member_id,
)
from cohort.assignment.protocol.messages import Decision, JoinComplete, JoinPending, JoinRequest, MemberSubscription
from cohort.assignment.protocol.rebalance import (
    Context,
    candidate_assignors,
    check_member,
    maybe_complete_join,
    prepare_rebalance,
    start,
)
from cohort.assignment.protocol.reconcile import build_subscriptions
from cohort.assignment.types import EAGER
from cohort.common.validation import is_number, require_collection

__all__ = ["check_join_request", "decide_join"]

_S = GroupState


def check_join_request(req: JoinRequest) -> None:
    """Raise TypeError for a request whose fields have the wrong Python type, naming the field.

    `topics` and `assignors` must be collections of strings (a bare string would be read as its
    characters: `assignors="range"` as the ballot r, a, n, g, e); the session timeout must be a number of
    seconds and the rebalance and progress timeouts numbers or None (bools are not numbers here). Values of
    the right type but out of range (NaN, <= 0, outside the session bounds) are the decision's to refuse
    with a coordinator error.
    """
    require_collection(req.topics, "JoinRequest.topics")  # the names themselves: validate_topic_name
    require_collection(req.assignors, "JoinRequest.assignors")
    for assignor in req.assignors:
        if not isinstance(assignor, str):
            raise TypeError(f"JoinRequest.assignors must hold assignor names (str), got {assignor!r}")
    timeouts = {
        "session timeout": req.session_timeout,
        "rebalance timeout": req.rebalance_timeout,
        "progress timeout": req.progress_timeout,
    }
    for what, value in timeouts.items():
        if value is None and what != "session timeout":
            continue
        if isinstance(value, bool) or not isinstance(value, Real):
            kind = type(value).__name__
            raise TypeError(f"JoinRequest: the {what} must be a number of seconds, got {kind} {value!r}")


def _validate_join(group: GroupRecord, req: JoinRequest, ctx: Context) -> CoordinatorError | None:
    cfg = ctx.config
    if not cfg.min_session_timeout <= req.session_timeout <= cfg.max_session_timeout:  # False for NaN too
        return InvalidSessionTimeoutError(
            f"group {group.name!r}: session timeout {req.session_timeout:g} s is outside "
            f"[{cfg.min_session_timeout:g}, {cfg.max_session_timeout:g}] s"
        )
    rebalance, progress = req.effective_rebalance_timeout, req.effective_progress_timeout
    if not (is_number(rebalance) and rebalance > 0 and is_number(progress) and progress > 0):  # inf: no limit
        return InvalidRequestError(
            f"group {group.name!r}: rebalance and progress timeouts must be > 0, got {rebalance:g} and {progress:g} s"
        )
    if not req.assignors:
        return InconsistentGroupProtocolError(f"group {group.name!r}: the member lists no assignor")
    if not all(req.assignors):
        return InconsistentGroupProtocolError(
            f"group {group.name!r}: the member lists an empty assignor name in {list(req.assignors)}"
        )
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
    rebalance. A field of the wrong type (e.g. `assignors` as one string) raises TypeError
    (`check_join_request`); an empty assignor name is INCONSISTENT_GROUP_PROTOCOL, a NaN or non-positive
    rebalance or progress timeout INVALID_REQUEST.
    """
    check_join_request(req)
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
