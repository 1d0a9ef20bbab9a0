"""A member's rebalance hooks (`RebalanceListener`, Kafka's ConsumerRebalanceListener): what the run is told when
its partitions are revoked, assigned or lost (cohort.assignment.member calls them)."""

from __future__ import annotations

from collections.abc import Sequence

from cohort.common.types import TopicPartition

__all__ = ["RebalanceListener"]


class RebalanceListener:
    """Rebalance hooks, Kafka's ConsumerRebalanceListener; override the ones you need.

    `on_partitions_revoked` is the place to commit what was processed before a partition moves;
    `on_partitions_lost` must not commit (the partitions may already have a new owner).
    """

    def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        """Partitions this member must stop processing (still owned: commits are accepted)."""

    def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        """Partitions newly given to this member (all of them under eager, the added ones under cooperative)."""

    def on_partitions_lost(self, lost: Sequence[TopicPartition]) -> None:
        """Partitions this member lost without a clean revocation (expired, evicted): do not commit."""
