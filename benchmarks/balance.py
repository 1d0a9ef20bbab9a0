"""Assignors under skewed backlog, end to end: how long a group's batch lasts when its four slots share the work.

On the embedded Tansu broker and one Spark session shared by four worker-slot threads (as `host_slots` runs the
slots of one Dagster run), each case is one assignor on one backlog shape, on a fresh topic of 32 partitions, a
fresh SQLite store and sink. Each slot joins as its static member (`WorkerGroup.member`, given `log_offsets`, the
Kafka watermarks the Dagster worker passes as `kafka.watermarks`, so the leader's sync carries the backlog) and
runs `run_slot_batch` (join, batch, commit). Per case:

1. the first batch: the backlog is produced, the four slots join an empty group (its initial rebalance delay,
   3 s, gathers them in one generation) and each runs its batch;
2. a member leaves: the same backlog is produced again, slot 4 leaves the group and slots 1-3 (still members)
   rejoin, a generation of three on that backlog; then their runs end, keeping their static membership;
3. it comes back: slot 4 joins again and, once its join started a rebalance, slots 1-3 run again as new runs
   of their static slots: a generation of four, and each slot runs its batch on the round-2 backlog.

`moved` counts the partitions whose slot changed from one generation to the next: at the leave (at least slot
4's partitions move) and at the return (at least those slot 4 is given).

Shapes (records per partition, `--records` in all per round): `skewed`, one partition 20x the other 31; `zipf`,
the i-th largest partition 1/i of the largest (s = 1, shuffled over the partitions, fixed seed); `uniform`.

Per case and round: the makespan (wall seconds of the slowest slot's batch: its `run_batch` calls, retries
included), the idle time (the sum over slots of makespan minus the slot's batch), and the ideal. Work is measured
in seconds: a partition's work is its task's seconds on it in that round (`PartitionResult.seconds`: read, decode,
check, write), the bound is max(total work / 4, the biggest partition's work), and the ideal adds the slots'
fixed cost (median over slots of batch seconds minus the seconds of its partitions, which its one task reads one
after the other: planning, Spark job start, commit, mirror). `load/ideal` is the same ratio in records, as the
assignor decided it (no timing noise). Each assignor's makespan is divided by `sticky`'s in the same shape and
round; CPU seconds are the whole process tree's (driver, JVM, Python workers, broker) during the round. With
`--repeats`, each case runs that many times (fresh topic, group, store and sink each) and the run of median
first-round makespan is reported.

Each slot's batch is one Spark task (`spark.default.parallelism` 1) on a local session with a task thread per
slot, as four workers with a core each would read: a slot's batch then lasts as long as its partitions' work, the
premise of balancing it. On a machine with fewer cores than slots (two here) the slots' tasks share the cores, so
partitions read while all slots run take longer than those read at the end; the ideal uses each round's own
measured seconds. To compare with the SparkResource default, `--master local[2] --parallelism 2`: the slots' jobs
then share two task threads and a slot's partitions are read two at a time, so its batch is no longer the sum of
its partitions' work.

Usage:
    python -m benchmarks.balance                   # 600k records per shape and round (10 to 15 minutes)
    python -m benchmarks.balance --scale small     # 100k records (about 5 minutes)
    python -m benchmarks.balance --repeats 3       # each case 3 times, the median one reported
    python -m benchmarks.balance --scale tiny --shapes skewed --assignors sticky lag-sticky   # the smoke test

The last line printed is one JSON object: per shape and assignor the figures of both rounds, and the headline
`lag_sticky_<shape>_makespan_over_ideal`, `lag_sticky_<shape>_vs_sticky` and `sticky_<shape>_makespan_over_ideal`
(round 1), `lag_sticky_<shape>_moved` and `sticky_<shape>_moved` (at the leave and the return together).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from benchmarks.pipeline import SCHEMA, Event, tree_cpu
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.member import GroupMember
from cohort.assignment.protocol.group_state import GroupState
from cohort.assignment.worker_group import WorkerGroup
from cohort.common.ledger import OffsetLedger, OffsetMirror
from cohort.common.types import TopicPartition
from cohort.devtools.embedded_broker import EmbeddedBroker
from cohort.devtools.topics import create_topic, partition_counts, produce
from cohort.pipelines import PipelineSpec, build_session, run_batch
from cohort.pipelines.batch.results import BatchResult, PartitionResult
from cohort.pipelines.kafka.client import watermarks
from cohort.runtime.kafka_access import KafkaAccess
from cohort.runtime.slot_batch import SlotBatch, run_slot_batch
from cohort.runtime.slot_batch import SlotRun as SlotSetup

ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky", "lag-sticky")
SHAPES = ("skewed", "zipf", "uniform")
SCALES = {"tiny": 8_000, "small": 100_000, "default": 600_000}
PARTITIONS = 32
SLOTS = 4
log = logging.getLogger("benchmarks.balance")


def backlog_shape(shape: str, total: int, partitions: int = PARTITIONS) -> list[int]:
    """Records per partition summing to `total`: skewed (partition 0 is 20x each other one), zipf (s = 1, sizes
    shuffled over the partitions with a fixed seed) or uniform."""
    if shape == "skewed":
        weights = [20.0] + [1.0] * (partitions - 1)
    elif shape == "zipf":
        weights = [1.0 / rank for rank in range(1, partitions + 1)]
        random.Random(7).shuffle(weights)
    elif shape == "uniform":
        weights = [1.0] * partitions
    else:
        raise ValueError(f"unknown shape {shape!r}; use one of {SHAPES}")
    counts = [int(total * w / sum(weights)) for w in weights]
    for p in range(total - sum(counts)):  # rounding: the remainder one record each, from partition 0
        counts[p % partitions] += 1
    return counts


def shaped_records(counts: Sequence[int], round_: int) -> Iterator[tuple[int, bytes, bytes]]:
    """The benchmark pipeline's JSON events (benchmarks/pipeline.py, none malformed), `counts[p]` in partition p,
    the partitions interleaved as producers write them."""
    countries = ("FR", "DE", "ES", "IT")
    left = list(counts)
    i = 0
    while any(left):
        for p, n in enumerate(left):
            if n:
                left[p] -= 1
                i += 1
                value = (
                    f'{{"id": {i}, "user": "user-{i % 5000}", "amount": {(i % 997) * 1.5}, '
                    f'"country": "{countries[i % 4]}", "ts": {1_700_000_000_000 + i}}}'
                )
                yield p, f"r{round_}-{i}".encode(), value.encode()


@dataclass(frozen=True)
class SlotRun:
    """One slot's part of a round: its assignment, its batch's wall seconds (first call to the end of the last,
    retries included), the batch attempts and what each partition read."""

    slot: int
    assignment: tuple[TopicPartition, ...]
    seconds: float
    attempts: int
    partitions: tuple[PartitionResult, ...]

    @property
    def read_seconds(self) -> float:
        return sum(p.seconds for p in self.partitions)

    @property
    def records(self) -> int:
        return sum(p.consumed for p in self.partitions)


@dataclass(frozen=True)
class RoundFigures:
    """A round's makespan, idle time and ideal (seconds), the records balance, and the CPU seconds it took."""

    makespan_s: float
    idle_s: float
    ideal_s: float
    fixed_s: float
    """The part of the ideal every slot's batch pays whatever its partitions (module doc)."""
    load_over_ideal: float
    cpu_s: float
    attempts: int
    slots: Mapping[int, tuple[int, int, float]]
    """Slot -> (partitions, records, batch seconds)."""
    generations: tuple[int, ...]
    """The generation each slot's batch ran in (one value when the four slots formed one generation)."""

    @property
    def makespan_over_ideal(self) -> float:
        return self.makespan_s / self.ideal_s


