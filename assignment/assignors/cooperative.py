"""The cooperative sticky assignor: the sticky target, reached in two rounds without double ownership.

In the first round a partition whose owner changes is left out of its new owner's list while any other
member still holds it (lists it as owned, and no member lists it with a newer generation); that member's new
list lacks it, so the member revokes it. Fed back with `owned_partitions` set to the first result, the second
round finds the partition unowned and completes the move. A partition is never listed for two members in one
result, nor for one member while another still holds it.

Convergence in two rounds means the second round revokes nothing. With equal subscriptions that holds by
construction: every member owns at most its quota and the members owning `P // n + 1` are the first to get
the extra slots again. With unequal subscriptions the second round re-places the withheld partitions by load,
which can differ from the first round's plan and, rarely, push balance to take an owned partition away. The
first round therefore simulates the second on the general path; unless the simulation lands exactly on the
target, the first round adopts the simulated target instead (again minus transfers still held elsewhere), so
a member never revokes a partition only to get it back, and partitions nobody holds go straight to their
final owner. After a few adoptions without a fixed point (the simulated targets can alternate; about one
unequal-subscription round in a thousand under random churn) it falls back to withholding whatever the
simulated round would take away. That still converges in two rounds and never double-lists, but may delay a
partition nobody else held. With equal subscriptions the first round is exactly the target minus transfers:
members over quota in round 1 keep only their quota and receive nothing, and the members that won the extra
slots own `P // n + 1` and win them again in round 2, so nobody is handed back a partition it gave up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import numpy as np

from cohort.assignment.assignors._cluster import Cluster, build_cluster
from cohort.assignment.assignors._general import general_target
from cohort.assignment.assignors._output import assignment_from_owners
from cohort.assignment.assignors.sticky import shared_subscription, sticky_target
from cohort.assignment.types import COOPERATIVE, Assignment, Subscription

__all__ = ["CooperativeStickyAssignor", "first_round", "withhold_transfers"]

_ADOPTIONS = 6
"""How many times the first round may adopt the simulated second round's target before only shrinking."""


def withhold_transfers(cluster: Cluster, target: np.ndarray) -> np.ndarray:
    """`target` without the partitions some other member still holds (-1 = withheld).

    A member holds a partition it lists as owned unless another member lists it with a higher generation.
    That includes members that no longer subscribe to the topic: they consume it until they revoke it.
    """
    elsewhere = (cluster.holders > 1) | ((cluster.holders == 1) & (cluster.holder != target))
    return np.where((target >= 0) & elsewhere, np.int32(-1), target)


def first_round(cluster: Cluster) -> np.ndarray:
    """The owner array a cooperative round returns: the sticky target minus moves not yet safe to make."""
    target = sticky_target(cluster)
    result = withhold_transfers(cluster, target)
    if (result == target).all() or shared_subscription(cluster) is not None:
        return result  # nothing withheld (round 2 = target, by idempotence), or the quota path (see above)
    for _ in range(_ADOPTIONS):
        settled = _second_round(cluster, result)
        if (settled == target).all():
            return result
        target = settled
        result = withhold_transfers(cluster, target)
    while True:  # fallback: shrink until the second round keeps everything; ends, as each pass drops one more
        taken = (result >= 0) & (_second_round(cluster, result) != result)
        if not taken.any():
            return result
        result = np.where(taken, np.int32(-1), result)


def _second_round(cluster: Cluster, first: np.ndarray) -> np.ndarray:
    """The general-path target the group will compute when fed `first` back as its owned partitions."""
    owned = first >= 0
    fed_back = dataclasses.replace(cluster, retained=first, holders=owned.astype(np.int32), holder=first)
    return general_target(fed_back)


class CooperativeStickyAssignor:
    """The sticky target, with ownership changes split over two rounds (cooperative protocol).

    Stateless; one instance may be shared.

    >>> from cohort.assignment import CooperativeStickyAssignor, Subscription
    >>> from cohort.common.types import TopicPartition
    >>> owned = [TopicPartition("t", p) for p in range(4)]
    >>> subs = {"A": Subscription(["t"], owned, generation=1), "B": Subscription(["t"])}
    >>> first = CooperativeStickyAssignor().assign({"t": 4}, subs)
    >>> [str(tp) for tp in first["A"]], first["B"]
    (['t-0', 't-1'], [])
    >>> subs = {m: Subscription(["t"], first[m], generation=2) for m in subs}
    >>> [str(tp) for tp in CooperativeStickyAssignor().assign({"t": 4}, subs)["B"]]
    ['t-2', 't-3']
    """

    name: str = "cooperative-sticky"
    protocol: str = COOPERATIVE

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> Assignment:
        """Return member id -> sorted partitions, withholding partitions another member still owns."""
        cluster = build_cluster(partitions_per_topic, subscriptions)
        return assignment_from_owners(cluster, first_round(cluster))
