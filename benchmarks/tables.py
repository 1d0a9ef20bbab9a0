"""Table sinks: the same records landed as Parquet range directories, a Delta Lake table and an Iceberg table.

On the embedded Tansu broker, in one run:

1. **Rate.** Produce N small JSON records (8 fields: long, string, double, string, long, int, a nullable double,
   a boolean) over 8 partitions with librdkafka's default batching. Spark starts (session + Python worker pool,
   timed separately), then `run_batch` lands the whole topic in one batch into each sink format, each landing
   with a fresh group and sink and the same spec otherwise (JSON into an explicit StructType, a pandera model,
   no transform: the reading tasks write Parquet themselves). One warm-up landing per format first (reported,
   left out of the medians), then `--repeats` rounds, the order of the formats rotated each round
   (parquet/delta/iceberg, delta/iceberg/parquet, ...). Every landing is checked with the format's own reader:
   N rows (deltalake `DeltaTable.to_pyarrow_table`, pyiceberg `load_table(...).scan().to_arrow()`, a pyarrow
   dataset over the Parquet range directories), N distinct (partition, offset), nothing quarantined.
2. **Commit latency.** Small batches into the same tables: `--small-batches` times (default 60), produce
   `--small-records` (default 1,000) over the 8 partitions, then one `run_batch` per format (three groups
   reading the same topic, each into its own sink, the order rotated each step). The two table commits of a
   batch (quarantine table, then sink table) are timed directly: the benchmark wraps
   `cohort.pipelines.tables.batch.open_tables` so that each store's `commit` is timed with `time.perf_counter`.
   Reported per format: the table commits of a batch (sum of the two), the whole `commit` stage (ledger
   ownership check + placing the files + both table commits + ledger commit), the `reconcile` stage, over
   all batches and for the first 10 and the last 10 (history grows: one table version per commit); the
   Parquet sink's `commit` + `publish` stages for the same batches as the peer. The tables are read back at
   the end (every offset once).

CPU seconds per 1M records: driver + JVM + its Python workers (from /proc), the driver alone (getrusage: the
delta-rs and pyiceberg commits run in the driver), the broker separately.

Usage:
    python -m benchmarks.tables            # 1M records, 3 rounds, 60 small batches of 1,000
    python -m benchmarks.tables --quick    # 200k records
    python -m benchmarks.tables --commits 1000   # only commit latency over 1000 commits, with/without retention

The last line printed is one JSON object: {"records", "parquet_rate", "delta_rate", "iceberg_rate",
"ratio_delta_vs_parquet", "ratio_iceberg_vs_parquet", "cpu_s_per_1m", "commit_ms", "reconcile_ms", ...}; rates
are records per second (medians over the rounds); `commit_ms` has, per format, the median, p90 and the medians of
the first and last 10 small batches of the table commits (Parquet: `commit` + `publish` stages).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pandera.pyspark as pa
import pyarrow as arrow
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyspark.sql.types as T
from deltalake import DeltaTable
from pyiceberg.catalog.sql import SqlCatalog

import cohort.pipelines.tables.batch as table_batch
import cohort.pipelines.tables.delta.store as delta_store
from benchmarks.pipeline import _own_cpu_s, _tree_cpu_s
from cohort.assignment.coordinator import Coordinator
from cohort.common.ledger import OffsetLedger
from cohort.common.types import TopicPartition
from cohort.devtools.embedded_broker import EmbeddedBroker
from cohort.devtools.topics import create_topic, produce
from cohort.pipelines import KafkaOffsetMirror, PipelineSpec, build_session, run_batch
from cohort.pipelines.batch.results import BatchResult
from cohort.pipelines.tables.store import TableCommit
from cohort.pipelines.tables.target import TableTarget

TOPIC = "bench-tables"
SMALL_TOPIC = "bench-tables-small"
GROUP = "bench-tables"
FORMATS = ("parquet", "delta", "iceberg")
TABLE_FORMATS = ("delta", "iceberg")
COUNTRIES = ["FR", "DE", "ES", "IT"]
SCHEMA = T.StructType(
    [
        T.StructField("id", T.LongType(), nullable=False),
        T.StructField("user", T.StringType(), nullable=False),
        T.StructField("amount", T.DoubleType(), nullable=False),
        T.StructField("country", T.StringType(), nullable=False),
        T.StructField("ts", T.LongType(), nullable=False),
        T.StructField("quantity", T.IntegerType(), nullable=False),
        T.StructField("score", T.DoubleType(), nullable=True),
        T.StructField("active", T.BooleanType(), nullable=False),
    ]
)
EDGE = 10  # the first and last batches compared to show growth with history


class TableEvent(pa.DataFrameModel):
    """The benchmark's validation (nothing fails it): bounded numbers, a known country."""

    id: T.LongType() = pa.Field(ge=0)  # type: ignore[valid-type]
    amount: T.DoubleType() = pa.Field(ge=0, lt=10_000)  # type: ignore[valid-type]
    country: T.StringType() = pa.Field(isin=COUNTRIES)  # type: ignore[valid-type]
    quantity: T.IntegerType() = pa.Field(ge=0, lt=100)  # type: ignore[valid-type]