def figures(runs: Sequence[SlotRun], counts: Sequence[int], cpu_s: float, generations: Sequence[int]) -> RoundFigures:
    """Makespan, idle and ideal of one round (module doc); `counts` is the records per partition it read."""
    makespan = max(r.seconds for r in runs)
    work = [p.seconds for r in runs for p in r.partitions]
    bound = max(sum(work) / SLOTS, max(work))
    fixed = max(0.0, statistics.median(r.seconds - r.read_seconds for r in runs if r.partitions))
    records_bound = max(sum(counts) / SLOTS, max(counts))
    return RoundFigures(
        makespan_s=makespan,
        idle_s=sum(makespan - r.seconds for r in runs),
        ideal_s=fixed + bound,
        fixed_s=fixed,
        load_over_ideal=max(r.records for r in runs) / records_bound,
        cpu_s=cpu_s,
        attempts=max(r.attempts for r in runs),
        slots={r.slot: (len(r.assignment), r.records, round(r.seconds, 3)) for r in runs},
        generations=tuple(generations),
    )


Owners = Mapping[int, Collection[TopicPartition]]
"""Slot -> the partitions it was assigned in one generation."""


def moved(before: Owners, after: Owners) -> int:
    """Partitions whose slot differs between two generations (a leaver's partitions all count)."""
    owner = {tp: slot for slot, tps in before.items() for tp in tps}
    return sum(1 for slot, tps in after.items() for tp in tps if owner.get(tp) != slot)


