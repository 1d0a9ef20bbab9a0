"""Pipeline throughput: a plain confluent-kafka consumer vs Cohort's end-to-end batch, in one run, on each broker.

On the embedded Tansu broker and on Apache Kafka (`--broker`, default both; see benchmarks/brokers.py): produce N
JSON records over 8 partitions (batched), read them all with a single plain consumer (the raw rate), start Spark
(timed separately), then run one `run_batch` over the 8 partitions: read (mapInArrow + librdkafka driven from C,
cohort.pipelines.tasks.native_reader), decode (msgspec) and validate (the pandera model as Arrow kernels) in the
reading tasks, write Parquet (pyarrow, from the same tasks), check counts, commit to the ledger (SQLite coordinator)
and mirror to Kafka. One record in 1,000 is malformed, so the quarantine path runs too. The headline pipeline figure
is the JVM's first batch (JIT warm-up included); the same batch is then run again (fresh group and sink) to show the
warm-JVM rate.

With both brokers, each step runs on one broker then the other before the next step, Tansu first in one step and
Kafka first in the next (A B, B A, ...): produce, the plain consumer with the default settings, then tuned, then
Spark's start, the first batch, the second, then the stages redone. Each broker's Spark runs in a fresh process of
its own (`--spark-batches`, internal), both alive from their start to the end of the batches, so each broker's first
batch is the first of a fresh process and JVM, as when the benchmark ran on one broker, and the brokers' batches
still alternate. Before each of these Spark steps the benchmark waits (up to 10 s) until both Spark processes are
idle, so what one JVM still does after its step (the JIT compiling what it just ran) does not slow the other's.
Both brokers run throughout; the CPU figures leave out the broker's own process, shown apart
(`broker_cpu_s_per_1m`).

Usage:
    python -m benchmarks.pipeline                     # 1M records, on Tansu and on Kafka
    python -m benchmarks.pipeline --quick             # 200k records
    python -m benchmarks.pipeline --broker embedded   # one broker only (or kafka)

The last line printed is one JSON object: {"records", "raw_rate", "tuned_raw_rate", "pipeline_rate",
"ratio", "ratio_vs_tuned", "cpu_s_per_1m", "spark_startup_s", ...}, those of the first broker measured (the
embedded one unless `--broker kafka`), which `broker` names. `raw_rate` is the plain consumer with
librdkafka's default settings and `ratio` the pipeline's rate over it; `tuned_raw_rate` is the same consumer
with the one setting the pipeline's readers change (fetch.queue.backoff.ms) and `ratio_vs_tuned` its seconds
over the pipeline's. Both ratios and `cpu_s_per_1m` (CPU seconds of the whole process tree: driver, JVM,
Python workers, per 1M records) are of the JVM's first batch. Both raw consumers touch every value.
`warm_cpu_s_per_1m` is the second batch's (`warm_pipeline_rate` its rate), and `stage_cpu_s_per_1m` breaks it down
(benchmarks/stages.py: read, decode, check, write and digest redone one by one in this process over the same records,
and the batch's commit); `read_python_cpu_s_per_1m` is the same read through confluent-kafka's Python consumer (the
peer of the C read), `decode_msgspec_cpu_s_per_1m` the same decoding with msgspec alone (the peer of the C fast
path), `broker_cpu_s_per_1m` and `warm_broker_cpu_s_per_1m` the broker process's own CPU during each batch,
`produce_s` the produce time, `load` the load average before each batch, and `reference_loop_cpu_s` a fixed
pure-Python loop's CPU seconds, to compare runs taken on different days. `brokers` holds these figures for each
broker measured, and with both, `kafka_over_embedded` Kafka's over Tansu's for `pipeline_rate`, `cpu_s_per_1m`
(the headline), `warm_pipeline_rate`, `warm_cpu_s_per_1m`, `raw_rate`, `tuned_raw_rate` and `broker_cpu_s_per_1m`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandera.pyspark as pa
import pyspark.sql.types as T
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from benchmarks.brokers import (
    LABELS,
    add_broker_option,
    broker_names,
    broker_pid,
    in_turn,
    ratio,
    start_brokers,
    summary,
)
from benchmarks.stages import PEERS, reference_cpu, stage_cpu
from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.devtools.topics import create_topic, produce
from cohort.pipelines import KafkaOffsetMirror, PipelineSpec, build_session, run_batch
from cohort.pipelines.tasks.reader import READER_DEFAULTS, OffsetSpan

ROOT = Path(__file__).resolve().parents[1]
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


@dataclass
class Batch:
    """One `run_batch` of the 8 partitions, timed."""

    seconds: float
    stage_seconds: dict[str, float]
    load: float
    cpu: float
    """CPU seconds of the process tree (the batches' process, the Spark JVM, its Python workers)."""
    broker_cpu: float
    """CPU seconds of the broker's own process (Tansu's binary, Kafka's JVM) meanwhile: not in `cpu`."""
    spans: list[tuple[str, int, int, int]]
    """(topic, partition, from, until) of each partition read."""


@dataclass
class BrokerRun:
    """Everything measured on one broker."""

    name: str
    config: dict[str, Any]
    pid: int | None
    produce_s: float = 0.0
    raw: dict[str, tuple[float, float]] = field(default_factory=dict)
    """{"default" | "tuned": (seconds, CPU seconds)} of the plain consumer."""
    startup_s: float = 0.0
    batches: list[Batch] = field(default_factory=list)
    """The JVM's first batch, then the same batch again in the same JVM."""
    by_stage: dict[str, float] = field(default_factory=dict)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200k records instead of 1M")
    parser.add_argument("--records", type=int, default=None, help="number of records (overrides --quick)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--java-options", default=None, help="extra JVM options for the Spark driver (experiments)")
    add_broker_option(parser)
    parser.add_argument("--spark-batches", default=None, help=argparse.SUPPRESS)  # a JOB_JSON: see spark_batches
    return parser


def _broker_cpu(pid: int | None) -> float:
    return _tree_cpu_s(pid) if pid is not None else 0.0


REPLY = "cohort-bench-reply "
"""How a `--spark-batches` process marks its answers on stdout (anything else there, from its JVM, is passed on)."""


def spark_batches(job: Mapping[str, Any]) -> None:
    """A process of its own (`--spark-batches JOB_JSON`, driven by `SparkBatches`) with its own Spark (a JVM) on one
    broker, as the whole benchmark ran on one broker before: it answers each command it reads on stdin with one
    line on stdout (`REPLY` and JSON): `start` starts Spark and the Python worker pool ({"startup_s"}), `cold` then
    `warm` run the batch (the JVM's first, then the same records again for a fresh group and sink: Batch's
    fields), `stop` stops Spark. JOB_JSON holds `name`, `bootstrap`, `broker_pid`, `count`, `partitions`, `tmp`
    and `java_options`."""
    name, count, config = job["name"], job["count"], {"bootstrap.servers": job["bootstrap"]}
    topic_partitions = [TopicPartition(TOPIC, p) for p in range(job["partitions"])]
    coordinator = Coordinator.from_url(f"sqlite:///{job['tmp']}/cohort-{name}.db")
    mirror = KafkaOffsetMirror(config)
    spark: Any = None

    def reply(found: Mapping[str, Any]) -> None:
        print(REPLY + json.dumps(found), flush=True)

    for line in sys.stdin:
        command = line.strip()
        if command == "start":
            started = time.perf_counter()
            conf = {"spark.driver.extraJavaOptions": job["java_options"]} if job["java_options"] else None
            spark = build_session(app_name="cohort-bench", conf=conf)
            spark.sparkContext.setLogLevel("ERROR")
            # start the Python worker pool: part of starting Spark, not of any batch
            spark.range(2, numPartitions=2).mapInArrow(lambda batches: batches, "id long").count()
            reply({"startup_s": time.perf_counter() - started})
        elif command in ("cold", "warm"):
            group = f"{GROUP}-{name}-{command}"
            spec = PipelineSpec(sink_path=f"{job['tmp']}/lake-{name}-{command}", value_schema=SCHEMA, model=Event)
            ledger = coordinator.standalone_ledger(group)
            jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
            load, cpu = os.getloadavg()[0], _tree_cpu_s(jvm_pid) + time.process_time()
            broker_cpu = _broker_cpu(job["broker_pid"])
            started = time.perf_counter()
            result = run_batch(spark, spec, config, topic_partitions, ledger, group=group, mirror=mirror)
            seconds = time.perf_counter() - started
            cpu = _tree_cpu_s(jvm_pid) + time.process_time() - cpu
            broker_cpu = _broker_cpu(job["broker_pid"]) - broker_cpu
            if result.records + result.quarantined != count or result.quarantined != count // 1000:
                raise SystemExit(f"counts do not add up: {result.records} + {result.quarantined} != {count}")
            if result.mirror_error:
                raise SystemExit(f"mirror failed: {result.mirror_error}")
            spans = [(p.topic, p.partition, p.from_offset, p.until_offset) for p in result.partitions]
            reply(Batch(seconds, dict(result.stage_seconds), load, cpu, broker_cpu, spans).__dict__)
        elif command == "stop":
            if spark is not None:
                spark.stop()
            coordinator.close()
            reply({})
            return
        else:
            raise SystemExit(f"unknown command {command!r}")


class SparkBatches:
    """A `--spark-batches` process on one broker, driven one step at a time, so the brokers' steps alternate (both
    Spark started, then each broker's first batch, then each one's second) while each broker's first batch is the
    first of a fresh process and JVM, as when the benchmark ran on one broker."""

    def __init__(self, run: BrokerRun, count: int, partitions: int, tmp: str, java_options: str | None) -> None:
        self.name = run.name
        job = {
            "name": run.name,
            "bootstrap": run.config["bootstrap.servers"],
            "broker_pid": run.pid,
            "count": count,
            "partitions": partitions,
            "tmp": tmp,
            "java_options": java_options,
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.pipeline", "--spark-batches", json.dumps(job)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def ask(self, command: str) -> dict[str, Any]:
        """Send one command and return its answer."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        for line in self.process.stdout:
            if line.startswith(REPLY):
                found: dict[str, Any] = json.loads(line[len(REPLY) :])
                return found
            print(line, end="", file=sys.stderr)
        raise SystemExit(f"the Spark batches on {self.name} exited {self.process.wait()} at {command!r}")

    def close(self) -> None:
        """Stop the process (killed if it does not end within a minute)."""
        if self.process.poll() is None:
            try:
                self.process.communicate("stop\n", timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def settle(workers: Iterable[SparkBatches], *, idle: float = 0.1, limit_s: float = 10.0) -> None:
    """Wait, at most `limit_s`, until the Spark processes use less than `idle` of a core (over half a second), so
    what one step leaves running in a JVM (the JIT compiling what it just ran, a clean-up) is not charged to the
    next step, whichever broker's Spark runs it."""
    pids = [worker.process.pid for worker in workers]
    deadline = time.monotonic() + limit_s
    before = sum(_tree_cpu_s(pid) for pid in pids)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        after = sum(_tree_cpu_s(pid) for pid in pids)
        if after - before < idle * 0.5:
            return
        before = after


def measure(names: Sequence[str], count: int, partitions: int, java_options: str | None) -> dict[str, BrokerRun]:
    """Each step on every broker, the brokers in turn (A B, then B A, ...: `in_turn`) before the next step: produce,
    the plain consumer (default, then tuned), Spark's start, the first batch, the second (each broker's Spark in a
    process of its own: `SparkBatches`), the stages redone."""
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="cohort-bench-"))
        brokers = start_brokers(names, stack)
        runs = {
            name: BrokerRun(name, {"bootstrap.servers": broker.bootstrap_servers}, broker_pid(broker))
            for name, broker in brokers.items()
        }
        steps = iter(range(1_000))

        def in_order() -> list[BrokerRun]:
            return [runs[name] for name in in_turn(names, next(steps))]

        for run in in_order():
            create_topic(run.config, TOPIC, partitions)
            started = time.perf_counter()
            produce(run.config, TOPIC, events(count, partitions))
            run.produce_s = time.perf_counter() - started
        tuned = {"fetch.queue.backoff.ms": READER_DEFAULTS["fetch.queue.backoff.ms"]}
        for label, settings in (("default", {}), ("tuned", tuned)):
            for run in in_order():
                run.raw[label] = raw_consume(run.config, partitions, count, settings)
        workers = {name: SparkBatches(run, count, partitions, tmp, java_options) for name, run in runs.items()}
        for worker in workers.values():
            stack.callback(worker.close)
        for step in ("start", "cold", "warm"):
            for run in in_order():
                settle(workers.values())
                found = workers[run.name].ask(step)
                if step == "start":
                    run.startup_s = found["startup_s"]
                else:
                    run.batches.append(Batch(**{**found, "spans": [tuple(span) for span in found["spans"]]}))
        for worker in workers.values():
            worker.ask("stop")
        for run in in_order():
            spans = [OffsetSpan(*span) for span in run.batches[1].spans]
            spec = PipelineSpec(sink_path=f"{tmp}/lake-{run.name}-stages", value_schema=SCHEMA, model=Event)
            run.by_stage = stage_cpu(spec, run.config, spans)
    return runs