def record(i: int) -> bytes:
    """Record `i` as JSON (about 137 bytes)."""
    return json.dumps(
        {
            "id": i,
            "user": f"user-{i % 5000}",
            "amount": (i % 997) * 1.5,
            "country": COUNTRIES[i % 4],
            "ts": 1_700_000_000_000 + i,
            "quantity": i % 100,
            "score": None if i % 7 == 0 else (i % 1000) / 10,
            "active": i % 3 != 0,
        }
    ).encode()


def records(start: int, count: int, partitions: int) -> Iterator[tuple[int, bytes, bytes]]:
    """(partition, key, value) for records start .. start + count - 1, round-robin over the partitions."""
    for i in range(start, start + count):
        yield i % partitions, f"key-{i}".encode(), record(i)


def spec_for(fmt: str, sink: str) -> PipelineSpec:
    """The benchmark's spec in a sink format (sink directories are identifiers: the Iceberg table's name)."""
    return PipelineSpec(sink_path=sink, table_format=fmt, value_schema=SCHEMA, model=TableEvent)


# -- timing the table commits --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommitCall:
    """One `TableStore.commit` call: which table, whether it carried a batch (else a fence or roll-back from the
    reconcile step), and its wall seconds."""

    table: str  # "sink" or "quarantine"
    batch: bool
    seconds: float


@contextmanager
def timing_table_commits() -> Iterator[list[CommitCall]]:
    """While open, every table store a batch opens times its `commit` calls into the yielded list."""
    calls: list[CommitCall] = []
    original = table_batch.open_tables

    def timed_store(store: Any, role: str) -> None:
        commit = store.commit

        def timed_commit(change: TableCommit) -> None:
            started = time.perf_counter()
            try:
                commit(change)
            finally:
                calls.append(CommitCall(role, change.batch is not None, time.perf_counter() - started))

        setattr(store, "commit", timed_commit)  # noqa: B010 (an instance attribute over the method)

    def opened(target: TableTarget) -> table_batch.TablePair:
        pair = original(target)
        timed_store(pair.sink, "sink")
        timed_store(pair.quarantine, "quarantine")
        return pair

    table_batch.open_tables = opened
    try:
        yield calls
    finally:
        table_batch.open_tables = original


@contextmanager
def counting_table_opens() -> Iterator[dict[str, int]]:
    """While open, counts the full table loads: Delta tables the Delta store constructs (each one reads the log
    from the last checkpoint), Iceberg tables loaded from a SQL catalog (each one reads the metadata JSON)."""
    counts = {"delta": 0, "iceberg": 0}
    delta_table = delta_store.DeltaTable
    load_table = SqlCatalog.load_table

    class CountingDeltaTable(delta_table):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            counts["delta"] += 1
            super().__init__(*args, **kwargs)

    def counting_load_table(catalog: SqlCatalog, identifier: Any) -> Any:
        counts["iceberg"] += 1
        return load_table(catalog, identifier)

    setattr(delta_store, "DeltaTable", CountingDeltaTable)  # noqa: B010
    setattr(SqlCatalog, "load_table", counting_load_table)  # noqa: B010
    try:
        yield counts
    finally:
        setattr(delta_store, "DeltaTable", delta_table)  # noqa: B010
        setattr(SqlCatalog, "load_table", load_table)  # noqa: B010


