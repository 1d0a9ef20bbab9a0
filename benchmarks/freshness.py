"""Freshness: from records produced to their rows readable in the sink and their offsets committed, per scheduled run.

On the embedded Tansu broker and on Apache Kafka (`--broker`, default both, in the same run; benchmarks/brokers.py),
with a SQLite coordinator store and a Dagster instance in a temporary DAGSTER_HOME: one group of one worker slot
(`initial_rebalance_delay_s=0`) per mode and broker (a case), each on its own topic and sink, the modes differing
only in their Spark:

- **cold**: `SparkResource()`, a local Spark (a JVM) started by each run and ended with it;
- **warm**: `SparkResource(master=None, remote=...)`, a Spark Connect server started once for the whole benchmark
  (harness/spark_connect.py: PySpark's own distribution, local[2]), which every run connects to; each run
  opens a Spark Connect session and releases it at its end, as the resource does;
- **kept** (only with `--modes`, a prototype): the same server, but every run of the slot attaches to one
  server-side session (`;session_id=` in the URL) and leaves it open at its end (the client's
  `release_session_on_close` set to False), so the server's Python workers of that session serve every run.

Each run is what Dagster's run launcher does for a scheduled run: a fresh process (benchmarks/freshness_run.py)
that imports the code, builds the Definitions, opens the instance and executes the group's worker job for slot 1:
with the job's own executor as `dagster api execute_run` does for a launched run (`--executor launched`, the
default: `dg.execute_job` on the reconstructable job; the worker job runs its one step in the run process), or with
`execute_in_process` (`--executor in_process`).
The measurement starts when the run process is spawned: the schedule's interval and the Dagster daemon's tick and
queue before that are not included.
Before each run, N new records (default 1,000, JSON, over 4 partitions) are produced to the group's topic (in a few
milliseconds, just before the launch); the modes take turns, the order rotating every round, each mode run on both
brokers one after the other, Tansu first in even rounds and Kafka first in odd ones (so neither broker's run always
follows the other's), after one first run per case (mode and broker) that is reported but left out of the medians
(the instance's and the store's first use, the server's first jobs). Both brokers run throughout, and every case
shares the one Spark Connect server and Dagster instance.

Per run:
- **launch -> commit**: from spawning the run process to the ledger's commit of its batch (the `committed_at` of
  the run's entries in `Coordinator.ledger_history`; both are wall-clock `time.time()` seconds on this host);
- **produce -> commit**: the median over the batch's records of the commit time minus the record's produce time
  (its Kafka timestamp, CreateTime, set by the producer; read back from the sink);
- **readable**: right after the run, the sink holds exactly the batch's offsets (pyarrow over the Parquet sink);
  the rows are published just after the commit (rename of the staged range directories, then the Kafka mirror):
  **launch -> published** is the end of `run_batch` less its mirror stage;
- the **split** of launch -> commit, from the run's report (see benchmarks/freshness_run.py): the interpreter's
  start, imports, the Definitions, the Dagster instance, from the instance to the step's start (the run stored, the
  resources up), the step before its Spark session, the Spark session (started before any slot's member joins),
  before the group join (run tags, unreported ranges, topic metadata), the join, before the batch (partition
  counts, dynamic partitions), and `run_batch` until the commit (its `stage_seconds` are shown too);
- CPU seconds: the run process and everything it started and reaped (the local JVM and its Python workers in
  cold runs), and the Connect server's process tree (its JVM and Python workers, those alive at the run's end).

Under load: `--load busy` runs the whole measurement with one core kept busy by a spinning process (a neighbour
job on a shared worker); `--load both` (the default) measures on the machine as it is, then with the busy core,
each in its own process, and prints the two side by side with the warm/cold ratio of each. The target (warm
launch -> commit under 5 s) is judged on the quiet run; the loaded one is reported.

Usage:
    python -m benchmarks.freshness                          # cold and warm, 7 runs each, quiet then loaded
    python -m benchmarks.freshness --quick                  # 3 runs per mode
    python -m benchmarks.freshness --modes cold,warm,kept   # with the kept-session prototype
    python -m benchmarks.freshness --executor in_process    # execute_in_process instead of a launched run's path
    python -m benchmarks.freshness --broker embedded        # one broker only (or kafka)

The last line printed is one JSON object (with `--load both`: {"quiet": {...}, "busy": {...}, "warm_cold_ratio":
{"quiet", "busy"}, "loaded_over_quiet_warm", and with both brokers "kafka_over_embedded_launch_to_commit": {load:
{mode: ratio}}}, each inner object as below): {"records", "runs", "executor", "load", "connect_server_startup_s",
"target_s", "all_readable" (every run on every broker), then, of the first broker measured (the embedded one unless
`--broker kafka`), which "broker" names: per mode M "M_launch_to_commit_s", "M_launch_to_commit_p90_s",
"M_produce_to_commit_s", "M_launch_to_published_s", "M_split_s", and "target_met"; "brokers": {name: those per-mode
figures, "all_readable" and "target_met" of that broker}; with both brokers, "kafka_over_embedded": Kafka's over
Tansu's for each mode's "M_launch_to_commit_s" (the headline), "M_launch_to_commit_p90_s" and
"M_produce_to_commit_s"}. Times are medians over the runs (p90: the 90th percentile), in seconds; the target is the
warm mode's median launch -> commit. `warm_cold_ratio` and `loaded_over_quiet_warm` are of the first broker.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.dataset as ds

from benchmarks.brokers import add_broker_option, broker_names, ratio, round_order, start_brokers, summary
from benchmarks.pipeline import tree_cpu
from cohort.assignment.coordinator import Coordinator
from cohort.devtools.topics import create_topic, produce
from harness.spark_connect import REPOSITORY, SparkConnectServer, clean_env

MODES = ("cold", "warm", "kept")
TARGET_S = 5.0
RUN_TIMEOUT_S = 600.0
SPLIT = (
    "interpreter",
    "imports",
    "definitions",
    "dagster_instance",
    "dagster_run_to_step",
    "before_spark",
    "spark_session",
    "before_join",
    "group_join",
    "before_batch",
    "batch_to_commit",
)
"""The parts of launch -> commit, in order (they add up to it): see `split`."""


@dataclass
class Run:
    """One measured run of a mode."""

    mode: str
    broker: str
    label: str
    spawn: float
    exited: float
    committed_at: float
    report: dict[str, Any]
    produce_to_commit: list[float]
    readable: bool
    cpu_s: float
    server_cpu_s: float
    load: float
    split: dict[str, float] = field(default_factory=dict)

    @property
    def launch_to_commit(self) -> float:
        return self.committed_at - self.spawn

    @property
    def launch_to_published(self) -> float:
        """Launch to the end of `run_batch` less its Kafka mirror: the rows were published (renamed) by then."""
        return self.report["batch"][1] - self.report["stage_seconds"].get("mirror", 0.0) - self.spawn

    @property
    def process_s(self) -> float:
        return self.exited - self.spawn


def cpu_since(before: Mapping[int, float], after: Mapping[int, float]) -> float:
    """CPU seconds the processes alive at `after` used since `before`. Approximate: a process that ended in between
    is left out, unless a process of the tree reaped it (then its parent's count holds all of its CPU)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def records(first: int, count: int, partitions: int) -> list[tuple[int, bytes, bytes]]:
    """`count` JSON events with ids from `first`, over the partitions in turn."""
    return [
        (i % partitions, f"k{i}".encode(), json.dumps({"id": i, "kind": "view"}).encode())
        for i in range(first, first + count)
    ]


def split(report: Mapping[str, Any], spawn: float, committed_at: float) -> dict[str, float]:
    """Launch -> commit in consecutive parts (seconds), from the run's own timeline."""
    marks = [
        spawn,
        report["main"],  # the interpreter is up
        report["imported"],  # Dagster, PySpark, Cohort
        report["defs"],  # build_cohort_definitions, the job resolved
        report["instance"],  # DagsterInstance.get()
        report["events"]["STEP_START"][0],  # execute_in_process: the run stored, resources up, the step started
        report["spark_session"][0],  # run config, the group's settings (the session starts before any member)
        report["spark_session"][1],  # SparkResource.get_session()
        report["join"][0],  # run tags, unreported ranges, topic metadata, the coordinator
        report["join"][1],  # GroupMember.join(): the group protocol
        report["batch"][0],  # partition counts, the instance's dynamic partitions, the Kafka mirror
        committed_at,  # run_batch up to its ledger commit
    ]
    if any(later < earlier for earlier, later in itertools.pairwise(marks)):
        named = dict(zip(SPLIT, marks[1:], strict=True))
        raise ValueError(f"the run's timeline is not in the order the split assumes: {named}")
    return {name: marks[i + 1] - marks[i] for i, name in enumerate(SPLIT)}


def sink_rows(sink: str) -> Any:
    """The sink's Kafka partition, offset and timestamp (the record's, a UTC timestamp) columns."""
    table = ds.dataset(sink, format="parquet", partitioning="hive").to_table(columns=["kafka"])
    kafka = table.column("kafka").combine_chunks()
    return {name: kafka.field(name) for name in ("partition", "offset", "timestamp")}


def read_back(sink: str, ranges: Sequence[Sequence[int]], count: int) -> tuple[bool, list[float]]:
    """(whether the sink holds exactly the offsets of `ranges`, once each and `count` in all; the rows' produce
    times, in seconds since the epoch)."""
    columns = sink_rows(sink)
    wanted = None
    for partition, start, until, _ in ranges:
        here = pc.and_(
            pc.equal(columns["partition"], partition),
            pc.and_(pc.greater_equal(columns["offset"], start), pc.less(columns["offset"], until)),
        )
        wanted = here if wanted is None else pc.or_(wanted, here)
    if wanted is None:
        return False, []
    keys = sorted(
        zip(
            pc.filter(columns["partition"], wanted).to_pylist(),
            pc.filter(columns["offset"], wanted).to_pylist(),
            strict=True,
        )
    )
    expected = sorted((p, o) for p, start, until, _ in ranges for o in range(start, until))
    readable = keys == expected and len(keys) == count
    return readable, [t.timestamp() for t in pc.filter(columns["timestamp"], wanted).to_pylist()]


def p90(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[8] if len(values) > 1 else values[0]


_SPIN = """
import os, sys
parent = int(sys.argv[1])
while os.getppid() == parent:  # ends with the benchmark, even when it is killed
    for _ in range(1_000_000):
        pass
"""
"""The busy core's loop: spins, and looks every few milliseconds whether the benchmark that started it still runs."""


class BusyCore:
    """One core kept busy by a child process spinning at normal priority, for as long as the block lasts."""

    def __enter__(self) -> BusyCore:
        self._process = subprocess.Popen([sys.executable, "-c", _SPIN, str(os.getpid())])
        return self

    def __exit__(self, *_exc: object) -> None:
        self._process.kill()
        self._process.wait()


def both_loads(argv: Sequence[str]) -> None:
    """The measurement quiet, then with a busy core, each in a fresh process; both summaries and the ratios."""
    found: dict[str, dict[str, Any]] = {}
    for load in ("quiet", "busy"):
        print(f"== load: {load}", flush=True)
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.freshness", *argv, "--load", load],
            cwd=REPOSITORY,
            stdout=subprocess.PIPE,
            text=True,
            check=False,
        )
        print(done.stdout, end="", flush=True)
        if done.returncode != 0:
            raise SystemExit(f"the {load} measurement exited {done.returncode}")
        found[load] = json.loads(done.stdout.strip().splitlines()[-1])
    ratio = {
        load: round(found[load]["warm_launch_to_commit_s"] / found[load]["cold_launch_to_commit_s"], 2)
        for load in found
        if "cold_launch_to_commit_s" in found[load]
    }
    loaded = round(found["busy"]["warm_launch_to_commit_s"] / found["quiet"]["warm_launch_to_commit_s"], 2)
    names = list(found["quiet"].get("brokers", {}))
    print()
    print(f"{'median launch -> commit (s)':<34}{'quiet':>10}{'busy core':>12}")
    for mode in MODES:
        key = f"{mode}_launch_to_commit_s"
        for name in names:
            if key in found["quiet"]["brokers"][name]:
                cells = "".join(
                    f"{found[load]['brokers'][name][key]:>{w}.2f}" for load, w in (("quiet", 10), ("busy", 12))
                )
                print(f"  {mode + ' ' + name:<32}{cells}")
    first = found["quiet"].get("broker", "embedded")
    print(f"  {'warm / cold (' + first + ')':<32}{ratio.get('quiet', 0.0):>10.2f}{ratio.get('busy', 0.0):>12.2f}")
    compared = {
        load: {
            mode: found[load]["kafka_over_embedded"][f"{mode}_launch_to_commit_s"]
            for mode in MODES
            if f"{mode}_launch_to_commit_s" in found[load].get("kafka_over_embedded", {})
        }
        for load in found
    }
    for mode in compared["quiet"]:
        print(f"  {'Kafka / Tansu, ' + mode:<32}{compared['quiet'][mode]:>10.2f}{compared['busy'][mode]:>12.2f}")
    print(
        f"warm, busy over quiet: {loaded:.2f}x ({first}); target (quiet warm < {TARGET_S:.0f} s): "
        f"{'met' if found['quiet']['target_met'] else 'missed'}"
    )
    extra = {"kafka_over_embedded_launch_to_commit": compared} if compared["quiet"] else {}
    print(json.dumps({**found, "warm_cold_ratio": ratio, "loaded_over_quiet_warm": loaded, **extra}))


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="3 runs per mode instead of 7")
    parser.add_argument("--runs", type=int, default=None, help="measured runs per mode (overrides --quick)")
    parser.add_argument("--records", type=int, default=1000, help="records produced before each run")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--modes", default="cold,warm", help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument(
        "--executor",
        choices=("launched", "in_process"),
        default="launched",
        help="how the run executes: with the job's own executor as a launched run does (dg.execute_job), or "
        "with execute_in_process (see benchmarks/freshness_run.py)",
    )
    parser.add_argument(
        "--load",
        choices=("quiet", "busy", "both"),
        default="both",
        help="the machine as it is, with one core kept busy, or both in turn (default)",
    )
    add_broker_option(parser)
    return parser


