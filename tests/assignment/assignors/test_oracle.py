"""An independent, deliberately naive oracle for assignor properties, and tests that the oracle itself bites.

The property tests import these checks; they are written from the issue's definitions with plain dicts and
loops (no numpy, nothing shared with the implementation) so that a bug in the assignors cannot hide behind
the same bug in the checker.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import pytest

from cohort.assignment import Subscription
from cohort.common.types import TopicPartition

Result = Mapping[str, list[TopicPartition]]


def assignable(counts: Mapping[str, int], sub: Subscription) -> set[TopicPartition]:
    """Every partition a member may be given."""
    return {TopicPartition(t, p) for t in set(sub.topics) if t in counts for p in range(counts[t])}


def all_assignable(counts: Mapping[str, int], subs: Mapping[str, Subscription]) -> set[TopicPartition]:
    out: set[TopicPartition] = set()
    for sub in subs.values():
        out |= assignable(counts, sub)
    return out


def previous_owners(counts: Mapping[str, int], subs: Mapping[str, Subscription]) -> dict[TopicPartition, str]:
    """Partition -> member whose owned claim survives: the unique highest generation among all claims on the
    partition (a member that dropped the topic still competes), and valid for that member."""
    wanted = all_assignable(counts, subs)
    claims: dict[TopicPartition, list[tuple[int, str]]] = defaultdict(list)
    for member, sub in subs.items():
        for tp in sub.owned_partitions:
            if tp in wanted:
                claims[tp].append((sub.generation, member))
    owners = {}
    for tp, entries in claims.items():
        best = max(g for g, _ in entries)
        at_best = [m for g, m in entries if g == best]
        if len(at_best) == 1 and tp in assignable(counts, subs[at_best[0]]):
            owners[tp] = at_best[0]
    return owners


def check_valid(counts: Mapping[str, int], subs: Mapping[str, Subscription], result: Result) -> None:
    """Shape and legality: every member a key, lists sorted, no partition twice, only subscribed partitions."""
    assert set(result) == set(subs)
    seen: set[TopicPartition] = set()
    for member, tps in result.items():
        assert list(tps) == sorted(tps), f"{member}'s list is not sorted"
        assert all(type(tp) is TopicPartition for tp in tps)
        allowed = assignable(counts, subs[member])
        for tp in tps:
            assert tp in allowed, f"{member} got {tp} it cannot have"
            assert tp not in seen, f"{tp} assigned twice"
            seen.add(tp)


def check_complete(counts: Mapping[str, int], subs: Mapping[str, Subscription], result: Result) -> None:
    """Every partition some member subscribes to is assigned."""
    assigned = {tp for tps in result.values() for tp in tps}
    assert assigned == all_assignable(counts, subs)


def equal_subscriptions(counts: Mapping[str, int], subs: Mapping[str, Subscription]) -> bool:
    """All members that can be given anything can be given exactly the same partitions."""
    sets = [frozenset(s) for s in (assignable(counts, sub) for sub in subs.values()) if s]
    return len(set(sets)) <= 1


def check_balanced(counts: Mapping[str, int], subs: Mapping[str, Subscription], result: Result) -> None:
    """Equal subscriptions: counts differ by at most one. Otherwise: no member two or more below another
    could take one of that member's partitions (checked pairwise, as the issue states it)."""
    sizes = {m: len(tps) for m, tps in result.items()}
    if equal_subscriptions(counts, subs):
        active = [sizes[m] for m in subs if assignable(counts, subs[m])]
        assert not active or max(active) - min(active) <= 1, f"unbalanced: {sorted(active)}"
        return
    allowed = {m: assignable(counts, subs[m]) for m in subs}
    for low in subs:
        for high in subs:
            if sizes[low] + 2 <= sizes[high]:
                movable = allowed[low].intersection(result[high])
                assert not movable, f"{low} ({sizes[low]}) could take {sorted(movable)[0]} from {high} ({sizes[high]})"


def revoked(previous: Mapping[TopicPartition, str], result: Result) -> int:
    """Partitions whose surviving previous owner no longer has them."""
    return sum(1 for tp, member in previous.items() if tp not in set(result.get(member, ())))


def minimal_revocations(counts: Mapping[str, int], subs: Mapping[str, Subscription]) -> int:
    """The fewest revocations any balanced assignment needs when subscriptions are equal.

    With P partitions over n active members, quotas are q = P // n and P % n members get q + 1. A member owning
    o valid partitions must give up max(0, o - its quota). Giving the P % n extra slots to members with o > q
    saves one revocation each, so the minimum is sum(max(0, o - q)) - min(P % n, #{o > q}).
    """
    active = [m for m in subs if assignable(counts, subs[m])]
    if not active:
        return 0
    total = len(all_assignable(counts, subs))
    base, extra = divmod(total, len(active))
    previous = previous_owners(counts, subs)
    owned = defaultdict(int)
    for member in previous.values():
        owned[member] += 1
    excess = sum(max(0, owned[m] - base) for m in active)
    return excess - min(extra, sum(1 for m in active if owned[m] > base))


