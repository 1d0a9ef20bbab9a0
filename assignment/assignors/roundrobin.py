"""Kafka's round-robin assignor: all subscribed partitions dealt over the members in turn.

Partitions are sorted by (topic, partition) and dealt over the members sorted by id, cyclically; a member not
subscribed to a partition's topic is skipped. The dealing position carries over from topic to topic, exactly as
Kafka's `CircularIterator` does, which is what makes Kafka's documented examples come out as they do.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping

from cohort.assignment.assignors._common import (
    checked_members,
    checked_partition_counts,
    effective_topics,
    require_unique_owned,
)
from cohort.assignment.types import EAGER, Assignment, Subscription
from cohort.common.types import TopicPartition

__all__ = ["RoundRobinAssignor"]


class RoundRobinAssignor:
    """Deal partitions sorted by (topic, partition) over members sorted by id, skipping non-subscribers.

    Stateless; one instance may be shared. Finding the next subscriber is a binary search over the topic's
    subscriber positions, so the cost is O(P log C) rather than O(P * C) when few members share a topic.

    >>> from cohort.assignment import RoundRobinAssignor, Subscription
    >>> subs = {"C0": Subscription(["t0", "t1"]), "C1": Subscription(["t0", "t1"])}
    >>> [str(tp) for tp in RoundRobinAssignor().assign({"t0": 3, "t1": 3}, subs)["C0"]]
    ['t0-0', 't0-2', 't1-1']
    """

    name: str = "roundrobin"
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
        positions: dict[str, list[int]] = {}  # topic -> sorted positions of its subscribers in member_ids
        for position, member_id in enumerate(member_ids):
            for topic in effective_topics(subscriptions[member_id].topics, counts):
                positions.setdefault(topic, []).append(position)
        lists: list[list[TopicPartition]] = [[] for _ in member_ids]
        cursor = 0  # index of the member the circular iterator points at
        for topic in sorted(positions):
            subscribers = positions[topic]
            for partition in range(counts[topic]):
                i = bisect_left(subscribers, cursor)
                position = subscribers[i] if i < len(subscribers) else subscribers[0]
                lists[position].append(TopicPartition(topic, partition))
                cursor = (position + 1) % len(member_ids)
        return dict(zip(member_ids, lists, strict=True))
