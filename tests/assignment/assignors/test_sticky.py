"""Hand-written cases for the sticky and cooperative-sticky assignors, one per rule in the issue."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from cohort.assignment import CooperativeStickyAssignor, StickyAssignor, Subscription
from cohort.common.types import TopicPartition
from tests.assignment.assignors.test_oracle import (
    check_balanced,
    check_complete,
    check_no_swaps,
    check_valid,
    held_by_others,
    minimal_revocations,
    previous_owners,
    revoked,
)

STICKY = StickyAssignor()
COOP = CooperativeStickyAssignor()


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def part(topic: str, numbers: range | list[int]) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in numbers]


def fed_back(subs: Mapping[str, Subscription], result: Mapping[str, list[TopicPartition]], generation: int):
    """The next round's subscriptions: same topics, owned = the previous result."""
    return {m: Subscription(s.topics, result[m], generation) for m, s in subs.items()}


# --- balance and retention --------------------------------------------------------------------------------


def test_equal_subscriptions_leave_moves_only_the_leavers_partitions() -> None:
    counts = {"a": 10, "b": 10}
    initial = STICKY.assign(counts, {f"m{i}": Subscription(["a", "b"]) for i in range(5)})
    survivors = {m: Subscription(["a", "b"], initial[m], 1) for m in ("m0", "m1", "m3", "m4")}
    result = STICKY.assign(counts, survivors)
    for member in survivors:
        assert set(initial[member]) <= set(result[member])
    assert sorted(len(v) for v in result.values()) == [5, 5, 5, 5]


def test_equal_subscriptions_join_takes_only_its_quota() -> None:
    counts = {"a": 10, "b": 10}
    initial = STICKY.assign(counts, {f"m{i}": Subscription(["a", "b"]) for i in range(4)})
    subs = {m: Subscription(["a", "b"], initial[m], 1) for m in initial}
    subs["new"] = Subscription(["a", "b"])
    result = STICKY.assign(counts, subs)
    assert len(result["new"]) == 4
    moved = sum(len(set(initial[m]) - set(result[m])) for m in initial)
    assert moved == 4 == minimal_revocations(counts, subs)


def test_extra_slots_go_to_members_that_own_more() -> None:
    # 7 partitions over 3 members: quotas 2, 2, 3. "c" owns 3 and must keep all of them; "a" owns 2.
    subs = {
        "a": Subscription(["t"], part("t", [0, 1]), 4),
        "b": Subscription(["t"]),
        "c": Subscription(["t"], part("t", [2, 3, 4]), 4),
    }
    result = STICKY.assign({"t": 7}, subs)
    assert result == {"a": part("t", [0, 1]), "b": part("t", [5, 6]), "c": part("t", [2, 3, 4])}
    assert revoked(previous_owners({"t": 7}, subs), result) == 0


def test_over_quota_member_keeps_its_lowest_partitions() -> None:
    subs = {"a": Subscription(["t"], part("t", [5, 1, 3, 0]), 2), "b": Subscription(["t"])}
    assert STICKY.assign({"t": 4}, subs) == {"a": part("t", [0, 1]), "b": part("t", [2, 3])}


def test_unequal_subscriptions_balance_without_moving_pinned_partitions() -> None:
    # "solo" alone subscribes to "big": it must keep all 8 even though it is far above the others.
    counts = {"big": 8, "shared": 4}
    subs = {
        "solo": Subscription(["big", "shared"], part("shared", range(4)), 3),
        "x": Subscription(["shared"]),
        "y": Subscription(["shared"]),
    }
    result = STICKY.assign(counts, subs)
    assert result["solo"] == part("big", range(8))
    assert sorted(len(result[m]) for m in ("x", "y")) == [2, 2]
    check_balanced(counts, subs, result)


def test_unequal_join_takes_what_balance_requires() -> None:
    counts = {"t": 6, "u": 6}
    subs = {
        "a": Subscription(["t", "u"], part("t", range(6)), 2),
        "b": Subscription(["u"], part("u", range(6)), 2),
        "c": Subscription(["t"]),
    }
    result = STICKY.assign(counts, subs)
    check_balanced(counts, subs, result)
    # "c" needs 3 of a's t partitions; a then sits 3 below b on u, so b must hand a one more: 4 moves,
    # the fewest that leave nobody two below a member holding a partition it could take.
    assert sorted(len(v) for v in result.values()) == [3, 4, 5]
    assert len(result["c"]) == 3 and len(result["b"]) == 5
    assert revoked(previous_owners(counts, subs), result) == 4


