"""The sticky assignor: balance first, then keep as much of what members own as balance allows.

Algorithm (one call, no state kept between calls; everything comes from the subscriptions):

1. Index the input (`_cluster`): members by sorted id, partitions of the assignable topics by global id in
   (topic, partition) order. Owned partitions are validated and settled here: duplicates within one member
   are a `ValueError`; a partition claimed by several members goes to the highest generation, and to nobody
   on a tie; the winning claim is then dropped if its topic was deleted or unsubscribed, or the partition is
   beyond the topic's current count.
2. If every member with an assignable subscription has the same one (the common case), use the quota path
   (`_homogeneous`): quota `P // n` each, `P % n` members get one more (those owning more than `P // n`
   first); keep owned partitions up to quota; deal the rest in slices to members below quota. Counts differ by
   at most one and the number of revocations is the minimum any balanced assignment needs.
3. Otherwise use the general path (`_general`): keep every owned claim, water-fill the unowned partitions
   topic by topic (most loaded topics first), then balance topic by topic with heaps keyed by load until no
   member two or more below another could take one of its partitions, and finally send back home any pair of
   same-topic partitions that chains of moves left crossed (A -> B and B -> A).
4. Build the result (`_output`), reusing the caller's TopicPartition objects where possible.

Complexity: the quota path is O(P log P) inside numpy plus O(C) Python steps. The general path adds
O(T * C) vectorised work per balancing cycle and O(log C) Python work per partition moved; the number of
moves follows the imbalance to repair (in the benchmarks a join or leave moves about what balance requires,
exactly that with equal subscriptions). Neither path compares members pairwise or searches partition by
partition, unlike the original KIP-54 algorithm that kafka-python still runs.

Determinism: members and topics are sorted, and the result depends only on the owned *sets*, never on the
iteration order of the mappings or collections passed in.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from cohort.assignment.assignors._cluster import Cluster, build_cluster
from cohort.assignment.assignors._general import general_target
from cohort.assignment.assignors._homogeneous import homogeneous_target
from cohort.assignment.assignors._output import assignment_from_owners
from cohort.assignment.types import EAGER, Assignment, Subscription

__all__ = ["StickyAssignor", "shared_subscription", "sticky_target"]


def shared_subscription(cluster: Cluster) -> np.ndarray | None:
    """The indexes of the active members if they all share one subscription (quota path), else None."""
    rows = cluster.subscribed
    active = np.flatnonzero(rows.any(axis=1))
    if len(active) and (rows[active] == rows[active[0]]).all():
        return active
    return None


def sticky_target(cluster: Cluster) -> np.ndarray:
    """The balanced, maximally sticky owner array (global partition id -> member index, -1 unassigned)."""
    if cluster.num_partitions == 0:
        return np.full(0, -1, dtype=np.int32)
    active = shared_subscription(cluster)
    if active is not None:
        return homogeneous_target(cluster, active)
    return general_target(cluster)


class StickyAssignor:
    """Balanced assignment that keeps owned partitions where balance allows (eager protocol).

    Owned partitions and their generation come in each member's `Subscription`; the assignor keeps no state,
    so one instance may be shared. The `rack` field is not used.

    >>> from cohort.assignment import StickyAssignor, Subscription
    >>> subs = {"C0": Subscription(["t0"]), "C1": Subscription(["t0", "t1"]), "C2": Subscription(["t1", "t2"])}
    >>> result = StickyAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, subs)
    >>> {m: [str(tp) for tp in tps] for m, tps in result.items()}
    {'C0': ['t0-0'], 'C1': ['t1-0', 't1-1'], 'C2': ['t2-0', 't2-1', 't2-2']}
    """

    name: str = "sticky"
    protocol: str = EAGER

    def assign(
        self,
        partitions_per_topic: Mapping[str, int],
        subscriptions: Mapping[str, Subscription],
    ) -> Assignment:
        """Return member id -> sorted partitions (every member is a key; idle members map to [])."""
        cluster = build_cluster(partitions_per_topic, subscriptions)
        return assignment_from_owners(cluster, sticky_target(cluster))
