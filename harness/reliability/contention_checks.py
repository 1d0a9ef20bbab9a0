"""What a contention run must leave in the store: every accepted operation exactly once, nothing else.

`verify(url, results)` reads the group back (ledger, heads, event log, the group row's version) and raises
AssertionError naming the first lost update, phantom write or double ownership; it returns the run's
figures for the benchmark.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.protocol.group_state import EventKind, GroupState
from cohort.assignment.store.sql import SqlGroupStore
from harness.reliability.contention_worker import CONFIG, GROUP, TOPIC, ProcessResult, partitions

__all__ = ["verify"]


def _ledger(coordinator: Coordinator, results: Sequence[ProcessResult]) -> int:
    """Each partition's ledger is contiguous and is exactly the accepted commits, one committer per
    generation; each process's accepted commits are the rows carrying its run id."""
    accepted: dict[int, Counter[tuple[int, int, str, int]]] = defaultdict(Counter)
    for result in results:
        for _topic, partition, start, until, member_id, generation in result.commits:
            accepted[partition][(start, until, member_id, generation)] += 1
    heads = coordinator.fetch_offsets(GROUP, list(partitions()))
    rows_by_run: Counter[str | None] = Counter()
    total = 0
    for tp in partitions():
        history = coordinator.ledger_history(GROUP, TOPIC, tp.partition)
        total += len(history)
        for before, after in itertools.pairwise(history):
            assert after.from_offset == before.until_offset, f"{tp}: gap or overlap at {after.from_offset}"
        recorded = Counter((e.from_offset, e.until_offset, e.member_id or "", e.generation) for e in history)
        lost = accepted[tp.partition] - recorded
        phantom = recorded - accepted[tp.partition]
        assert not lost, f"{tp}: accepted commits missing from the ledger (lost update): {sorted(lost)[:5]}"
        assert not phantom, f"{tp}: ledger rows no process saw accepted: {sorted(phantom)[:5]}"
        assert heads[tp] == (history[-1].until_offset if history else None), f"{tp}: head is not the ledger's end"
        committers: dict[int, set[str | None]] = defaultdict(set)
        for entry in history:
            committers[entry.generation].add(entry.member_id)
            rows_by_run[entry.run_id] += 1
        doubled = {g: m for g, m in committers.items() if len(m) > 1}
        assert not doubled, f"{tp}: two members committed in one generation: {doubled}"
    for result in results:
        assert rows_by_run[result.tag] == result.accepted.get("commit", 0) == len(result.commits), (
            f"process {result.tag}: {result.accepted.get('commit', 0)} commits accepted, "
            f"{rows_by_run[result.tag]} ledger rows carry its run id"
        )
    return total


def _ownership(results: Sequence[ProcessResult]) -> int:
    """Within a generation the assignments members received are disjoint; returns the generations seen."""
    per_generation: dict[int, dict[tuple[str, int], str]] = defaultdict(dict)
    for result in results:
        for generation, member_id, owned in result.syncs:
            for tp in owned:
                holder = per_generation[generation].setdefault(tp, member_id)
                assert holder == member_id, f"{tp} held by {holder} and {member_id} in generation {generation}"
    return len(per_generation)


def _events(coordinator: Coordinator, results: Sequence[ProcessResult]) -> int:
    """Generations follow each other one by one; every admission and leave is recorded exactly once."""
    events = [e for _, e in coordinator.group_events(GROUP)]
    generations = [e.generation for e in events if e.kind is EventKind.GENERATION]
    assert generations == list(range(1, len(generations) + 1)), f"generation history has holes: {generations[:20]}"
    joined = Counter(e.member_id for e in events if e.kind is EventKind.MEMBER_JOINED)
    left = Counter(e.member_id for e in events if e.kind is EventKind.MEMBER_REMOVED and e.reason.startswith("left:"))
    for result in results:
        for member_id in result.admitted:
            assert joined[member_id] == 1, f"{result.tag}: member {member_id} joined {joined[member_id]} times"
        for member_id in result.left:
            assert left[member_id] == 1, f"{result.tag}: member {member_id} left {left[member_id]} times"
    admitted = sum(len(r.admitted) for r in results)
    assert sum(joined.values()) == admitted, f"{sum(joined.values())} admissions recorded, {admitted} seen"
    assert sum(left.values()) == sum(len(r.left) for r in results), "leaves recorded differ from leaves accepted"
    return len(generations)


def _version(url: str) -> int:
    store = SqlGroupStore.from_url(url)
    try:
        with store.engine.connect() as conn:
            query = sa.text("SELECT version FROM cohort_groups WHERE name = :n")
            return int(conn.execute(query, {"n": GROUP}).scalar_one())
    finally:
        store.close()


def verify(url: str, results: Sequence[ProcessResult]) -> dict[str, Any]:
    """Check the store after a contention run; return its figures."""
    coordinator = Coordinator.from_url(url, config=CONFIG)
    try:
        rows = _ledger(coordinator, results)
        generations_synced = _ownership(results)
        generations = _events(coordinator, results)
        final = coordinator.describe_group(GROUP)
        stayed = [(m.client_id, m.member_id, m.generation, m.awaiting_join) for m in final.members]
        assert final.state is GroupState.EMPTY and not final.members, f"every run left, yet {final.state}: {stayed}"
    finally:
        coordinator.close()
    # Every accepted call wrote (a session deadline at least) and bumped the version once; refused calls
    # bump it at most once; the setup's metadata report once. Fewer bumps than accepted writes = lost update.
    writes = sum(sum(r.accepted.values()) for r in results)
    calls = sum(r.calls + r.final_calls for r in results)
    version = _version(url)
    assert writes + 1 <= version <= calls + 1, f"group version {version} outside [{writes + 1}, {calls + 1}]"
    seconds = max(r.seconds for r in results)
    return {
        "processes": len(results),
        "steps_per_process": results[0].calls,
        "calls": calls,
        "accepted": writes,
        "commits_accepted": rows,
        "refused": dict(sum((Counter(r.refused) for r in results), Counter())),
        "generations": generations,
        "generations_with_syncs": generations_synced,
        "group_version": version,
        "wall_s": round(seconds, 2),
        "calls_per_s": round(calls / seconds, 1),
    }
