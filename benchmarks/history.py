"""Long histories: what a group's run start, its checks and the operator's commands cost after N batches.

A group scheduled every minute commits ~500k ranges per partition a year. For each N (batches per partition) and
P (partitions), on the embedded Tansu broker, a SQLite store and a Dagster instance (in memory by default), the
history is fast-forwarded (harness/history.py: the ledger through the coordinator's commit decision, the
worker-built materializations in bulk, a Parquet range directory per range, P * N records produced and the heads
mirrored to Kafka), then measured, `--repeats` times each (medians):

- **run start (Dagster)**: `cohort.assets.worker.unreported_materializations` over the slot's partitions, as every
  batch run calls it before its batch; it must report nothing (every range has its materialization).
- **run start (Airflow)**: `cohort.airflow.slot.shown_ranges` over the group's asset events (plain objects with
  each range's `extra`, as Airflow hands them; Airflow's own query of those events is not counted) and
  `unreported_ranges`; must report nothing. Skipped above `--airflow-max` ranges (the events are held in memory).
- **offsets check**: `cohort.assets.checks.check_results` with the contiguity and lag checks selected (through
  `gather_audits`), as after every batch; both must pass.
- **sink check**: the same with the sink check (`sink_matches_ledger`) selected; must pass.
- **describe / audit**: `cohort describe GROUP --json` and `cohort audit GROUP --sink ... --json` as subprocesses
  (Python start-up included: compare with N = 1k), with `--bootstrap-servers`; the audit must find nothing.
  Each is timed once more only if it took under a minute; one that runs past `--cli-timeout` is reported as such.
- **sizes**: the SQLite store on disk, the Dagster event log (SQLite pages), the sink's range directories.

Each measurement is timed in wall seconds and in CPU seconds (of the benchmark's process, every thread, for the
calls made in it; of the child for the commands), and every figure is also printed as a ratio to the same figure
at the smallest N of the same P (N = 1k by default). On a shared machine the CPU seconds are the steadier figure:
the target for the redesigned trail is, in CPU seconds, 1.5x at most at 100k for the run start (both faces) and
the offsets check, nothing re-reported and every check green (`target_met`).

`--tables` measures instead the commit latency of a Delta and an Iceberg table through Cohort's table stores
(`cohort.pipelines.tables.batch.open_tables`: `DeltaTableStore`, `IcebergTableStore` on a SQLite catalog) as
their history grows: each commit lands one small Parquet file (`--table-rows` rows of one partition) on the marks
read just before (as a batch does: `marks`, then `commit`), reporting the median `commit` latency (wall and CPU)
and `marks` latency over the 10 commits from commit 10, 100, 1,000 and 10,000, as far as `--table-budget` seconds
per format allow. Only the sink table is committed (a batch also commits its quarantine table).

Usage:
    python -m benchmarks.history            # N = 1k, 10k, 100k on 1 partition; N = 1k, 10k on 100 partitions
    python -m benchmarks.history --quick    # N = 300, 1k, 3k on 1 and 10 partitions, 2 repeats
    python -m benchmarks.history --ns 1000,10000,100000 --partitions 1
    python -m benchmarks.history --tables   # table commit latency from commit 10 to 10,000

The last line printed is one JSON object: {"cases": [...], "cpu_ratios": {...}, "wall_ratios": {...},
"target_met": ...} (or, with --tables, {"tables": {...}}).
"""

from __future__ import annotations

import argparse
import bisect
import datetime
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pyspark.sql.types as T
import sqlalchemy as sa

from cohort.assets.checks import check_results
from cohort.assets.translator import CHECK_CONTIGUOUS, CHECK_LAG, CHECK_SINK, CohortConfig, DagsterCohortTranslator
from cohort.assets.worker import unreported_materializations
from cohort.common.types import OffsetRange, TopicPartition
from cohort.devtools.embedded_broker import EmbeddedBroker
from cohort.devtools.topics import create_topic, produce
from cohort.pipelines.spec import PipelineSpec
from cohort.resources import KafkaResource
from cohort.resources.group import CohortGroupResource
from harness.history import HistorySpec, fast_forward, mirror_heads

