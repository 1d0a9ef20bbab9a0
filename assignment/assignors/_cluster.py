"""An indexed, array-backed view of one `assign` call's input, shared by the sticky assignors.

Members are numbered by sorted id and the partitions of the assignable topics (those with metadata, at least
one partition and at least one subscriber) are numbered 0..P-1 in (topic, partition) order, topic by topic:
partition `p` of the `t`-th topic has global id `offsets[t] + p`. Everything the sticky algorithms need is
then a handful of numpy arrays, so per-partition work happens in C rather than in Python.

Building the view also validates the owned partitions and settles conflicting claims:

- a member listing a partition twice is a `ValueError`;
- a partition claimed by several members goes to the claim with the highest generation; when several claims
  share the highest generation none of them keeps it (the group cannot tell which is current). A claim
  beaten by a newer generation is stale: that member no longer holds the partition;
- the winning claim is then dropped if it is on a deleted topic, on a topic the member no longer subscribes
  to, or beyond the topic's current partition count. The partition is free, not handed back to a stale
  claim: the member that had it most recently still holds it until it revokes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import itemgetter

import numpy as np

from cohort.assignment.assignors._common import (
    checked_generation,
    checked_members,
    checked_partition_counts,
    duplicate_owned_error,
    effective_topics,
)
from cohort.assignment.types import Subscription
from cohort.common.types import TopicPartition

__all__ = ["Cluster", "build_cluster"]

_topic_of = itemgetter(0)
_partition_of = itemgetter(1)


@dataclass(frozen=True, eq=False)
class Cluster:
    """The indexed input of one assignment; arrays are owned by the view and never mutated after build."""

    members: tuple[str, ...]
    """Member ids, sorted; a member's index is its position here."""
    topics: tuple[str, ...]
    """Assignable topics, sorted."""
    offsets: np.ndarray
    """int64[T + 1]: the partitions of topic t have global ids offsets[t] .. offsets[t + 1] - 1."""
    subscribed: np.ndarray
    """bool[C, T]: member c subscribes to topic t (and the topic is assignable)."""
    retained: np.ndarray
    """int32[P]: the member whose claim on the partition survives validation and conflicts, else -1."""
    holders: np.ndarray
    """int32[P]: how many members still hold the partition: they list it (subscribed or not) and no other
    member lists it with a higher generation. A claim beaten by a newer generation is stale, not held."""
    holder: np.ndarray
    """int32[P]: a member holding the partition (the only one when holders is 1), else -1."""
    objects: np.ndarray
    """object[P]: the caller's TopicPartition for the partition where one was passed in, else None."""
    has_object: np.ndarray
    """bool[P]: objects[g] holds a reusable TopicPartition."""

    @property
    def num_partitions(self) -> int:
        return int(self.offsets[-1])

    @property
    def num_members(self) -> int:
        return len(self.members)


def build_cluster(partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]) -> Cluster:
    """Validate the input and index it; see the module docstring for the rules applied to owned partitions."""
    counts = checked_partition_counts(partitions_per_topic)
    members = checked_members(subscriptions)
    subs = [subscriptions[m] for m in members]
    generations = np.array([checked_generation(m, s) for m, s in zip(members, subs, strict=True)], np.int64)

    # Effective subscriptions, memoised because large groups usually share one subscription.
    memo: dict[frozenset[str], frozenset[str]] = {}
    effective: list[frozenset[str]] = []
    for sub in subs:
        key = sub.topics if isinstance(sub.topics, frozenset) else frozenset(sub.topics)
        eff = memo.get(key)
        if eff is None:
            eff = memo[key] = effective_topics(key, counts)
        effective.append(eff)
    topics = tuple(sorted(frozenset().union(*memo.values())))
    tindex = {t: i for i, t in enumerate(topics)}
    sizes = np.array([counts[t] for t in topics], dtype=np.int64)
    offsets = np.zeros(len(topics) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])

    subscribed = np.zeros((len(members), len(topics)), dtype=bool)
    rows: dict[frozenset[str], np.ndarray] = {}
    for c, eff in enumerate(effective):
        if eff:
            row = rows.get(eff)
            if row is None:
                row = rows[eff] = np.zeros(len(topics), dtype=bool)
                row[[tindex[t] for t in eff]] = True
            subscribed[c] = row

    claims = _Claims.parse(members, subs, topics, sizes, offsets)
    return claims.to_cluster(members, topics, offsets, subscribed, generations)


