"""The lag-aware target: balance each member's backlog, and move an owned partition only when that pays.

A member's *load* is the sum of its partitions' backlogs; the batch of a group lasts as long as its most loaded
member takes, so the goal is a small largest load (the *makespan*). The *ideal share* is the total backlog over
the members that subscribe to anything.

1. **Keep.** Every surviving owned claim stays (the cluster view already dropped invalid and conflicting
   ones); the free partitions are placed (step 3). This is the assignment with no move at all.
2. **Shed.** Members whose kept load is above `cap = ideal * (1 + threshold / 2)` release partitions: their
   largest among those no bigger than what they are still over by, in a few vectorised passes. A partition
   bigger than the excess is never released, so a donor ends at or just above the cap and never below it, and
   neither is one too big to land on the least loaded member without passing the cap (moving it would only
   move the peak). The released partitions are placed again (step 3).
3. **Place.** Partitions with a backlog above 5% of the ideal share ("heavy") go one by one, largest first,
   to the least loaded subscriber of their topic (longest processing time first: a heap when every member
   shares one subscription, else the least loaded subscriber of the topic). The others are cut from one line:
   the water level is the load to which the least loaded members can be raised with them, each member below
   it owns the stretch of the line between its load and the level, and a partition goes to the member whose
   stretch its start falls in, so no member ends more than one partition (under 5% of the ideal) above the
   level, and the level is at most the ideal share. With unequal subscriptions each topic is cut over its own
   subscribers, most loaded topics first. Partitions with no backlog are dealt by partition count, as the
   sticky assignor would (they cost nothing to read but each is still a consumer to run).
4. **Decide.** The shed-and-place assignment replaces the kept one only if its makespan is lower by more than
   `threshold * ideal`; otherwise nothing owned moves. So small backlog changes never move a partition, and
   when moves happen the result is within `threshold / 2` of the ideal plus one light partition.

Balance from scratch (nothing owned, so nothing can move): the makespan is at most the larger of the heavy
partitions' longest-processing-time makespan (within 4/3 of the optimum, and one partition above the ideal)
and the ideal plus 5% of it. With many partitions per member this is within 1.15x of
`max(ideal, largest partition)`; with few large partitions no assignment may be (two members, three equal
partitions: the best makespan is 4/3 of the ideal).

Cost: O(P log P) numpy work for the sorts, O(H log C) Python steps for the H heavy partitions (H < 20 C) and,
with unequal subscriptions, O(T) numpy steps over each topic's subscribers. Deterministic: members and topics
are sorted, ties go to the lower member index and partition id, and floats are only compared, never summed in
an order that depends on the input's iteration order.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from cohort.assignment.assignors._cluster import Cluster
from cohort.assignment.assignors._general import _water_fill

__all__ = ["DEFAULT_THRESHOLD", "HEAVY_SHARE", "LagPlan", "lag_plan", "loads_of"]

DEFAULT_THRESHOLD = 0.10
"""Owned partitions move only when that lowers the largest member's backlog by more than 10% of the ideal."""

HEAVY_SHARE = 0.05
"""Partitions above this fraction of the ideal share are placed one at a time, largest first."""

_SHED_PASSES = 3


@dataclass(frozen=True, eq=False)
class LagPlan:
    """One lag-aware target and the figures behind its decision (loads are records to read)."""

    owner: np.ndarray
    """int32[P]: global partition id -> member index, -1 if unassigned (no subscriber)."""
    ideal: float
    """Total backlog over the members that subscribe to something."""
    kept_makespan: int
    """Largest member load with every owned partition kept (free partitions placed)."""
    makespan: int
    """Largest member load of `owner`."""
    moved: int
    """Owned partitions `owner` gives to another member."""


@dataclass(frozen=True, eq=False)
class _Layout:
    """Per-cluster arrays the placement needs, computed once per plan."""

    topic_of: np.ndarray  # int64[P]
    subscribers: tuple[np.ndarray, ...]  # per topic: member indexes, sorted
    topic_order: tuple[int, ...]  # most loaded topics first (unequal subscriptions)
    active: np.ndarray  # members subscribing to something
    shared: bool  # every topic has exactly the active members as subscribers


def loads_of(owner: np.ndarray, weights: np.ndarray, num_members: int) -> np.ndarray:
    """int64[C]: each member's backlog under `owner`."""
    assigned = owner >= 0
    return np.bincount(owner[assigned], weights=weights[assigned], minlength=num_members).astype(np.int64)