GROUP = "bench-history"
LONG_S = 30.0  # a measurement slower than this is not timed again
QUICK_CALLS = 25  # millisecond measurements: up to this many calls ...
QUICK_BUDGET_S = 2.0  # ... while they add up to less than this
TABLE_MARKS = (10, 100, 1_000, 10_000)
TABLE_WINDOW = 10


@dataclass
class Case:
    """One (N, P) history and what was measured on it (seconds unless named otherwise; None: not measured)."""

    n: int
    partitions: int
    fast_forward_s: dict[str, float] = field(default_factory=dict)
    wall_s: dict[str, float | None] = field(default_factory=dict)
    cpu_s: dict[str, float | None] = field(default_factory=dict)
    first_cpu_s: dict[str, float | None] = field(default_factory=dict)
    rereported: int | None = None
    airflow_rereported: int | None = None
    check_green: bool | None = None
    check_problems: str = ""
    sink_check_green: bool | None = None
    sink_check_note: str = ""
    audit_ok: bool | None = None
    audit_note: str = ""
    store_mb: float = 0.0
    events_mb: float = 0.0
    sink_dirs: int = 0

    @property
    def green(self) -> bool:
        """Nothing re-reported, every check and the audit green (what was measured)."""
        flags = (self.check_green, self.sink_check_green, self.audit_ok)
        reported = (self.rereported or 0) + (self.airflow_rereported or 0)
        return reported == 0 and all(f is not False for f in flags)


Timing = tuple[float | None, float | None]
"""(wall seconds, CPU seconds) of a measurement, medians; (None, None) when it was given up."""


@dataclass(frozen=True)
class Timed:
    """Medians of a measurement's calls, the first call's own times, and the last call's answer."""

    timing: Timing
    first: Timing
    answer: Any