# -- reading back --------------------------------------------------------------------------------------------


def read_back(spec: PipelineSpec) -> arrow.Table:
    """The sink's rows with the format's own reader."""
    if spec.table_format == "delta":
        return DeltaTable(spec.sink_path).to_pyarrow_table()
    if spec.table_format == "iceberg":
        catalog = SqlCatalog("cohort", uri=spec.iceberg_catalog_url, warehouse=f"file://{spec.sink_path}")
        return catalog.load_table(spec.iceberg_identifiers[0]).scan().to_arrow()
    # the range directories (names starting with _ or . are ignored: the quarantine, staging)
    return ds.dataset(spec.sink_path, format="parquet", partitioning="hive").to_table(columns=["kafka"])


def check_sink(spec: PipelineSpec, expected: int, what: str) -> None:
    """SystemExit unless the sink holds `expected` rows, every (partition, offset) once."""
    table = read_back(spec)
    kafka = table.column("kafka").combine_chunks()
    partition = pc.cast(pc.struct_field(kafka, "partition"), arrow.int64())
    offset = pc.struct_field(kafka, "offset")
    distinct = pc.count_distinct(pc.add(pc.multiply(partition, 1 << 40), offset)).as_py()
    if table.num_rows != expected or distinct != expected:
        raise SystemExit(f"{what}: {table.num_rows} rows, {distinct} distinct offsets read back, not {expected}")


def table_history(spec: PipelineSpec) -> str:
    """The sink and quarantine tables' history: versions (Delta) or snapshots and metadata (Iceberg), data files."""
    if spec.table_format == "delta":
        delta = DeltaTable(spec.sink_path)
        checkpoints = [name for name in os.listdir(f"{spec.sink_path}/_delta_log") if ".checkpoint." in name]
        text = f"sink version {delta.version()}, {len(delta.file_uris())} files, {len(checkpoints)} checkpoints; "
        if not DeltaTable.is_deltatable(spec.quarantine_root):
            return text + "no quarantine table (nothing quarantined)"
        quarantine = DeltaTable(spec.quarantine_root)
        return text + f"quarantine version {quarantine.version()}, {len(quarantine.file_uris())} files"
    if spec.table_format == "iceberg":
        catalog = SqlCatalog("cohort", uri=spec.iceberg_catalog_url, warehouse=f"file://{spec.sink_path}")
        parts = []
        for name, identifier in zip(("sink", "quarantine"), spec.iceberg_identifiers, strict=True):
            if not catalog.table_exists(identifier):
                parts.append(f"no {name} table")
                continue
            table = catalog.load_table(identifier)
            metadata = table.metadata_location.removeprefix("file://")
            size = os.path.getsize(metadata) if os.path.exists(metadata) else -1
            parts.append(
                f"{name} {len(table.snapshots())} snapshots, {len(table.inspect.files())} files, "
                f"{len(table.metadata.metadata_log)} metadata-log entries, metadata JSON {size / 1024:.0f} KiB"
            )
        return "; ".join(parts)
    return ""


# -- measuring -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Landing:
    """One timed `run_batch`: wall and CPU seconds (driver + JVM + Python workers; driver alone; broker), the
    table commits it made."""

    fmt: str
    label: str
    seconds: float
    cpu_s: float
    driver_cpu_s: float
    broker_cpu_s: float
    load: float
    result: BatchResult
    commits: tuple[CommitCall, ...] = field(default=())
    opens: int = 0

    def stage(self, *names: str) -> float:
        return sum(self.result.stage_seconds.get(name, 0.0) for name in names)

    @property
    def table_commit_s(self) -> float:
        """The batch's two table commits (quarantine, sink), the reconcile step's fences left out."""
        return sum(c.seconds for c in self.commits if c.batch)

    def table_s(self, table: str) -> float:
        return sum(c.seconds for c in self.commits if c.batch and c.table == table)