def lag_plan(cluster: Cluster, weights: np.ndarray, threshold: float = DEFAULT_THRESHOLD) -> LagPlan:
    """The lag-aware owner array for `cluster` with `weights[g]` records to read on partition g (see module)."""
    if cluster.num_partitions == 0 or not cluster.subscribed.any():
        empty = np.full(cluster.num_partitions, -1, dtype=np.int32)
        return LagPlan(empty, 0.0, 0, 0, 0)
    layout = _layout(cluster, weights)
    ideal = float(weights.sum()) / len(layout.active)
    heavy_cut = HEAVY_SHARE * ideal
    kept = _place(cluster, layout, cluster.retained.copy(), weights, heavy_cut)
    kept_makespan = int(loads_of(kept, weights, cluster.num_members).max())
    if kept_makespan - ideal <= threshold * ideal:  # no assignment beats the ideal, so no gain can pay
        return LagPlan(kept, ideal, kept_makespan, kept_makespan, 0)
    shed = _shed(cluster, kept, weights, ideal * (1 + threshold / 2), layout.active)
    if shed is None:  # nobody above the cap, or nothing it could release: the candidate is the kept one
        return LagPlan(kept, ideal, kept_makespan, kept_makespan, 0)
    candidate = _place(cluster, layout, shed, weights, heavy_cut)
    makespan = int(loads_of(candidate, weights, cluster.num_members).max())
    if kept_makespan - makespan <= threshold * ideal:
        return LagPlan(kept, ideal, kept_makespan, kept_makespan, 0)
    moved = int(np.count_nonzero((cluster.retained >= 0) & (candidate != cluster.retained)))
    return LagPlan(candidate, ideal, kept_makespan, makespan, moved)


def _layout(cluster: Cluster, weights: np.ndarray) -> _Layout:
    sizes = np.diff(cluster.offsets)
    topic_of = np.repeat(np.arange(len(cluster.topics), dtype=np.int64), sizes)
    subscribers = tuple(np.flatnonzero(column).astype(np.int32) for column in cluster.subscribed.T)
    active = np.flatnonzero(cluster.subscribed.any(axis=1)).astype(np.int32)
    shared = all(len(s) == len(active) for s in subscribers)  # each subscriber set is a subset of active
    if shared:
        order: tuple[int, ...] = tuple(range(len(cluster.topics)))
    else:
        per_topic = np.add.reduceat(weights, cluster.offsets[:-1])  # every assignable topic has a partition
        order = tuple(
            sorted(
                range(len(cluster.topics)),
                key=lambda t: (Fraction(-int(per_topic[t]), max(1, len(subscribers[t]))), len(subscribers[t]), t),
            )
        )
    return _Layout(topic_of, subscribers, order, active, shared)


def _place(cluster: Cluster, layout: _Layout, owner: np.ndarray, weights: np.ndarray, heavy_cut: float) -> np.ndarray:
    """Give every unowned partition of a subscribed topic an owner (step 3 of the module docstring)."""
    num_members = cluster.num_members
    pool = np.flatnonzero(owner < 0)
    if len(pool) == 0:
        return owner
    loads = loads_of(owner, weights, num_members)
    pool_weights = weights[pool]
    work = pool[pool_weights > 0]
    heavy = work[weights[work] > heavy_cut]
    light = work[weights[work] <= heavy_cut]
    zero = pool[pool_weights == 0]

    if len(heavy):
        heavy = heavy[np.lexsort((heavy, -weights[heavy]))]  # largest first, then by partition id
        if layout.shared:
            _heavy_heap(owner, loads, heavy, weights, layout.active)
        else:
            _heavy_scan(owner, loads, heavy, weights, layout)
    if layout.shared:
        if len(light):
            positions = _cut(loads[layout.active], weights[light])
            owner[light] = layout.active[positions]
        if len(zero):
            counts = np.bincount(owner[owner >= 0], minlength=num_members)
            owner[zero] = np.repeat(layout.active, _water_fill(counts[layout.active], len(zero)))
        return owner
    light_topic = layout.topic_of[light]
    zero_topic = layout.topic_of[zero]
    counts = np.bincount(owner[owner >= 0], minlength=num_members)
    for t in layout.topic_order:
        subs = layout.subscribers[t]
        items = light[light_topic == t]
        if len(items):
            positions = _cut(loads[subs], weights[items])
            owner[items] = subs[positions]
            loads[subs] += np.bincount(positions, weights=weights[items], minlength=len(subs)).astype(np.int64)
            counts[subs] += np.bincount(positions, minlength=len(subs))
        idle = zero[zero_topic == t]
        if len(idle):
            amounts = _water_fill(counts[subs], len(idle))
            owner[idle] = np.repeat(subs, amounts)
            counts[subs] += amounts
    return owner