def cases_of(modes: Sequence[str], names: Sequence[str]) -> list[tuple[str, str]]:
    """The (mode, broker) cases of a run, in the order of their first runs (round `i` takes them in `round_order`)."""
    return [(mode, name) for mode in modes for name in names]


def main() -> None:
    args = parser().parse_args()
    if args.load == "both":
        argv = sys.argv[1:]
        if "--load" in argv:
            del argv[argv.index("--load") : argv.index("--load") + 2]
        both_loads(argv)
        return
    runs_per_mode = args.runs or (3 if args.quick else 7)
    modes = tuple(args.modes.split(","))
    if not set(modes) <= set(MODES) or "warm" not in modes:
        parser().error(f"--modes takes {', '.join(MODES)}, warm included")
    names = broker_names(args.broker)
    cases = cases_of(modes, names)
    began = time.perf_counter()

    with contextlib.ExitStack() as stack:
        if args.load == "busy":
            stack.enter_context(BusyCore())
        brokers = start_brokers(names, stack)
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="cohort-freshness-"))
        configs = {name: {"bootstrap.servers": broker.bootstrap_servers} for name, broker in brokers.items()}
        home = Path(tmp) / "dagster"
        home.mkdir()
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        store_url = f"sqlite:///{tmp}/cohort.db"
        jobs = {
            (mode, name): {
                "bootstrap": brokers[name].bootstrap_servers,
                "group": f"bench-freshness-{mode}-{name}",
                "topic": f"bench-freshness-{mode}-{name}",
                "sink": f"{tmp}/lake-{mode}-{name}",
                "store_url": store_url,
                "remote": None,
                "keep_session": mode == "kept",
                "executor": args.executor,
            }
            for mode, name in cases
        }
        for (_, name), job in jobs.items():
            create_topic(configs[name], job["topic"], args.partitions)

        started = time.perf_counter()
        server = SparkConnectServer(root=Path(tmp) / "connect").start()
        server_startup_s = time.perf_counter() - started
        for (mode, _), job in jobs.items():
            if mode == "warm":
                job["remote"] = server.url
            elif mode == "kept":  # one server-side session per slot, kept across its runs
                job["remote"] = f"{server.url}/;session_id={uuid.uuid4()}"
        assert server._process is not None
        server_pid = server._process.pid
        coordinator = Coordinator.from_url(store_url)
        produced = dict.fromkeys(cases, 0)
        env = clean_env(DAGSTER_HOME=str(home), PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)

        def run(case: tuple[str, str], label: str) -> Run:
            (mode, name), job = case, jobs[case]
            produce(configs[name], job["topic"], records(produced[case], args.records, args.partitions))
            produced[case] += args.records
            report_path = Path(tmp) / f"report-{mode}-{name}-{label}.json"
            log = Path(tmp) / f"run-{mode}-{name}-{label}.log"
            load = os.getloadavg()[0]
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            server_cpu = tree_cpu(server_pid)
            with log.open("wb") as out:
                spawn = time.time()
                process = subprocess.Popen(
                    [sys.executable, "-m", "benchmarks.freshness_run", json.dumps({**job, "report": str(report_path)})],
                    cwd=REPOSITORY,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
                code = process.wait(RUN_TIMEOUT_S)
                exited = time.time()
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            server_cpu_s = cpu_since(server_cpu, tree_cpu(server_pid))
            what = f"{mode} run {label} on {name}"
            if code != 0 or not report_path.exists():
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
                raise SystemExit(f"{what} exited {code}; {log}:\n{tail}")
            report = json.loads(report_path.read_text())
            if report.get("connect") != (mode != "cold"):
                raise SystemExit(f"{what}: the run's session was {'not ' * (mode != 'cold')}Spark Connect")
            committed = {
                e.committed_at
                for p in range(args.partitions)
                for e in coordinator.ledger_history(job["group"], job["topic"], p)
                if e.run_id == report["run_id"]
            }
            if len(committed) != 1:
                raise SystemExit(f"{what}: {len(committed)} commit times in the ledger, expected one")
            committed_at = committed.pop()
            if sum(r[3] for r in report["ranges"]) != args.records:
                raise SystemExit(f"{what}: committed {report['ranges']}, not {args.records} records")
            readable, produced_at = read_back(job["sink"], report["ranges"], args.records)
            return Run(
                mode=mode,
                broker=name,
                label=label,
                spawn=spawn,
                exited=exited,
                committed_at=committed_at,
                report=report,
                produce_to_commit=[committed_at - t for t in produced_at],
                readable=readable,
                cpu_s=after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime,
                server_cpu_s=server_cpu_s,
                load=load,
                split=split(report, spawn, committed_at),
            )

        print(
            f"Spark Connect server up in {server_startup_s:.1f} s; {args.records} records per run over "
            f"{args.partitions} partitions; executor {args.executor}; brokers: {', '.join(names)}; "
            f"load {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)",
            flush=True,
        )
        firsts = [run(case, "first") for case in cases]
        for r in firsts:
            show(r)
        measured: list[Run] = []
        for i in range(runs_per_mode):
            for case in round_order(modes, names, i):
                measured.append(run(case, f"run{i}"))
                show(measured[-1])
        server.stop()
        coordinator.close()
        load_end = os.getloadavg()[0]

    common: dict[str, Any] = {
        "records": args.records,
        "runs": runs_per_mode,
        "executor": args.executor,
        "load": args.load,
        "connect_server_startup_s": round(server_startup_s, 1),
        "target_s": TARGET_S,
    }
    per_broker = print_results(measured, modes, names, runs_per_mode)
    all_readable = all(r.readable for r in [*firsts, *measured])
    for name, figures in per_broker.items():
        figures["all_readable"] = all(r.readable for r in [*firsts, *measured] if r.broker == name)
    print(
        f"rows readable right after every run: {all_readable}; load {load_end:.2f} at the end; "
        f"{time.perf_counter() - began:.0f} s in all"
    )
    ratio_keys = [f"{m}_{k}" for m in modes for k in ("launch_to_commit_s", "launch_to_commit_p90_s")]
    ratio_keys += [f"{m}_produce_to_commit_s" for m in modes]
    found = summary(common, per_broker, ratio_keys)
    found["all_readable"] = all_readable  # every run on every broker; each broker's own under `brokers`
    print(json.dumps(found))


def show(r: Run) -> None:
    parts = " ".join(f"{name}={seconds:.2f}" for name, seconds in r.split.items())
    stages = " ".join(f"{name}={seconds:.2f}" for name, seconds in r.report["stage_seconds"].items())
    print(
        f"{r.mode:<5}{r.broker:<9}{r.label:<6} load {r.load:4.2f}  launch->commit {r.launch_to_commit:6.2f} s  "
        f"produce->commit {statistics.median(r.produce_to_commit):6.2f} s  "
        f"launch->published {r.launch_to_published:6.2f} s  process {r.process_s:6.2f} s  "
        f"readable {r.readable}  CPU {r.cpu_s:5.1f} s (+ server {r.server_cpu_s:4.1f} s)",
        flush=True,
    )
    print(f"     split: {parts}", flush=True)
    tasks = r.report["task_seconds"]
    print(
        f"     batch stages: {stages} (of plan: parallelism {r.report.get('parallelism_s', 0.0):.2f}; "
        f"reading tasks {min(tasks):.2f} to {max(tasks):.2f}); after the commit: "
        f"{r.exited - r.committed_at:.2f} s to the process's exit "
        f"(Spark close {r.report['spark_close'][1] - r.report['spark_close'][0]:.2f} s)",
        flush=True,
    )


def print_results(
    measured: Sequence[Run], modes: Sequence[str], names: Sequence[str], runs_per_mode: int
) -> dict[str, dict[str, Any]]:
    """The table of medians, a column per (mode, broker), Kafka over Tansu when both ran; each broker's figures."""
    cases = cases_of(modes, names)
    by_case = {case: [r for r in measured if (r.mode, r.broker) == case] for case in cases}
    launch = {case: [r.launch_to_commit for r in by_case[case]] for case in cases}
    fresh = {case: [statistics.median(r.produce_to_commit) for r in by_case[case]] for case in cases}
    published = {case: [r.launch_to_published for r in by_case[case]] for case in cases}
    splits = {
        case: {name: round(statistics.median(r.split[name] for r in by_case[case]), 3) for name in SPLIT}
        for case in cases
    }
    headers = [mode if len(names) == 1 else f"{mode} {name}" for mode, name in cases]

    def medians(value: Any) -> str:
        return "".join(f"{statistics.median(value(r) for r in by_case[c]):>16.2f}" for c in cases)

    print()
    print(f"{'':<34}{''.join(f'{h:>16}' for h in headers)}   (median / p90 over {runs_per_mode} runs per case)")
    for label, values in (
        ("launch -> commit", launch),
        ("produce -> commit", fresh),
        ("launch -> published", published),
    ):
        cells = "".join(f"{statistics.median(values[c]):>9.2f} / {p90(values[c]):<5.2f}" for c in cases)
        print(f"{label + ' (s)':<34}{cells}")
    print(f"{'process, launch to exit (s)':<34}{medians(lambda r: r.process_s)}")
    print(f"{'CPU, run process tree (s)':<34}{medians(lambda r: r.cpu_s)}")
    print(f"{'CPU, Connect server tree (s)':<34}{medians(lambda r: r.server_cpu_s)}")
    print("split of launch -> commit (median s):")
    for part in SPLIT:
        print(f"  {part:<32}{''.join(f'{splits[c][part]:>16.2f}' for c in cases)}")
    stage_names = sorted({s for r in measured for s in r.report["stage_seconds"]})
    print("run_batch stages (median s):")
    for stage in stage_names:
        print(f"  {stage:<32}{medians(lambda r, stage=stage: r.report['stage_seconds'].get(stage, 0.0))}")
    print(f"  {'(of plan: parallelism)':<32}{medians(lambda r: r.report.get('parallelism_s', 0.0))}")
    print(f"  {'(reading tasks, longest)':<32}{medians(lambda r: max(r.report['task_seconds']))}")
    if {"embedded", "kafka"} <= set(names):
        median = {case: round(statistics.median(launch[case]), 2) for case in cases}  # as in the summary
        cells = ", ".join(f"{m} {ratio(median[(m, 'kafka')], median[(m, 'embedded')]):.2f}" for m in modes)
        print(f"Kafka / Tansu, median launch -> commit: {cells}")
    per_broker: dict[str, dict[str, Any]] = {}
    for name in names:
        figures: dict[str, Any] = {}
        for m in modes:
            case = (m, name)
            figures[f"{m}_launch_to_commit_s"] = round(statistics.median(launch[case]), 2)
            figures[f"{m}_launch_to_commit_p90_s"] = round(p90(launch[case]), 2)
            figures[f"{m}_produce_to_commit_s"] = round(statistics.median(fresh[case]), 2)
            figures[f"{m}_launch_to_published_s"] = round(statistics.median(published[case]), 2)
            figures[f"{m}_split_s"] = splits[case]
        warm_median = statistics.median(launch[("warm", name)])
        figures["target_met"] = warm_median < TARGET_S
        print(
            f"target on {name}: warm launch -> commit < {TARGET_S:.0f} s: "
            f"{'met' if figures['target_met'] else 'missed'} ({warm_median:.2f} s)"
        )
        per_broker[name] = figures
    return per_broker


if __name__ == "__main__":
    main()
