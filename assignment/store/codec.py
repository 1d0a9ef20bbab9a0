"""Compact JSON encodings of group and member records for the store.

Partition lists are stored per topic as runs of consecutive partitions (`{"t": [[0, 41]]}` is t-0..t-41),
so a 10k-partition assignment is a few hundred bytes per member. Keys are short because a 500-member
group is written member by member on every protocol step that changes it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from itertools import repeat
from typing import Any

from cohort.assignment.protocol.group_state import EventKind, GroupEvent, GroupRecord, GroupState, MemberRecord
from cohort.common.types import TopicPartition

__all__ = [
    "decode_group",
    "decode_member",
    "decode_partitions",
    "dumps",
    "encode_group",
    "encode_member",
    "encode_member_partitions",
    "encode_partitions",
    "event_from_row",
    "event_row",
]


_new_tuple = tuple.__new__


def dumps(value: Any) -> str:
    """Compact deterministic JSON."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def encode_partitions(partitions: Iterable[TopicPartition]) -> dict[str, list[list[int]]]:
    """{topic: [[first, last], ...]} runs of consecutive partitions."""
    out: dict[str, list[list[int]]] = {}
    for topic, p in sorted(partitions):
        runs = out.setdefault(topic, [])
        if runs and runs[-1][1] == p - 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    return out


def decode_partitions(encoded: dict[str, list[list[int]]]) -> tuple[TopicPartition, ...]:
    """Inverse of `encode_partitions`, sorted. Runs are expanded in bulk (`tuple.__new__` over a zip, no
    Python-level call per partition): a sensor tick decodes every member's partitions of every group."""
    decoded: list[TopicPartition] = []
    for topic in sorted(encoded):
        for first, last in encoded[topic]:
            decoded.extend(map(_new_tuple, repeat(TopicPartition), zip(repeat(topic), range(first, last + 1))))
    return tuple(decoded)


def encode_member(m: MemberRecord) -> str:
    """A member record's small, often-changing fields (deadlines, flags, subscription) as compact JSON."""
    return dumps(
        {
            "i": m.instance_id,
            "c": m.client_id,
            "t": list(m.topics),
            "p": m.topic_pattern,
            "a": list(m.protocols),
            "st": m.session_timeout,
            "rt": m.rebalance_timeout,
            "pt": m.progress_timeout,
            "q": m.join_seq,
            "sd": m.session_deadline,
            "r": m.rack,
            "g": m.generation,
            "j": m.joined,
            "s": m.synced,
            "ag": m.assigned_generation,
            "pd": m.progress_deadline,
        }
    )


def encode_member_partitions(m: MemberRecord) -> str:
    """A member's assigned and owned partitions (large for big assignments, rarely changed) as JSON."""
    return dumps({"as": encode_partitions(m.assigned), "o": encode_partitions(m.owned)})


def decode_member(member_id: str, text: str, partitions: str) -> MemberRecord:
    """Inverse of `encode_member` and `encode_member_partitions`."""
    d = json.loads(text)
    parts = json.loads(partitions)
    return MemberRecord(
        member_id=member_id,
        instance_id=d["i"],
        client_id=d["c"],
        topics=tuple(d["t"]),
        topic_pattern=d["p"],
        protocols=tuple(d["a"]),
        session_timeout=d["st"],
        rebalance_timeout=d["rt"],
        progress_timeout=d["pt"],
        join_seq=d["q"],
        session_deadline=d["sd"],
        rack=d["r"],
        generation=d["g"],
        joined=d["j"],
        synced=d["s"],
        assigned=decode_partitions(parts["as"]),
        assigned_generation=d["ag"],
        owned=decode_partitions(parts["o"]),
        progress_deadline=d["pd"],
    )


def encode_group(g: GroupRecord) -> str:
    """The group-level fields (members are stored separately) as compact JSON."""
    return dumps(
        {
            "protocol": g.protocol,
            "rebalance_protocol": g.rebalance_protocol,
            "leader": g.leader_id,
            "pending": dict(g.pending),
            "topics": dict(g.partitions_per_topic),
            "rebalance_deadline": g.rebalance_deadline,
            "initial_delay_until": g.initial_delay_until,
            "next_seq": g.next_seq,
            "reason": g.rebalance_reason,
            "created_at": g.created_at,
            "rerun_claims": dict(g.rerun_claims),
            "last_protocol": g.last_protocol,
            "last_protocols": list(g.last_protocols),
        }
    )


def decode_group(name: str, state: str, generation: int, text: str, members: dict[str, MemberRecord]) -> GroupRecord:
    """Inverse of `encode_group`, with the members loaded from their rows."""
    d = json.loads(text)
    return GroupRecord(
        name=name,
        state=GroupState(state),
        generation=generation,
        protocol=d["protocol"],
        rebalance_protocol=d["rebalance_protocol"],
        leader_id=d["leader"],
        members=members,
        pending=d["pending"],
        partitions_per_topic=d["topics"],
        rebalance_deadline=d["rebalance_deadline"],
        initial_delay_until=d["initial_delay_until"],
        next_seq=d["next_seq"],
        rebalance_reason=d["reason"],
        created_at=d["created_at"],
        rerun_claims=d.get("rerun_claims", {}),  # absent in records written before claims existed
        last_protocol=d.get("last_protocol"),  # these two: absent in records written before they were kept
        last_protocols=tuple(d.get("last_protocols", ())),
    )


def event_row(group: str, e: GroupEvent) -> dict[str, Any]:
    """A group event as a row of `cohort_group_events`."""
    return {
        "group_name": group,
        "at": e.at,
        "kind": e.kind.value,
        "state": e.state.value,
        "previous_state": e.previous_state.value if e.previous_state is not None else None,
        "generation": e.generation,
        "member_id": e.member_id,
        "reason": e.reason[:1000],
    }


def event_from_row(row: Any) -> GroupEvent:
    """Inverse of `event_row`."""
    return GroupEvent(
        at=row.at,
        kind=EventKind(row.kind),
        state=GroupState(row.state),
        generation=row.generation,
        previous_state=GroupState(row.previous_state) if row.previous_state is not None else None,
        member_id=row.member_id,
        reason=row.reason,
    )