def rejoin(members: Mapping[int, GroupMember]) -> dict[int, tuple[TopicPartition, ...]]:
    """The members join again together (each on its own thread), as members left behind by a leaver do; their
    assignments in the generation that forms."""
    failures: list[BaseException] = []

    def again(member: GroupMember) -> None:
        try:
            member.join()
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=again, args=(m,), name="balance-rejoin") for m in members.values()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return {slot: member.assignment for slot, member in members.items()}


class TimedRunner:
    """`run_batch` as a slot's `BatchRunner`, noting when each of the slot's calls started and ended."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, float]] = []

    def __call__(
        self,
        spark: SparkSession,
        spec: PipelineSpec,
        kafka_config: Mapping[str, Any],
        partitions: Sequence[TopicPartition],
        ledger: OffsetLedger,
        *,
        group: str | None = None,
        mirror: OffsetMirror | None = None,
        run_id: str | None = None,
        new_partitions: Collection[TopicPartition] = (),
    ) -> BatchResult:
        started = time.perf_counter()
        try:
            return run_batch(
                spark, spec, kafka_config, partitions, ledger,
                group=group, mirror=mirror, run_id=run_id, new_partitions=new_partitions,
            )  # fmt: skip
        finally:
            self.calls.append((started, time.perf_counter()))

    @property
    def seconds(self) -> float:
        return self.calls[-1][1] - self.calls[0][0] if self.calls else 0.0


@dataclass(frozen=True)
class Case:
    """Everything one case's slots share: the session, the broker, the group's settings, store and sink."""

    spark: SparkSession
    config: Mapping[str, Any]
    workers: WorkerGroup
    coordinator: Coordinator
    spec: PipelineSpec

    @property
    def topic(self) -> str:
        return self.workers.topics[0]


def run_round(
    case: Case, round_: int, order: Sequence[int], *, returning: bool = False
) -> tuple[list[SlotRun], list[SlotBatch]]:
    """Each slot of `order` on its own thread, as `host_slots` runs them: join as the slot's static member, run
    the batch on its assignment, commit; with `returning`, the first slot of `order` joins first (`returned`).
    The members are still in the group after."""
    outcomes: dict[int, tuple[SlotBatch, TimedRunner]] = {}
    failures: list[BaseException] = []
    lock = threading.Lock()

    def slot(n: int) -> None:
        runner = TimedRunner()
        member = case.workers.member(
            case.coordinator,
            n,
            run_id=f"{case.workers.group}-r{round_}-s{n}",
            topic_metadata=lambda: partition_counts(case.config, [case.topic]),
            log_offsets=lambda tps: watermarks(case.config, tps),  # what the Dagster worker's kafka.watermarks reads
        )
        try:
            run_id = f"{case.workers.group}-r{round_}-s{n}"
            done = run_slot_batch(
                member,
                SlotSetup(n, run_id, case.spec, KafkaAccess(case.config), lambda: case.spark, log, runner=runner),
            )
        except BaseException as exc:
            with lock:
                failures.append(exc)
            return
        with lock:
            outcomes[n] = (done, runner)

    threads = [threading.Thread(target=slot, args=(n,), name=f"balance-slot-{n}") for n in order]
    threads[0].start()
    if returning:  # the others' next runs come once its join started the rebalance: one generation of four
        returned(case, threads[0])
    for thread in threads[1:]:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        for done, _ in outcomes.values():
            done.leave()
        raise failures[0]
    runs = [
        SlotRun(
            slot=n,
            assignment=done.assignment,
            seconds=runner.seconds,
            attempts=done.attempts,
            partitions=done.result.partitions if done.result is not None else (),
        )
        for n, (done, runner) in sorted(outcomes.items())
    ]
    return runs, [done for done, _ in (outcomes[n] for n in sorted(outcomes))]


def returned(case: Case, thread: threading.Thread, timeout_s: float = 60.0) -> None:
    """Wait until the returning slot's join has started a rebalance (the group leaves Stable).

    Without it the next runs of the other slots, arriving first, replace their static members in the stable
    group and start on the previous generation's assignment, and the return's rebalance then waits for them.
    """
    deadline = time.monotonic() + timeout_s
    while thread.is_alive() and time.monotonic() < deadline:
        if case.coordinator.describe_group(case.workers.group).state != GroupState.STABLE:
            return
        time.sleep(0.05)


def whole_tree_cpu() -> float:
    """CPU seconds of this process and its descendants so far: driver, JVM, Python workers, the broker."""
    return sum(tree_cpu(os.getpid()).values())


def run_case(
    spark: SparkSession, config: Mapping[str, Any], tmp: str, name: str, assignor: str, counts: Sequence[int]
) -> dict[str, Any]:
    """Both rounds of one case (module doc) on a fresh topic, store, group and sink; its figures."""
    topic = f"balance-{name}"
    create_topic(config, topic, PARTITIONS)
    workers = WorkerGroup(
        f"balance-{name}",
        topics=(topic,),
        assignors=(assignor,),
        worker_slots=SLOTS,
        store_url=f"sqlite:///{tmp}/{name}.db",
    )
    coordinator = workers.open_coordinator()
    spec = PipelineSpec(sink_path=f"{tmp}/{name}-lake", value_schema=SCHEMA, model=Event)
    case = Case(spark, config, workers, coordinator, spec)
    try:
        produce(config, topic, shaped_records(counts, 1))
        first, one = measured_round(case, 1, list(range(1, SLOTS + 1)), counts)
        produce(config, topic, shaped_records(counts, 2))
        batches = {done.slot: done for done in first}
        batches[SLOTS].leave()  # slot 4 leaves the group; the others are still members
        stayers = {slot: done.member for slot, done in batches.items() if slot != SLOTS and done.member is not None}
        after_leave = rejoin(stayers)
        for slot in stayers:  # their runs end; the static memberships stay for the slots' next runs
            batches[slot].leave(leave_group=False)
        second, two = measured_round(case, 2, [SLOTS, *range(1, SLOTS)], counts, returning=True)
        for done in second:
            done.leave()
    finally:
        coordinator.close()
    initial = {done.slot: done.assignment for done in first}
    final = {done.slot: done.assignment for done in second}
    return {
        "round1": one,
        "round2": two,
        "moved_leave": moved(initial, after_leave),
        "moved_return": moved(after_leave, final),
        "leaver_had": len(initial[SLOTS]),
        "returner_got": len(final[SLOTS]),
    }


def measured_round(
    case: Case, round_: int, order: Sequence[int], counts: Sequence[int], *, returning: bool = False
) -> tuple[list[SlotBatch], RoundFigures]:
    """One round's batches (`run_round`), checked to have read the backlog exactly, and its figures."""
    cpu, mark = whole_tree_cpu(), case.coordinator.last_group_event_id(case.workers.group)
    runs, batches = run_round(case, round_, order, returning=returning)
    cpu = whole_tree_cpu() - cpu
    generations = sorted({done.generation for done in batches})
    if len(generations) > 1 or any(not done.assignment for done in batches):  # say how the group formed
        events = case.coordinator.group_events(case.workers.group, after=mark)
        log.warning(
            f"{case.workers.group} round {round_}: the slots ran in generations {generations}, assigned "
            f"{ {d.slot: len(d.assignment) for d in batches} }; group events: "
            + "; ".join(f"{e.kind} gen {e.generation} {e.state} {e.member_id} {e.reason}" for _, e in events)
        )
    read = sum(r.records for r in runs)
    if read != sum(counts):
        for done in batches:
            done.leave()
        raise SystemExit(f"{case.workers.group} round {round_}: read {read} records, produced {sum(counts)}")
    return batches, figures(runs, counts, cpu, [done.generation for done in batches])