def _heavy_heap(
    owner: np.ndarray, loads: np.ndarray, heavy: np.ndarray, weights: np.ndarray, members: np.ndarray
) -> None:
    """Longest processing time first over one shared subscription: each partition to the least loaded member."""
    heap = list(zip(loads[members].tolist(), members.tolist(), strict=True))
    heapq.heapify(heap)
    chosen = []
    for w in weights[heavy].tolist():
        load, member = heap[0]
        heapq.heapreplace(heap, (load + w, member))
        chosen.append(member)
    owner[heavy] = chosen
    for load, member in heap:
        loads[member] = load


def _heavy_scan(owner: np.ndarray, loads: np.ndarray, heavy: np.ndarray, weights: np.ndarray, layout: _Layout) -> None:
    """Longest processing time first with unequal subscriptions: the least loaded subscriber of the topic."""
    for g, t, w in zip(heavy.tolist(), layout.topic_of[heavy].tolist(), weights[heavy].tolist(), strict=True):
        subs = layout.subscribers[t]
        member = int(subs[int(np.argmin(loads[subs]))])
        owner[g] = member
        loads[member] += w


def _cut(loads: np.ndarray, items: np.ndarray) -> np.ndarray:
    """Which of the members (by position in `loads`) gets each item, cutting the items from one line.

    The water level `L` raises the least loaded members with all the items; member i owns the stretch
    `max(0, L - loads[i])` of the line, stretches in member order; an item goes to the member whose stretch its
    start falls in. A member therefore ends below `L` plus its last item, and members at or above `L` get none.
    """
    total = float(items.sum())
    order = np.argsort(loads, kind="stable")
    level_sorted = loads[order].astype(np.float64)
    prefix = np.cumsum(level_sorted)
    need = np.arange(1, len(loads) + 1) * level_sorted - prefix
    j = int(np.searchsorted(need, total, side="right"))  # need[0] == 0, so j >= 1
    level = (total + prefix[j - 1]) / j
    bounds = np.cumsum(np.maximum(level - loads, 0.0))
    starts = np.cumsum(items) - items
    positions = np.searchsorted(bounds, starts, side="right")
    last = int(np.flatnonzero(level > loads)[-1])  # rounding may put the last starts past the last stretch
    return np.minimum(positions, last)


def _shed(cluster: Cluster, kept: np.ndarray, weights: np.ndarray, cap: float, active: np.ndarray) -> np.ndarray | None:
    """`kept` minus what members above `cap` release: their largest partitions no bigger than what they are
    still over by, in a few passes, never taking a member below `cap`. A partition too big to land on the least
    loaded member without passing the cap stays where it is (moving it would only move the peak). Whether a
    partition was owned before does not matter, so a plan fed back as owned is decided the same way again.
    None when nothing is released."""
    owner = kept.copy()
    num_members = cluster.num_members
    loads = loads_of(owner, weights, num_members)
    over = loads - cap
    donors = over > 0
    if not donors.any():
        return None
    room = cap - float(loads[active].min())  # a bigger partition would push even the least loaded over the cap
    held = np.flatnonzero(owner >= 0)
    held = held[donors[owner[held]] & (weights[held] > 0) & (weights[held] <= room)]
    who = owner[held]
    w = weights[held]
    order = np.lexsort((held, -w, who))  # by member, largest first, then by partition id
    held, who, w = held[order], who[order], w[order]
    first = np.searchsorted(who, who, side="left")
    remaining = np.where(donors, over, 0.0)
    released = np.zeros(len(held), dtype=bool)
    for _ in range(_SHED_PASSES):
        eligible = ~released & (w <= remaining[who])
        step = np.where(eligible, w, 0)
        running = np.cumsum(step)
        within = running - (running[first] - step[first])  # cumulative per member
        take = eligible & (within <= remaining[who])
        if not take.any():
            break
        released |= take
        remaining -= np.bincount(who[take], weights=w[take], minlength=num_members)
    if not released.any():
        return None
    owner[held[released]] = -1
    return owner
