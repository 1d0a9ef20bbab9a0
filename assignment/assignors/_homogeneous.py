"""The sticky target when every active member has the same subscription: quotas, keep, fill.

With `P` partitions and `n` active members, every member's quota is `P // n` and `P % n` of them get one
more. The extra slots go to the members that keep the most of what they own (ranked by
`min(owned, P // n + 1)` descending, then by id), because only a member owning more than `P // n` saves a
revocation by getting one. Each member then keeps its owned partitions up to its quota (the lowest
(topic, partition) ones when it must give some up), and the partitions left over are dealt to the members
still below quota in contiguous slices, in member order.

This revokes the least any balanced assignment can: `sum(max(0, owned - P // n)) - min(P % n, #{owned >
P // n})`. No member both gives and receives, so no partition moves A -> B while another moves B -> A.

The leftover pool is ordered by (partition number, topic) before slicing, so a member filled from scratch
gets partitions spread over many topics rather than a run of one topic. Any fixed order would do for the
cooperative protocol: the second round's pool is a subset of the first's in the same order, so the
members below quota take back exactly the slices they were promised.

Everything is numpy over global partition ids: O(P log P) in C, O(n) in Python.
"""

from __future__ import annotations

import numpy as np

from cohort.assignment.assignors._cluster import Cluster

__all__ = ["homogeneous_target"]


def homogeneous_target(cluster: Cluster, active: np.ndarray) -> np.ndarray:
    """Owner array for `cluster` where `active` (sorted member indexes) all share one subscription.

    Members outside `active` subscribe to nothing assignable and get nothing.
    """
    owner = cluster.retained.copy()
    num_members = cluster.num_members
    base, extra = divmod(cluster.num_partitions, len(active))

    held = np.bincount(owner[owner >= 0], minlength=num_members)
    held_active = held[active]
    rank = np.lexsort((np.arange(len(active)), -np.minimum(held_active, base + 1)))
    quota = np.zeros(num_members, dtype=np.int64)
    quota[active] = base
    quota[active[rank[:extra]]] += 1

    over = held > quota
    if over.any():
        owned = np.flatnonzero(owner >= 0)
        who = owner[owned]
        chosen = over[who]
        gids, who = owned[chosen], who[chosen]
        order = np.argsort(_compact(who, num_members), kind="stable")  # by member, gid ascending within
        gids, who = gids[order], who[order]
        rank_within = np.arange(len(who)) - np.searchsorted(who, who)
        owner[gids[rank_within >= quota[who]]] = -1

    deficit = quota - np.minimum(held, quota)
    pool = np.flatnonzero(owner < 0)
    topic = np.searchsorted(cluster.offsets, pool, side="right") - 1
    numbers = pool - cluster.offsets[topic]
    pool = pool[np.argsort(numbers, kind="stable")]  # (partition number, topic) order
    receivers = np.repeat(np.arange(num_members, dtype=np.int32), deficit)
    if len(receivers) != len(pool):
        raise AssertionError(f"quota fill mismatch: {len(receivers)} slots for {len(pool)} partitions")
    owner[pool] = receivers
    return owner


def _compact(values: np.ndarray, bound: int) -> np.ndarray:
    """`values` in the narrowest integer type that holds `bound` (16-bit keys sort by radix, much faster)."""
    return values.astype(np.int16) if bound < np.iinfo(np.int16).max else values