def median_time(call: Callable[[], Any], repeats: int) -> Timed:
    """The median wall and CPU time (of this process: every thread) of at least `repeats` calls (two, when the
    second took over LONG_S; up to QUICK_CALLS while they add up to under QUICK_BUDGET_S, as millisecond figures
    need many calls on a noisy machine). A call that writes the trail's marks reads the whole history the first
    time only: the first call's times are kept apart, and the median of the others is the steady state."""
    walls, cpus, answer = [], [], None
    while len(walls) < repeats or (len(walls) < QUICK_CALLS and sum(walls[1:]) < QUICK_BUDGET_S):
        started, cpu = time.perf_counter(), time.process_time()
        answer = call()
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
        if walls[-1] > LONG_S and len(walls) > 1:  # the first may be the trail's one full read
            break
    steady = slice(1, None) if len(walls) > 2 else slice(None)  # the first call apart when there are others
    timing = (statistics.median(walls[steady]), statistics.median(cpus[steady]))
    return Timed(timing, (walls[0], cpus[0]), answer)


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cli(args: Sequence[str], timeout_s: float, repeats: int) -> tuple[Timing, subprocess.CompletedProcess[str] | None]:
    """`python -m cohort ARGS`: the median wall and CPU time ((None, None) when it ran past the timeout; one run
    when it took over LONG_S) and the last run."""
    walls: list[float] = []
    cpus: list[float] = []
    done = None
    for _ in range(repeats):
        started, cpu = time.perf_counter(), _children_cpu_s()
        try:
            done = subprocess.run(
                [sys.executable, "-m", "cohort", *args], capture_output=True, text=True, timeout=timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            return (None, None), None
        walls.append(time.perf_counter() - started)
        cpus.append(_children_cpu_s() - cpu)
        if walls[-1] > LONG_S:
            break
    return (statistics.median(walls), statistics.median(cpus)), done


def sqlite_mb(engine_or_storage: Any) -> float:
    """A SQLite database's size from its pages (works for the in-memory event log too)."""
    with engine_or_storage.index_connection() as conn:
        pages = conn.execute(sa.text("PRAGMA page_count")).scalar()
        size = conn.execute(sa.text("PRAGMA page_size")).scalar()
    return round(pages * size / 1e6, 1)


def file_mb(path: Path) -> float:
    return round(sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 1e6, 1)


class Bench:
    """One history on its own topic, store, sink and Dagster instance, and the measurements on it."""

    def __init__(self, broker: EmbeddedBroker, tmp: Path, n: int, partitions: int, args: argparse.Namespace) -> None:
        self.args = args
        self.case = Case(n, partitions)
        self.topic = f"history-{partitions}p-{n}"
        self.bootstrap = broker.bootstrap_servers
        self.kafka_config: dict[str, object] = {"bootstrap.servers": self.bootstrap}
        self.store = tmp / f"{self.topic}.db"
        self.store_url = f"sqlite:///{self.store}"
        self.sink = tmp / f"lake-{self.topic}"
        self.resource = CohortGroupResource(
            group=GROUP, topics=[self.topic], worker_slots=1, initial_rebalance_delay_s=0.0, store_url=self.store_url
        )
        schema = T.StructType([T.StructField("id", T.LongType())])
        spec = PipelineSpec(sink_path=str(self.sink), value_format="json", value_schema=schema)
        self.config = CohortConfig(self.resource, pipeline=spec)
        self.translator = DagsterCohortTranslator()
        self.key = self.translator.get_asset_key(GROUP, self.topic)
        self.spec = HistorySpec(GROUP, self.topic, partitions, n).ending_now()
        self.kafka = KafkaResource(bootstrap_servers=self.bootstrap)
        self.instance = dg.DagsterInstance.ephemeral()
        self.coordinator = self.resource.worker_group().open_coordinator()

    def close(self) -> None:
        self.kafka.close()
        self.resource.close()
        self.coordinator.close()
        self.instance.dispose()

    def fast_forward(self) -> None:
        case, spec = self.case, self.spec
        create_topic(self.kafka_config, self.topic, case.partitions)
        started = time.perf_counter()
        records = ((p, None, b"{}") for p in range(case.partitions) for _ in range(spec.head))
        produce(self.kafka_config, self.topic, records)
        produce_s = time.perf_counter() - started
        done = fast_forward(self.resource.worker_group(), self.coordinator, self.instance, self.config, spec, sink=True)
        mirror_heads(self.kafka_config, spec)
        case.sink_dirs = done.sink_dirs
        case.fast_forward_s = {
            "produce": round(produce_s, 1),
            "ledger": round(done.ledger_s, 1),
            "events": round(done.events_s, 1),
            "sink": round(done.sink_s, 1),
        }
        case.store_mb = file_mb(self.store)
        case.events_mb = sqlite_mb(self.instance.event_log_storage)

    def measure(self) -> Case:
        case, repeats = self.case, self.args.repeats
        instance_id = self.resource.instance_id(1)
        counts = {self.topic: case.partitions}

        def run_start() -> int:
            found = unreported_materializations(
                self.instance, self.coordinator, self.config, self.translator, {instance_id}, counts, "bench-run"
            )
            return sum(1 for _ in found)

        case.rereported = self._timed("run_start", run_start) // 2  # a topic and a landed materialization per range
        self._airflow(counts)

        checks = {dg.AssetCheckKey(self.key, CHECK_CONTIGUOUS), dg.AssetCheckKey(self.key, CHECK_LAG)}
        evaluations = self._timed("check", lambda: self._checks(checks))
        case.check_green = all(e.passed for e in evaluations)
        case.check_problems = "; ".join(
            str(e.metadata["cohort/details"].value).splitlines()[0] for e in evaluations if not e.passed
        )[:300]
        self._sink_check()

        common = ["--store-url", self.store_url, "--bootstrap-servers", self.bootstrap, "--json"]
        timing, _ = cli(["describe", GROUP, *common], self.args.cli_timeout, repeats)
        self._record("describe", timing)
        timing, done = cli(["audit", GROUP, "--sink", str(self.sink), *common], self.args.cli_timeout, repeats)
        self._record("audit", timing)
        if done is None:
            case.audit_note = f"ran past {self.args.cli_timeout:.0f} s"
        else:
            case.audit_ok = done.returncode == 0
            if not case.audit_ok:
                case.audit_note = (done.stdout or done.stderr)[-300:]
        return case

    def _record(self, name: str, timing: Timing) -> None:
        self.case.wall_s[name], self.case.cpu_s[name] = timing

    def _timed(self, name: str, call: Callable[[], Any]) -> Any:
        """Time `call` (medians, and its first call apart) as measurement `name`; its last answer."""
        timed = median_time(call, self.args.repeats)
        self._record(name, timed.timing)
        self.case.first_cpu_s[name] = timed.first[1]
        return timed.answer

    def _checks(self, selected: set[dg.AssetCheckKey]) -> list[dg.AssetCheckEvaluation]:
        return list(check_results(self.instance, self.config, self.translator, self.resource, self.kafka, selected))

    def _sink_check(self) -> None:
        """The sink check in a child process (it reads the store and the sink, not the Dagster instance), which
        is given up after `--cli-timeout`; the child times its own calls."""
        case = self.case
        command = [sys.executable, "-m", "benchmarks.history", "--child-sink-check", self.store_url, str(self.sink)]
        command += [self.topic, str(self.args.repeats)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=self.args.cli_timeout, check=True)
        except subprocess.TimeoutExpired:
            case.sink_check_note = f"ran past {self.args.cli_timeout:.0f} s"
            self._record("sink_check", (None, None))
            return
        except subprocess.CalledProcessError as exc:
            raise SystemExit(f"the sink check failed: {exc.stderr[-2000:]}") from None
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        self._record("sink_check", (answer["wall_s"], answer["cpu_s"]))
        case.sink_check_green = answer["passed"]

    def _airflow(self, counts: dict[str, int]) -> None:
        """The slot task's report of earlier ranges over the group alias's events (held in memory: an accessor
        that filters by time, as Airflow's `inlet_events[alias].after(...)` does in its database)."""
        case = self.case
        if case.n * case.partitions > self.args.airflow_max:
            return
        try:
            import cohort.airflow.slot as slot
            from cohort.airflow.lineage import group_alias
            from cohort.runtime.lineage import reported_range
        except ImportError:  # Airflow is not installed
            return
        spec, group = self.spec, self.resource.worker_group()
        events = AirflowEvents(
            AirflowEvent(
                reported_range(
                    OffsetRange(spec.topic, p, k * spec.records, (k + 1) * spec.records, records=spec.records),
                    group=GROUP,
                    generation=1,
                    member="m",
                    instance_id=group.instance_id(1),
                    run_id=spec.run_id(k),
                    reported_by=spec.run_id(k),
                ).as_extra(),
                datetime.datetime.fromtimestamp(spec.at(k), datetime.UTC),
            )
            for k in range(spec.batches)
            for p in range(spec.partitions)
        )
        inlet = {group_alias(GROUP): events}

        def run_start() -> int:
            if hasattr(slot, "earlier_ranges"):  # the trail's API
                return len(slot.earlier_ranges(group, self.coordinator, counts, 1, inlet, "airflow:bench"))
            shown = slot.shown_ranges(inlet, GROUP)  # type: ignore[attr-defined]  # before the trail
            return len(slot.unreported_ranges(group, self.coordinator, counts, 1, shown, "airflow:bench"))  # type: ignore[attr-defined]

        case.airflow_rereported = self._timed("airflow_start", run_start)


@dataclass(frozen=True)
class AirflowEvent:
    """An asset event as a task's `inlet_events` hands it: its `extra` and when it was stored."""

    extra: dict[str, Any]
    timestamp: datetime.datetime


class AirflowEvents(list[AirflowEvent]):
    """The alias's events, oldest first; `after(iso time)` keeps those stored at that time or later."""

    def after(self, when: str) -> list[AirflowEvent]:
        start = bisect.bisect_left(self, datetime.datetime.fromisoformat(when), key=lambda e: e.timestamp)
        return self[start:]


def child_sink_check(store_url: str, sink: str, topic: str, repeats: int) -> None:
    """The sink check of a history, alone (`--child-sink-check`): prints {"wall_s", "cpu_s", "passed"}."""
    resource = CohortGroupResource(
        group=GROUP, topics=[topic], worker_slots=1, initial_rebalance_delay_s=0.0, store_url=store_url
    )
    schema = T.StructType([T.StructField("id", T.LongType())])
    config = CohortConfig(resource, pipeline=PipelineSpec(sink_path=sink, value_format="json", value_schema=schema))
    translator = DagsterCohortTranslator()
    selected = {dg.AssetCheckKey(translator.get_landed_asset_key(GROUP, topic), CHECK_SINK)}
    with dg.DagsterInstance.ephemeral() as instance:

        def check() -> list[dg.AssetCheckEvaluation]:
            return list(check_results(instance, config, translator, resource, None, selected))  # type: ignore[arg-type]

        timed = median_time(check, repeats)
        (wall, cpu), evaluations = timed.timing, timed.answer
    resource.close()
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "passed": len(evaluations) == 1 and evaluations[0].passed}))


