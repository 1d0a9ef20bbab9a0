"""User transforms: the plain batch against the same batch with a transform, in one run, one warm JVM.

On the embedded Tansu broker: produce N JSON records over 8 partitions (one in 1,000 malformed: the quarantine
runs too), start Spark, warm the JVM with one batch of each kind, then run `run_batch` over all partitions
`--repeats` times per case, interleaved, each on a fresh group and sink:

- `plain`: no transform; the reading tasks decode, check and write both outputs (pyarrow);
- `light`: a Spark transform, two `withColumn` (a derived amount, a lower-cased string): the reading tasks hand
  the valid rows to the JVM as Arrow, Spark transforms them and hands them back to Python tasks as Arrow, which
  write the sink (pyarrow);
- `heavy`: a Spark transform, a broadcast join with a small dimension table (4 countries) and a filter;
- `identity`: a Spark transform that changes nothing: the rows' trip through the JVM alone, the floor of any
  Spark transform;
- `light-arrow`, `heavy-arrow`: the same two transforms as Arrow transforms (`PipelineSpec.arrow_transform`),
  applied by the reading tasks before they write: nothing crosses into the JVM;
- `persisted` (with `--persisted`): the light transform on the Spark-written path the batch takes for a root
  only Hadoop reaches (`file:` URI): checked rows cross into the JVM, are cached, and Spark writes both outputs.

Per case: the median records/s and CPU seconds per 1M records, split into the driver (this process), the JVM and
the Python workers (the JVM's descendants), the ratios to `plain`, and the median wall seconds per stage.

Usage:
    python -m benchmarks.transform                 # 1M records, 3 repeats
    python -m benchmarks.transform --records 200000 --repeats 3 --persisted

The last line printed is one JSON object: per case its rate and CPU figures, plus `<case>_rate_ratio` and
`<case>_cpu_ratio` (against `plain`) for each transform case.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from benchmarks.pipeline import SCHEMA, Event, events, tree_cpu
from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.devtools.embedded_broker import EmbeddedBroker
from cohort.devtools.topics import create_topic, produce
from cohort.pipelines import PipelineSpec, build_session, run_batch
from cohort.pipelines.batch.results import BatchResult

TOPIC = "bench-transform"
COUNTRIES = [("FR", "France", "west"), ("DE", "Germany", "central"), ("ES", "Spain", "south"), ("IT", "Italy", "south")]


def light(frame: DataFrame) -> DataFrame:
    """Two columns: a derived amount and a lower-cased string."""
    return frame.withColumn("amount_cents", (F.col("amount") * 100).cast("long")).withColumn(
        "user_lc", F.lower(F.col("user"))
    )


def identity(frame: DataFrame) -> DataFrame:
    """No change: what any Spark transform costs before it computes anything (the rows' trip through the JVM)."""
    return frame


def light_arrow(rows: pa.Table) -> pa.Table:
    """`light` as an Arrow transform: the same two columns, computed by the reading tasks."""
    cents = pc.cast(pc.trunc(pc.multiply(rows.column("amount"), 100)), pa.int64())
    return rows.append_column("amount_cents", cents).append_column("user_lc", pc.utf8_lower(rows.column("user")))


def heavy_arrow(rows: pa.Table) -> pa.Table:
    """`heavy` as an Arrow transform: the 4-row dimension looked up by country (a broadcast join), the filter."""
    codes = pa.array([c for c, _, _ in COUNTRIES])
    at = pc.index_in(rows.column("country"), value_set=codes)
    for i, name in ((1, "country_name"), (2, "region")):
        rows = rows.append_column(name, pa.array([row[i] for row in COUNTRIES]).take(at))
    rows = rows.filter(pc.greater_equal(rows.column("amount"), 0))
    return rows.append_column("amount_cents", pc.cast(pc.trunc(pc.multiply(rows.column("amount"), 100)), pa.int64()))


def heavy_transform(spark: Any) -> Callable[[DataFrame], DataFrame]:
    """A broadcast join with a 4-row dimension table, then a filter every valid record passes (amount >= 0)."""
    dimension = spark.createDataFrame(COUNTRIES, "country string, country_name string, region string")

    def heavy(frame: DataFrame) -> DataFrame:
        joined = frame.join(F.broadcast(dimension), on="country", how="left")
        return joined.filter(F.col("amount") >= 0).withColumn("amount_cents", (F.col("amount") * 100).cast("long"))

    return heavy


@dataclass(frozen=True)
class Run:
    """One batch: wall seconds, CPU seconds of the driver, the JVM and the Python workers, and its result."""

    seconds: float
    driver: float
    jvm: float
    workers: float
    result: BatchResult

    @property
    def cpu(self) -> float:
        return self.driver + self.jvm + self.workers


def _split_cpu(jvm_pid: int) -> tuple[float, float, float]:
    """(this process, the JVM, its descendants: the Python workers) CPU seconds so far."""
    tree = tree_cpu(jvm_pid)
    jvm = tree.pop(jvm_pid, 0.0)
    return time.process_time(), jvm, sum(tree.values())


def run_once(spark: Any, jvm_pid: int, spec: PipelineSpec, config: Mapping[str, Any], ledger: Any, count: int) -> Run:
    """One batch over every partition of TOPIC, with its CPU split; fails unless every record is accounted for."""
    partitions = [TopicPartition(TOPIC, p) for p in range(8)]
    before = _split_cpu(jvm_pid)
    started = time.perf_counter()
    result = run_batch(spark, spec, config, partitions, ledger)
    seconds = time.perf_counter() - started
    after = _split_cpu(jvm_pid)
    if result.records + result.quarantined != count or result.quarantined != count // 1000:
        raise SystemExit(f"counts do not add up: {result.records} + {result.quarantined} != {count}")
    driver, jvm, workers = (b - a for a, b in zip(before, after, strict=True))
    return Run(seconds, driver, jvm, workers, result)


def _median(runs: list[Run], value: Callable[[Run], float]) -> float:
    return statistics.median(value(r) for r in runs)


def _stage_wall(stage: str) -> Callable[[Run], float]:
    return lambda run: run.result.stage_seconds.get(stage, 0.0)


def report(name: str, runs: list[Run], count: int, plain: list[Run] | None) -> dict[str, Any]:
    """Print one case's medians (and its ratios to `plain`); return them for the JSON line."""
    per_1m = 1_000_000 / count
    rate = _median(runs, lambda r: count / r.seconds)
    cpu = _median(runs, lambda r: r.cpu) * per_1m
    figures: dict[str, Any] = {
        "rate": round(rate),
        "cpu_s_per_1m": round(cpu, 2),
        "driver_cpu_s_per_1m": round(_median(runs, lambda r: r.driver) * per_1m, 2),
        "jvm_cpu_s_per_1m": round(_median(runs, lambda r: r.jvm) * per_1m, 2),
        "workers_cpu_s_per_1m": round(_median(runs, lambda r: r.workers) * per_1m, 2),
    }
    line = (
        f"{name:<10} {rate:>10,.0f} records/s  {cpu:5.2f} CPU s per 1M (driver {figures['driver_cpu_s_per_1m']:.2f}, "
        f"JVM {figures['jvm_cpu_s_per_1m']:.2f}, Python workers {figures['workers_cpu_s_per_1m']:.2f})"
    )
    if plain is not None:
        base_rate = _median(plain, lambda r: count / r.seconds)
        base_cpu = _median(plain, lambda r: r.cpu) * per_1m
        figures["rate_ratio"] = round(rate / base_rate, 3)
        figures["cpu_ratio"] = round(cpu / base_cpu, 3)
        line += f"  rate x{figures['rate_ratio']:.2f}, CPU x{figures['cpu_ratio']:.2f} of plain"
    print(line)
    stages = sorted({s for r in runs for s in r.result.stage_seconds})
    walls = {s: _median(runs, _stage_wall(s)) for s in stages}
    print("           wall s:  " + ", ".join(f"{s} {v:.2f}" for s, v in walls.items()))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--persisted", action="store_true", help="also the light transform on the persisted path")
    args = parser.parse_args()
    count = args.records

    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="cohort-bench-transform-") as tmp:
        config = {"bootstrap.servers": broker.bootstrap_servers}
        create_topic(config, TOPIC, 8)
        produce(config, TOPIC, events(count, 8))
        spark = build_session(app_name="cohort-bench-transform")
        spark.sparkContext.setLogLevel("ERROR")
        spark.range(2, numPartitions=2).mapInArrow(lambda batches: batches, "id long").count()
        jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        coordinator = Coordinator.from_url(f"sqlite:///{tmp}/cohort.db")
        transforms: dict[str, Any] = {
            "plain": None,
            "light": light,
            "heavy": heavy_transform(spark),
            "identity": identity,
            "light-arrow": light_arrow,
            "heavy-arrow": heavy_arrow,
        }
        roots = {name: f"{tmp}/{name}" for name in transforms}
        if args.persisted:
            transforms["persisted"] = light
            roots["persisted"] = f"file:{tmp}/persisted"
        runs: dict[str, list[Run]] = {name: [] for name in transforms}
        for round_ in range(args.repeats + 1):  # round 0 warms the JVM (JIT) for every case; not counted
            for name, transform in transforms.items():
                kind = "arrow_transform" if name.endswith("-arrow") else "transform"
                spec = PipelineSpec(
                    sink_path=f"{roots[name]}-{round_}", value_schema=SCHEMA, model=Event, **{kind: transform}
                )
                ledger = coordinator.standalone_ledger(f"bench-{name}-{round_}")
                run = run_once(spark, jvm_pid, spec, config, ledger, count)
                if round_:
                    runs[name].append(run)
        spark.stop()
        coordinator.close()

    print(f"records {count:,} over 8 partitions, {args.repeats} repeats per case (medians), one warm JVM")
    summary: dict[str, Any] = {"records": count, "repeats": args.repeats}
    for name in transforms:
        summary[name] = report(name, runs[name], count, None if name == "plain" else runs["plain"])
    for name in ("light", "heavy", "identity", "light-arrow", "heavy-arrow"):
        key = name.replace("-", "_")
        summary[f"{key}_rate_ratio"] = summary[name]["rate_ratio"]
        summary[f"{key}_cpu_ratio"] = summary[name]["cpu_ratio"]
    print(f"load average (1 min) {os.getloadavg()[0]:.2f} at the end ({os.cpu_count()} cores)")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
