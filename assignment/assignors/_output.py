"""Turn an owner array (global partition id -> member index) into the public `Assignment` dict.

Building a million TopicPartition tuples dominates the cost of a large assignment, so the caller's own
TopicPartition objects are reused wherever a partition was passed in, new ones are built in bulk per topic
with `tuple.__new__` (no Python-level call per item), and the per-member lists are cut from one sorted array.
Global ids are in (topic, partition) order, so each member's slice is already sorted.
"""

from __future__ import annotations

from itertools import repeat

import numpy as np

from cohort.assignment.assignors._cluster import Cluster
from cohort.assignment.types import Assignment
from cohort.common.types import TopicPartition

__all__ = ["assignment_from_owners"]

_new_tuple = tuple.__new__


def assignment_from_owners(cluster: Cluster, owner: np.ndarray) -> Assignment:
    """Every member id -> its partitions sorted by (topic, partition); `owner[g] == -1` leaves g out."""
    assigned = owner >= 0
    counts = np.bincount(owner[assigned], minlength=cluster.num_members)
    objects = cluster.objects.copy()
    missing = np.flatnonzero(assigned & ~cluster.has_object)
    if len(missing):
        bounds = np.searchsorted(missing, cluster.offsets).tolist()
        for t, topic in enumerate(cluster.topics):
            lo, hi = bounds[t], bounds[t + 1]
            if lo == hi:
                continue
            gids = missing[lo:hi]
            numbers = (gids - cluster.offsets[t]).tolist()
            built = list(map(_new_tuple, repeat(TopicPartition), zip(repeat(topic), numbers)))
            objects[gids] = np.fromiter(built, dtype=object, count=len(built))
    key = owner.astype(np.int16) if cluster.num_members < np.iinfo(np.int16).max else owner
    order = np.argsort(key, kind="stable")  # unassigned (-1) first, then by member, gid ascending within
    flat = objects[order[len(owner) - int(counts.sum()) :]].tolist()
    ends = np.cumsum(counts).tolist()
    starts = [0, *ends][: len(ends)]
    return {m: flat[s:e] for m, s, e in zip(cluster.members, starts, ends, strict=True)}