# -- the report -----------------------------------------------------------------------------------------------

TIMINGS = (
    ("run_start", "run start"),
    ("airflow_start", "airflow start"),
    ("check", "offsets check"),
    ("sink_check", "sink check"),
    ("describe", "describe"),
    ("audit", "audit"),
)
TARGET = 1.5
"""At N = 100k, each per-run figure within this factor of N = 1k (CPU seconds)."""
PER_RUN = ("run_start", "airflow_start", "check", "sink_check")
"""What every batch run pays (its start, the checks after it); describe and audit read everything by design."""


def ratios(cases: Sequence[Case], kind: str) -> dict[str, dict[str, float | None]]:
    """Per case ("P=1 N=100000"), each timing of `kind` ("cpu_s" or "wall_s") and size over the same figure at
    the smallest N of the same P."""
    out: dict[str, dict[str, float | None]] = {}
    for case in cases:
        base = min((c for c in cases if c.partitions == case.partitions), key=lambda c: c.n)
        figures, reference = _figures(case, kind), _figures(base, kind)
        out[_label(case)] = {
            name: round(value / reference[name], 2) if value is not None and reference.get(name) else None  # type: ignore[operator]
            for name, value in figures.items()
        }
    return out


def _figures(case: Case, kind: str) -> dict[str, float | None]:
    timings: dict[str, float | None] = getattr(case, kind)
    return {**{name: timings.get(name) for name, _ in TIMINGS}, "store_mb": case.store_mb, "events_mb": case.events_mb}