def report(run: BrokerRun, count: int, partitions: int) -> dict[str, Any]:
    """Print one broker's figures (as the benchmark did on Tansu alone) and return them for the summary."""
    (raw_s, raw_cpu), (raw_tuned_s, raw_tuned_cpu) = run.raw["default"], run.raw["tuned"]
    cold, warm = run.batches
    pipeline_s, warm_s = cold.seconds, warm.seconds
    raw_rate, pipeline_rate = count / raw_s, count / pipeline_s
    print(f"== broker: {run.name} ({LABELS[run.name]})")
    print(f"records                 {count:>12,} over {partitions} partitions (produced in {run.produce_s:.1f} s)")
    print(f"raw consumer (default)  {raw_rate:>12,.0f} records/s  ({raw_s:.2f} s, {raw_cpu:.1f} CPU s)")
    print(
        f"raw consumer (tuned)    {count / raw_tuned_s:>12,.0f} records/s  "
        f"({raw_tuned_s:.2f} s, {raw_tuned_cpu:.1f} CPU s)"
    )
    print(f"spark start-up          {run.startup_s:>12.2f} s (session + Python worker pool)")
    print(
        f"pipeline end to end     {pipeline_rate:>12,.0f} records/s  "
        f"({pipeline_s:.2f} s, {cold.cpu:.1f} CPU s, first batch of the JVM; broker {cold.broker_cpu:.1f} CPU s)"
    )
    for stage, seconds in cold.stage_seconds.items():
        rate = f"{count / seconds:>12,.0f} records/s" if seconds > 0 else ""
        print(f"  {stage:<21} {seconds:>8.2f} s  {rate}")
    print(
        f"pipeline, warm JVM      {count / warm_s:>12,.0f} records/s  "
        f"({warm_s:.2f} s, {warm.cpu:.1f} CPU s, second batch; broker {warm.broker_cpu:.1f} CPU s)"
    )
    print(
        f"ratio pipeline/raw      {pipeline_rate / raw_rate:>12.2f}  (vs tuned raw: {raw_tuned_s / pipeline_s:.2f}; "
        f"warm JVM: {raw_s / warm_s:.2f} and {raw_tuned_s / warm_s:.2f})"
    )
    print(
        f"load average (1 min)    {cold.load:>12.2f} before the first batch, {warm.load:.2f} before the second "
        f"({os.cpu_count()} cores)"
    )
    per_1m = 1_000_000 / count
    by_stage = dict(run.by_stage)
    peers = {name: by_stage.pop(name) for name in PEERS}
    by_stage["commit"] = warm.stage_seconds.get("commit", 0.0)  # the ledger's transaction: CPU ~ wall
    accounted = sum(by_stage.values())
    print("CPU by stage, per 1M records (the tasks' stages redone one by one in one process; commit: the batch's):")
    for stage, seconds in by_stage.items():
        print(f"  {stage:<21} {seconds * per_1m:>8.2f} CPU s")
    print(f"  {'sum':<21} {accounted * per_1m:>8.2f} CPU s")
    print(
        f"  {'the rest (Spark)':<21} {(warm.cpu - accounted) * per_1m:>8.2f} CPU s  "
        f"(the warm batch's {warm.cpu * per_1m:.2f} less the sum: scheduling, Python workers, the driver's plan)"
    )
    print(
        f"  {'peer: read (Python)':<21} {peers['read_python'] * per_1m:>8.2f} CPU s  "
        f"(confluent-kafka's Python consumer; the C one: {by_stage['read'] * per_1m:.2f})"
    )
    print(
        f"  {'peer: decode (msgspec)':<21} {peers['decode_msgspec'] * per_1m:>8.2f} CPU s  "
        f"(every record through msgspec; the C fast path: {by_stage['decode'] * per_1m:.2f})"
    )
    return {
        "raw_rate": round(raw_rate),
        "tuned_raw_rate": round(count / raw_tuned_s),
        "pipeline_rate": round(pipeline_rate),
        "ratio": round(pipeline_rate / raw_rate, 3),
        "ratio_vs_tuned": round(raw_tuned_s / pipeline_s, 3),
        "cpu_s_per_1m": round(cold.cpu * per_1m, 2),
        "spark_startup_s": round(run.startup_s, 2),
        "warm_cpu_s_per_1m": round(warm.cpu * per_1m, 2),
        "stage_cpu_s_per_1m": {stage: round(seconds * per_1m, 2) for stage, seconds in by_stage.items()},
        "read_python_cpu_s_per_1m": round(peers["read_python"] * per_1m, 2),
        "decode_msgspec_cpu_s_per_1m": round(peers["decode_msgspec"] * per_1m, 2),
        "warm_pipeline_rate": round(count / warm_s),
        "broker_cpu_s_per_1m": round(cold.broker_cpu * per_1m, 2),
        "warm_broker_cpu_s_per_1m": round(warm.broker_cpu * per_1m, 2),
        "produce_s": round(run.produce_s, 2),
        "load": [round(cold.load, 2), round(warm.load, 2)],
    }


