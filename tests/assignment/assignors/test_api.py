"""Public API of the assignors: worked examples, registry, validation, edge cases.

The worked examples are the classic ones for Kafka's assignors: two consumers over two topics of three
partitions each, a third consumer joining them, and unequal subscriptions (C0 on t0; C1 on t0, t1; C2 on
t1, t2). The expected assignments are those of Kafka's Java assignors: range gives each member a contiguous
block of each topic in member order (with three consumers, C1 gets partition 1 and C2 partition 2 of each
topic), and round-robin deals t0p0, t0p1, t0p2, t1p0, ... over the members subscribed to each topic in turn.
"""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from cohort.assignment import (
    COOPERATIVE,
    EAGER,
    Assignor,
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    Subscription,
    UnknownAssignorError,
    available_assignors,
    get_assignor,
    register_assignor,
)
from cohort.common.types import TopicPartition

ALL = [RangeAssignor(), RoundRobinAssignor(), StickyAssignor(), CooperativeStickyAssignor()]
ids = [a.name for a in ALL]


def tps(*labels: str) -> list[TopicPartition]:
    """tps("t0p0", "t1p2") -> [TopicPartition("t0", 0), TopicPartition("t1", 2)]."""
    out = []
    for label in labels:
        topic, partition = label.split("p")
        out.append(TopicPartition(topic, int(partition)))
    return out


TWO_BY_THREE = {"t0": 3, "t1": 3}
BOTH = {"C0": Subscription(["t0", "t1"]), "C1": Subscription(["t0", "t1"])}
UNEQUAL_COUNTS = {"t0": 1, "t1": 2, "t2": 3}
UNEQUAL = {"C0": Subscription(["t0"]), "C1": Subscription(["t0", "t1"]), "C2": Subscription(["t1", "t2"])}


# --- worked examples ------------------------------------------------------------------------------------


def test_range_two_consumers() -> None:
    assert RangeAssignor().assign(TWO_BY_THREE, BOTH) == {
        "C0": tps("t0p0", "t0p1", "t1p0", "t1p1"),
        "C1": tps("t0p2", "t1p2"),
    }


def test_range_third_consumer_splits_each_topic_in_member_order() -> None:
    subs = {m: Subscription(["t0", "t1"]) for m in ("C0", "C1", "C2")}
    # each member in order takes the next block of each topic: C1 partition 1, C2 partition 2
    assert RangeAssignor().assign(TWO_BY_THREE, subs) == {
        "C0": tps("t0p0", "t1p0"),
        "C1": tps("t0p1", "t1p1"),
        "C2": tps("t0p2", "t1p2"),
    }


def test_roundrobin_equal_subscriptions() -> None:
    assert RoundRobinAssignor().assign(TWO_BY_THREE, BOTH) == {
        "C0": tps("t0p0", "t0p2", "t1p1"),
        "C1": tps("t0p1", "t1p0", "t1p2"),
    }


def test_roundrobin_unequal_subscriptions() -> None:
    assert RoundRobinAssignor().assign(UNEQUAL_COUNTS, UNEQUAL) == {
        "C0": tps("t0p0"),
        "C1": tps("t1p0"),
        "C2": tps("t1p1", "t2p0", "t2p1", "t2p2"),
    }


def test_sticky_unequal_subscriptions() -> None:
    assert StickyAssignor().assign(UNEQUAL_COUNTS, UNEQUAL) == {
        "C0": tps("t0p0"),
        "C1": tps("t1p0", "t1p1"),
        "C2": tps("t2p0", "t2p1", "t2p2"),
    }


def test_sticky_kip54_example_member_leaves_and_nothing_else_moves() -> None:
    """KIP-54 example 1: C1 leaves; C0 and C2 keep everything and split C1's three partitions."""
    counts = {"t0": 2, "t1": 2, "t2": 2, "t3": 2}
    topics = sorted(counts)
    subs = {
        "C0": Subscription(topics, tps("t0p0", "t1p1", "t3p0"), generation=1),
        "C2": Subscription(topics, tps("t1p0", "t2p1"), generation=1),
    }
    assert StickyAssignor().assign(counts, subs) == {
        "C0": tps("t0p0", "t1p1", "t2p0", "t3p0"),
        "C2": tps("t0p1", "t1p0", "t2p1", "t3p1"),
    }


