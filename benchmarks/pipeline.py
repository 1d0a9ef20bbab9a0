"""Pipeline throughput: a plain confluent-kafka consumer vs Cohort's end-to-end batch, in one run.

On the embedded Tansu broker: produce N JSON records over 8 partitions (batched), read them all with a
single plain consumer (the raw rate), start Spark (timed separately), then run one `run_batch` over the
8 partitions: read (mapInArrow + librdkafka driven from C, cohort.pipelines.tasks.native_reader), decode (msgspec)
and validate (the pandera model as Arrow kernels) in the reading tasks, write Parquet (pyarrow, from the same
tasks), check counts, commit to the ledger (SQLite coordinator) and mirror to Kafka.
One record in 1,000 is malformed, so the quarantine path runs too. The headline pipeline figure is the
JVM's first batch (JIT warm-up included); the same batch is then run again (fresh group and sink) to
show the warm-JVM rate.

Usage:
    python -m benchmarks.pipeline            # 1M records
    python -m benchmarks.pipeline --quick    # 200k records

The last line printed is one JSON object: {"records", "raw_rate", "tuned_raw_rate", "pipeline_rate",
"ratio", "ratio_vs_tuned", "cpu_s_per_1m", "spark_startup_s"}. `raw_rate` is the plain consumer with
librdkafka's default settings and `ratio` the pipeline's rate over it; `tuned_raw_rate` is the same consumer
with the one setting the pipeline's readers change (fetch.queue.backoff.ms) and `ratio_vs_tuned` its seconds
over the pipeline's. Both ratios and `cpu_s_per_1m` (CPU seconds of the whole process tree: driver, JVM,
Python workers, per 1M records) are of the JVM's first batch. Both raw consumers touch every value.
`warm_cpu_s_per_1m` is the second batch's, and `stage_cpu_s_per_1m` breaks it down (benchmarks/stages.py: read,
decode, check, write and digest redone one by one in this process over the same records, and the batch's commit);
`read_python_cpu_s_per_1m` is the same read through confluent-kafka's Python consumer (the peer of the C read),
`decode_msgspec_cpu_s_per_1m` the same decoding with msgspec alone (the peer of the C fast path), and
`reference_loop_cpu_s` a fixed pure-Python loop's CPU seconds, to compare runs taken on different days.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pandera.pyspark as pa
import pyspark.sql.types as T
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from benchmarks.stages import PEERS, reference_cpu, stage_cpu
from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.devtools.embedded_broker import EmbeddedBroker
from cohort.devtools.topics import create_topic, produce
from cohort.pipelines import KafkaOffsetMirror, PipelineSpec, build_session, run_batch
from cohort.pipelines.tasks.reader import READER_DEFAULTS, OffsetSpan

TOPIC = "bench-events"
GROUP = "bench-pipeline"
SCHEMA = T.StructType(
    [
        T.StructField("id", T.LongType(), nullable=False),
        T.StructField("user", T.StringType()),
        T.StructField("amount", T.DoubleType()),
        T.StructField("country", T.StringType()),
        T.StructField("ts", T.LongType()),
    ]
)


class Event(pa.DataFrameModel):
    """The benchmark's validation: a non-negative id, a bounded amount, a known country."""

    id: T.LongType() = pa.Field(ge=0)  # type: ignore[valid-type]
    amount: T.DoubleType() = pa.Field(ge=0, lt=10_000)  # type: ignore[valid-type]
    country: T.StringType() = pa.Field(isin=["FR", "DE", "ES", "IT"], nullable=True)  # type: ignore[valid-type]


def events(count: int, partitions: int) -> Iterator[tuple[int, bytes, bytes]]:
    countries = ["FR", "DE", "ES", "IT"]
    for i in range(count):
        if i % 1000 == 999:
            value = b'{"id": "not-a-number"'
        else:
            value = json.dumps(
                {
                    "id": i,
                    "user": f"user-{i % 5000}",
                    "amount": (i % 997) * 1.5,
                    "country": countries[i % 4],
                    "ts": 1_700_000_000_000 + i,
                }
            ).encode()
        yield i % partitions, f"key-{i}".encode(), value


