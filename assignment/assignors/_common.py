"""Input checks and small helpers shared by every built-in assignor.

All assignors reject the same bad input with the same `ValueError` messages, so the coordinator can surface
them unchanged whichever strategy a group uses. A subscription to a topic without metadata is not an error:
the member simply gets nothing from that topic (its metadata may not have propagated yet).
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Mapping

from cohort.assignment.types import Subscription
from cohort.common.types import TopicPartition

__all__ = [
    "checked_generation",
    "checked_members",
    "checked_partition_counts",
    "duplicate_owned_error",
    "effective_topics",
    "require_unique_owned",
]


def checked_partition_counts(partitions_per_topic: Mapping[str, int]) -> dict[str, int]:
    """Return a plain copy of the topic metadata, rejecting counts that are not integers >= 0."""
    counts: dict[str, int] = {}
    for topic, count in partitions_per_topic.items():
        if not isinstance(topic, str):
            raise ValueError(f"topic names must be strings, got {topic!r}")
        try:
            value = operator.index(count)
        except TypeError:
            raise ValueError(f"partition count of topic {topic!r} must be an integer, got {count!r}") from None
        if value < 0:
            raise ValueError(f"partition count of topic {topic!r} must be >= 0, got {value}")
        counts[topic] = value
    return counts


def checked_members(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Return the member ids sorted, rejecting empty or non-string ids and malformed subscriptions.

    Sorting here is what makes every assignor independent of the mapping's iteration order.
    """
    for member_id, subscription in subscriptions.items():
        if not isinstance(member_id, str) or not member_id:
            raise ValueError(f"member ids must be non-empty strings, got {member_id!r}")
        if not isinstance(subscription, Subscription):
            raise ValueError(f"subscription of member {member_id!r} must be a Subscription, got {subscription!r}")
        if isinstance(subscription.topics, str):
            raise ValueError(
                f"topics of member {member_id!r} must be a collection of topic names, not the string "
                f"{subscription.topics!r}"
            )
    return sorted(subscriptions)


def checked_generation(member_id: str, subscription: Subscription) -> int:
    """Return the subscription's generation as an int, rejecting non-integers."""
    try:
        return operator.index(subscription.generation)
    except TypeError:
        raise ValueError(
            f"generation of member {member_id!r} must be an integer, got {subscription.generation!r}"
        ) from None


def effective_topics(topics: Collection[str], counts: Mapping[str, int]) -> frozenset[str]:
    """The subscribed topics that exist and have at least one partition: the ones a member can be given."""
    return frozenset(topic for topic in topics if counts.get(topic, 0) > 0)


def duplicate_owned_error(member_id: str, topic: str, partition: int) -> ValueError:
    """The error every assignor raises when one member lists the same partition twice."""
    return ValueError(
        f"member {member_id!r} lists partition {TopicPartition(topic, partition)} more than once in owned_partitions"
    )


def require_unique_owned(member_ids: list[str], subscriptions: Mapping[str, Subscription]) -> None:
    """Reject a member whose owned_partitions repeat a partition (simple per-member check).

    The sticky assignors run a vectorised version of this check; range and roundrobin ignore ownership and
    use this one so that bad input is rejected the same way whichever strategy a group uses.
    """
    for member_id in member_ids:
        owned = subscriptions[member_id].owned_partitions
        if len(set(owned)) != len(owned):
            seen: set[tuple[str, int]] = set()
            for topic, partition in owned:
                if (topic, partition) in seen:
                    raise duplicate_owned_error(member_id, topic, partition)
                seen.add((topic, partition))
