"""Coordinator benchmarks: join/sync rounds, heartbeats, commit throughput (SQLite and PostgreSQL).

Usage:
    python -m benchmarks.coordinator [--quick] [--no-postgres]

Measures, each on a fresh store:

* a full join/sync round of 500 members over 10k partitions: 500 first joins answered MEMBER_ID_REQUIRED,
  500 joins with the id (the initial rebalance delay holds the phase open), the clock moves past the
  delay, 500 polls that complete the join, the leader's sync (the coordinator runs cooperative-sticky for
  it) and 499 follower syncs: 2,000 transactions. Then one member leaves and the 499 others rejoin and
  sync (the rebalance round). Time is a ManualClock, so only the work is measured; CPU seconds are shown
  too, because the machine is shared.
* 100 `GroupMember`s in one process heartbeating at their interval against the real clock for a while:
  no member may expire and the generation may not move (no spurious expiry); heartbeat latencies.
* commit throughput: one member owning 10k partitions commits 100-partition batches (partitions/s) and
  single ranges (commits/s).

The last line printed is one JSON object with the headline figures (null where not measured).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cohort.assignment.clock import ManualClock, SystemClock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import MemberIdRequiredError
from cohort.assignment.member import GroupMember
from cohort.assignment.protocol.group_state import EventKind, GroupConfig, GroupState
from cohort.assignment.protocol.messages import JoinComplete, JoinRequest, SyncComplete
from cohort.assignment.settings import MemberSettings
from cohort.assignment.store.sql import SqlGroupStore
from cohort.common.types import OffsetRange, TopicPartition

ROOT = Path(__file__).resolve().parents[1]

GROUP, TOPIC = "bench", "bench"
COMMIT_GROUP = "bench-commits"


def _timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def join_sync_round(url: str, members: int = 500, partitions: int = 10_000) -> dict[str, float]:
    """A full join/sync round (group formation), then the rebalance round after one member leaves."""
    clock = ManualClock(0.0)
    coordinator = Coordinator(SqlGroupStore.from_url(url), clock=clock, config=GroupConfig(initial_rebalance_delay=3))
    coordinator.report_topic_metadata(GROUP, {TOPIC: partitions})
    request = JoinRequest(topics=[TOPIC], session_timeout=60, rebalance_timeout=120)

    def form() -> list[JoinComplete]:
        ids = []
        for _ in range(members):
            try:
                coordinator.join(GROUP, request)
            except MemberIdRequiredError as needed:
                ids.append(needed.member_id)
            coordinator.join(GROUP, request.with_member_id(ids[-1]))
        clock.advance(3)
        answers = [coordinator.join(GROUP, request.with_member_id(m)) for m in ids]
        assert all(isinstance(a, JoinComplete) for a in answers)
        return _sync_all(coordinator, answers)  # type: ignore[arg-type]

    wall, cpu, synced = _timed(form)
    described = coordinator.describe_group(GROUP)
    assert described.state is GroupState.STABLE and len(described.members) == members
    assert sum(len(m.assigned) for m in described.members) == partitions

    owned = {a.member_id: a for a in synced}
    leaving = next(iter(owned))

    def rebalance() -> None:
        coordinator.leave(GROUP, leaving)
        answers = []
        for member_id, answer in owned.items():
            if member_id != leaving:
                reported = request.with_member_id(member_id).with_owned(answer.assignment)
                answers.append(coordinator.join(GROUP, reported))
        done = [coordinator.join(GROUP, request.with_member_id(a.member_id)) for a in answers]
        _sync_all(coordinator, done)  # type: ignore[arg-type]

    re_wall, re_cpu, _ = _timed(rebalance)
    assert coordinator.describe_group(GROUP).state is GroupState.STABLE
    coordinator.close()
    return {"wall_s": wall, "cpu_s": cpu, "rebalance_wall_s": re_wall, "rebalance_cpu_s": re_cpu}


def _sync_all(coordinator: Coordinator, answers: list[JoinComplete]) -> list[SyncComplete]:
    leader = next(a for a in answers if a.is_leader)
    results = [coordinator.sync(GROUP, leader.member_id, leader.generation)]
    results += [coordinator.sync(GROUP, a.member_id, a.generation) for a in answers if not a.is_leader]
    assert all(isinstance(r, SyncComplete) for r in results)
    return results  # type: ignore[return-value]


class _TimedCoordinator(Coordinator):
    """Records the latency of every heartbeat."""

    latencies: list[float]

    def heartbeat(self, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return super().heartbeat(*args, **kwargs)
        finally:
            self.latencies.append(time.perf_counter() - start)


def heartbeats(url: str, members: int = 100, seconds: float = 20.0, session: float = 6.0) -> dict[str, Any]:
    """`members` GroupMembers (threads) heartbeating every session/3 against the real clock."""
    config = GroupConfig(initial_rebalance_delay=1.0, min_session_timeout=1.0)
    coordinator = _TimedCoordinator(SqlGroupStore.from_url(url), clock=SystemClock(), config=config)
    coordinator.latencies = []
    coordinator.report_topic_metadata(GROUP, {TOPIC: 1000})
    group = [
        GroupMember(
            coordinator,
            GROUP,
            MemberSettings(
                topics=(TOPIC,),
                session_timeout=session,
                rebalance_timeout=60,
                heartbeat_interval=session / 3,
                join_timeout=120,
            ),
            client_id=f"run-{i}",
            poll_interval=0.2,
        )
        for i in range(members)
    ]
    threads = [threading.Thread(target=m.join) for m in group]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    generation = coordinator.describe_group(GROUP).generation
    coordinator.latencies.clear()
    time.sleep(seconds)
    described = coordinator.describe_group(GROUP)
    removed = [e for _, e in coordinator.group_events(GROUP) if e.kind is EventKind.MEMBER_REMOVED]
    latencies = sorted(coordinator.latencies)
    for member in group:
        member.close(leave=False)
    coordinator.close()
    return {
        "members": len(described.members),
        "generation_moved": described.generation != generation,
        "removed": len(removed),
        "heartbeats": len(latencies),
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
        "max_ms": 1000 * latencies[-1],
    }


def commits(url: str, batches: int = 200, batch: int = 100, singles: int = 1000) -> dict[str, float]:
    """One member owning 10k partitions commits `batch`-partition commits and single-range commits."""
    clock = ManualClock(0.0)
    coordinator = Coordinator(SqlGroupStore.from_url(url), clock=clock, config=GroupConfig(initial_rebalance_delay=0))
    coordinator.report_topic_metadata(COMMIT_GROUP, {TOPIC: 10_000})
    request = JoinRequest(instance_id="bench/worker-0", topics=[TOPIC], assignors=["range"], session_timeout=60)
    joined = coordinator.join(COMMIT_GROUP, request)
    assert isinstance(joined, JoinComplete)
    member, generation = joined.member_id, joined.generation
    coordinator.sync(COMMIT_GROUP, member, generation)
    heads = dict.fromkeys(range(10_000), 0)

    def commit(parts: list[int]) -> None:
        ranges = [OffsetRange(TOPIC, p, heads[p], heads[p] + 10, records=10) for p in parts]
        coordinator.commit_offsets(COMMIT_GROUP, ranges, member_id=member, generation=generation, run_id="bench")
        for p in parts:
            heads[p] += 10

    wall, _, _ = _timed(
        lambda: [commit(list(range(i * batch % 10_000, i * batch % 10_000 + batch))) for i in range(batches)]
    )
    single_wall, _, _ = _timed(lambda: [commit([i % 10_000]) for i in range(singles)])
    assert coordinator.fetch_offsets(COMMIT_GROUP, [TopicPartition(TOPIC, 0)])[TopicPartition(TOPIC, 0)] == heads[0]
    coordinator.close()
    return {"partitions_per_s": batches * batch / wall, "single_commits_per_s": singles / single_wall}


@contextmanager
def postgres() -> Iterator[str | None]:
    """A throwaway PostgreSQL server (harness/postgres.py); None if it cannot be started."""
    try:
        from harness.postgres import PostgresServer

        root = Path(tempfile.mkdtemp(prefix="cohort-bench-pg-"))
        server = PostgresServer(root)
        server.start()
    except Exception as exc:  # no server binaries here: report, measure the rest
        print(f"PostgreSQL not measured: {exc}", file=sys.stderr)
        yield None
        return
    try:
        yield server.create_database("bench")
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter heartbeat and commit runs")
    parser.add_argument("--no-postgres", action="store_true", help="skip the PostgreSQL measurements")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cohort-bench-"))

    def sqlite(name: str) -> str:
        return f"sqlite:///{work / name}.db"

    print(f"load average before: {os.getloadavg()}")
    sqlite_round = join_sync_round(sqlite("round"))
    print(f"join/sync 500 members x 10k partitions, SQLite: {json.dumps(sqlite_round)}")
    pg_round: dict[str, float] | None = None
    pg_commits: dict[str, float] | None = None
    if not args.no_postgres:
        with postgres() as url:
            if url is not None:
                pg_round = join_sync_round(url)
                print(f"join/sync 500 members x 10k partitions, PostgreSQL: {json.dumps(pg_round)}")
                pg_commits = commits(url, batches=50 if args.quick else 200, singles=200 if args.quick else 1000)
                print(f"commits, PostgreSQL: {json.dumps(pg_commits)}")
    beat = heartbeats(sqlite("heartbeats"), seconds=8.0 if args.quick else 30.0)
    print(f"heartbeats, 100 members, SQLite: {json.dumps(beat)}")
    committed = commits(sqlite("commits"), batches=50 if args.quick else 200, singles=200 if args.quick else 1000)
    print(f"commits, SQLite: {json.dumps(committed)}")
    print(f"load average after: {os.getloadavg()}")
    print(
        json.dumps(
            {
                "join_sync_500_members_sqlite_s": round(sqlite_round["wall_s"], 3),
                "join_sync_500_members_sqlite_cpu_s": round(sqlite_round["cpu_s"], 3),
                "join_sync_500_members_postgres_s": round(pg_round["wall_s"], 3) if pg_round else None,
                "rebalance_499_members_sqlite_s": round(sqlite_round["rebalance_wall_s"], 3),
                "heartbeat_100_members_spurious_expiries": beat["removed"],
                "heartbeat_p99_ms": round(beat["p99_ms"], 2),
                "commits_per_s_sqlite": round(committed["partitions_per_s"]),
                "single_commits_per_s_sqlite": round(committed["single_commits_per_s"]),
                "commits_per_s_postgres": round(pg_commits["partitions_per_s"]) if pg_commits else None,
            }
        )
    )


if __name__ == "__main__":
    main()