@dataclass
class Bench:
    """What every landing shares: the session, the coordinator, the broker's config, the commit timer."""

    spark: Any
    jvm_pid: int
    coordinator: Coordinator
    config: Mapping[str, Any]
    mirror: KafkaOffsetMirror
    calls: list[CommitCall]
    opens: dict[str, int]

    def land(
        self, fmt: str, label: str, spec: PipelineSpec, partitions: Sequence[TopicPartition], ledger: OffsetLedger
    ) -> Landing:
        group = getattr(ledger, "group", None)
        assert isinstance(group, str)
        load = os.getloadavg()[0]
        first_call, opens = len(self.calls), self.opens.get(fmt, 0)
        jvm, everything, own = _tree_cpu_s(self.jvm_pid), _tree_cpu_s(os.getpid()), _own_cpu_s()
        driver = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        result = run_batch(self.spark, spec, self.config, partitions, ledger, group=group, mirror=self.mirror)
        seconds = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF)
        driver_s = after.ru_utime + after.ru_stime - driver.ru_utime - driver.ru_stime
        jvm = _tree_cpu_s(self.jvm_pid) - jvm
        broker_s = _tree_cpu_s(os.getpid()) - everything - jvm - (_own_cpu_s() - own)
        if result.quarantined:
            raise SystemExit(f"{fmt} {label}: {result.quarantined} records quarantined")
        if result.mirror_error:
            raise SystemExit(f"{fmt} {label}: mirror failed: {result.mirror_error}")
        commits = tuple(self.calls[first_call:])
        opened = self.opens.get(fmt, 0) - opens
        return Landing(fmt, label, seconds, jvm + driver_s, driver_s, broker_s, load, result, commits, opened)


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summary_ms(values: Sequence[float]) -> dict[str, float]:
    """Median, p90 and the medians of the first and last EDGE values, in milliseconds."""
    ms = [v * 1000 for v in values]
    return {
        "median": round(statistics.median(ms), 1),
        "p90": round(percentile(ms, 90), 1),
        "first10_median": round(statistics.median(ms[:EDGE]), 1),
        "last10_median": round(statistics.median(ms[-EDGE:]), 1),
    }


def _fmt_ms(summary: Mapping[str, float]) -> str:
    return (
        f"median {summary['median']:7.1f}  p90 {summary['p90']:7.1f}  first {EDGE} {summary['first10_median']:7.1f}  "
        f"last {EDGE} {summary['last10_median']:7.1f} ms"
    )