def _label(case: Case) -> str:
    return f"P={case.partitions} N={case.n}"


def _within_target(case: Case, ratio: dict[str, float | None]) -> bool:
    """The per-run figures (the run start, the offsets and sink checks) within TARGET of the smallest N (Airflow's
    run start only if measured)."""
    for name in PER_RUN:
        if name == "airflow_start" and case.cpu_s.get(name) is None:
            continue
        value = ratio[name]
        if value is None or value > TARGET:
            return False
    return True


def _cell(value: float | None, ratio: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" + (f" ({ratio:.1f}x)" if ratio is not None and ratio != 1.0 else "")


def _table(cases: Sequence[Case], kind: str, title: str) -> dict[str, dict[str, float | None]]:
    rows = ratios(cases, kind)
    print(title)
    header = ["P", "N", *[t for _, t in TIMINGS], "store MB", "events MB", "re-reported", "checks", "audit"]
    print("  " + " | ".join(header))
    for case in cases:
        figures, row = _figures(case, kind), rows[_label(case)]
        cells = [str(case.partitions), f"{case.n:,}", *[_cell(figures[name], row[name]) for name in figures]]
        reported = f"{case.rereported}" + (
            f" / {case.airflow_rereported}" if case.airflow_rereported is not None else ""
        )
        checks = "green" if case.check_green else f"RED {case.check_problems}"
        checks += "" if case.sink_check_green is not False else "; sink check RED"
        checks += f"; sink check {case.sink_check_note}" if case.sink_check_note else ""
        audit = "ok" if case.audit_ok else (case.audit_note or "-")
        print("  " + " | ".join([*cells, reported, checks, audit]))
    return rows


def report(cases: Sequence[Case], began: float) -> None:
    cpu = _table(cases, "cpu_s", "CPU seconds (the benchmark's process, or the command's), x: over the smallest N")
    wall = _table(cases, "wall_s", "wall seconds, x: over the smallest N")
    for case in cases:
        first = ", ".join(f"{name} {value:.3g}" for name, value in case.first_cpu_s.items() if value is not None)
        print(f"fast-forward {_label(case)}: {case.fast_forward_s} s; {case.sink_dirs:,} range dirs")
        print(f"  first calls, CPU s: {first}")
    big = [c for c in cases if c.n >= 100_000]
    target = [c for c in big if c.green and _within_target(c, cpu[_label(c)])]
    load, seconds = os.getloadavg()[0], time.perf_counter() - began
    print(f"load average {load:.1f} at the end ({os.cpu_count()} cores); wall {seconds:.0f} s")
    result = {
        "cases": [{**asdict(c), "green": c.green} for c in cases],
        "cpu_ratios": cpu,
        "wall_ratios": wall,
        "target_met": bool(big) and len(target) == len(big),
    }
    print(json.dumps(result))


# -- table commit latency -------------------------------------------------------------------------------------


def tables(args: argparse.Namespace) -> None:
    """Commit latency of the Delta and Iceberg stores as their history grows."""
    from cohort.pipelines.tables.batch import open_tables
    from cohort.pipelines.tables.store import BatchRecord, NewFile, Owner, TableCommit, data_dir

    tp = TopicPartition("history", 0)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="cohort-history-tables-") as tmp:
        for fmt in ("delta", "iceberg"):
            root = Path(tmp) / f"lake_{fmt}"
            spec = PipelineSpec(sink_path=str(root), table_format=fmt, value_format="bytes")
            store = open_tables(spec.table_target).sink
            commit_s: list[float] = []
            commit_cpu_s: list[float] = []
            marks_s: list[float] = []
            started = time.perf_counter()
            for i in range(max(TABLE_MARKS) + TABLE_WINDOW):
                if time.perf_counter() - started > args.table_budget:
                    break
                low, high = i * args.table_rows, (i + 1) * args.table_rows
                relative = f"{data_dir(tp, low, high, 'a')}/part-00000.parquet"
                path = root / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                table = pa.table({"offset": pa.array(range(low, high), pa.int64())})
                pq.write_table(table, path)
                new = NewFile(relative, path.stat().st_size, table.num_rows, pq.read_schema(path))
                t0 = time.perf_counter()
                marks = store.marks(GROUP, [tp])
                t1, cpu = time.perf_counter(), time.process_time()
                record = BatchRecord(
                    f"run-{i}", (OffsetRange(tp.topic, tp.partition, low, high, records=table.num_rows),)
                )
                store.commit(TableCommit(Owner(GROUP, 1), {tp: marks[tp]}, {tp: high}, (new,), (), record))
                commit_s.append(time.perf_counter() - t1)
                commit_cpu_s.append(time.process_time() - cpu)
                marks_s.append(t1 - t0)
            done = len(commit_s)
            starts = [mark for mark in TABLE_MARKS if done >= mark - 1 + TABLE_WINDOW]
            if done >= TABLE_WINDOW and (not starts or starts[-1] - 1 + TABLE_WINDOW < done):
                starts.append(done - TABLE_WINDOW + 1)  # the furthest the budget allowed

            def window(values: list[float], first: int) -> float:
                return round(statistics.median(values[first - 1 : first - 1 + TABLE_WINDOW]) * 1000, 1)

            at = {
                str(first): {
                    "commit_ms": window(commit_s, first),
                    "commit_cpu_ms": window(commit_cpu_s, first),
                    "marks_ms": window(marks_s, first),
                }
                for first in starts
            }
            results[fmt] = {"commits": done, "seconds": round(time.perf_counter() - started), "at": at}
            print(f"{fmt}: {done:,} commits in {results[fmt]['seconds']} s")
            for mark, figures in at.items():
                print(
                    f"  from commit {int(mark):>6,}: commit {figures['commit_ms']:8.1f} ms "
                    f"({figures['commit_cpu_ms']:.1f} ms CPU), marks {figures['marks_ms']:8.1f} ms "
                    f"(medians of {TABLE_WINDOW})"
                )
    print(f"load average {os.getloadavg()[0]:.1f} at the end ({os.cpu_count()} cores)")
    print(json.dumps({"tables": results}))


