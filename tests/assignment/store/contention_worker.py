"""One process of the multi-process contention test: a real member hammering one group for a while.

Kept out of the test module so `spawn` children import only this and the package under test.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import CoordinatorError
from cohort.assignment.member import GroupMember, RebalanceListener
from cohort.assignment.protocol.group_state import GroupConfig
from cohort.assignment.settings import MemberSettings
from cohort.common.types import OffsetRange, TopicPartition

GROUP = "hammer"
TOPIC = "t"
CONFIG = GroupConfig(initial_rebalance_delay=0.3, min_session_timeout=0.5)


class _Recorder(RebalanceListener):
    def __init__(self, out: list[tuple[int, str, tuple[tuple[str, int], ...]]]) -> None:
        self.out = out
        self.member: GroupMember | None = None

    def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        member = self.member
        assert member is not None
        self.out.append((member.generation, str(member.member_id), tuple(tuple(tp) for tp in member.assignment)))


def _new_member(coordinator: Coordinator, index: int, assignors: Sequence[str], syncs: list[Any]) -> GroupMember:
    recorder = _Recorder(syncs)
    member = GroupMember(
        coordinator,
        GROUP,
        MemberSettings(
            topics=(TOPIC,),
            assignors=tuple(assignors),
            session_timeout=3.0,
            rebalance_timeout=6.0,
            heartbeat_interval=0.2,
            join_timeout=60.0,
        ),
        client_id=f"worker-{index}",
        poll_interval=0.02,
        listener=recorder,
    )
    recorder.member = member
    member.join()
    return member


def run_worker(url: str, index: int, seconds: float, assignors: Sequence[str]) -> dict[str, Any]:
    """Join, commit one offset at a time on owned partitions, churn now and then; report what happened."""
    rng = random.Random(index)
    coordinator = Coordinator.from_url(url, config=CONFIG)
    syncs: list[tuple[int, str, tuple[tuple[str, int], ...]]] = []
    accepted: list[tuple[int, int, str]] = []
    refused = 0
    member = _new_member(coordinator, index, assignors, syncs)
    deadline = time.monotonic() + seconds
    churn_at = time.monotonic() + seconds / 2 if index % 2 == 0 else float("inf")
    while time.monotonic() < deadline:
        if time.monotonic() >= churn_at:  # every other worker restarts once: guaranteed rebalances
            churn_at = float("inf")
            member.close()
            member = _new_member(coordinator, index, assignors, syncs)
        if member.rebalance_needed:
            member.ensure_active()
        owned = member.assignment
        if owned:
            partition = rng.choice(owned)
            start = coordinator.fetch_offsets(GROUP, [partition])[partition] or 0
            member_id = str(member.member_id)
            try:
                member.commit([OffsetRange(TOPIC, partition.partition, start, start + 1, records=1)])
                accepted.append((partition.partition, start, member_id))
            except CoordinatorError:
                refused += 1
        if rng.random() < 0.005:
            member.close()
            member = _new_member(coordinator, index, assignors, syncs)
        time.sleep(rng.uniform(0.0, 0.005))
    member.close()
    coordinator.close()
    return {"syncs": syncs, "accepted": accepted, "refused": refused}
