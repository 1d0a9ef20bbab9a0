"""The sticky target for unequal subscriptions: keep, water-fill per topic, then balance per topic.

1. Keep every surviving owned claim (the cluster view already dropped invalid and conflicting ones).
2. Assign the unowned partitions topic by topic, the most loaded topics first (partitions per subscriber
   descending, then fewer subscribers, then name, as Kafka's uniform assignor orders them). Within a topic the
   partitions are water-filled over its subscribers: the least loaded are raised to a common level, which is
   computed in one vectorised step from sorted counts and prefix sums.
3. Balance. The target is: for every topic, no member holding one of its partitions has two or more
   partitions more than the least loaded subscriber of that topic. This is exactly "no member two or more
   below another could take one of its partitions". Each topic is balanced on its own with a max-heap of
   donors (holders at least two above the topic's minimum) and a min-heap of receivers, moving partitions
   the donor did not own before first; topics are revisited in a cycle until a full cycle moves nothing.
4. Uncross. Chains of moves through a third member can leave one partition moved A -> B and another of the
   same topic moved B -> A; both go back home. Per-topic counts do not change, so balance is untouched.

Every move lowers the sum of squared member loads by at least two, so the cycle always ends. A topic that is
already balanced costs two vectorised reductions per cycle; a move costs O(log C) Python work. In practice a
join or leave moves only what balance requires and the cycle ends after one or two rounds.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from fractions import Fraction

import numpy as np

from cohort.assignment.assignors._cluster import Cluster

__all__ = ["general_target"]


def general_target(cluster: Cluster) -> np.ndarray:
    """Owner array for a cluster whose members subscribe to different topic sets."""
    owner = cluster.retained.copy()
    counts = np.bincount(owner[owner >= 0], minlength=cluster.num_members).astype(np.int64)
    subscribers = [np.flatnonzero(column) for column in cluster.subscribed.T]
    sizes = np.diff(cluster.offsets).tolist()
    order = sorted(
        range(len(cluster.topics)),
        key=lambda t: (Fraction(-sizes[t], len(subscribers[t])), len(subscribers[t]), t),
    )
    offsets = cluster.offsets.tolist()
    for t in order:
        free = np.flatnonzero(owner[offsets[t] : offsets[t + 1]] < 0) + offsets[t]
        if len(free):
            amounts = _water_fill(counts[subscribers[t]], len(free))
            owner[free] = np.repeat(subscribers[t], amounts)
            counts[subscribers[t]] += amounts

    shared = [t for t in order if len(subscribers[t]) >= 2]
    idle = 0  # topics visited in a row without a move
    position = 0
    while shared and idle < len(shared):
        t = shared[position]
        position = (position + 1) % len(shared)
        moved = _balance_topic(owner, counts, cluster.retained, subscribers[t], offsets[t], offsets[t + 1])
        idle = 1 if moved else idle + 1
    _uncross(owner, cluster.retained, cluster.offsets)
    return owner


def _water_fill(current: np.ndarray, units: int) -> np.ndarray:
    """How many of `units` new partitions each member gets, raising the least loaded to a common level.

    `current` are the members' loads in member order; ties at the final level are broken towards the lower
    member index. The result's loads never exceed the smallest load of a member that got nothing.
    """
    order = np.argsort(current, kind="stable")
    level_sorted = current[order]
    prefix = np.cumsum(level_sorted)
    # need[j-1]: units needed to lift the j least loaded members to the load of the j-th.
    need = np.arange(1, len(current) + 1) * level_sorted - prefix
    j = int(np.searchsorted(need, units, side="right"))  # need[0] == 0, so j >= 1
    level, remainder = divmod(units + int(prefix[j - 1]), j)
    amounts = np.zeros(len(current), dtype=np.int64)
    amounts[order[:j]] = level - level_sorted[:j]
    amounts[np.sort(order[:j])[:remainder]] += 1
    return amounts


def _balance_topic(
    owner: np.ndarray,
    counts: np.ndarray,
    retained: np.ndarray,
    subscribers: np.ndarray,
    start: int,
    stop: int,
) -> int:
    """Move this topic's partitions from overloaded holders to its least loaded subscribers; return moves.

    On return every holder of the topic has at most one partition more than the topic's least loaded
    subscriber. Within the call the roles never swap: a receiver ends at most one above the (rising)
    minimum and a donor at least one above it, so stale heap entries can simply be dropped.
    """
    holders = owner[start:stop]
    subscriber_counts = counts[subscribers]
    low = int(subscriber_counts.min())
    holder_counts = counts[holders]
    high = int(holder_counts.max())
    if high - low < 2:
        return 0

    positions = np.flatnonzero(holder_counts >= low + 2)
    donors_of = holders[positions]
    previously_theirs = retained[start + positions] == donors_of
    # Per donor: partitions it did not own before first (lowest first), then its own, highest first, so
    # that like the quota path a member keeps its lowest partitions.
    sort = np.lexsort((np.where(previously_theirs, -positions, positions), previously_theirs, donors_of))
    positions, donors_of = positions[sort].tolist(), donors_of[sort]
    donors, first, taken = np.unique(donors_of, return_index=True, return_counts=True)
    receivers = subscribers[subscriber_counts <= high - 2].tolist()
    donors_list = donors.tolist()
    next_index = dict(zip(donors_list, first.tolist(), strict=True))
    end_index = dict(zip(donors_list, (first + taken).tolist(), strict=True))
    load = {m: int(counts[m]) for m in donors_list + receivers}

    donor_heap = [(-load[b], b) for b in donors_list]
    receiver_heap = [(load[a], a) for a in receivers]
    heapq.heapify(donor_heap)
    heapq.heapify(receiver_heap)
    moves = 0
    while donor_heap and receiver_heap:
        negative, donor = donor_heap[0]
        if -negative != load[donor]:
            heapq.heappop(donor_heap)
            continue
        receiver_load, receiver = receiver_heap[0]
        if receiver_load != load[receiver]:
            heapq.heappop(receiver_heap)
            continue
        if -negative - receiver_load < 2:
            break
        heapq.heappop(donor_heap)
        heapq.heappop(receiver_heap)
        index = next_index[donor]
        next_index[donor] = index + 1
        owner[start + positions[index]] = receiver
        load[donor] -= 1
        load[receiver] += 1
        moves += 1
        if index + 1 < end_index[donor]:
            heapq.heappush(donor_heap, (-load[donor], donor))
        heapq.heappush(receiver_heap, (load[receiver], receiver))
    if moves:
        members = list(load)
        counts[members] = [load[m] for m in members]
    return moves


def _uncross(owner: np.ndarray, retained: np.ndarray, offsets: np.ndarray) -> None:
    """Send back pairs of same-topic partitions that moved A -> B and B -> A (counts stay the same)."""
    moved = np.flatnonzero((retained >= 0) & (owner >= 0) & (owner != retained))
    if len(moved) < 2:
        return
    topics = (np.searchsorted(offsets, moved, side="right") - 1).tolist()
    flows: defaultdict[tuple[int, int, int], list[int]] = defaultdict(list)
    for gid, topic, source, target in zip(
        moved.tolist(), topics, retained[moved].tolist(), owner[moved].tolist(), strict=True
    ):
        flows[(topic, source, target)].append(gid)
    for (topic, source, target), forward in flows.items():
        backward = flows.get((topic, target, source))
        if source < target and backward:
            pairs = min(len(forward), len(backward))
            owner[forward[:pairs]] = source
            owner[backward[:pairs]] = target