# -- main -----------------------------------------------------------------------------------------------------


def _ints(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="N = 300, 1k, 3k on 1 and 10 partitions, 2 repeats")
    parser.add_argument("--ns", type=_ints, default=None, help="batches per partition, comma-separated")
    parser.add_argument("--partitions", type=_ints, default=None, help="partition counts, comma-separated")
    parser.add_argument("--max-ranges", type=int, default=1_000_000, help="skip histories of more ranges (N * P)")
    parser.add_argument("--repeats", type=int, default=None, help="timed calls per measurement (median)")
    parser.add_argument("--airflow-max", type=int, default=300_000, help="skip the Airflow run start above N * P")
    parser.add_argument("--cli-timeout", type=float, default=900.0, help="seconds before a CLI command is given up")
    parser.add_argument("--tables", action="store_true", help="measure table commit latency instead")
    parser.add_argument("--table-budget", type=float, default=300.0, help="seconds of commits per table format")
    parser.add_argument("--table-rows", type=int, default=10, help="rows per table commit")
    parser.add_argument("--child-sink-check", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_sink_check:
        store_url, sink, topic, repeats = args.child_sink_check
        child_sink_check(store_url, sink, topic, int(repeats))
        return
    logging.getLogger("alembic").setLevel(logging.WARNING)  # each in-memory Dagster instance stamps its schema
    if args.tables:
        tables(args)
        return
    ns = args.ns or ([300, 1_000, 3_000] if args.quick else [1_000, 10_000, 100_000])
    partitions = args.partitions or ([1, 10] if args.quick else [1, 100])
    args.repeats = args.repeats or (2 if args.quick else 3)
    began = time.perf_counter()
    cases: list[Case] = []
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="cohort-history-") as tmp:
        for p in partitions:
            for n in ns:
                if n * p > args.max_ranges:
                    print(f"P={p} N={n:,}: skipped ({n * p:,} ranges > --max-ranges {args.max_ranges:,})")
                    continue
                bench = Bench(broker, Path(tmp), n, p, args)
                try:
                    bench.fast_forward()
                    print(f"P={p} N={n:,}: fast-forwarded {bench.case.fast_forward_s} s", flush=True)
                    cases.append(bench.measure())
                finally:
                    bench.close()
                print(f"P={p} N={n:,}: {asdict(cases[-1])}", flush=True)
    report(cases, began)


if __name__ == "__main__":
    main()
