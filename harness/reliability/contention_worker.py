"""N processes x S protocol steps on ONE group, and the checks that nothing was lost (test and benchmark).

Each process runs members (`chaos_members.SimMember`, the same state machine the chaos simulation uses)
through join / sync / heartbeat / commit / leave cycles against the real SQL store, counting exactly one
coordinator call per step, and reports what the coordinator accepted. The parent then reads the store and
checks, from the ledger, the event log and the group row's version, that every accepted operation is
there exactly once and that no partition ever had two owners in one generation (`verify`).

Kept apart from the test module so `spawn` children import only this and the package under test.
"""

from __future__ import annotations

import multiprocessing
import queue
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import CoordinatorError
from cohort.assignment.protocol.group_state import GroupConfig
from cohort.assignment.protocol.messages import JoinRequest
from cohort.common.types import OffsetRange, TopicPartition
from harness.reliability.chaos_members import Phase, SimMember

__all__ = ["CONFIG", "GROUP", "PARTITIONS", "TOPIC", "ProcessResult", "run_contention", "run_process"]

GROUP, TOPIC, PARTITIONS = "contended", "t", 16
CONFIG = GroupConfig(initial_rebalance_delay=0)
ASSIGNORS = ("cooperative-sticky", "range")
POLL_INTERVAL = 0.01


@dataclass(frozen=True)
class ProcessResult:
    """What one process's members did, as the coordinator answered it.

    Attributes:
        tag: the process's run id (on every ledger row it committed).
        calls: coordinator calls made (== the step budget), each at most one group-version bump.
        final_calls: calls made after the budget (the run's final leave).
        accepted: accepted calls by kind ("join", "sync", "heartbeat", "commit", "leave").
        refused: refused calls by error code.
        commits: accepted ranges (topic, partition, from, until, member id, generation).
        syncs: completed syncs (generation, member id, partitions).
        admitted: member ids the coordinator admitted (first join answered with the id).
        left: member ids whose leave was accepted.
        seconds: wall time of the steps.
    """

    tag: str
    calls: int
    final_calls: int = 0
    accepted: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    commits: tuple[tuple[str, int, int, int, str, int], ...] = ()
    syncs: tuple[tuple[int, str, tuple[tuple[str, int], ...]], ...] = ()
    admitted: tuple[str, ...] = ()
    left: tuple[str, ...] = ()
    seconds: float = 0.0


def _new_member(coordinator: Coordinator, tag: str, serial: int) -> SimMember:
    request = JoinRequest(
        client_id=f"{tag}-{serial:04d}",
        topics=(TOPIC,),
        assignors=ASSIGNORS,
        session_timeout=30.0,
        rebalance_timeout=10.0,
        progress_timeout=60.0,
    )
    return SimMember(coordinator, GROUP, request.client_id or tag, request)