def test_sticky_kip54_example_two_unequal_member_leaves() -> None:
    """KIP-54 example 2 (C2 on t0, t1, t2): C0 leaves and its t0p0 goes to the less loaded C1."""
    counts = {"t0": 1, "t1": 2, "t2": 3}
    subs = {
        "C1": Subscription(["t0", "t1"], tps("t1p0", "t1p1"), generation=1),
        "C2": Subscription(["t0", "t1", "t2"], tps("t2p0", "t2p1", "t2p2"), generation=1),
    }
    assert StickyAssignor().assign(counts, subs) == {
        "C1": tps("t0p0", "t1p0", "t1p1"),
        "C2": tps("t2p0", "t2p1", "t2p2"),
    }


# --- protocol and registry ------------------------------------------------------------------------------


@pytest.mark.parametrize("assignor", ALL, ids=ids)
def test_builtins_satisfy_the_protocol_and_are_registered(assignor: Assignor) -> None:
    assert isinstance(assignor, Assignor)
    registered = get_assignor(assignor.name)
    assert type(registered) is type(assignor)
    assert registered.protocol == (COOPERATIVE if assignor.name == "cooperative-sticky" else EAGER)


def test_available_assignors_lists_the_builtins_sorted() -> None:
    names = available_assignors()
    assert names == sorted(names)
    assert {"range", "roundrobin", "sticky", "cooperative-sticky"} <= set(names)


def test_unknown_assignor_error_names_it_and_lists_known_ones() -> None:
    with pytest.raises(UnknownAssignorError) as caught:
        get_assignor("no-such-assignor")
    assert isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert "'no-such-assignor'" in message
    for name in ("range", "roundrobin", "sticky", "cooperative-sticky"):
        assert name in message


class _EverythingToFirst:
    """A custom assignor: every subscribed partition goes to the first member by id."""

    name = "test-everything-to-first"
    protocol = EAGER

    def assign(self, partitions_per_topic, subscriptions):  # type: ignore[no-untyped-def]
        members = sorted(subscriptions)
        result = {m: [] for m in members}
        topics = sorted({t for s in subscriptions.values() for t in s.topics if t in partitions_per_topic})
        result[members[0]] = [TopicPartition(t, p) for t in topics for p in range(partitions_per_topic[t])]
        return result


def test_register_custom_assignor_duplicate_and_replace() -> None:
    custom = _EverythingToFirst()
    register_assignor(custom, replace=True)
    assert get_assignor(custom.name) is custom
    assert custom.name in available_assignors()
    with pytest.raises(ValueError, match="already registered"):
        register_assignor(_EverythingToFirst())
    replacement = _EverythingToFirst()
    register_assignor(replacement, replace=True)
    assert get_assignor(custom.name) is replacement
    with pytest.raises(ValueError, match="already registered"):
        register_assignor(StickyAssignor())


def test_register_rejects_malformed_assignors() -> None:
    class NoName(_EverythingToFirst):
        name = ""

    class BadProtocol(_EverythingToFirst):
        name = "test-bad-protocol"
        protocol = "sometimes"

    with pytest.raises(ValueError, match="name"):
        register_assignor(NoName())
    with pytest.raises(ValueError, match="protocol"):
        register_assignor(BadProtocol())
    assert "test-bad-protocol" not in available_assignors()


