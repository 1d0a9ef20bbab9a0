"""Target assignment and reconciliation as plain functions."""

from __future__ import annotations

import pytest

from cohort.assignment.errors import InvalidRequestError
from cohort.assignment.protocol.group_state import GroupRecord, MemberRecord
from cohort.assignment.protocol.reconcile import (
    build_subscriptions,
    reconcile,
    subscribed_partition_counts,
    unassigned_partitions,
    validate_assignment,
)
from cohort.assignment.store.codec import (
    decode_member,
    decode_partitions,
    encode_member,
    encode_member_partitions,
    encode_partitions,
)
from cohort.common.types import TopicPartition as TP


def _group(**members: MemberRecord) -> GroupRecord:
    return GroupRecord(name="g", members=members, partitions_per_topic={"t": 4, "u": 2, "orders-x": 1})


def _m(member_id: str, topics: tuple[str, ...] = ("t",), pattern: str | None = None, **kw: object) -> MemberRecord:
    return MemberRecord(member_id, None, None, topics, pattern, ("range",), 10, 10, 10, 0, 0.0, **kw)  # type: ignore[arg-type]


def test_reconcile_withholds_partitions_another_member_still_holds() -> None:
    target = {"a": [TP("t", 0), TP("t", 1)], "b": [TP("t", 2), TP("t", 3)]}
    held = {"a": [TP("t", 0), TP("t", 1), TP("t", 2)], "b": []}
    plan = reconcile(target, held)
    assert plan["a"].assigned == (TP("t", 0), TP("t", 1)) and plan["a"].revoking == (TP("t", 2),)
    assert plan["b"].assigned == (TP("t", 3),) and plan["b"].withheld == (TP("t", 2),)
    # once a released t-2, the same target goes through whole
    plan = reconcile(target, {"a": [TP("t", 0), TP("t", 1)], "b": []})
    assert plan["b"].assigned == (TP("t", 2), TP("t", 3)) and plan["b"].withheld == ()


def test_reconcile_with_nothing_held_is_the_target_eager() -> None:
    target = {"a": [TP("t", 1), TP("t", 0)], "b": []}
    plan = reconcile(target, {"a": [], "b": []})
    assert plan["a"].assigned == (TP("t", 0), TP("t", 1)) and plan["b"].assigned == ()
    assert all(not p.withheld and not p.revoking for p in plan.values())


def test_reconcile_never_gives_a_partition_to_two_members() -> None:
    target = {"a": [TP("t", 0)], "b": [TP("t", 1)], "c": [TP("t", 2)]}
    held = {"a": [TP("t", 1)], "b": [TP("t", 2)], "c": [TP("t", 0)]}  # a full rotation
    plan = reconcile(target, held)
    assert all(p.assigned == () for p in plan.values())
    assert {m: p.revoking for m, p in plan.items()} == {"a": (TP("t", 1),), "b": (TP("t", 2),), "c": (TP("t", 0),)}


def test_validate_assignment_normalises_and_refuses_bad_lists() -> None:
    group = _group(a=_m("a"), b=_m("b", ("t", "u")))
    ok = validate_assignment(group, {"a": [TP("t", 1), TP("t", 0)], "b": [TP("u", 0)]})
    assert ok == {"a": (TP("t", 0), TP("t", 1)), "b": (TP("u", 0),)}
    assert validate_assignment(group, {"a": []}) == {"a": (), "b": ()}
    for bad, words in [
        ({"a": [TP("t", 0)], "b": [TP("t", 0)]}, "both"),
        ({"zed": []}, "unknown members"),
        ({"a": [TP("u", 0)]}, "does not subscribe"),
        ({"a": [TP("t", 4)]}, "has 4 partitions"),
        ({"b": [TP("nope", 0)]}, "does not subscribe"),
        ({"a": [TP("t", 1.0)]}, "not a partition number"),  # type: ignore[arg-type]
        ({"a": [TP("t", True)]}, "not a partition number"),
    ]:
        with pytest.raises(InvalidRequestError, match=words):
            validate_assignment(group, bad)


def test_subscriptions_resolve_patterns_and_carry_the_last_assignment() -> None:
    group = _group(
        a=_m("a", (), r"orders-.*", assigned=(TP("orders-x", 0),), assigned_generation=3),
        b=_m("b", ("u",)),
    )
    subs = build_subscriptions(group)
    assert tuple(subs["a"].topics) == ("orders-x",) and subs["a"].owned_partitions == (TP("orders-x", 0),)
    assert subs["a"].generation == 3 and subs["b"].generation == -1
    assert subscribed_partition_counts(group) == {"orders-x": 1, "u": 2}
    assert unassigned_partitions(group, {"a": [TP("orders-x", 0)]}, {"b": [TP("u", 1)]}) == [TP("u", 0)]


def test_partition_runs_round_trip() -> None:
    parts = [TP("t", p) for p in (0, 1, 2, 5, 7, 8)] + [TP("u", 3)]
    encoded = encode_partitions(reversed(parts))
    assert encoded == {"t": [[0, 2], [5, 5], [7, 8]], "u": [[3, 3]]}
    assert decode_partitions(encoded) == tuple(sorted(parts))
    member = _m("a", ("t",), "x.*", owned=tuple(parts), assigned=tuple(parts[:2]), progress_deadline=5.5)
    assert decode_member("a", encode_member(member), encode_member_partitions(member)) == member
