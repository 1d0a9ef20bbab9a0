"""Benchmark Cohort's sticky assignor, side by side with kafka-python's StickyPartitionAssignor.

For each size (partitions x members) and subscription mode it times three rounds: (a) the initial assignment,
(b) one member leaves, (c) one member joins, with owned partitions taken from (a). It reports the median time,
the partitions moved (owner changed), the fewest moves balance allows (equal subscriptions), and the peak RSS
of a fresh process that built the inputs and ran the rounds. Each size and mode runs in its own child process
so the RSS figures do not mix; kafka-python runs only on the sizes it can handle, under a time limit.

    python -m benchmarks.assignors --quick   # under a minute: 1k, 10k, 100k; kafka-python at 1k and 10k
    python -m benchmarks.assignors           # adds 1M partitions x 2,000 members and more repeats
    python -m benchmarks.assignors --lag     # only the lag-aware assignor against sticky, up to 1M x 2,000

The lag-aware assignor (`lag-sticky`) runs beside `sticky` in one fresh process per size, equal subscriptions,
on one skewed backlog (lognormal records per partition, fixed seed): CPU seconds of `assign` (median of 3) and
the largest member backlog over the lower bound max(ideal share, largest partition), for three rounds: (a)
initial, nothing owned; (b) rebalance: both start from sticky's count-balanced assignment (lag-sticky's first
cooperative round is timed; its makespan is the one after the second round completes the moves); (c) one member
leaves, each from its own initial assignment. The last line printed is one JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cohort.assignment import LagStickyAssignor, StickyAssignor, Subscription
from cohort.common.types import TopicPartition

MODES = ("equal", "single-topic", "random-subsets")
Row = dict[str, Any]


@dataclass(frozen=True)
class Size:
    label: str
    topics: int
    partitions_per_topic: int
    members: int

    @property
    def key(self) -> str:
        return self.label.lower().replace(" ", "_").replace(",", "")


SIZES = (
    Size("1k x 100", 10, 100, 100),
    Size("10k x 100", 50, 200, 100),
    Size("100k x 1000", 200, 500, 1000),
    Size("1M x 2000", 500, 2000, 2000),
)


def group(size: Size, mode: str) -> tuple[dict[str, int], dict[str, frozenset[str]], frozenset[str]]:
    """Topic metadata, each member's topics, and the joining member's topics for one size and mode.

    equal: everyone on every topic. single-topic: as equal, but the first member subscribes to one topic only.
    random-subsets: every member (and the joiner) on a random non-empty subset, fixed seed.
    """
    counts = {f"topic-{t:04d}": size.partitions_per_topic for t in range(size.topics)}
    everything = frozenset(counts)
    members = [f"member-{i:05d}" for i in range(size.members)]
    rng = random.Random(42)
    if mode == "random-subsets":
        names = sorted(counts)
        topics = {m: frozenset(rng.sample(names, rng.randint(1, len(names)))) for m in members}
        joiner = frozenset(rng.sample(names, rng.randint(1, len(names))))
    else:
        topics = dict.fromkeys(members, everything)
        if mode == "single-topic":
            topics[members[0]] = frozenset([min(counts)])
        joiner = everything
    return counts, topics, joiner


def moved(before: Mapping[str, list[Any]], after: Mapping[str, list[Any]]) -> int:
    """Partitions whose owner differs between two assignments (a leaver's partitions count as moved)."""
    owner = {tp: m for m, tps in before.items() for tp in tps}
    return sum(1 for m, tps in after.items() for tp in tps if owner.get(tp) != m)


def fewest_moves(total: int, owned: Mapping[str, int], leaver_owned: int) -> int:
    """Fewest moves for equal subscriptions: the leaver's partitions plus sum(max(0, o - q)) - min(r, #{o > q})
    over the remaining members, with quota q = total // n and r = total % n extra slots."""
    base, extra = divmod(total, len(owned))
    excess = sum(max(0, o - base) for o in owned.values())
    return leaver_owned + excess - min(extra, sum(1 for o in owned.values() if o > base))


def timed(call: Callable[[], Any], repeats: int) -> tuple[Any, float]:
    """The call's result and its median wall time in milliseconds."""
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = call()
        times.append((time.perf_counter() - start) * 1000)
    return result, statistics.median(times)


def rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize() / 2**20


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass(frozen=True)
class Engine:
    """How to run one assignor: `prepare` builds its input from member -> (topics, owned, generation) outside
    the timed region; `run` is the timed call; `result` turns its output into member -> partitions."""

    prepare: Callable[[dict[str, tuple]], Any]
    run: Callable[[Any], Any]
    result: Callable[[Any], dict[str, list]]


def run_rounds(size: Size, mode: str, repeats: int, engine: Engine) -> Row:
    """Rounds (a) initial, (b) one member leaves, (c) one member joins, owned partitions taken from (a)."""
    counts, topics, joiner = group(size, mode)
    members = sorted(topics)
    start_rss = rss_mb()

    def play(members_in: dict[str, tuple]) -> tuple[dict[str, list], float]:
        prepared = engine.prepare(members_in)
        output, ms = timed(lambda: engine.run(prepared), repeats)
        return engine.result(output), ms

    initial, t_initial = play({m: (topics[m], [], -1) for m in members})
    leaver = members[len(members) // 2]
    after_leave, t_leave = play({m: (topics[m], initial[m], 1) for m in members if m != leaver})
    join_in = {m: (topics[m], initial[m], 1) for m in members}
    join_in["member-joiner"] = (joiner, [], -1)
    after_join, t_join = play(join_in)
    row: Row = {
        "ms": {"initial": t_initial, "leave": t_leave, "join": t_join},
        "moved": {"leave": moved(initial, after_leave), "join": moved(initial, after_join)},
        "rss_start_mb": start_rss,
        "peak_rss_mb": peak_rss_mb(),
    }
    if mode == "equal":
        total = sum(counts.values())
        held = {m: len(initial[m]) for m in members}
        stay = {m: n for m, n in held.items() if m != leaver}
        row["minimum"] = {
            "leave": fewest_moves(total, stay, held[leaver]),
            "join": fewest_moves(total, {**held, "member-joiner": 0}, 0),
        }
    return row


def cohort_worker(size: Size, mode: str, repeats: int) -> Row:
    assignor = StickyAssignor()
    counts, _, _ = group(size, mode)
    engine = Engine(
        prepare=lambda members: {m: Subscription(t, owned, g) for m, (t, owned, g) in members.items()},
        run=lambda subs: assignor.assign(counts, subs),
        result=lambda output: output,
    )
    return run_rounds(size, mode, repeats, engine)


def kafka_python_worker(size: Size, mode: str, repeats: int) -> Row:
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.structs import TopicPartition as KafkaTopicPartition

    counts, _, _ = group(size, mode)

    @dataclass(frozen=True)
    class Member:
        member_id: str
        metadata: Any

    class ClusterMetadata:
        """The two calls the assignor makes on kafka-python's ClusterMetadata."""

        def topics(self) -> set[str]:
            return set(counts)

        def partitions_for_topic(self, topic: str) -> set[int] | None:
            return set(range(counts[topic])) if topic in counts else None

    def prepare(members: dict[str, tuple]) -> list[Member]:
        return [
            Member(m, StickyPartitionAssignor._metadata(sorted(t), [KafkaTopicPartition(*tp) for tp in owned], g))
            if owned
            else Member(m, StickyPartitionAssignor._metadata(sorted(t), None))
            for m, (t, owned, g) in members.items()
        ]

    engine = Engine(
        prepare=prepare,
        run=lambda members: StickyPartitionAssignor().assign(ClusterMetadata(), members),
        result=lambda output: {
            m: [TopicPartition(t, p) for t, ps in a.assigned_partitions for p in ps] for m, a in output.items()
        },
    )
    return run_rounds(size, mode, repeats, engine)


def cpu_timed(call: Callable[[], Any], repeats: int) -> tuple[Any, float]:
    """The call's result and its median CPU time in seconds (the machine is shared: CPU, not wall)."""
    times, result = [], None
    for _ in range(repeats):
        start = time.process_time()
        result = call()
        times.append(time.process_time() - start)
    return result, statistics.median(times)


def skewed_backlog(counts: Mapping[str, int]) -> dict[TopicPartition, int]:
    """Records left per partition: lognormal (median ~3,000, mean ~4,900, a long tail), fixed seed."""
    import numpy as np

    keys = [TopicPartition(t, p) for t in sorted(counts) for p in range(counts[t])]
    records = np.random.default_rng(42).lognormal(8.0, 1.0, len(keys)).astype(np.int64)
    return dict(zip(keys, records.tolist(), strict=True))


def lag_worker(size: Size, mode: str, repeats: int) -> Row:
    """lag-sticky and sticky on the same inputs: CPU seconds per round and makespan over the lower bound."""
    counts, topics, _ = group(size, mode)
    members = sorted(topics)
    backlog = skewed_backlog(counts)
    lower = max(sum(backlog.values()) / len(members), max(backlog.values()))
    lag, sticky = LagStickyAssignor(), StickyAssignor()

    def makespan(result: Mapping[str, list[TopicPartition]], n: int = len(members)) -> float:
        bound = max(sum(backlog.values()) / n, max(backlog.values()))
        return max(sum(backlog[tp] for tp in tps) for tps in result.values()) / bound

    def subs(owned: Mapping[str, list[TopicPartition]], skip: str = "", gen: int = 1) -> dict[str, Subscription]:
        return {m: Subscription(topics[m], owned.get(m, []), gen if owned else -1) for m in members if m != skip}

    row: Row = {"cpu_s": {}, "makespan": {}, "moved": {}, "lower_bound": lower}
    fresh = subs({})
    lag_initial, row["cpu_s"]["lag_initial"] = cpu_timed(lambda: lag.assign(counts, fresh, backlog=backlog), repeats)
    sticky_initial, row["cpu_s"]["sticky_initial"] = cpu_timed(lambda: sticky.assign(counts, fresh), repeats)
    row["makespan"] |= {"lag_initial": makespan(lag_initial), "sticky_initial": makespan(sticky_initial)}

    counted = subs(sticky_initial)
    first, row["cpu_s"]["lag_rebalance"] = cpu_timed(lambda: lag.assign(counts, counted, backlog=backlog), repeats)
    again, row["cpu_s"]["sticky_rebalance"] = cpu_timed(lambda: sticky.assign(counts, counted), repeats)
    second = lag.assign(counts, subs(first, gen=2), backlog=backlog)
    row["makespan"] |= {"lag_rebalance": makespan(second), "sticky_rebalance": makespan(again)}
    row["moved"] |= {"lag_rebalance": moved(sticky_initial, second), "sticky_rebalance": moved(sticky_initial, again)}

    leaver = members[len(members) // 2]
    lag_left, sticky_left = subs(lag_initial, leaver), subs(sticky_initial, leaver)
    after, row["cpu_s"]["lag_leave"] = cpu_timed(lambda: lag.assign(counts, lag_left, backlog=backlog), repeats)
    peer, row["cpu_s"]["sticky_leave"] = cpu_timed(lambda: sticky.assign(counts, sticky_left), repeats)
    n = len(members) - 1
    row["makespan"] |= {"lag_leave": makespan(after, n), "sticky_leave": makespan(peer, n)}
    row["moved"] |= {"lag_leave": moved(lag_initial, after), "sticky_leave": moved(sticky_initial, peer)}
    row["peak_rss_mb"] = peak_rss_mb()
    return row


def describe_lag(label: str, row: Row | None, limit: float) -> list[str]:
    if row is None:
        return [f"{label:<12} lag-sticky    timed out after {limit:.0f} s"]
    cpu, span, mv = row["cpu_s"], row["makespan"], row["moved"]
    lines = []
    for phase in ("initial", "rebalance", "leave"):
        lag, peer = cpu[f"lag_{phase}"], cpu[f"sticky_{phase}"]
        moves = f"  moved {mv[f'lag_{phase}']} / {mv[f'sticky_{phase}']}" if f"lag_{phase}" in mv else ""
        lines.append(
            f"{label:<12} {phase:<9} CPU lag-sticky {lag:6.3f} s  sticky {peer:6.3f} s  ratio {lag / peer:4.2f}  "
            f"makespan / bound {span[f'lag_{phase}']:.3f} / {span[f'sticky_{phase}']:.3f}{moves}"
        )
    return lines


def child(worker: str, size: Size, mode: str, repeats: int, timeout: float) -> Row | None:
    """Run one worker in a fresh process; None if it exceeded `timeout` seconds."""
    command = [sys.executable, "-m", "benchmarks.assignors", "--worker", worker, "--size", size.label, "--mode", mode]
    try:
        done = subprocess.run(
            [*command, "--repeats", str(repeats)], capture_output=True, text=True, timeout=timeout, check=True
        )
    except subprocess.TimeoutExpired:
        return None
    return json.loads(done.stdout.splitlines()[-1])


def describe(label: str, mode: str, engine: str, row: Row | None, limit: float) -> str:
    if row is None:
        return f"{label:<12} {mode:<15} {engine:<13} timed out after {limit:.0f} s"
    ms, mv = row["ms"], row["moved"]
    minimum = row.get("minimum")
    least = f" (min {minimum['leave']}/{minimum['join']})" if minimum else ""
    return (
        f"{label:<12} {mode:<15} {engine:<13} initial {ms['initial']:9.1f} ms  leave {ms['leave']:9.1f} ms  "
        f"join {ms['join']:9.1f} ms  moved leave/join {mv['leave']}/{mv['join']}{least}  "
        f"peak RSS {row['peak_rss_mb']:.0f} MB (at start {row['rss_start_mb']:.0f} MB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes up to 100k, fewer repeats (under a minute)")
    parser.add_argument("--lag", action="store_true", help="only lag-sticky against sticky (1k to 1M x 2,000)")
    parser.add_argument("--worker", choices=["cohort", "kafka-python", "lag"], help=argparse.SUPPRESS)
    parser.add_argument("--size", help=argparse.SUPPRESS)
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        size = next(s for s in SIZES if s.label == args.size)
        work = {"cohort": cohort_worker, "kafka-python": kafka_python_worker, "lag": lag_worker}[args.worker]
        print(json.dumps(work(size, args.mode, args.repeats)))
        return
    if args.lag:
        print(json.dumps(lag_section(SIZES[:3] if args.quick else SIZES)))
        return

    sizes = SIZES[:3] if args.quick else SIZES
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    results: dict[tuple[str, str, str], Row | None] = {}
    for size in sizes:
        for mode in MODES:
            repeats = 3 if args.quick or size.topics * size.partitions_per_topic >= 10**6 else 7
            results[(size.key, mode, "cohort")] = row = child("cohort", size, mode, repeats, 600)
            print(describe(size.label, mode, "cohort", row, 600), flush=True)
    peer_modes = ("equal",) if args.quick else MODES
    limit = 60.0 if args.quick else 300.0
    for size in SIZES[:2]:
        for mode in peer_modes:
            row = child("kafka-python", size, mode, 1 if args.quick else 3, limit)
            results[(size.key, mode, "kafka-python")] = row
            print(describe(size.label, mode, "kafka-python", row, limit), flush=True)

    def worst_ms(size: Size, mode: str = "equal") -> float:
        row = results[(size.key, mode, "cohort")]
        assert row is not None
        return max(row["ms"].values())

    ratios: dict[str, float] = {}
    for (key, mode, engine), peer in results.items():
        ours = results.get((key, mode, "cohort"))
        if engine == "kafka-python" and peer is not None and ours is not None:
            per_round = {r: peer["ms"][r] / ours["ms"][r] for r in ours["ms"]}
            ratios[f"{key}/{mode}"] = min(per_round.values())
            spelled = ", ".join(f"{r} {x:.0f}x" for r, x in per_round.items())
            print(f"ratio kafka-python / cohort  {key} {mode}: {spelled}")
    moved_ok = all(
        row["moved"] == row["minimum"]
        for (_, _, engine), row in results.items()
        if engine == "cohort" and row is not None and "minimum" in row
    )
    summary: dict[str, Any] = {
        "vs_kafka_python_10k_x_100": round(ratios.get("10k_x_100/equal", 0.0), 1),
        "sticky_10k_x_100_ms": round(worst_ms(SIZES[1]), 2),
        "sticky_100k_x_1000_ms": round(worst_ms(SIZES[2]), 2),
        "moved_equals_minimum": moved_ok,
    }
    if not args.quick:
        big = SIZES[3]
        unequal = max(worst_ms(big, mode) for mode in MODES[1:])
        peak = max(results[(big.key, mode, "cohort")]["peak_rss_mb"] for mode in MODES)  # type: ignore[index]
        summary |= {
            "sticky_1m_x_2000_ms": round(worst_ms(big), 1),
            "sticky_1m_x_2000_unequal_ms": round(unequal, 1),
            "peak_rss_1m_x_2000_mb": round(peak),
        }
    summary |= lag_section(sizes)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    print(json.dumps(summary))


def lag_section(sizes: tuple[Size, ...]) -> dict[str, Any]:
    """Run lag-sticky beside sticky at each size (equal subscriptions); the headline figures of the largest."""
    print(f"load average at start of lag-sticky: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    row: Row | None = None
    for size in sizes:
        row = child("lag", size, "equal", 3, 900)
        for line in describe_lag(size.label, row, 900):
            print(line, flush=True)
    print(f"load average at end of lag-sticky: {os.getloadavg()[0]:.1f}", flush=True)
    if row is None:
        return {}
    key = sizes[-1].key
    slowest = max(v for k, v in row["cpu_s"].items() if k.startswith("lag_"))
    peer = max(v for k, v in row["cpu_s"].items() if k.startswith("sticky_"))
    return {
        f"lag_sticky_{key}_cpu_s": round(slowest, 3),
        f"sticky_{key}_cpu_s": round(peer, 3),
        f"lag_sticky_{key}_makespan_over_bound": round(
            max(row["makespan"][k] for k in row["makespan"] if "lag" in k), 3
        ),
        f"sticky_{key}_makespan_over_bound": round(
            max(row["makespan"][k] for k in row["makespan"] if "sticky" in k), 3
        ),
    }


if __name__ == "__main__":
    main()