def median_case(repeats: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Of a case's repeats, the one whose first-round makespan is the median (the lower middle one of an even
    number), so that one run's figures are reported together."""
    ranked = sorted(repeats, key=lambda case: case["round1"].makespan_s)
    return ranked[(len(ranked) - 1) // 2]


def warm_up(spark: SparkSession, config: Mapping[str, Any], tmp: str, total: int) -> None:
    """One uncounted case, so the JVM's JIT warm-up is not charged to the first measured case."""
    run_case(spark, config, tmp, "warm-up", "sticky", backlog_shape("uniform", max(total // 4, PARTITIONS)))


def report_shape(shape: str, counts: Sequence[int], cases: Mapping[str, dict[str, Any]]) -> None:
    """One table per shape: both rounds' figures per assignor, with ratios to the ideal and to `sticky`."""
    median = statistics.median(counts)
    print(
        f"\n{shape}: {sum(counts):,} records per round over {len(counts)} partitions (biggest {max(counts):,}, "
        f"{max(counts) / median:.1f}x the median), {SLOTS} slots"
    )
    print(
        f"{'assignor':<19}{'round':>5}{'makespan s':>11}{'idle s':>8}{'ideal s':>8}{'/ideal':>7}"
        f"{'vs sticky':>10}{'load/ideal':>11}{'CPU s':>7}{'tries':>6}  moved at the leave / the return"
    )
    for assignor, case in cases.items():
        for key in ("round1", "round2"):
            f: RoundFigures = case[key]
            peer: RoundFigures | None = cases["sticky"][key] if "sticky" in cases else None
            versus = f"{f.makespan_s / peer.makespan_s:10.2f}" if peer is not None else f"{'':>10}"
            moves = (
                f"{case['moved_leave']} (slot {SLOTS} had {case['leaver_had']}) / "
                f"{case['moved_return']} (slot {SLOTS} got {case['returner_got']})"
                if key == "round2"
                else ""
            )
            print(
                f"{assignor if key == 'round1' else '':<19}{key[-1]:>5}{f.makespan_s:11.2f}{f.idle_s:8.2f}"
                f"{f.ideal_s:8.2f}{f.makespan_over_ideal:7.2f}{versus}{f.load_over_ideal:11.2f}{f.cpu_s:7.1f}"
                f"{f.attempts:>6}  {moves}"
            )


def as_json(f: RoundFigures, peer: RoundFigures | None) -> dict[str, Any]:
    out = {
        "makespan_s": round(f.makespan_s, 3),
        "idle_s": round(f.idle_s, 3),
        "ideal_s": round(f.ideal_s, 3),
        "fixed_s": round(f.fixed_s, 3),
        "makespan_over_ideal": round(f.makespan_over_ideal, 3),
        "load_over_ideal": round(f.load_over_ideal, 3),
        "cpu_s": round(f.cpu_s, 1),
        "attempts": f.attempts,
        "slots": {str(slot): list(figures) for slot, figures in sorted(f.slots.items())},
        "generations": sorted(set(f.generations)),
    }
    if peer is not None:
        out["vs_sticky"] = round(f.makespan_s / peer.makespan_s, 3)
    return out


def summary(records: int, args: argparse.Namespace, results: Mapping[str, Mapping[str, dict[str, Any]]]) -> dict:
    """The JSON line: every case's figures and the headline ones."""
    out: dict[str, Any] = {"records": records, "slots": SLOTS, "partitions": PARTITIONS, "master": args.master}
    out |= {"parallelism": args.parallelism, "repeats": args.repeats}
    for shape, cases in results.items():
        out[shape] = {}
        for assignor, case in cases.items():
            peer = cases.get("sticky")
            out[shape][assignor] = {
                "round1": as_json(case["round1"], peer["round1"] if peer else None),
                "round2": as_json(case["round2"], peer["round2"] if peer else None),
                "moved_leave": case["moved_leave"],
                "moved_return": case["moved_return"],
                "leaver_had": case["leaver_had"],
            }
        for assignor in ("lag-sticky", "sticky"):
            if assignor in cases:
                key = assignor.replace("-", "_")
                row = out[shape][assignor]
                out[f"{key}_{shape}_makespan_over_ideal"] = row["round1"]["makespan_over_ideal"]
                out[f"{key}_{shape}_moved"] = row["moved_leave"] + row["moved_return"]
                if assignor != "sticky" and "vs_sticky" in row["round1"]:
                    out[f"{key}_{shape}_vs_sticky"] = row["round1"]["vs_sticky"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=sorted(SCALES), default="default", help="records per shape and round")
    parser.add_argument("--records", type=int, default=None, help="records per shape and round (overrides --scale)")
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--assignors", nargs="+", choices=ASSIGNORS, default=list(ASSIGNORS))
    parser.add_argument("--master", default=f"local[{SLOTS}]", help="Spark master (default: a task thread per slot)")
    parser.add_argument("--parallelism", type=int, default=1, help="spark.default.parallelism: tasks per batch")
    parser.add_argument("--no-warm-up", action="store_true", help="skip the uncounted first case")
    parser.add_argument("--repeats", type=int, default=1, help="runs per case; the median one is reported")
    parser.add_argument("--verbose", action="store_true", help="log each slot's joins and batches")
    args = parser.parse_args()
    records = args.records or SCALES[args.scale]
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if records < PARTITIONS * 51:
        parser.error(f"--records must be at least {PARTITIONS * 51} (a record in each partition of each shape)")
    level = logging.INFO if args.verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    started = time.perf_counter()
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="cohort-bench-balance-") as tmp:
        config = {"bootstrap.servers": broker.bootstrap_servers}
        conf = {"spark.default.parallelism": str(args.parallelism)}
        spark = build_session(master=args.master, app_name="cohort-bench-balance", conf=conf)
        spark.sparkContext.setLogLevel("ERROR")
        spark.range(2, numPartitions=2).mapInArrow(lambda batches: batches, "id long").count()
        if not args.no_warm_up:
            warm_up(spark, config, tmp, records)
        for shape in args.shapes:
            counts = backlog_shape(shape, records)
            results[shape] = {}
            for assignor in args.assignors:
                repeats = []
                for repeat in range(args.repeats):  # each on a fresh topic, group, store and sink
                    name = f"{shape}-{assignor}-{repeat}"
                    case_started = time.perf_counter()
                    repeats.append(run_case(spark, config, tmp, name, assignor, counts))
                    one, two = repeats[-1]["round1"], repeats[-1]["round2"]
                    print(
                        f"  {name}: makespan {one.makespan_s:.2f} s and {two.makespan_s:.2f} s "
                        f"(case {time.perf_counter() - case_started:.0f} s, load {os.getloadavg()[0]:.1f})",
                        flush=True,
                    )
                results[shape][assignor] = median_case(repeats)
            report_shape(shape, counts, results[shape])
        spark.stop()
    print(
        f"\nload average at end: {os.getloadavg()[0]:.2f}; {time.perf_counter() - started:.0f} s in all; "
        f"master {args.master}, {args.parallelism} task(s) per slot batch"
    )
    print(json.dumps(summary(records, args, results)))


if __name__ == "__main__":
    main()