@dataclass(frozen=True, eq=False)
class _Claims:
    """Every owned-partition entry of every member, flattened in member order."""

    flat: list[TopicPartition]
    member: np.ndarray  # int32[K]
    in_space: np.ndarray  # int64[K_in]: indexes into flat of claims on assignable, in-range partitions
    gid: np.ndarray  # int64[K_in]: their global partition ids
    topic: np.ndarray  # int64[K_in]: their topic indexes
    reusable: np.ndarray  # bool[K_in]: the entry is a TopicPartition object that may be returned as is

    @staticmethod
    def parse(
        members: Sequence[str],
        subs: Sequence[Subscription],
        topics: Sequence[str],
        sizes: np.ndarray,
        offsets: np.ndarray,
    ) -> _Claims:
        lengths = [len(s.owned_partitions) for s in subs]
        total = sum(lengths)
        flat: list[TopicPartition] = list(chain.from_iterable(s.owned_partitions for s in subs))
        member = np.repeat(np.arange(len(members), dtype=np.int32), lengths)
        if total == 0:
            empty = np.zeros(0, dtype=np.int64)
            return _Claims(flat, member, empty, empty, empty, np.zeros(0, dtype=bool))
        kinds = set(map(type, flat))
        if kinds != {TopicPartition}:
            for entry in flat:
                if not isinstance(entry, tuple) or len(entry) != 2:
                    raise ValueError(f"owned partitions must be TopicPartition values, got {entry!r}")
        try:
            partition = np.fromiter(map(_partition_of, flat), dtype=np.int64, count=total)
        except (TypeError, ValueError, OverflowError):
            raise ValueError("owned partition numbers must be integers") from None
        tindex = {t: i for i, t in enumerate(topics)}
        topic = np.fromiter(map(tindex.get, map(_topic_of, flat), repeat(-1)), dtype=np.int64, count=total)
        limit = np.append(sizes, 0)[topic]  # topic -1 (not assignable) reads the trailing 0
        in_space = np.flatnonzero((partition >= 0) & (partition < limit))
        topic_in = topic[in_space]
        gid = offsets[topic_in] + partition[in_space]
        if kinds == {TopicPartition}:
            reusable = np.ones(len(in_space), dtype=bool)
        else:
            reusable = np.fromiter((type(flat[i]) is TopicPartition for i in in_space.tolist()), bool)
        claims = _Claims(flat, member, in_space, gid, topic_in, reusable)
        claims.reject_duplicates(members, topics, offsets)
        return claims

    def reject_duplicates(self, members: Sequence[str], topics: Sequence[str], offsets: np.ndarray) -> None:
        """Raise if one member lists a partition twice (assignable or not)."""
        num_partitions = int(offsets[-1])
        if len(self.gid):
            per_partition = np.bincount(self.gid, minlength=num_partitions)
            if per_partition.max() > 1:
                shared = per_partition[self.gid] > 1
                claimant = self.member[self.in_space[shared]].astype(np.int64)
                keys = np.sort(claimant * num_partitions + self.gid[shared])
                repeated = np.flatnonzero(keys[1:] == keys[:-1])
                if len(repeated):
                    member, gid = divmod(int(keys[repeated[0]]), num_partitions)
                    t = int(np.searchsorted(offsets, gid, side="right")) - 1
                    raise duplicate_owned_error(members[member], topics[t], gid - int(offsets[t]))
        outside = np.ones(len(self.flat), dtype=bool)
        outside[self.in_space] = False
        seen: set[tuple[int, str, int]] = set()
        for i in np.flatnonzero(outside).tolist():
            topic, partition = self.flat[i]
            key = (int(self.member[i]), topic, partition)
            if key in seen:
                raise duplicate_owned_error(members[key[0]], topic, partition)
            seen.add(key)

    def to_cluster(
        self,
        members: Sequence[str],
        topics: tuple[str, ...],
        offsets: np.ndarray,
        subscribed: np.ndarray,
        generations: np.ndarray,
    ) -> Cluster:
        num_partitions = int(offsets[-1])
        claimant = self.member[self.in_space]
        holders, holder = _holders(self.gid, claimant, generations, num_partitions)
        # The sole holder keeps the partition if it still subscribes to the topic.
        retained = np.full(num_partitions, -1, dtype=np.int32)
        sole = np.flatnonzero(holders == 1)
        if len(sole):
            topic = np.searchsorted(offsets, sole, side="right") - 1
            keeps = subscribed[holder[sole], topic]
            retained[sole[keeps]] = holder[sole[keeps]]

        objects = np.empty(num_partitions, dtype=object)
        has_object = np.zeros(num_partitions, dtype=bool)
        if len(self.gid):
            source = self.in_space[self.reusable]
            targets = self.gid[self.reusable]
            if len(source) == len(self.flat):  # the common case: every entry is reusable, in input order
                picked = np.fromiter(self.flat, dtype=object, count=len(source))
            else:
                picked = np.fromiter(map(self.flat.__getitem__, source.tolist()), dtype=object, count=len(source))
            objects[targets] = picked
            has_object[targets] = True
        return Cluster(
            members=tuple(members),
            topics=topics,
            offsets=offsets,
            subscribed=subscribed,
            retained=retained,
            holders=holders,
            holder=holder,
            objects=objects,
            has_object=has_object,
        )


def _holders(
    gid: np.ndarray, claimant: np.ndarray, generations: np.ndarray, num_partitions: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per partition: how many claims are at the highest generation among its claims, and one such claimant."""
    holder = np.full(num_partitions, -1, dtype=np.int32)
    if len(gid) == 0:
        return np.zeros(num_partitions, dtype=np.int32), holder
    count = np.bincount(gid, minlength=num_partitions)
    if count.max() > 1:
        generation = generations[claimant]
        best = np.full(num_partitions, np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(best, gid, generation)
        current = generation == best[gid]
        gid, claimant = gid[current], claimant[current]
        count = np.bincount(gid, minlength=num_partitions)
    holder[gid] = claimant
    return count.astype(np.int32), holder
