"""A backlog mapping as an int64 array over the cluster's global partition ids (`_cluster`).

Built in a few C-level passes over the mapping (no Python work per partition beyond the dict's own), so a
million-partition backlog costs a few tenths of a second at most. Partitions the mapping does not name, and
entries for partitions that are not assignable (unknown topic, beyond the count), weigh nothing. The
mapping's TopicPartition keys are kept for the result, as the caller's owned partitions are, so an initial
round does not build a million new tuples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter

import numpy as np

from cohort.assignment.assignors._cluster import Cluster
from cohort.common.types import TopicPartition

__all__ = ["IndexedBacklog", "index_backlog"]

_INT_TYPES = (int, np.integer)
_topic_of = itemgetter(0)
_partition_of = itemgetter(1)


@dataclass(frozen=True, eq=False)
class IndexedBacklog:
    """The backlog per global partition id, and the cluster with the backlog's keys as reusable objects."""

    weights: np.ndarray | None
    """int64[P] records to read, or None when nothing is known (every assignable partition 0 or absent)."""
    cluster: Cluster


def index_backlog(cluster: Cluster, backlog: Mapping[TopicPartition, int] | None) -> IndexedBacklog:
    """Index `backlog` over `cluster`; negative or non-integer values and malformed keys are a ValueError."""
    if not backlog or cluster.num_partitions == 0:
        return IndexedBacklog(None, cluster)
    count = len(backlog)
    kinds = set(map(type, backlog.values()))
    if any(kind is bool or not issubclass(kind, _INT_TYPES) for kind in kinds):
        bad = next(v for v in backlog.values() if isinstance(v, bool) or not isinstance(v, _INT_TYPES))
        raise ValueError(f"backlog values must be integers (records), got {bad!r}")
    values = np.fromiter(backlog.values(), dtype=np.int64, count=count)
    if values.min() < 0:
        raise ValueError(f"backlog of {list(backlog)[int(np.argmin(values))]} is negative: {int(values.min())}")
    try:
        partition = np.fromiter(map(_partition_of, backlog), dtype=np.int64, count=count)
        topics = map(_topic_of, backlog)
    except (TypeError, ValueError, OverflowError, IndexError):
        raise ValueError("backlog keys must be TopicPartition values with integer partition numbers") from None
    tindex = {t: i for i, t in enumerate(cluster.topics)}
    topic = np.fromiter(map(tindex.get, topics, repeat(-1)), dtype=np.int64, count=count)
    sizes = np.diff(cluster.offsets)
    limit = np.append(sizes, 0)[topic]  # topic -1 (not assignable) reads the trailing 0
    inside = np.flatnonzero((partition >= 0) & (partition < limit))
    gids = cluster.offsets[topic[inside]] + partition[inside]
    weights = np.zeros(cluster.num_partitions, dtype=np.int64)
    weights[gids] = values[inside]
    if not weights.any():
        return IndexedBacklog(None, cluster)
    missing = ~cluster.has_object[gids]
    if not missing.any() or set(map(type, backlog)) != {TopicPartition}:
        return IndexedBacklog(weights, cluster)
    keys = np.fromiter(backlog, dtype=object, count=count)[inside]
    objects = cluster.objects.copy()
    objects[gids[missing]] = keys[missing]
    has_object = cluster.has_object.copy()
    has_object[gids] = True
    return IndexedBacklog(weights, dataclasses.replace(cluster, objects=objects, has_object=has_object))