def run_process(url: str, index: int, steps: int, barrier: Any | None = None) -> ProcessResult:
    """One process: `steps` coordinator calls by a member that commits, heartbeats, leaves and rejoins."""
    rng = random.Random(index)
    tag = f"p{index}"
    coordinator = Coordinator.from_url(url, config=CONFIG)
    accepted: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    commits: list[tuple[str, int, int, int, str, int]] = []
    syncs: list[tuple[int, str, tuple[tuple[str, int], ...]]] = []
    admitted: dict[str, None] = {}
    left: list[str] = []
    serial = 0
    member = _new_member(coordinator, tag, serial)
    if barrier is not None:
        barrier.wait(timeout=120)  # every process starts together: maximum contention
    started = time.perf_counter()
    calls = 0
    while calls < steps:
        calls += 1
        roll = rng.random()
        if member.phase is Phase.STABLE and member.owned and roll < 0.35:
            assert member.member_id is not None
            tp = rng.choice(member.owned)
            head = coordinator.fetch_offsets(GROUP, [tp])[tp] or 0  # a read, not a protocol step
            try:
                entries = coordinator.commit_offsets(
                    GROUP,
                    [OffsetRange(tp.topic, tp.partition, head, head + 1, records=1)],
                    member_id=member.member_id,
                    generation=member.generation,
                    run_id=tag,
                )
            except CoordinatorError as exc:
                refused[exc.code] += 1
                continue
            accepted["commit"] += 1
            commits.extend(
                (e.topic, e.partition, e.from_offset, e.until_offset, str(e.member_id), e.generation) for e in entries
            )
        elif member.member_id is not None and member.member_id in admitted and roll > 0.992:
            outcome = member.leave()
            if outcome == "left":
                accepted["leave"] += 1
                left.append(member.member_id)
            else:
                refused[outcome] += 1
            serial += 1
            member = _new_member(coordinator, tag, serial)
        else:
            result = member.step(progress=True)
            if "->" in result.outcome or result.outcome == "MEMBER_ID_REQUIRED":
                refused[result.outcome.split(" ")[0]] += 1
                continue
            accepted[result.call] += 1
            if result.outcome == "pending":
                time.sleep(POLL_INTERVAL)  # as GroupMember polls a pending join or sync: let the others act
            if result.call == "join" and member.member_id is not None:
                admitted.setdefault(member.member_id)
            if result.call == "sync" and result.outcome.startswith("gen="):
                assert member.member_id is not None
                owned = tuple((tp.topic, tp.partition) for tp in member.owned)
                syncs.append((member.generation, member.member_id, owned))
    seconds = time.perf_counter() - started
    final_calls = 0
    if member.member_id is not None:
        # The run ends cleanly (a call beyond the step budget): a member leaves; a member id handed out by
        # MEMBER_ID_REQUIRED but not used yet is given back, else it would hold the join phase open.
        final_calls, kind = 1, "final_leave" if member.member_id in admitted else "final_release"
        outcome = member.leave()
        if outcome != "left":
            refused[f"{kind}_{outcome}"] += 1
        else:
            accepted[kind] += 1
            if kind == "final_leave":
                left.append(member.member_id)
    coordinator.close()
    return ProcessResult(
        tag=tag,
        calls=calls,
        final_calls=final_calls,
        accepted=dict(accepted),
        refused=dict(refused),
        commits=tuple(commits),
        syncs=tuple(syncs),
        admitted=tuple(admitted),
        left=tuple(left),
        seconds=seconds,
    )


def _child(url: str, index: int, steps: int, barrier: Any, results: Any) -> None:
    try:
        results.put((index, run_process(url, index, steps, barrier)))
    except BaseException as exc:  # report instead of dying silently; the parent fails the run
        results.put((index, f"{type(exc).__name__}: {exc}"))
        raise


def run_contention(url: str, processes: int, steps: int, *, timeout: float = 300.0) -> list[ProcessResult]:
    """Start `processes` spawned processes of `steps` calls each on one group; return their results.

    Raises AssertionError if a process fails or the whole run exceeds `timeout` (its processes are then
    terminated by handle).
    """
    setup = Coordinator.from_url(url, config=CONFIG)
    setup.report_topic_metadata(GROUP, {TOPIC: PARTITIONS})
    setup.close()
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(processes)
    results = context.Queue()
    children = [
        context.Process(target=_child, args=(url, i, steps, barrier, results), daemon=True) for i in range(processes)
    ]
    for child in children:
        child.start()
    collected: dict[int, ProcessResult | str] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(collected) < processes:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"contention run exceeded {timeout:g} s ({len(collected)}/{processes} done)")
            try:
                index, outcome = results.get(timeout=min(remaining, 5.0))
            except queue.Empty:
                dead = [c for c in children if c.exitcode not in (None, 0)]
                if dead:
                    raise AssertionError(f"a contention process died with exit code {dead[0].exitcode}") from None
                continue
            collected[index] = outcome
    finally:
        for child in children:
            child.join(timeout=10)
            if child.is_alive():
                child.terminate()
                child.join(timeout=10)
    failures = [o for o in collected.values() if isinstance(o, str)]
    assert not failures, f"contention processes failed: {failures}"
    return [collected[i] for i in range(processes)]  # type: ignore[misc]


def partitions() -> Sequence[TopicPartition]:
    """The contended topic's partitions."""
    return [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