# --- owned partitions that are no longer valid ------------------------------------------------------------


def test_claims_on_deleted_unsubscribed_and_shrunk_topics_are_dropped() -> None:
    owned = [*part("t", range(4)), tp("deleted", 0), tp("u", 0), tp("t", 9)]
    subs = {"a": Subscription(["t", "deleted"], owned, 5), "b": Subscription(["t", "u"])}
    counts = {"t": 2, "u": 1}  # "t" shrank from 4 partitions to 2
    assert previous_owners(counts, subs) == {tp("t", 0): "a", tp("t", 1): "a"}
    # Two valid claims survive; 2 against 1 is balanced, so "a" keeps both and "b" gets u-0.
    assert STICKY.assign(counts, subs) == {"a": part("t", [0, 1]), "b": [tp("u", 0)]}
    subs["c"] = Subscription(["t"])
    assert STICKY.assign(counts, subs) == {"a": [tp("t", 0)], "b": [tp("u", 0)], "c": [tp("t", 1)]}


def test_negative_partition_numbers_in_owned_are_dropped() -> None:
    subs = {"a": Subscription(["t"], [tp("t", -1), tp("t", 0)], 1)}
    assert STICKY.assign({"t": 2}, subs) == {"a": part("t", [0, 1])}


# --- conflicting claims -------------------------------------------------------------------------------------


def test_conflict_higher_generation_keeps_the_partition() -> None:
    subs = {
        "a": Subscription(["t"], [tp("t", 1)], generation=4),
        "b": Subscription(["t"], [tp("t", 1)], generation=3),
        "c": Subscription(["t"]),
    }
    # Without the claim "a" would get t-0 (the pool is dealt in member order).
    assert STICKY.assign({"t": 3}, subs) == {"a": [tp("t", 1)], "b": [tp("t", 0)], "c": [tp("t", 2)]}


def test_conflict_at_equal_generation_nobody_keeps_the_partition() -> None:
    subs = {
        "a": Subscription(["t"], [tp("t", 1)], generation=3),
        "b": Subscription(["t"], [tp("t", 2), tp("t", 1)], generation=3),
        "c": Subscription(["t"]),
    }
    # "b" keeps t-2; t-1 goes back to the pool with t-0 and is dealt in member order: a, c.
    assert STICKY.assign({"t": 3}, subs) == {"a": [tp("t", 0)], "b": [tp("t", 2)], "c": [tp("t", 1)]}


def test_conflict_tie_at_top_beats_a_lower_generation_claim() -> None:
    subs = {
        "a": Subscription(["t"], [tp("t", 0)], generation=5),
        "b": Subscription(["t"], [tp("t", 0)], generation=5),
        "c": Subscription(["t"], [tp("t", 0)], generation=1),
    }
    assert previous_owners({"t": 3}, subs) == {}
    result = STICKY.assign({"t": 3}, subs)
    assert result == {"a": [tp("t", 0)], "b": [tp("t", 1)], "c": [tp("t", 2)]}


def test_newer_claim_from_a_member_that_dropped_the_topic_frees_the_partition() -> None:
    # "b" had t-1 in generation 9 and has since dropped t; a's generation-1 claim is stale, so t-1 is free.
    subs = {
        "a": Subscription(["t"], [tp("t", 1)], generation=1),
        "b": Subscription(["u"], [tp("t", 1)], generation=9),
        "c": Subscription(["t"]),
    }
    assert STICKY.assign({"t": 2, "u": 0}, subs) == {"a": [tp("t", 0)], "b": [], "c": [tp("t", 1)]}
    # Without the newer claim, a keeps t-1.
    subs["b"] = Subscription(["u"])
    assert STICKY.assign({"t": 2, "u": 0}, subs) == {"a": [tp("t", 1)], "b": [], "c": [tp("t", 0)]}


# --- cooperative ------------------------------------------------------------------------------------------


