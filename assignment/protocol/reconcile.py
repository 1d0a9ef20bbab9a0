"""Target assignment and reconciliation: what each member gets now, what it must revoke first.

Two plain steps, after Kafka's TargetAssignmentBuilder / CurrentAssignmentBuilder:

1. **Target** (`build_subscriptions`, `compute_target`, `validate_assignment`): the elected assignor's
   answer for the current members, or the leader's own, checked against the group (known members,
   subscribed topics, known partitions, no partition listed twice).
2. **Reconcile** (`reconcile`): a partition goes to its target member only if no *other* member still
   holds it. A member that holds a partition outside its target must revoke it, and only when it has
   released it (by rejoining) can the next round hand it over.

Eager members release everything when they rejoin, so at the end of an eager join phase nothing is held
and reconciliation hands out the whole target. Cooperative members keep what they hold across the join,
so a moving partition is withheld in the first round and delivered in the follow-up round: the
cooperative protocol falls out of step 2 whatever the assignor did.

Example:
    >>> from cohort.common.types import TopicPartition as TP
    >>> plan = reconcile({"a": [TP("t", 0)], "b": [TP("t", 1)]}, {"a": {TP("t", 0), TP("t", 1)}, "b": set()})
    >>> plan["a"].revoking, plan["b"].assigned, plan["b"].withheld
    ((TopicPartition(topic='t', partition=1),), (), (TopicPartition(topic='t', partition=1),))
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from cohort.assignment.errors import InvalidRequestError
from cohort.assignment.protocol.group_state import GroupRecord, effective_topics
from cohort.assignment.types import COOPERATIVE, Assignor, Subscription
from cohort.common.types import TopicPartition
from cohort.common.validation import is_integer

__all__ = [
    "Reconciliation",
    "build_subscriptions",
    "compute_target",
    "reconcile",
    "subscribed_partition_counts",
    "unassigned_partitions",
    "validate_assignment",
]


def build_subscriptions(group: GroupRecord) -> dict[str, Subscription]:
    """Each member's subscription as the assignor sees it: effective topics (pattern resolved against the
    known topics) and its owned partitions with the generation of its last assignment.

    Under the cooperative protocol "owned" is what the member really holds now (a cooperative assignor
    withholds a moving partition from its new owner while the old one still holds it, so it must not be
    told about a partition the old owner already released). Under eager every member released everything
    when it rejoined, so "owned" is its previous assignment: the stickiness hint, as Kafka's eager sticky
    assignor keeps it in the member's user data.
    """
    known = group.partitions_per_topic
    cooperative = group.rebalance_protocol == COOPERATIVE
    return {
        member_id: Subscription(
            topics=effective_topics(m, known),
            owned_partitions=m.owned if cooperative else m.assigned,
            generation=m.assigned_generation,
            rack=m.rack,
        )
        for member_id, m in group.members.items()
    }


def subscribed_partition_counts(group: GroupRecord) -> dict[str, int]:
    """Partition counts of the known topics at least one member subscribes to."""
    known = group.partitions_per_topic
    topics: set[str] = set()
    for member in group.members.values():
        topics.update(effective_topics(member, known))
    return {t: known[t] for t in sorted(topics) if t in known}


def compute_target(group: GroupRecord, assignor: Assignor) -> dict[str, list[TopicPartition]]:
    """Run `assignor` over the group's members and known partitions (the leader's job, done for it)."""
    return assignor.assign(subscribed_partition_counts(group), build_subscriptions(group))


def validate_assignment(
    group: GroupRecord, assignment: Mapping[str, Sequence[TopicPartition]]
) -> dict[str, tuple[TopicPartition, ...]]:
    """Check a leader's assignment and normalise it: every member a key, each list sorted and unique.

    Raises InvalidRequestError naming the first problem: an unknown member, a partition number that is not
    an integer (a float or bool), a partition listed twice, a topic the member does not subscribe to, or a
    partition beyond the topic's known count.
    """
    known = group.partitions_per_topic
    unknown = sorted(set(assignment) - set(group.members))
    if unknown:
        raise InvalidRequestError(f"group {group.name!r}: assignment names unknown members {unknown[:5]}")
    seen: dict[TopicPartition, str] = {}
    result: dict[str, tuple[TopicPartition, ...]] = {}
    for member_id, member in group.members.items():
        listed = assignment.get(member_id, ())
        bad = next((tp for tp in listed if not is_integer(tp[1])), None)
        if bad is not None:  # 1.0 or True would pass the range check and be stored as a partition
            raise InvalidRequestError(f"group {group.name!r}: {member_id} is assigned {bad!r}: not a partition number")
        parts = sorted({TopicPartition(tp[0], int(tp[1])) for tp in listed})
        topics = set(effective_topics(member, known))
        for tp in parts:
            if tp in seen:
                raise InvalidRequestError(f"group {group.name!r}: {tp} assigned to both {seen[tp]} and {member_id}")
            seen[tp] = member_id
            if tp.topic not in topics:
                raise InvalidRequestError(
                    f"group {group.name!r}: {tp} assigned to {member_id}, which does not subscribe to {tp.topic!r}"
                )
            count = known.get(tp.topic)
            if count is None or not 0 <= tp.partition < count:
                raise InvalidRequestError(
                    f"group {group.name!r}: {tp} assigned to {member_id} but topic {tp.topic!r} has "
                    f"{count if count is not None else 'no known'} partitions"
                )
        result[member_id] = tuple(parts)
    return result


@dataclass(frozen=True)
class Reconciliation:
    """One member's share of a round.

    Attributes:
        assigned: target partitions the member may consume now (nobody else holds them).
        revoking: partitions it holds that are no longer in its target; it must stop and release them.
        withheld: target partitions another member still holds; delivered in a follow-up round.
    """

    member_id: str
    assigned: tuple[TopicPartition, ...]
    revoking: tuple[TopicPartition, ...]
    withheld: tuple[TopicPartition, ...]


def reconcile(
    target: Mapping[str, Sequence[TopicPartition]], held: Mapping[str, Collection[TopicPartition]]
) -> dict[str, Reconciliation]:
    """Split each member's target into what it gets now and what waits for another member's release."""
    holder: dict[TopicPartition, str] = {}
    for member_id, parts in held.items():
        for tp in parts:
            holder[tp] = member_id
    plan: dict[str, Reconciliation] = {}
    for member_id in set(target) | set(held):
        wanted = target.get(member_id, ())
        assigned = tuple(sorted(tp for tp in wanted if holder.get(tp, member_id) == member_id))
        withheld = tuple(sorted(tp for tp in wanted if holder.get(tp, member_id) != member_id))
        wanted_set = set(wanted)
        revoking = tuple(sorted(tp for tp in held.get(member_id, ()) if tp not in wanted_set))
        plan[member_id] = Reconciliation(member_id, assigned, revoking, withheld)
    return plan


def unassigned_partitions(
    group: GroupRecord,
    target: Mapping[str, Collection[TopicPartition]],
    held: Mapping[str, Collection[TopicPartition]],
) -> list[TopicPartition]:
    """Subscribed partitions that are neither in the target nor still held by a member (would be lost)."""
    covered: set[TopicPartition] = set()
    for parts in target.values():
        covered.update(parts)
    for parts in held.values():
        covered.update(parts)
    return [
        TopicPartition(topic, p)
        for topic, count in subscribed_partition_counts(group).items()
        for p in range(count)
        if TopicPartition(topic, p) not in covered
    ]
