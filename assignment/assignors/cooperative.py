"""The cooperative sticky assignor: the sticky target, reached in two rounds without double ownership.

In the first round a partition whose owner changes is left out of its new owner's list while any other
member still lists it as owned; that member's new list lacks it, so the member revokes it. Fed back with
`owned_partitions` set to the first result, the second round finds the partition unowned and completes the
move. A partition is never listed for two members in one result, nor for one member while another still owns
it.

Convergence in two rounds means the second round revokes nothing. With equal subscriptions that holds by
construction: every member owns at most its quota and the members owning `P // n + 1` are the first to get
the extra slots again. With unequal subscriptions the second round re-places the withheld partitions by load,
which can differ from the first round's plan and, rarely, push balance to take an owned partition away. The
first round therefore simulates the second on the general path and also withholds whatever the simulated
round would take away, repeating until the simulated round revokes nothing. Each repetition withholds at
least one more partition, so this ends; in practice one simulation finds nothing to add.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

import numpy as np

from assignment.assignors._cluster import Cluster, build_cluster
from assignment.assignors._common import paused_gc
from assignment.assignors._general import general_target
from assignment.assignors._output import assignment_from_owners
from assignment.assignors.sticky import shared_subscription, sticky_target
from assignment.types import COOPERATIVE, Assignment, Subscription

__all__ = ["CooperativeStickyAssignor", "first_round", "withhold_transfers"]


def withhold_transfers(cluster: Cluster, target: np.ndarray) -> np.ndarray:
    """`target` without the partitions some other member still lists as owned (-1 = withheld)."""
    elsewhere = (cluster.claim_count > 1) | ((cluster.claim_count == 1) & (cluster.claimer != target))
    return np.where((target >= 0) & elsewhere, np.int32(-1), target)


def first_round(cluster: Cluster) -> np.ndarray:
    """The owner array a cooperative round returns: the sticky target minus moves not yet safe to make."""
    result = withhold_transfers(cluster, sticky_target(cluster))
    if cluster.num_partitions == 0 or shared_subscription(cluster) is not None:
        return result
    while True:
        owned = result >= 0
        fed_back = dataclasses.replace(cluster, retained=result, claim_count=owned.astype(np.int32), claimer=result)
        taken = owned & (general_target(fed_back) != result)
        if not taken.any():
            return result
        result = np.where(taken, np.int32(-1), result)


class CooperativeStickyAssignor:
    """The sticky target, with ownership changes split over two rounds (cooperative protocol).

    Stateless; one instance may be shared.

    >>> from assignment import CooperativeStickyAssignor, Subscription, TopicPartition
    >>> owned = [TopicPartition("t", p) for p in range(4)]
    >>> subs = {"A": Subscription(["t"], owned, generation=1), "B": Subscription(["t"])}
    >>> first = CooperativeStickyAssignor().assign({"t": 4}, subs)
    >>> [str(tp) for tp in first["A"]], first["B"]
    (['t-0', 't-1'], [])
    >>> subs = {m: Subscription(["t"], first[m], generation=2) for m in subs}
    >>> [str(tp) for tp in CooperativeStickyAssignor().assign({"t": 4}, subs)["B"]]
    ['t-2', 't-3']
    """

    name: ClassVar[str] = "cooperative-sticky"
    protocol: ClassVar[str] = COOPERATIVE

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> Assignment:
        """Return member id -> sorted partitions, withholding partitions another member still owns."""
        with paused_gc():
            cluster = build_cluster(partitions_per_topic, subscriptions)
            return assignment_from_owners(cluster, first_round(cluster))
