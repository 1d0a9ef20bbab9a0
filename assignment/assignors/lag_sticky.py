"""The lag-aware sticky assignor: balance the records each member has to read, not its partition count.

A group's batch lasts as long as its slowest member, and the slowest member is the one with the most records
to read. `lag-sticky` takes each partition's backlog (end offset minus the group's committed offset, which the
coordinator computes at the leader's sync from the leader's end offsets and the ledger: `cohort.assignment.
backlog`) and balances the sum per member (`_lag`), keeping owned partitions unless moving some lowers the
largest member's backlog by more than `threshold` times the ideal share (10% by default).

It is cooperative: a partition whose owner changes is withheld while another member still holds it, and the
first round simulates the second so that the second round only completes the moves (it takes nothing away
from what the first round assigned). Without a backlog (none given, or zero everywhere) it is exactly the
cooperative sticky assignor, whose target is the count-balanced `sticky` one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from cohort.assignment.assignors._cluster import Cluster, build_cluster
from cohort.assignment.assignors._lag import DEFAULT_THRESHOLD, LagPlan, lag_plan
from cohort.assignment.assignors._output import assignment_from_owners
from cohort.assignment.assignors._weights import index_backlog
from cohort.assignment.assignors.cooperative import first_round, withhold_transfers
from cohort.assignment.types import COOPERATIVE, Assignment, Subscription
from cohort.common.types import TopicPartition

__all__ = ["DEFAULT_THRESHOLD", "LagPlan", "LagStickyAssignor", "lag_first_round"]


def lag_first_round(cluster: Cluster, weights: np.ndarray, threshold: float = DEFAULT_THRESHOLD) -> np.ndarray:
    """The owner array one cooperative round returns: the lag-aware target minus moves not yet safe to make.

    The second round (fed this result back as owned) is simulated; anything it would take away from this
    round's result is withheld now instead, until it would take nothing (each pass withholds at least one more
    partition, so this ends). Then, on the same backlog, the second round only adds the withheld partitions.
    The simulation usually costs little: a plan fed back is balanced, so it stops at its first check.
    """
    result = withhold_transfers(cluster, lag_plan(cluster, weights, threshold).owner)
    while True:
        fed_back = dataclasses.replace(cluster, retained=result, holders=(result >= 0).astype(np.int32), holder=result)
        settled = lag_plan(fed_back, weights, threshold).owner
        taken = (result >= 0) & (settled != result)
        if not taken.any():
            return result
        result = np.where(taken, np.int32(-1), result)


class LagStickyAssignor:
    """Balance each member's backlog, sticky and cooperative; count balance (cooperative sticky) without one.

    `threshold`: owned partitions move only when that lowers the largest member's backlog by more than this
    fraction of the ideal share (total backlog over the members). Stateless (the threshold is configuration);
    one instance may be shared.

    >>> from cohort.assignment import Subscription
    >>> from cohort.common.types import TopicPartition as TP
    >>> subs = {"A": Subscription(["t"]), "B": Subscription(["t"])}
    >>> backlog = {TP("t", 0): 900, TP("t", 1): 50, TP("t", 2): 30, TP("t", 3): 20}
    >>> result = LagStickyAssignor().assign({"t": 4}, subs, backlog=backlog)
    >>> {m: [tp.partition for tp in tps] for m, tps in result.items()}
    {'A': [0], 'B': [1, 2, 3]}
    """

    name: str = "lag-sticky"
    protocol: str = COOPERATIVE
    uses_backlog: bool = True

    def __init__(self, threshold: float = DEFAULT_THRESHOLD) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold < 10:
            raise ValueError(
                f"threshold must be a number in [0, 10) (a fraction of the ideal share), got {threshold!r}"
            )
        self._threshold = float(threshold)

    @property
    def threshold(self) -> float:
        """The fraction of the ideal share a move must save on the largest member's backlog."""
        return self._threshold

    def __repr__(self) -> str:
        return f"LagStickyAssignor(threshold={self._threshold!r})"

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        *,
        backlog: Mapping[TopicPartition, int] | None = None,
    ) -> Assignment:
        """Return member id -> sorted partitions, withholding partitions another member still owns."""
        indexed = index_backlog(build_cluster(partitions_per_topic, subscriptions), backlog)
        cluster, weights = indexed.cluster, indexed.weights
        owner = first_round(cluster) if weights is None else lag_first_round(cluster, weights, self.threshold)
        return assignment_from_owners(cluster, owner)

    def plan(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
        backlog: Mapping[TopicPartition, int],
    ) -> LagPlan | None:
        """The target behind `assign` and its figures (ideal share, makespan kept and planned, moves), before
        cooperative withholding; None when no backlog is known (count balance applies)."""
        indexed = index_backlog(build_cluster(partitions_per_topic, subscriptions), backlog)
        weights = indexed.weights
        return None if weights is None else lag_plan(indexed.cluster, weights, self.threshold)
