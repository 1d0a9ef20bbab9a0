"""The table sinks on object storage: the same records landed into Delta Lake and Iceberg tables on an S3 API and on
the local disk, in one run.

On the embedded Tansu broker and the tests' S3 server (harness.s3_server: moto's S3 over HTTP on loopback, its
signatures checked; the AWS variables set before Spark starts, as a deployment sets them): produce N small JSON
records over 8 partitions (benchmarks.tables' records and spec), start Spark, then `run_batch` lands the whole topic
in one batch per landing, each with a fresh group and table (Iceberg: a SQLite catalog on the local disk for both).
One warm-up landing per case, then `--repeats` rounds; the four cases (delta/iceberg x local/s3) alternate, their
order rotated each round. Every landing is read back with the format's own reader (N rows, N distinct offsets).

Reported per case: records/s (median of the rounds), the median seconds of each stage of `run_batch`
(`BatchResult.stage_seconds`: where S3 costs more), and per format the S3/local ratio of the rates; the load
average before each landing. The S3 server is a Python process on the same two cores: its CPU is part of the
S3 figures (a real store's is not).

Usage:
    python -m benchmarks.object_store            # 1M records, 5 rounds
    python -m benchmarks.object_store --quick    # 200k records

The last line printed is one JSON object: {"records", "rates": {case: records/s}, "ratio_s3_vs_local":
{format: ratio}, "stages_s": {case: {stage: median s}}, "load": [...]}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.tables import SCHEMA, TableEvent, records
from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.devtools.embedded_broker import EmbeddedBroker
from cohort.devtools.topics import create_topic, produce
from cohort.pipelines import PipelineSpec, build_session, run_batch
from harness.s3_server import S3Server
from harness.tables import table_offsets

TOPIC = "bench-object-store"
CASES = (("delta", "local"), ("delta", "s3"), ("iceberg", "local"), ("iceberg", "s3"))


@dataclass(frozen=True)
class Landing:
    """One timed `run_batch`: its case, wall seconds, the stages' seconds and the load average before it."""

    case: str
    seconds: float
    stages: dict[str, float]
    load: float


def _case(fmt: str, where: str) -> str:
    return f"{fmt}-{where}"


def _spec(fmt: str, where: str, label: str, tmp: str, bucket: str) -> PipelineSpec:
    """The benchmark's spec for one landing: a fresh table under the local tmp or the bucket."""
    root = f"{tmp}/lake_{fmt}_{label}" if where == "local" else f"s3://{bucket}/lake_{fmt}_{label}"
    catalog = f"sqlite:///{tmp}/catalog_{where}_{label}.sqlite" if fmt == "iceberg" else None
    return PipelineSpec(
        sink_path=root, table_format=fmt, value_schema=SCHEMA, model=TableEvent, iceberg_catalog=catalog
    )


def _rotated(turn: int) -> list[tuple[str, str]]:
    shift = turn % len(CASES)
    return list(CASES[shift:] + CASES[:shift])


def _land(spark: Any, coordinator: Coordinator, config: dict[str, str], spec: PipelineSpec, case: str,
          label: str, partitions: list[TopicPartition], count: int) -> Landing:  # fmt: skip
    load = os.getloadavg()[0]
    ledger = coordinator.standalone_ledger(f"bench-os-{case}-{label}")
    started = time.perf_counter()
    result = run_batch(spark, spec, config, partitions, ledger)
    seconds = time.perf_counter() - started
    if result.records != count or result.quarantined:
        raise SystemExit(f"{case} {label}: {result.records} landed, {result.quarantined} quarantined, not {count}")
    offsets = table_offsets(spec)
    if len(offsets) != count or len(set(offsets)) != count:
        raise SystemExit(f"{case} {label}: {len(offsets)} rows read back ({len(set(offsets))} distinct), not {count}")
    return Landing(case, seconds, dict(result.stage_seconds), load)


def _report(count: int, landings: list[Landing], warmups: list[Landing]) -> dict[str, Any]:
    """Print the table of rates and stages; the JSON summary."""
    rates: dict[str, float] = {}
    stages: dict[str, dict[str, float]] = {}
    for fmt, where in CASES:
        case = _case(fmt, where)
        runs = [r for r in landings if r.case == case]
        rates[case] = round(statistics.median(count / r.seconds for r in runs))
        names = sorted({n for r in runs for n in r.stages})
        stages[case] = {n: round(statistics.median(r.stages.get(n, 0.0) for r in runs), 3) for n in names}
        warm = next(w for w in warmups if w.case == case)
        print(f"{case:14} {rates[case]:>10,} records/s  (warm-up {count / warm.seconds:,.0f})  stages: {stages[case]}")
    ratio = {fmt: round(rates[_case(fmt, "s3")] / rates[_case(fmt, "local")], 3) for fmt in ("delta", "iceberg")}
    for fmt, value in ratio.items():
        print(f"{fmt}: S3 / local = {value:.2f}x")
    return {
        "records": count,
        "rates": rates,
        "ratio_s3_vs_local": ratio,
        "stages_s": stages,
        "load": [round(r.load, 2) for r in landings],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200k records instead of 1M")
    parser.add_argument("--records", type=int, default=None, help="records per landing (overrides --quick)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (after one warm-up landing per case)")
    args = parser.parse_args()
    count = args.records or (200_000 if args.quick else 1_000_000)
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    with (
        S3Server() as server,
        EmbeddedBroker() as broker,
        tempfile.TemporaryDirectory(prefix="cohort-object-store-") as tmp,
    ):
        os.environ.update(server.environ())  # before Spark starts: its Python workers write the staged files
        bucket = server.create_bucket("bench-lake")
        config = {"bootstrap.servers": broker.bootstrap_servers}
        create_topic(config, TOPIC, args.partitions)
        produce(config, TOPIC, records(0, count, args.partitions))
        spark = build_session(app_name="cohort-object-store-bench")
        spark.sparkContext.setLogLevel("ERROR")
        spark.range(2, numPartitions=2).mapInArrow(lambda batches: batches, "id long").count()
        coordinator = Coordinator.from_url(f"sqlite:///{tmp}/cohort.db")
        partitions = [TopicPartition(TOPIC, p) for p in range(args.partitions)]

        def timed(fmt: str, where: str, label: str) -> Landing:
            spec = _spec(fmt, where, label, tmp, bucket)
            landing = _land(spark, coordinator, config, spec, _case(fmt, where), label, partitions, count)
            print(f"  {landing.case} {label}: {count / landing.seconds:,.0f} records/s (load {landing.load:.2f})")
            return landing

        warmups = [timed(fmt, where, "warmup") for fmt, where in CASES]
        landings = [timed(fmt, where, f"run{r}") for r in range(args.repeats) for fmt, where in _rotated(r)]
        summary = _report(count, landings, warmups)
        spark.stop()
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
