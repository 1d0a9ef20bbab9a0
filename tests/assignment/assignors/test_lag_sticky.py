"""The lag-aware sticky assignor: balance of backlog, stickiness, determinism, cooperative rounds, fallback.

Property tests draw small clusters (a seed drives the bulk, so a failure report reproduces it) and run under the
"assignors-lag" hypothesis profile: fast enough for every `make test`; COHORT_ASSIGNOR_PROFILE=assignors-thorough
runs many more examples.
"""

from __future__ import annotations

import os
import random
from collections.abc import Mapping
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from cohort.assignment import (
    CooperativeStickyAssignor,
    LagStickyAssignor,
    StickyAssignor,
    Subscription,
    get_assignor,
)
from cohort.assignment.assignors._lag import DEFAULT_THRESHOLD
from cohort.common.types import TopicPartition
from tests.assignment.assignors.test_oracle import all_assignable, check_complete, check_valid, held_by_others

settings.register_profile(
    "assignors-lag", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.register_profile("assignors-thorough", parent=settings.get_profile("assignors-lag"), max_examples=1000)
PROFILE = settings.get_profile(os.environ.get("COHORT_ASSIGNOR_PROFILE", "assignors-lag"))

LAG = LagStickyAssignor()
Subs = dict[str, Subscription]
Result = Mapping[str, list[TopicPartition]]
Backlog = dict[TopicPartition, int]


@dataclass(frozen=True)
class Case:
    counts: dict[str, int]
    subs: Subs
    backlog: Backlog


def loads(result: Result, backlog: Mapping[TopicPartition, int]) -> dict[str, int]:
    return {m: sum(backlog.get(tp, 0) for tp in tps) for m, tps in result.items()}


def fed_back(subs: Mapping[str, Subscription], result: Result, generation: int) -> Subs:
    return {m: Subscription(s.topics, result[m], generation) for m, s in subs.items()}


def draw_backlog(rng: random.Random, partitions: list[TopicPartition], mode: str) -> Backlog:
    """uniform, skewed (a few partitions hold most records), sparse (zeros and missing entries)."""
    backlog: Backlog = {}
    for tp in partitions:
        if mode == "uniform":
            backlog[tp] = rng.randint(0, 1000)
        elif mode == "skewed":
            backlog[tp] = int(rng.paretovariate(1.2) * 100)
        elif rng.random() < 0.5:
            backlog[tp] = rng.choice([0, rng.randint(1, 5000)])
    return backlog


@st.composite
def cases(draw: st.DrawFn, *, owned: bool = True, equal: bool | None = None) -> Case:
    """1-6 topics of 0-40 partitions, 1-10 members on equal or unequal subscriptions, owned partitions from an
    earlier (disjoint) layout, and a backlog drawn in one of three shapes."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    same = draw(st.booleans()) if equal is None else equal
    counts = {f"t{i}": rng.randint(0, 40) for i in range(draw(st.integers(1, 6)))}
    names = sorted(counts)
    members = [f"m{i}" for i in range(draw(st.integers(1, 10)))]
    topics = {m: names if same else rng.sample(names, rng.randint(0, len(names))) for m in members}
    partitions = [TopicPartition(t, p) for t, n in counts.items() for p in range(n)]
    layout: dict[str, list[TopicPartition]] = {m: [] for m in members}
    if owned and draw(st.booleans()):
        for tp in partitions:
            holders = [m for m in members if tp.topic in topics[m]]
            if holders and rng.random() < 0.9:
                layout[rng.choice(holders)].append(tp)
    subs = {m: Subscription(topics[m], layout[m], 1 if layout[m] else -1) for m in members}
    return Case(counts, subs, draw_backlog(rng, partitions, draw(st.sampled_from(["uniform", "skewed", "sparse"]))))


def shuffled(case: Case, seed: int) -> Case:
    """The same input with every mapping and owned list in another order."""
    rng = random.Random(seed)
    members = list(case.subs)
    rng.shuffle(members)
    subs = {}
    for m in members:
        owned = list(case.subs[m].owned_partitions)
        rng.shuffle(owned)
        subs[m] = Subscription(list(case.subs[m].topics)[::-1], owned, case.subs[m].generation)
    keys = list(case.backlog)
    rng.shuffle(keys)
    return Case(dict(reversed(case.counts.items())), subs, {k: case.backlog[k] for k in keys})


# --------------------------------------------------------------------------------------------- registration


def test_lag_sticky_is_registered_as_a_cooperative_backlog_assignor() -> None:
    assignor = get_assignor("lag-sticky")
    assert isinstance(assignor, LagStickyAssignor)
    assert (assignor.protocol, assignor.uses_backlog, assignor.threshold) == ("cooperative", True, DEFAULT_THRESHOLD)


@pytest.mark.parametrize("threshold", [-0.1, float("nan"), True, "0.1", 10])
def test_a_threshold_outside_its_range_is_refused(threshold: object) -> None:
    with pytest.raises(ValueError, match="threshold"):
        LagStickyAssignor(threshold=threshold)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("backlog", "message"),
    [({TopicPartition("t", 0): -1}, "negative"), ({TopicPartition("t", 0): 1.5}, "integers"), ({"t": 3}, "keys")],
)
def test_bad_backlog_values_are_refused(backlog: Mapping[TopicPartition, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LAG.assign({"t": 2}, {"a": Subscription(["t"])}, backlog=backlog)


def test_the_heaviest_partition_gets_a_member_to_itself() -> None:
    subs = {m: Subscription(["t"]) for m in "ABC"}
    records = [4000, 4000, 4000, 10, 10, 10, 10, 10, 9000]
    backlog = {TopicPartition("t", p): n for p, n in enumerate(records)}
    result = LAG.assign({"t": 9}, subs, backlog=backlog)
    assert loads(result, backlog) == {"A": 9000, "B": 8000, "C": 4050}
    counted = StickyAssignor().assign({"t": 9}, subs)
    assert max(loads(counted, backlog).values()) == 12000  # three partitions each: the three 4000s together


# ------------------------------------------------------------------------------------------------ balance


@st.composite
def balanced_inputs(draw: st.DrawFn) -> tuple[int, list[int]]:
    """Members and backlogs where 1.15x of the lower bound is reachable: light partitions (each at most 15% of
    the ideal share) plus fewer huge ones than members (each at least the ideal share)."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    members = draw(st.integers(1, 12))
    light = [rng.randint(0, 100) for _ in range(members * draw(st.integers(20, 40)))]
    huge_count = draw(st.integers(0, members - 1))
    floor = -(-sum(light) // (members - huge_count))  # huge * (members - count) >= light: huge >= the ideal
    weights = light + [rng.randint(floor, 3 * floor)] * huge_count
    rng.shuffle(weights)
    ideal = sum(weights) / members
    assume(all(w <= 0.15 * ideal or w >= ideal for w in weights))
    return members, weights


@given(balanced_inputs())
@PROFILE
def test_from_nothing_owned_the_makespan_is_within_1_15_of_the_lower_bound(drawn: tuple[int, list[int]]) -> None:
    members, weights = drawn
    backlog = {TopicPartition("t", p): w for p, w in enumerate(weights)}
    subs = {f"m{i:02d}": Subscription(["t"]) for i in range(members)}
    result = LAG.assign({"t": len(weights)}, subs, backlog=backlog)
    bound = max(sum(weights) / members, max(weights))
    assert max(loads(result, backlog).values()) <= 1.15 * bound + 1e-9


@given(cases(owned=False, equal=True))
@PROFILE
def test_from_nothing_owned_no_member_exceeds_the_ideal_by_more_than_the_largest_partition(case: Case) -> None:
    """Any backlog, one shared subscription: makespan <= ideal share + largest partition (list scheduling)."""
    result = LAG.assign(case.counts, case.subs, backlog=case.backlog)
    check_valid(case.counts, case.subs, result)
    check_complete(case.counts, case.subs, result)
    weights = [case.backlog.get(tp, 0) for tp in all_assignable(case.counts, case.subs)]
    if weights and any(weights):
        active = sum(1 for m in case.subs if result[m] or case.subs[m].topics)
        assert max(loads(result, case.backlog).values()) <= sum(weights) / active + max(weights) + 1e-9


# ---------------------------------------------------------------------------------------------- stickiness


@given(cases())
@PROFILE
def test_owned_partitions_move_only_when_the_gain_beats_the_threshold(case: Case) -> None:
    plan = LAG.plan(case.counts, case.subs, case.backlog)
    if plan is None:
        return
    if plan.moved:
        assert plan.kept_makespan - plan.makespan > DEFAULT_THRESHOLD * plan.ideal
    assert plan.makespan <= plan.kept_makespan
    result = LAG.assign(case.counts, case.subs, backlog=case.backlog)
    owner = {tp: m for m, s in case.subs.items() for tp in s.owned_partitions}
    moved = {tp for m, tps in result.items() for tp in tps if owner.get(tp, m) != m}
    revoked = {tp for m, s in case.subs.items() for tp in s.owned_partitions if tp not in set(result[m])}
    if not plan.moved:
        assert not moved and not revoked


@given(st.integers(0, 2**32 - 1), st.integers(1, 8), st.sampled_from([0.0, 0.02]))
@PROFILE
def test_small_backlog_changes_move_nothing(seed: int, members: int, change: float) -> None:
    """Balanced on one backlog, then every partition's backlog drifts by up to 2%: the gain of any move is
    under the threshold, so the assignment stays exactly as it is."""
    rng = random.Random(seed)
    counts = {"a": members * 40, "b": members * 30}
    partitions = [TopicPartition(t, p) for t, n in counts.items() for p in range(n)]
    backlog = {tp: rng.randint(50, 100) for tp in partitions}
    subs = {f"m{i}": Subscription(["a", "b"]) for i in range(members)}
    first = LAG.assign(counts, subs, backlog=backlog)
    drifted = {tp: round(w * (1 + rng.uniform(-change, change))) for tp, w in backlog.items()}
    again = LAG.assign(counts, fed_back(subs, first, 1), backlog=drifted)
    assert again == first


def test_a_skewed_backlog_moves_partitions_off_the_overloaded_member() -> None:
    counts = {"t": 40}
    subs = {m: Subscription(["t"]) for m in "AB"}
    first = StickyAssignor().assign(counts, subs)  # A: 0-19, B: 20-39
    backlog = {TopicPartition("t", p): (100 if p < 20 else 1) for p in range(40)}
    owned = fed_back(subs, first, 1)
    plan = LAG.plan(counts, owned, backlog)
    assert plan is not None and plan.moved > 0 and plan.makespan < plan.kept_makespan
    one = LAG.assign(counts, owned, backlog=backlog)
    assert set(one["A"]) < set(first["A"]) and one["B"] == first["B"]  # round 1: A only revokes
    two = LAG.assign(counts, fed_back(subs, one, 2), backlog=backlog)
    assert max(loads(two, backlog).values()) <= (1 + DEFAULT_THRESHOLD) * 2020 / 2


# ------------------------------------------------------------------------------ determinism, cooperative


@given(cases(), st.integers(0, 2**32 - 1))
@PROFILE
def test_the_same_input_in_any_order_gives_the_same_assignment(case: Case, seed: int) -> None:
    other = shuffled(case, seed)
    first = LAG.assign(case.counts, case.subs, backlog=case.backlog)
    assert LAG.assign(other.counts, other.subs, backlog=other.backlog) == first
    assert LAG.assign(case.counts, case.subs, backlog=dict(case.backlog)) == first


@given(cases())
@PROFILE
def test_cooperative_rounds_never_double_assign_and_complete_in_two(case: Case) -> None:
    """Round 1 gives nobody a partition another member still holds; fed back, round 2 revokes nothing round 1
    assigned and completes the assignment; round 3 changes nothing."""
    first = LAG.assign(case.counts, case.subs, backlog=case.backlog)
    check_valid(case.counts, case.subs, first)
    seen: set[TopicPartition] = set()
    for member, tps in first.items():
        assert not set(tps) & held_by_others(case.subs, member)
        assert not set(tps) & seen
        seen |= set(tps)
    second = LAG.assign(case.counts, fed_back(case.subs, first, 2), backlog=case.backlog)
    check_valid(case.counts, case.subs, second)
    check_complete(case.counts, case.subs, second)
    for member in first:
        assert set(first[member]) <= set(second[member]), f"round 2 took partitions away from {member}"
    third = LAG.assign(case.counts, fed_back(case.subs, second, 3), backlog=case.backlog)
    assert third == second


# ------------------------------------------------------------------------------------------------ fallback


@given(cases(), st.sampled_from(["none", "empty", "zeros", "unknown"]))
@PROFILE
def test_without_a_known_backlog_it_balances_counts_as_cooperative_sticky_does(case: Case, kind: str) -> None:
    backlog: Mapping[TopicPartition, int] | None = {
        "none": None,
        "empty": {},
        "zeros": dict.fromkeys(case.backlog, 0),
        "unknown": {TopicPartition("elsewhere", 0): 5, TopicPartition("t0", 10_000): 7},
    }[kind]
    result = LAG.assign(case.counts, case.subs, backlog=backlog)
    assert result == CooperativeStickyAssignor().assign(case.counts, case.subs)
    assert LAG.assign(case.counts, case.subs) == result
    if not any(s.owned_partitions for s in case.subs.values()):
        assert result == StickyAssignor().assign(case.counts, case.subs)