RATIO_KEYS = (
    "pipeline_rate",
    "cpu_s_per_1m",
    "warm_pipeline_rate",
    "warm_cpu_s_per_1m",
    "raw_rate",
    "tuned_raw_rate",
    "broker_cpu_s_per_1m",
)
"""The figures compared Kafka over Tansu (`kafka_over_embedded`); the first two are the headline."""

_RATIO_LINES = (
    ("pipeline_rate", "pipeline records/s, first batch of the JVM"),
    ("cpu_s_per_1m", "CPU s per 1M, first batch of the JVM"),
    ("warm_pipeline_rate", "pipeline records/s, warm JVM"),
    ("warm_cpu_s_per_1m", "CPU s per 1M, warm batch"),
    ("raw_rate", "raw consumer records/s (default)"),
    ("tuned_raw_rate", "raw consumer records/s (tuned)"),
    ("broker_cpu_s_per_1m", "broker's own CPU s per 1M, first batch"),
)


def print_ratios(per_broker: Mapping[str, Mapping[str, Any]]) -> None:
    """Kafka's figures beside Tansu's and their ratio, when both ran."""
    if not {"embedded", "kafka"} <= set(per_broker):
        return
    tansu, kafka = per_broker["embedded"], per_broker["kafka"]
    print(f"== Kafka / Tansu{'':<30}{'Tansu':>12}{'Kafka':>12}{'Kafka/Tansu':>13}")
    for key, label in _RATIO_LINES:
        print(f"  {label:<43}{tansu[key]:>12,}{kafka[key]:>12,}{ratio(kafka[key], tansu[key]) or 0.0:>13.2f}")


def main() -> None:
    args = parser().parse_args()
    if args.spark_batches:
        spark_batches(json.loads(args.spark_batches))
        return
    count = args.records or (200_000 if args.quick else 1_000_000)
    runs = measure(broker_names(args.broker), count, args.partitions, args.java_options)
    per_broker = {name: report(run, count, args.partitions) for name, run in runs.items()}
    print_ratios(per_broker)
    reference = reference_cpu()
    print(f"machine reference       {reference:>12.2f} CPU s  (a pure-Python loop of 10M additions, best of 3)")
    common = {"records": count, "reference_loop_cpu_s": round(reference, 3)}
    print(json.dumps(summary(common, per_broker, RATIO_KEYS)))


if __name__ == "__main__":
    main()
