"""What the operations CLI shows, computed as plain values: group listings, describe rows, what-if moves.

`cohort groups`, `cohort describe`, `cohort delete` and `cohort simulate` (cohort/cli/main.py) print these as
Rich tables or JSON; keeping the computation here makes it testable without a terminal.

Example:
    >>> plan = simulate_change({"orders": 4}, ["a", "b"], assignor="sticky", leave=["b"])
    >>> plan.moved
    (('orders', 2, 'b', 'a'), ('orders', 3, 'b', 'a'))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from cohort.assignment import Subscription, get_assignor
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.protocol.backlog import run_assignor
from cohort.assignment.types import Assignment
from cohort.common.types import TopicPartition

__all__ = [
    "DescribeRow",
    "ResetRow",
    "WhatIf",
    "describe_rows",
    "group_rows",
    "live_group_state",
    "reset_rows",
    "simulate_change",
]


@dataclass(frozen=True)
class DescribeRow:
    """One line of `cohort describe`, as `kafka-consumer-groups --describe` prints it."""

    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None
    lag: int | None
    owner: str | None
    generation: int

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def group_rows(coordinator: Coordinator) -> list[dict[str, object]]:
    """One dict per group: name, state, members, generation, assignor (the current generation's, None while the
    group is Empty), last assignor (the latest generation's that had members) and configured assignors (those
    its leader declared, in order of preference)."""
    rows: list[dict[str, object]] = []
    for listing in coordinator.list_groups():
        described = coordinator.describe_group(listing.name)
        rows.append(
            {
                "group": listing.name,
                "state": listing.state.value,
                "members": listing.members,
                "generation": listing.generation,
                "assignor": described.assignor,
                "last_assignor": described.last_assignor,
                "configured_assignors": list(described.configured_assignors),
            }
        )
    return rows


def describe_rows(
    coordinator: Coordinator,
    group: str,
    end_offsets: Callable[[Sequence[TopicPartition]], Mapping[TopicPartition, int]] | None = None,
) -> list[DescribeRow]:
    """Per partition of the group's topics: committed offset, end offset, lag, owner, generation.

    Topics are those a member subscribes to, plus those with committed offsets; `end_offsets` (Kafka's
    end offsets, e.g. `KafkaResource.end_offsets`) is optional: without it, log end and lag are None.
    """
    described = coordinator.describe_group(group)
    known = dict(described.partitions_per_topic)
    subscribed = {t for m in described.members for t in m.topics}
    tps = [TopicPartition(t, p) for t, n in sorted(known.items()) for p in range(n)]
    committed = coordinator.fetch_offsets(group, tps) if tps else {}
    with_commits = {tp.topic for tp, offset in committed.items() if offset is not None}
    tps = [tp for tp in tps if tp.topic in subscribed or tp.topic in with_commits]
    ends = dict(end_offsets(tps)) if end_offsets is not None and tps else {}
    owners = {tp: (m.instance_id or m.member_id) for m in described.members for tp in m.assigned}
    rows = []
    for tp in tps:
        current, end = committed.get(tp), ends.get(tp)
        lag = None if end is None else max(0, end - (current or 0))
        rows.append(DescribeRow(tp.topic, tp.partition, current, end, lag, owners.get(tp), described.generation))
    return rows


@dataclass(frozen=True)
class ResetRow:
    """One offset reset the ledger recorded: when, which partition, from where to where, who and why."""

    at: str
    topic: str
    partition: int
    from_offset: int
    to_offset: int
    note: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def reset_rows(coordinator: Coordinator, group: str, rows: Sequence[DescribeRow], *, last: int = 20) -> list[ResetRow]:
    """The `last` offset resets of the partitions `rows` describe, oldest first."""
    from datetime import UTC, datetime

    from cohort.assignment.protocol.messages import RESET

    described = {(row.topic, row.partition) for row in rows}
    found = [
        e
        for e in coordinator.latest_ledger_entries(group, RESET, limit=10 * last)
        if (e.topic, e.partition) in described
    ]
    found.sort(key=lambda e: (e.committed_at, e.topic, e.partition))
    return [
        ResetRow(
            datetime.fromtimestamp(e.committed_at, UTC).isoformat(timespec="seconds"),
            e.topic,
            e.partition,
            e.from_offset,
            e.until_offset,
            e.note or "",
        )
        for e in found[-last:]
    ]


@dataclass(frozen=True)
class WhatIf:
    """The assignment before and after a membership change, and which partitions move.

    `moved` lists (topic, partition, from member, to member); `rounds` is 2 for a cooperative assignor
    (revoke, then assign). `records`: member -> (backlog before, backlog after) when a backlog was given.
    """

    assignor: str
    before: Mapping[str, tuple[TopicPartition, ...]]
    after: Mapping[str, tuple[TopicPartition, ...]]
    moved: tuple[tuple[str, int, str | None, str | None], ...]
    rounds: int
    records: Mapping[str, tuple[int, int]] = field(default_factory=dict)


def _converge(
    assign: Callable[[Mapping[str, int], Mapping[str, Subscription]], Assignment],
    counts: Mapping[str, int],
    topics: Mapping[str, Sequence[str]],
    owned: Mapping[str, Sequence[TopicPartition]],
    generation: int,
) -> tuple[dict[str, tuple[TopicPartition, ...]], int]:
    """Run the assignor until the assignment stops changing (cooperative assignors need two rounds)."""
    current = {m: tuple(owned.get(m, ())) for m in topics}
    for rounds in range(1, 5):
        subs = {m: Subscription(tuple(topics[m]), current[m], generation + rounds - 1) for m in topics}
        nxt = {m: tuple(ps) for m, ps in assign(counts, subs).items()}
        if nxt == current:
            return current, max(1, rounds - 1)
        current = nxt
    return current, 4


def simulate_change(
    partitions_per_topic: Mapping[str, int],
    members: Sequence[str],
    *,
    assignor: str = "sticky",
    current: Mapping[str, Sequence[TopicPartition]] | None = None,
    subscriptions: Mapping[str, Sequence[str]] | None = None,
    leave: Sequence[str] = (),
    join: Sequence[str] = (),
    generation: int = 1,
    backlog: Mapping[TopicPartition, int] | None = None,
) -> WhatIf:
    """What `assignor` does when `leave` members go and `join` members arrive.

    `current` is the assignment now (a live group's); without it, the assignor's own assignment of
    `members` is the starting point. Every member subscribes to every topic unless `subscriptions` says.
    `backlog` (records left per partition) goes to an assignor that balances backlog (`lag-sticky`), and
    each member's backlog before and after is reported.
    """
    chosen = get_assignor(assignor)

    def assign(counts: Mapping[str, int], subs: Mapping[str, Subscription]) -> Assignment:
        return run_assignor(chosen, counts, subs, backlog)

    unknown = sorted(set(leave) - set(members))
    if unknown:
        raise ValueError(f"cannot remove {unknown}: not members ({sorted(members)})")
    clash = sorted(set(join) & set(members))
    if clash:
        raise ValueError(f"cannot add {clash}: already members")
    topics_of = {m: tuple((subscriptions or {}).get(m, sorted(partitions_per_topic))) for m in [*members, *join]}
    counts = dict(partitions_per_topic)
    if current is None:
        before, _ = _converge(assign, counts, {m: topics_of[m] for m in members}, {}, generation)
    else:
        before = {m: tuple(sorted(current.get(m, ()))) for m in members}
    after_members = {m: topics_of[m] for m in [*members, *join] if m not in set(leave)}
    after, rounds = _converge(assign, counts, after_members, before, generation)
    owner_before = {tp: m for m, tps in before.items() for tp in tps}
    owner_after = {tp: m for m, tps in after.items() for tp in tps}
    moved = tuple(
        (tp.topic, tp.partition, owner_before.get(tp), owner_after.get(tp))
        for tp in sorted(set(owner_before) | set(owner_after))
        if owner_before.get(tp) != owner_after.get(tp)
    )
    records = {}
    if backlog is not None:
        for member in sorted(set(before) | set(after)):
            records[member] = tuple(sum(backlog.get(tp, 0) for tp in side.get(member, ())) for side in (before, after))
    return WhatIf(assignor, before, after, moved, rounds, {m: (b, a) for m, (b, a) in records.items()})


def live_group_state(
    coordinator: Coordinator, group: str
) -> tuple[dict[str, int], list[str], dict[str, tuple[TopicPartition, ...]], dict[str, list[str]]]:
    """(partition counts, member names, current assignment, subscriptions) of a live group, members named
    by instance id when static."""
    described = coordinator.describe_group(group)
    if not described.members:
        raise ValueError(f"group {group!r} has no members ({described.state.value}); give --members instead")
    names = {m.member_id: (m.instance_id or m.member_id) for m in described.members}
    counts = dict(described.partitions_per_topic)
    subs = {names[m.member_id]: list(m.topics) for m in described.members}  # patterns already resolved
    current = {names[m.member_id]: m.assigned for m in described.members}
    return counts, list(names.values()), current, subs
