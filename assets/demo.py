"""`make demo`: the embedded path end to end, on embedded defaults.

Starts the embedded broker, creates a 4-partition topic, produces sample JSON events, reads every
partition's full offset range back through Spark (mapInArrow + confluent-kafka assign and bounded consume),
writes Parquet, and prints per-partition counts and offset ranges. Exits non-zero if any count disagrees.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import functions as F

from assignment import TopicPartition
from pipelines.kafka_client import create_topic, produce, watermarks
from pipelines.reader import OffsetSpan, read_spans
from pipelines.spark import build_session
from resources.embedded_broker import EmbeddedBroker

__all__ = ["DemoReport", "run_demo"]

TOPIC = "demo-events"
PARTITIONS = 4


@dataclass(frozen=True)
class PartitionReport:
    partition: int
    produced: int
    from_offset: int
    until_offset: int
    read: int
    min_offset: int | None
    max_offset: int | None

    @property
    def ok(self) -> bool:
        span = self.until_offset - self.from_offset
        return self.produced == self.read == span


@dataclass(frozen=True)
class DemoReport:
    partitions: list[PartitionReport]
    in_parquet: int
    seconds: float

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.partitions) and self.in_parquet == sum(p.produced for p in self.partitions)


def _events(count: int, seed: int = 7) -> list[tuple[int, bytes, bytes]]:
    rng = random.Random(seed)
    kinds = ["view", "click", "purchase", "refund"]
    records = []
    for i in range(count):
        user = f"user-{rng.randrange(500)}"
        event = {"event_id": i, "user": user, "kind": rng.choice(kinds), "amount": round(rng.uniform(1, 200), 2)}
        records.append((i % PARTITIONS, user.encode(), json.dumps(event).encode()))
    return records


def run_demo(events: int = 10_000, output: Path | None = None) -> DemoReport:
    """Run the demo and return what it saw; the caller decides how to print it."""
    started = time.monotonic()
    records = _events(events)
    produced = [sum(1 for p, _, _ in records if p == n) for n in range(PARTITIONS)]
    out = output or Path(tempfile.mkdtemp(prefix="cohort-demo-")) / "parquet"
    with EmbeddedBroker() as broker:
        config = {"bootstrap.servers": broker.bootstrap_servers}
        create_topic(config, TOPIC, PARTITIONS)
        produce(config, TOPIC, records)
        marks = watermarks(config, [TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        spark = build_session(app_name="cohort-demo", conf={"spark.ui.showConsoleProgress": "false"})
        spark.sparkContext.setLogLevel("ERROR")
        spans = [OffsetSpan(TOPIC, tp.partition, low, high) for tp, (low, high) in sorted(marks.items())]
        frame = read_spans(spark, config, spans)
        frame.write.mode("overwrite").partitionBy("partition").parquet(str(out))
        counts = (
            spark.read.parquet(str(out))
            .groupBy("partition")
            .agg(F.count("*").alias("n"), F.min("offset").alias("lo"), F.max("offset").alias("hi"))
            .collect()
        )
        stats = {row["partition"]: row for row in counts}
    reports = []
    for span in spans:
        row = stats.get(span.partition)
        reports.append(
            PartitionReport(
                partition=span.partition,
                produced=produced[span.partition],
                from_offset=span.from_offset,
                until_offset=span.until_offset,
                read=int(row["n"]) if row else 0,
                min_offset=int(row["lo"]) if row else None,
                max_offset=int(row["hi"]) if row else None,
            )
        )
    return DemoReport(reports, sum(r.read for r in reports), time.monotonic() - started)


def main() -> int:
    report = run_demo()
    print(f"{'PARTITION':>9} {'PRODUCED':>8} {'RANGE':>15} {'READ':>6} {'OFFSETS SEEN':>14}  OK")
    for p in report.partitions:
        seen = f"{p.min_offset}..{p.max_offset}" if p.min_offset is not None else "-"
        print(
            f"{p.partition:>9} {p.produced:>8} {f'[{p.from_offset}, {p.until_offset})':>15} {p.read:>6} "
            f"{seen:>14}  {'yes' if p.ok else 'NO'}"
        )
    print(
        f"total produced {sum(p.produced for p in report.partitions)}, in parquet {report.in_parquet}, "
        f"{report.seconds:.1f} s"
    )
    print(
        json.dumps(
            {"ok": report.ok, "produced": sum(p.produced for p in report.partitions), "in_sink": report.in_parquet}
        )
    )
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