def test_assignor_package_imports_no_dagster_or_spark() -> None:
    code = (
        "import sys, cohort.assignment.assignors; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('dagster', 'pyspark')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- input validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize("assignor", ALL, ids=ids)
def test_negative_partition_count_is_rejected(assignor: Assignor) -> None:
    with pytest.raises(ValueError, match=r"partition count of topic 't1' must be >= 0, got -1"):
        assignor.assign({"t0": 3, "t1": -1}, BOTH)


@pytest.mark.parametrize("assignor", ALL, ids=ids)
def test_non_integer_partition_count_is_rejected(assignor: Assignor) -> None:
    with pytest.raises(ValueError, match="must be an integer"):
        assignor.assign({"t0": 2.5}, BOTH)  # type: ignore[dict-item]


@pytest.mark.parametrize("assignor", ALL, ids=ids)
@pytest.mark.parametrize("topic", ["t0", "deleted"])
def test_duplicate_owned_partition_is_rejected(assignor: Assignor, topic: str) -> None:
    owned = [TopicPartition(topic, 1), TopicPartition("t0", 0), TopicPartition(topic, 1)]
    subs = {"C0": Subscription(["t0"]), "C1": Subscription(["t0"], owned, generation=2)}
    with pytest.raises(ValueError, match=rf"member 'C1' lists partition {topic}-1 more than once"):
        assignor.assign({"t0": 3}, subs)


@pytest.mark.parametrize("assignor", ALL, ids=ids)
def test_empty_member_id_is_rejected(assignor: Assignor) -> None:
    with pytest.raises(ValueError, match="member ids must be non-empty strings"):
        assignor.assign({"t0": 3}, {"": Subscription(["t0"]), "C1": Subscription(["t0"])})


@pytest.mark.parametrize("assignor", ALL, ids=ids)
def test_topics_given_as_one_string_is_rejected(assignor: Assignor) -> None:
    with pytest.raises(ValueError, match="collection of topic names"):
        assignor.assign({"t0": 3}, {"C0": Subscription("t0")})


@pytest.mark.parametrize("assignor", ALL, ids=ids)
def test_subscription_to_topic_without_metadata_is_not_an_error(assignor: Assignor) -> None:
    subs = {"C0": Subscription(["t0", "not-yet-created"]), "C1": Subscription(["not-yet-created"])}
    assert assignor.assign({"t0": 2}, subs) == {"C0": tps("t0p0", "t0p1"), "C1": []}


# --- edge cases common to all assignors -------------------------------------------------------------------


@pytest.mark.parametrize("assignor", ALL, ids=ids)
def test_member_without_subscription_is_idle_and_present(assignor: Assignor) -> None:
    subs = {"C0": Subscription([]), "C1": Subscription(["t0"])}
    assert assignor.assign({"t0": 2}, subs) == {"C0": [], "C1": tps("t0p0", "t0p1")}


@pytest.mark.parametrize("assignor", ALL, ids=ids)
def test_topic_without_subscriber_is_not_assigned(assignor: Assignor) -> None:
    result = assignor.assign({"t0": 1, "orphan": 4}, {"C0": Subscription(["t0"])})
    assert result == {"C0": tps("t0p0")}


@pytest.mark.parametrize("assignor", ALL, ids=ids)
def test_more_members_than_partitions_leaves_members_idle(assignor: Assignor) -> None:
    subs = {f"m{i:03d}": Subscription(["t0"]) for i in range(200)}
    result = assignor.assign({"t0": 3}, subs)
    assert set(result) == set(subs)
    sizes = sorted(len(v) for v in result.values())
    assert sizes == [0] * 197 + [1, 1, 1]
    assert sorted(tp for v in result.values() for tp in v) == tps("t0p0", "t0p1", "t0p2")


@pytest.mark.parametrize("assignor", ALL, ids=ids)
@pytest.mark.parametrize("counts", [{}, {"t0": 0}, {"t0": 0, "t1": 0}])
def test_zero_partitions_gives_everyone_nothing(assignor: Assignor, counts: dict[str, int]) -> None:
    subs = {"C0": Subscription(["t0", "t1"], tps("t0p0"), generation=3), "C1": Subscription(["t0"])}
    assert assignor.assign(counts, subs) == {"C0": [], "C1": []}


@pytest.mark.parametrize("assignor", ALL, ids=ids)
def test_no_members_gives_an_empty_assignment(assignor: Assignor) -> None:
    assert assignor.assign({"t0": 3}, {}) == {}


@pytest.mark.parametrize("assignor", ALL, ids=ids)
def test_result_is_independent_of_input_order(assignor: Assignor) -> None:
    rng = random.Random(7)
    counts = {f"t{i}": rng.randint(0, 9) for i in range(6)}
    topics = sorted(counts)
    subs = {}
    for i in range(9):
        chosen = rng.sample(topics, rng.randint(0, len(topics)))
        owned = [TopicPartition(t, p) for t in chosen for p in range(counts[t]) if rng.random() < 0.3]
        subs[f"m{i}"] = Subscription(chosen, owned, generation=rng.randint(-1, 2))
    expected = assignor.assign(counts, subs)
    for _ in range(5):
        shuffled_counts = dict(rng.sample(list(counts.items()), len(counts)))
        shuffled = {}
        for member in rng.sample(list(subs), len(subs)):
            sub = subs[member]
            shuffled[member] = Subscription(
                set(sub.topics), rng.sample(list(sub.owned_partitions), len(sub.owned_partitions)), sub.generation
            )
        assert assignor.assign(shuffled_counts, shuffled) == expected


@pytest.mark.parametrize("assignor", ALL, ids=ids)
def test_lists_are_sorted_topic_partitions(assignor: Assignor) -> None:
    counts = {"b": 12, "a": 11, "c": 3}
    subs = {f"m{i}": Subscription(["c", "a", "b"]) for i in range(4)}
    for partitions in assignor.assign(counts, subs).values():
        assert partitions == sorted(partitions)
        assert all(type(tp) is TopicPartition for tp in partitions)
