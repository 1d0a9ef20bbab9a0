"""Kafka's range assignor: contiguous partition ranges per topic.

For each topic, the members subscribed to it are sorted by id; with `P` partitions and `C` such members each
gets `P // C` consecutive partitions and the first `P % C` members get one more. Ownership is ignored, so a
membership change can move many partitions; the sticky assignors exist for that.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import repeat

from cohort.assignment.assignors._common import (
    checked_members,
    checked_partition_counts,
    effective_topics,
    require_unique_owned,
)
from cohort.assignment.types import EAGER, Assignment, Subscription
from cohort.common.types import TopicPartition

__all__ = ["RangeAssignor", "topic_partitions"]

_new_tuple = tuple.__new__


def topic_partitions(topic: str, start: int, stop: int) -> list[TopicPartition]:
    """TopicPartitions `topic`-`start` .. `topic`-`stop - 1`, built in bulk without per-item Python calls."""
    return list(map(_new_tuple, repeat(TopicPartition), zip(repeat(topic), range(start, stop))))


class RangeAssignor:
    """Assign each topic's partitions in contiguous ranges over its subscribers sorted by id.

    Stateless; one instance may be shared. Example:

    >>> from cohort.assignment import RangeAssignor, Subscription
    >>> subs = {"C0": Subscription(["t0", "t1"]), "C1": Subscription(["t0", "t1"])}
    >>> result = RangeAssignor().assign({"t0": 3, "t1": 3}, subs)
    >>> [str(tp) for tp in result["C1"]]
    ['t0-2', 't1-2']
    """

    name: str = "range"
    protocol: str = EAGER

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> Assignment:
        """Return member id -> sorted partitions (every member is a key; idle members map to [])."""
        counts = checked_partition_counts(partitions_per_topic)
        member_ids = checked_members(subscriptions)
        require_unique_owned(member_ids, subscriptions)
        subscribers: dict[str, list[str]] = {}
        for member_id in member_ids:  # sorted, so each subscriber list is sorted too
            for topic in effective_topics(subscriptions[member_id].topics, counts):
                subscribers.setdefault(topic, []).append(member_id)
        result: Assignment = {member_id: [] for member_id in member_ids}
        for topic in sorted(subscribers):  # topic order keeps every member's list sorted
            members = subscribers[topic]
            per_member, with_extra = divmod(counts[topic], len(members))
            start = 0
            for i, member_id in enumerate(members):
                stop = start + per_member + (1 if i < with_extra else 0)
                result[member_id].extend(topic_partitions(topic, start, stop))
                start = stop
        return result
