"""The protocol's other decisions: sync, heartbeat, leave, evict, expire, metadata, delete.

Each `decide_*` is a pure function `(group, request, ctx) -> Decision`: it first applies the timers
(`advance`), then decides, and never touches a database, a socket or the clock (`ctx.now` is given). The
store-backed `Coordinator` loads the group, calls one of these (or `decide_join`, re-exported here from
`cohort.assignment.protocol.join`), and persists the result in one transaction.

Example:
    >>> from cohort.assignment.protocol.group_state import GroupConfig
    >>> ctx = Context(now=0.0, config=GroupConfig(initial_rebalance_delay=0))
    >>> decide_heartbeat(None, "g", "m-1", 1, None, False, ctx).error.code
    'UNKNOWN_MEMBER_ID'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from cohort.assignment.errors import (
    CoordinatorError,
    GroupIdNotFoundError,
    InvalidRequestError,
    NonEmptyGroupError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from cohort.assignment.protocol.backlog import Backlog, run_assignor, uses_backlog
from cohort.assignment.protocol.group_state import (
    CLEAN_LEAVE,
    REMEMBERED_CLAIMS,
    EventKind,
    GroupRecord,
    GroupState,
    Outcome,
    effective_topics,
    transition,
)
from cohort.assignment.protocol.join import decide_join
from cohort.assignment.protocol.messages import Decision, HeartbeatResult, SyncComplete, SyncPending
from cohort.assignment.protocol.rebalance import (
    Context,
    check_member,
    maybe_complete_join,
    prepare_rebalance,
    remove_member,
    start,
)
from cohort.assignment.protocol.reconcile import (
    build_subscriptions,
    compute_target,
    reconcile,
    subscribed_partition_counts,
    unassigned_partitions,
    validate_assignment,
)
from cohort.common.types import TopicPartition
from cohort.common.validation import INT32_MAX, is_integer

__all__ = [
    "Context",
    "check_member",
    "decide_claim_rerun",
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


# ----------------------------------------------------------------------------------------------- sync


def decide_sync(
    group: GroupRecord | None,
    name: str,
    member_id: str,
    generation: int,
    instance_id: str | None,
    assignment: Mapping[str, Sequence[TopicPartition]] | None,
    ctx: Context,
    backlog: Backlog | None = None,
) -> Decision[SyncComplete | SyncPending]:
    """A member's sync: the leader's assignment is stored and the group becomes Stable.

    The leader passes `assignment` (member id -> partitions) or None to have the coordinator run the
    elected assignor; `backlog` (records left per partition, `cohort.assignment.protocol.backlog`) goes to that
    assignor if it asks for one, and is ignored otherwise. Followers get `SyncPending` until the leader has
    synced. The stored assignment is
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
            outcome = _store_assignment(outcome, assignment, ctx, backlog)
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
    outcome: Outcome,
    assignment: Mapping[str, Sequence[TopicPartition]] | None,
    ctx: Context,
    backlog: Backlog | None = None,
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
        if backlog is not None and uses_backlog(assignor):
            counts, subscriptions = subscribed_partition_counts(group), build_subscriptions(group)
            assignment = run_assignor(assignor, counts, subscriptions, backlog)
        else:
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
    return Decision(_remove_and_rebalance(outcome, member_id, ctx, f"{CLEAN_LEAVE} {reason}"))


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


def decide_claim_rerun(
    group: GroupRecord | None, name: str, lost: str, slot: int, holder: str, ctx: Context
) -> Decision[str]:
    """Claim the rerun of `lost` (a lost run's id, or another key of one loss) for `holder`; answer who holds
    it: `holder` on the first claim (and on a repeated one), the first claimant otherwise. Orchestrators
    sharing the store (several Dagster instances) each see the loss: only the answer's holder reruns it. A
    group that does not exist has no member another host could rerun: the claim is granted, not recorded."""
    if not lost or not holder:
        return Decision(start(group, name, ctx), error=InvalidRequestError("a rerun claim needs a loss and a holder"))
    if group is None:
        return Decision(start(None, name, ctx), response=holder)
    outcome = start(group, name, ctx)
    current = outcome.group
    held = current.rerun_claims.get(lost)
    if held is not None:
        return Decision(outcome, response=held)
    claims = {**current.rerun_claims, lost: holder}
    claims = dict(list(claims.items())[-REMEMBERED_CLAIMS:])
    outcome = outcome.but(replace(current, rerun_claims=claims))
    outcome = outcome.event(ctx.now, EventKind.RERUN_CLAIMED, reason=f"slot {slot}: rerun of {lost} by {holder}")
    return Decision(outcome, response=holder)


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
    changed or the topics matching a member's pattern changed. A count that is not an integer in
    [0, 2**31 - 1] (a bool, a float, a string) is INVALID_REQUEST and nothing is recorded."""
    for topic, count in partitions_per_topic.items():
        if not (is_integer(count) and 0 <= count <= INT32_MAX):  # bools are not counts
            return Decision(
                start(group, name, ctx), error=InvalidRequestError(f"topic {topic!r}: bad partition count {count!r}")
            )
    outcome = start(group, name, ctx)
    current = outcome.group
    new_known = {topic: int(count) for topic, count in sorted(partitions_per_topic.items())}
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