def rotated(step: int) -> tuple[str, ...]:
    shift = step % len(FORMATS)
    return FORMATS[shift:] + FORMATS[:shift]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200k records instead of 1M")
    parser.add_argument("--records", type=int, default=None, help="records of the rate part (overrides --quick)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (after one warm-up landing per format)")
    parser.add_argument("--small-batches", type=int, default=60, help="small batches per format (commit latency)")
    parser.add_argument("--small-records", type=int, default=1_000, help="records per small batch")
    parser.add_argument(
        "--commits", type=int, default=None, help="only: N one-file commits per format, with and without retention"
    )
    args = parser.parse_args()
    if args.commits is not None:  # the store-level retention run (benchmarks.table_commits), nothing else
        from benchmarks.table_commits import main as commits_main

        commits_main(["--commits", str(args.commits)])
        return
    count = args.records or (200_000 if args.quick else 1_000_000)
    per_1m = 1_000_000 / count
    began = time.perf_counter()

    with (
        EmbeddedBroker() as broker,
        tempfile.TemporaryDirectory(prefix="cohort-tables-") as tmp,
        timing_table_commits() as calls,
        counting_table_opens() as opens,
    ):
        config = {"bootstrap.servers": broker.bootstrap_servers}
        create_topic(config, TOPIC, args.partitions)
        create_topic(config, SMALL_TOPIC, args.partitions)
        started = time.perf_counter()
        produce(config, TOPIC, records(0, count, args.partitions))
        produce_s = time.perf_counter() - started

        started = time.perf_counter()
        spark = build_session(app_name="cohort-tables-bench")
        spark.sparkContext.setLogLevel("ERROR")
        # start the Python worker pool: part of starting Spark, not of any batch
        spark.range(2, numPartitions=2).mapInArrow(lambda batches: batches, "id long").count()
        startup_s = time.perf_counter() - started
        gateway: Any = spark.sparkContext._jvm
        bench = Bench(
            spark,
            int(gateway.java.lang.ProcessHandle.current().pid()),
            Coordinator.from_url(f"sqlite:///{tmp}/cohort.db"),
            config,
            KafkaOffsetMirror(config),
            calls,
            opens,
        )

        # 1. the rate: the whole topic in one batch per landing
        partitions = [TopicPartition(TOPIC, p) for p in range(args.partitions)]
        check_s: dict[str, list[float]] = {fmt: [] for fmt in FORMATS}

        def timed(fmt: str, label: str) -> Landing:
            spec = spec_for(fmt, f"{tmp}/lake_{fmt}_{label}")
            group = f"{GROUP}-{fmt}-{label}"
            landing = bench.land(fmt, label, spec, partitions, bench.coordinator.standalone_ledger(group))
            if landing.result.records != count:
                raise SystemExit(f"{fmt} {label}: {landing.result.records} records landed, not {count}")
            started = time.perf_counter()
            check_sink(spec, count, f"{fmt} {label}")
            check_s[fmt].append(time.perf_counter() - started)
            return landing

        warmups = [timed(fmt, "warmup") for fmt in FORMATS]
        landings: list[Landing] = []
        for repeat in range(args.repeats):
            landings.extend(timed(fmt, f"run{repeat}") for fmt in rotated(repeat))
        by_format = {fmt: [run for run in landings if run.fmt == fmt] for fmt in FORMATS}

        # 2. commit latency: small batches into the same sinks, one group per format on the same topic
        small_partitions = [TopicPartition(SMALL_TOPIC, p) for p in range(args.partitions)]
        small_specs = {fmt: spec_for(fmt, f"{tmp}/small_{fmt}") for fmt in FORMATS}
        small_ledgers = {fmt: bench.coordinator.standalone_ledger(f"{GROUP}-small-{fmt}") for fmt in FORMATS}
        small: dict[str, list[Landing]] = {fmt: [] for fmt in FORMATS}
        small_started = time.perf_counter()
        for step in range(args.small_batches):
            produce(config, SMALL_TOPIC, records(step * args.small_records, args.small_records, args.partitions))
            for fmt in rotated(step):
                landing = bench.land(fmt, f"small{step}", small_specs[fmt], small_partitions, small_ledgers[fmt])
                if landing.result.records != args.small_records:
                    raise SystemExit(
                        f"{fmt} small batch {step}: {landing.result.records} records, not {args.small_records}"
                    )
                small[fmt].append(landing)
        small_s = time.perf_counter() - small_started
        small_total = args.small_batches * args.small_records
        for fmt in FORMATS:
            check_sink(small_specs[fmt], small_total, f"{fmt} small batches")
        histories = {fmt: table_history(small_specs[fmt]) for fmt in TABLE_FORMATS}
        spark.stop()
        bench.coordinator.close()
        load_end = os.getloadavg()[0]

    median_s = {fmt: statistics.median(r.seconds for r in by_format[fmt]) for fmt in FORMATS}
    median_cpu = {fmt: statistics.median(r.cpu_s for r in by_format[fmt]) for fmt in FORMATS}
    median_driver = {fmt: statistics.median(r.driver_cpu_s for r in by_format[fmt]) for fmt in FORMATS}
    rate = {fmt: count / median_s[fmt] for fmt in FORMATS}

    print(f"records                 {count:>12,} over {args.partitions} partitions (produced in {produce_s:.1f} s)")
    print(f"spark start-up          {startup_s:>12.2f} s (session + Python worker pool)")
    print(
        "landings (rate, wall s, CPU s per 1M: driver+JVM+workers / driver alone / broker; table commits "
        "quarantine + sink; load before):"
    )
    for run in [*warmups, *landings]:
        tables = f"commits {run.table_s('quarantine'):5.2f} + {run.table_s('sink'):5.2f} s" if run.commits else ""
        print(
            f"  {run.fmt:<7} {run.label:<6} {count / run.seconds:>10,.0f} records/s  {run.seconds:6.2f} s  "
            f"{run.cpu_s * per_1m:5.1f} / {run.driver_cpu_s * per_1m:4.2f} / {run.broker_cpu_s * per_1m:4.1f} CPU s  "
            f"{tables:<27} load {run.load:4.2f}"
        )
    for fmt in FORMATS:
        middle = sorted(by_format[fmt], key=lambda r: r.seconds)[len(by_format[fmt]) // 2]
        stages = ", ".join(f"{k} {v:.2f}" for k, v in middle.result.stage_seconds.items())
        print(
            f"{fmt:<7} (median of {len(by_format[fmt])}) {rate[fmt]:>10,.0f} records/s  ({median_s[fmt]:.2f} s, "
            f"{median_cpu[fmt] * per_1m:.1f} CPU s per 1M, driver {median_driver[fmt] * per_1m:.2f}); "
            f"stages of the median run: {stages}"
        )
        print(f"          read back with the format's reader in {statistics.median(check_s[fmt]):.2f} s (median)")
    rounds = {
        fmt: [round(p.seconds / t.seconds, 2) for p, t in zip(by_format["parquet"], by_format[fmt], strict=True)]
        for fmt in TABLE_FORMATS
    }
    for fmt in TABLE_FORMATS:
        print(f"ratio {fmt}/parquet  {rate[fmt] / rate['parquet']:>12.2f}  (per round: {rounds[fmt]})")

    print(
        f"small batches           {args.small_batches} x {args.small_records:,} records over {args.partitions} "
        f"partitions per format ({small_s:.1f} s for all)"
    )
    commit_ms: dict[str, dict[str, float]] = {}
    reconcile_ms: dict[str, dict[str, float]] = {}
    for fmt in FORMATS:
        runs = small[fmt]
        loads = [r.load for r in runs]
        print(
            f"  {fmt}: run_batch wall {_fmt_ms(summary_ms([r.seconds for r in runs]))}  (load average before: "
            f"first {EDGE} {statistics.median(loads[:EDGE]):.2f}, last {EDGE} {statistics.median(loads[-EDGE:]):.2f})"
        )
        if fmt == "parquet":
            commit_ms[fmt] = summary_ms([r.stage("commit", "publish") for r in runs])
            print(f"    commit + publish stages  {_fmt_ms(commit_ms[fmt])}")
            continue
        commit_ms[fmt] = summary_ms([r.table_commit_s for r in runs])
        reconcile_ms[fmt] = summary_ms([r.stage("reconcile") for r in runs])
        fences = sum(1 for r in runs for c in r.commits if not c.batch)
        print(f"    table commits (q + sink) {_fmt_ms(commit_ms[fmt])}")
        for table in ("quarantine", "sink"):
            print(f"      {table:<10} table      {_fmt_ms(summary_ms([r.table_s(table) for r in runs]))}")
        print(f"    commit stage             {_fmt_ms(summary_ms([r.stage('commit') for r in runs]))}")
        print(f"    reconcile stage          {_fmt_ms(reconcile_ms[fmt])}")
        print(f"    plan stage               {_fmt_ms(summary_ms([r.stage('plan') for r in runs]))}")
        print(
            f"    first batch: commits {runs[0].table_commit_s * 1000:.1f} ms, reconcile "
            f"{runs[0].stage('reconcile') * 1000:.1f} ms; reconcile-step commits (fences) over all batches: {fences}"
        )
        print(
            f"    full table loads per batch (both tables): {statistics.median(r.opens for r in runs):.0f} "
            f"(min {min(r.opens for r in runs)}, max {max(r.opens for r in runs)}); in a 1-batch landing: "
            f"{statistics.median(r.opens for r in by_format[fmt]):.0f}"
        )
        print(f"    at the end: {histories[fmt]}")
    print(f"load average (1 min)    {load_end:>12.2f} at the end ({os.cpu_count()} cores)")
    print(f"benchmark wall time     {time.perf_counter() - began:>12.1f} s")
    result = {
        "records": count,
        "parquet_rate": round(rate["parquet"]),
        "delta_rate": round(rate["delta"]),
        "iceberg_rate": round(rate["iceberg"]),
        "ratio_delta_vs_parquet": round(rate["delta"] / rate["parquet"], 3),
        "ratio_iceberg_vs_parquet": round(rate["iceberg"] / rate["parquet"], 3),
        "cpu_s_per_1m": {fmt: round(median_cpu[fmt] * per_1m, 2) for fmt in FORMATS},
        "commit_ms": commit_ms,
        "reconcile_ms": reconcile_ms,
        "spark_startup_s": round(startup_s, 2),
        "rates": {fmt: [round(count / r.seconds) for r in by_format[fmt]] for fmt in FORMATS},
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