def _never_double_listed(subs: Mapping[str, Subscription], result: Mapping[str, list[TopicPartition]]) -> None:
    """No partition in two lists, nor in one member's list while another member still holds it."""
    seen: set[TopicPartition] = set()
    for member, partitions in result.items():
        assert not set(partitions) & held_by_others(subs, member)
        assert not set(partitions) & seen
        seen |= set(partitions)


def test_cooperative_join_completes_in_two_rounds() -> None:
    counts = {"a": 6, "b": 6}
    start = {m: Subscription(["a", "b"]) for m in ("m0", "m1", "m2")}
    initial = COOP.assign(counts, start)
    assert initial == STICKY.assign(counts, start)  # nothing owned: nothing to withhold
    subs = fed_back(start, initial, 1)
    subs["new"] = Subscription(["a", "b"])
    target = STICKY.assign(counts, subs)

    first = COOP.assign(counts, subs)
    _never_double_listed(subs, first)
    assert first["new"] == []  # all of its target is still owned by others
    for member in initial:
        assert first[member] == target[member]  # the others already shed what they will lose
    assert len(target["new"]) == 3

    second = COOP.assign(counts, fed_back(subs, first, 2))
    assert second == target
    assert COOP.assign(counts, fed_back(subs, second, 3)) == second


def test_cooperative_leave_needs_no_second_round() -> None:
    counts = {"t": 9}
    initial = STICKY.assign(counts, {m: Subscription(["t"]) for m in ("m0", "m1", "m2")})
    subs = {m: Subscription(["t"], initial[m], 1) for m in ("m0", "m2")}
    first = COOP.assign(counts, subs)
    assert first == STICKY.assign(counts, subs)  # the leaver's partitions are unowned: nothing withheld
    check_complete(counts, subs, first)


def test_cooperative_equal_generation_conflict_is_withheld_from_everyone() -> None:
    subs = {
        "a": Subscription(["t"], [tp("t", 0)], generation=2),
        "b": Subscription(["t"], [tp("t", 0), tp("t", 1)], generation=2),
    }
    first = COOP.assign({"t": 2}, subs)
    assert first == {"a": [], "b": [tp("t", 1)]}
    second = COOP.assign({"t": 2}, fed_back(subs, first, 3))
    assert second == {"a": [tp("t", 0)], "b": [tp("t", 1)]}


def test_cooperative_withholds_from_a_member_that_dropped_the_topic_too() -> None:
    # "b" no longer subscribes to t but still lists t-0: "a" must wait for b to revoke it.
    subs = {"a": Subscription(["t"]), "b": Subscription(["u"], [tp("t", 0)], generation=2)}
    first = COOP.assign({"t": 1, "u": 1}, subs)
    assert first == {"a": [], "b": [tp("u", 0)]}
    assert COOP.assign({"t": 1, "u": 1}, fed_back(subs, first, 3)) == {"a": [tp("t", 0)], "b": [tp("u", 0)]}


@pytest.mark.parametrize("members", [1, 2, 7])
def test_cooperative_subscription_change_converges(members: int) -> None:
    counts = {"t": 5, "u": 4, "v": 3}
    subs = {f"m{i}": Subscription(["t", "u", "v"]) for i in range(members)}
    owned = STICKY.assign(counts, subs)
    changed = {m: Subscription(["u"] if m == "m0" else ["t", "v"], owned[m], 1) for m in subs}
    first = COOP.assign(counts, changed)
    check_valid(counts, changed, first)
    _never_double_listed(changed, first)
    second = COOP.assign(counts, fed_back(changed, first, 2))
    check_complete(counts, changed, second)
    check_balanced(counts, changed, second)
    for member in changed:
        assert set(first[member]) <= set(second[member])
    check_no_swaps(previous_owners(counts, changed), STICKY.assign(counts, changed))


def test_cooperative_ignores_a_claim_beaten_by_a_newer_generation() -> None:
    # "b" still lists t-0 from generation 1, but "a" got it in generation 2: a keeps it, nothing is withheld.
    subs = {
        "a": Subscription(["t"], [tp("t", 0)], generation=2),
        "b": Subscription(["t"], [tp("t", 0), tp("t", 1)], generation=1),
    }
    assert COOP.assign({"t": 2}, subs) == {"a": [tp("t", 0)], "b": [tp("t", 1)]}