def check_no_swaps(previous: Mapping[TopicPartition, str], result: Result) -> None:
    """No partition moved A -> B while another of the same topic moved B -> A."""
    now = {tp: m for m, tps in result.items() for tp in tps}
    moves = {(tp.topic, a, now[tp]) for tp, a in previous.items() if tp in now and now[tp] != a}
    for topic, a, b in moves:
        assert (topic, b, a) not in moves, f"{topic}: partitions moved both {a} -> {b} and {b} -> {a}"


def held_by_others(subs: Mapping[str, Subscription], member: str) -> set[TopicPartition]:
    """Partitions another member still holds: it lists them (subscribed or not) and nobody lists them with a
    newer generation. A claim beaten by a newer generation is stale and holds nothing."""
    newest: dict[TopicPartition, int] = {}
    for sub in subs.values():
        for tp in sub.owned_partitions:
            newest[tp] = max(newest.get(tp, sub.generation), sub.generation)
    return {tp for m, sub in subs.items() if m != member for tp in sub.owned_partitions if sub.generation == newest[tp]}


# --- the oracle must itself be able to fail -------------------------------------------------------------


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def test_check_balanced_rejects_a_spread_of_two_with_equal_subscriptions() -> None:
    subs = {"a": Subscription(["t"]), "b": Subscription(["t"])}
    with pytest.raises(AssertionError, match="unbalanced"):
        check_balanced({"t": 4}, subs, {"a": [tp("t", 0)], "b": [tp("t", 1), tp("t", 2), tp("t", 3)]})


def test_check_balanced_rejects_a_movable_partition_with_unequal_subscriptions() -> None:
    subs = {"a": Subscription(["t"]), "b": Subscription(["t", "u"])}
    result = {"a": [], "b": [tp("t", 0), tp("u", 0)]}
    with pytest.raises(AssertionError, match="could take t-0"):
        check_balanced({"t": 1, "u": 1}, subs, result)
    check_balanced({"t": 1, "u": 1}, subs, {"a": [tp("t", 0)], "b": [tp("u", 0)]})


def test_check_valid_rejects_double_assignment_and_unsorted_lists() -> None:
    subs = {"a": Subscription(["t"]), "b": Subscription(["t"])}
    with pytest.raises(AssertionError, match="twice"):
        check_valid({"t": 2}, subs, {"a": [tp("t", 0)], "b": [tp("t", 0)]})
    with pytest.raises(AssertionError, match="not sorted"):
        check_valid({"t": 2}, subs, {"a": [tp("t", 1), tp("t", 0)], "b": []})


def test_minimal_revocations_counts_the_extra_slot_for_big_owners() -> None:
    # 5 partitions, 2 members: quotas 2 and 3. "a" owns 4: it keeps 3 (extra slot), so 1 revocation.
    owned = [tp("t", p) for p in range(4)]
    subs = {"a": Subscription(["t"], owned, 1), "b": Subscription(["t"])}
    assert minimal_revocations({"t": 5}, subs) == 1


def test_previous_owners_applies_generations_and_drops_ties() -> None:
    subs = {
        "a": Subscription(["t"], [tp("t", 0), tp("t", 1), tp("t", 2)], generation=3),
        "b": Subscription(["t"], [tp("t", 0)], generation=2),
        "c": Subscription(["t"], [tp("t", 1)], generation=3),
        "d": Subscription(["u"], [tp("t", 2)], generation=4),
    }
    assert previous_owners({"t": 3, "u": 1}, subs) == {tp("t", 0): "a"}


def test_check_no_swaps_rejects_crossing_moves() -> None:
    previous = {tp("t", 0): "a", tp("t", 1): "b"}
    with pytest.raises(AssertionError, match="moved both"):
        check_no_swaps(previous, {"a": [tp("t", 1)], "b": [tp("t", 0)]})


def test_held_by_others_ignores_claims_beaten_by_a_newer_generation() -> None:
    subs = {
        "a": Subscription(["t"], [tp("t", 0), tp("t", 1)], generation=1),
        "b": Subscription(["u"], [tp("t", 0)], generation=2),
        "c": Subscription(["t"], [tp("t", 1)], generation=1),
    }
    assert held_by_others(subs, "c") == {tp("t", 0), tp("t", 1)}
    assert held_by_others(subs, "a") == {tp("t", 0), tp("t", 1)}
    assert held_by_others(subs, "b") == {tp("t", 1)}