def _own_cpu_s() -> float:
    """This process's own CPU seconds plus its reaped children's, from /proc (the clock _tree_cpu_s uses)."""
    with open(f"/proc/{os.getpid()}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def tree_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of a process and each of its live descendants (with their reaped children), by pid (Linux)."""

    def stat(p: int) -> list[str]:
        with open(f"/proc/{p}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()

    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                children.setdefault(int(stat(int(entry))[1]), []).append(int(entry))
            except OSError:
                continue
    found, stack, tick = {}, [pid], os.sysconf("SC_CLK_TCK")
    while stack:
        current = stack.pop()
        try:
            found[current] = sum(int(x) for x in stat(current)[11:15]) / tick
        except OSError:
            continue
        stack.extend(children.get(current, []))
    return found


def _tree_cpu_s(pid: int) -> float:
    """CPU seconds of a process and its live descendants (plus reaped children), from /proc (Linux)."""
    return sum(tree_cpu(pid).values())


def raw_consume(
    config: Mapping[str, Any], partitions: int, count: int, settings: Mapping[str, Any], topic: str = TOPIC
) -> tuple[float, float]:
    """(seconds, CPU seconds) for one plain consumer to read `count` records of `topic`, touching each value."""
    consumer = Consumer({**config, "group.id": f"bench-raw-{topic}", "enable.auto.commit": False, **settings})
    started, cpu = time.perf_counter(), time.process_time()
    consumer.assign([KafkaTopicPartition(topic, p, 0) for p in range(partitions)])
    remaining, size = count, 0
    while remaining:
        messages = consumer.consume(min(10_000, remaining), 10.0)
        if not messages:
            raise RuntimeError(f"raw consumer stalled with {remaining} records left")
        for message in messages:
            if message.error() is not None:
                raise RuntimeError(f"raw consumer error: {message.error()}")
            size += len(message.value() or b"")
        remaining -= len(messages)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    consumer.close()
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200k records instead of 1M")
    parser.add_argument("--records", type=int, default=None, help="number of records (overrides --quick)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--java-options", default=None, help="extra JVM options for the Spark driver (experiments)")
    args = parser.parse_args()
    count = args.records or (200_000 if args.quick else 1_000_000)

    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="cohort-bench-") as tmp:
        config = {"bootstrap.servers": broker.bootstrap_servers}
        create_topic(config, TOPIC, args.partitions)
        started = time.perf_counter()
        produce(config, TOPIC, events(count, args.partitions))
        produce_s = time.perf_counter() - started

        raw_s, raw_cpu = raw_consume(config, args.partitions, count, {})
        tuned = {"fetch.queue.backoff.ms": READER_DEFAULTS["fetch.queue.backoff.ms"]}
        raw_tuned_s, raw_tuned_cpu = raw_consume(config, args.partitions, count, tuned)

        started = time.perf_counter()
        conf = {"spark.driver.extraJavaOptions": args.java_options} if args.java_options else None
        spark = build_session(app_name="cohort-bench", conf=conf)
        spark.sparkContext.setLogLevel("ERROR")
        # start the Python worker pool: part of starting Spark, not of any batch
        spark.range(2, numPartitions=2).mapInArrow(lambda batches: batches, "id long").count()
        startup_s = time.perf_counter() - started

        jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        coordinator = Coordinator.from_url(f"sqlite:///{tmp}/cohort.db")
        mirror = KafkaOffsetMirror(config)
        partitions = [TopicPartition(TOPIC, p) for p in range(args.partitions)]
        runs = []
        for name in ("cold", "warm"):  # the same records again, for a fresh group and sink, in the same JVM
            spec = PipelineSpec(sink_path=f"{tmp}/lake-{name}", value_schema=SCHEMA, model=Event)
            ledger = coordinator.standalone_ledger(f"{GROUP}-{name}")
            load, cpu = os.getloadavg()[0], _tree_cpu_s(jvm_pid) + time.process_time()
            started = time.perf_counter()
            result = run_batch(spark, spec, config, partitions, ledger, group=f"{GROUP}-{name}", mirror=mirror)
            cpu = _tree_cpu_s(jvm_pid) + time.process_time() - cpu
            runs.append((time.perf_counter() - started, result, load, cpu))
            if result.records + result.quarantined != count or result.quarantined != count // 1000:
                raise SystemExit(f"counts do not add up: {result.records} + {result.quarantined} != {count}")
            if result.mirror_error:
                raise SystemExit(f"mirror failed: {result.mirror_error}")
        spark.stop()
        coordinator.close()
        spans = [OffsetSpan(p.topic, p.partition, p.from_offset, p.until_offset) for p in runs[1][1].partitions]
        stages_spec = PipelineSpec(sink_path=f"{tmp}/lake-stages", value_schema=SCHEMA, model=Event)
        by_stage = stage_cpu(stages_spec, config, spans)

    (pipeline_s, result, load, cpu), (warm_s, warm_result, warm_load, warm_cpu) = runs
    raw_rate, pipeline_rate = count / raw_s, count / pipeline_s
    print(f"records                 {count:>12,} over {args.partitions} partitions (produced in {produce_s:.1f} s)")
    print(f"raw consumer (default)  {raw_rate:>12,.0f} records/s  ({raw_s:.2f} s, {raw_cpu:.1f} CPU s)")
    print(
        f"raw consumer (tuned)    {count / raw_tuned_s:>12,.0f} records/s  "
        f"({raw_tuned_s:.2f} s, {raw_tuned_cpu:.1f} CPU s)"
    )
    print(f"spark start-up          {startup_s:>12.2f} s (session + Python worker pool)")
    print(
        f"pipeline end to end     {pipeline_rate:>12,.0f} records/s  "
        f"({pipeline_s:.2f} s, {cpu:.1f} CPU s, first batch of the JVM)"
    )
    for stage, seconds in result.stage_seconds.items():
        rate = f"{count / seconds:>12,.0f} records/s" if seconds > 0 else ""
        print(f"  {stage:<21} {seconds:>8.2f} s  {rate}")
    print(
        f"pipeline, warm JVM      {count / warm_s:>12,.0f} records/s  "
        f"({warm_s:.2f} s, {warm_cpu:.1f} CPU s, second batch)"
    )
    print(
        f"ratio pipeline/raw      {pipeline_rate / raw_rate:>12.2f}  (vs tuned raw: {raw_tuned_s / pipeline_s:.2f}; "
        f"warm JVM: {raw_s / warm_s:.2f} and {raw_tuned_s / warm_s:.2f})"
    )
    print(
        f"load average (1 min)    {load:>12.2f} before the first batch, {warm_load:.2f} before the second "
        f"({os.cpu_count()} cores)"
    )
    per_1m = 1_000_000 / count
    peers = {name: by_stage.pop(name) for name in PEERS}
    by_stage["commit"] = warm_result.stage_seconds.get("commit", 0.0)  # the ledger's transaction: CPU ~ wall
    accounted = sum(by_stage.values())
    reference = reference_cpu()
    print("CPU by stage, per 1M records (the tasks' stages redone one by one in one process; commit: the batch's):")
    for stage, seconds in by_stage.items():
        print(f"  {stage:<21} {seconds * per_1m:>8.2f} CPU s")
    print(f"  {'sum':<21} {accounted * per_1m:>8.2f} CPU s")
    print(
        f"  {'the rest (Spark)':<21} {(warm_cpu - accounted) * per_1m:>8.2f} CPU s  "
        f"(the warm batch's {warm_cpu * per_1m:.2f} less the sum: scheduling, Python workers, the driver's plan)"
    )
    print(
        f"  {'peer: read (Python)':<21} {peers['read_python'] * per_1m:>8.2f} CPU s  "
        f"(confluent-kafka's Python consumer; the C one: {by_stage['read'] * per_1m:.2f})"
    )
    print(
        f"  {'peer: decode (msgspec)':<21} {peers['decode_msgspec'] * per_1m:>8.2f} CPU s  "
        f"(every record through msgspec; the C fast path: {by_stage['decode'] * per_1m:.2f})"
    )
    print(f"machine reference       {reference:>12.2f} CPU s  (a pure-Python loop of 10M additions, best of 3)")
    summary = {
        "records": count,
        "raw_rate": round(raw_rate),
        "tuned_raw_rate": round(count / raw_tuned_s),
        "pipeline_rate": round(pipeline_rate),
        "ratio": round(pipeline_rate / raw_rate, 3),
        "ratio_vs_tuned": round(raw_tuned_s / pipeline_s, 3),
        "cpu_s_per_1m": round(cpu * 1_000_000 / count, 2),
        "spark_startup_s": round(startup_s, 2),
        "warm_cpu_s_per_1m": round(warm_cpu * per_1m, 2),
        "stage_cpu_s_per_1m": {stage: round(seconds * per_1m, 2) for stage, seconds in by_stage.items()},
        "read_python_cpu_s_per_1m": round(peers["read_python"] * per_1m, 2),
        "decode_msgspec_cpu_s_per_1m": round(peers["decode_msgspec"] * per_1m, 2),
        "reference_loop_cpu_s": round(reference, 3),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
