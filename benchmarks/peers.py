"""Cohort against what users pick instead: Spark's own Kafka source, side by side, in one run, on Apache Kafka.

On one Apache Kafka broker (harness/kafka_broker.py) with a Schema Registry (harness/schema_registry.py): N JSON
records over 8 partitions (one in 1,000 malformed; benchmarks/pipeline.py's records) and M Confluent-framed Avro
records through the registry (benchmarks/formats.py's). Spark's Kafka source comes from harness/spark_kafka/pom.xml
(the 4.2.0 connector: Maven Central serves none at the installed PySpark's 4.3). The cases, each landing every
offset of a topic as Parquet (benchmarks/peer_cases.py):

- (a) `spark-batch`: `spark.read.format("kafka")` with `startingOffsets`/`endingOffsets` per partition (exactly the
  planned offsets), `read_committed`, `from_json` (or `from_avro` after the Confluent header) into the same schema,
  the records that do not decode dropped, Spark's Parquet writer;
- (b) `spark-stream`: Structured Streaming, `trigger(availableNow=True)`, a checkpoint: the first run over the
  backlog here, runs for a 1,000-record increment below;
- (c) `cohort`: `run_batch`, the plain path (validation with the pandera model, quarantine, digests, the SQLite
  ledger, the Kafka mirror);
- (d) `cohort-light`: Cohort with the light Spark transform (two `withColumn`); (e) `spark-batch-light`,
  `spark-stream-light`: the same transform in the peers; (f) `cohort-light-arrow`: the same transform as an Arrow
  transform;
- and for Avro: `spark-batch-avro`, `spark-stream-avro`, `cohort-avro`.

**First batch of a JVM**: each case once in a fresh process of its own (Spark's start timed apart). **Warm**: one
process and JVM for every case: a round to warm up (left out), then `--repeats` rounds, the cases' order rotated by
one each round, medians. After every round DuckDB checks that each case landed the same rows (partition, offset and
every value column; the transformed cases also the same transformed columns) as the topic's `spark-batch`, and the
run stops before printing any figure if not. **Increment**: 1,000 new JSON records, then `cohort` on the last
round's group and `spark-stream` on the last round's checkpoint, alternating which goes first, `--repeats` times:
launch to commit in the warm JVM (`run_batch`'s call to its return, the publish and the Kafka mirror included;
`start()` to `awaitTermination()`); both outputs must then hold the same rows. **Stages**: the plain path's CPU per
1M by stage (benchmarks/stages.py) beside the Spark source's (a read alone, read and decode, the whole batch), for
each format.

CPU seconds are of the whole process tree (this process, the JVM, its Python workers) per 1M records; the broker's
process is left out. Rates count every record read (malformed ones included).

Usage:
    python -m benchmarks.peers             # 1M JSON, 500k Avro, 3 repeats
    python -m benchmarks.peers --quick     # 200k JSON, 200k Avro, 3 repeats, first batches of the headline cases

The last line printed is one JSON object with `same_rows`, `rate_vs_spark_json`, `cpu_vs_spark_json`,
`rate_vs_spark_avro`, `cpu_vs_spark_avro`, `transform_rate_vs_spark`, `increment_latency_vs_available_now` (Cohort
over the Spark source's batch read; the increment over availableNow), the same against the streaming peer
(`..._vs_stream_...`), `cases` (each case's medians), `cold` (first batches), `stages` and `load`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.brokers import rotated
from benchmarks.peer_cases import COHORT, SPARK_BATCH, SPARK_STREAM, Case, CohortRun, Landing, Topic, land
from benchmarks.peer_rows import fingerprints, stage_breakdown
from benchmarks.pipeline import SCHEMA, Event, events

ROOT = Path(__file__).resolve().parents[1]
PARTITIONS = 8
INCREMENT = 1_000
JSON_TOPIC, AVRO_TOPIC = "peers-json", "bench-formats-avro"  # the subject formats.registered_avro_writer registers
CASES = (
    Case("spark-batch", SPARK_BATCH),
    Case("spark-stream", SPARK_STREAM),
    Case("cohort", COHORT),
    Case("spark-batch-light", SPARK_BATCH, transform=True),
    Case("spark-stream-light", SPARK_STREAM, transform=True),
    Case("cohort-light", COHORT, transform=True),
    Case("cohort-light-arrow", COHORT, arrow=True),
    Case("spark-batch-avro", SPARK_BATCH),
    Case("spark-stream-avro", SPARK_STREAM),
    Case("cohort-avro", COHORT),
)
REPLY = "cohort-peers-reply "
QUICK_FIRST_BATCHES = ("spark-batch", "cohort", "spark-batch-avro", "cohort-avro")
"""The cases whose first batch `--quick` measures (each is a JVM's start: the bulk of a quick run)."""


def topic_of(case: Case, topics: Mapping[str, Topic]) -> Topic:
    return topics["avro" if case.name.endswith("-avro") else "json"]


def reference_of(case: Case) -> str:
    """The case whose rows this one must equal: the topic's Spark batch read, with the transform if it has one."""
    if case.name.endswith("-avro"):
        return "spark-batch-avro"
    return "spark-batch-light" if case.transformed else "spark-batch"


# --- set-up -----------------------------------------------------------------------------------------------------


def _topics(config: Mapping[str, Any], registry_url: str, json_records: int, avro_records: int) -> dict[str, Topic]:
    """Create and fill both topics; return them with their end offsets and Cohort's specs."""
    import pyspark.sql.types as T

    from benchmarks.formats import AVRO_SCHEMA, FormatEvent, registered_avro_writer
    from benchmarks.formats import record as avro_record
    from cohort.devtools.topics import create_topic, produce
    from cohort.pipelines import PipelineSpec
    from cohort.pipelines.formats.registry import RegistryConnection

    create_topic(config, JSON_TOPIC, PARTITIONS)
    create_topic(config, AVRO_TOPIC, PARTITIONS)
    produce(config, JSON_TOPIC, events(json_records, PARTITIONS))
    write, _schema_id = registered_avro_writer(registry_url)
    produce(
        config, AVRO_TOPIC, ((i % PARTITIONS, f"key-{i}".encode(), write(avro_record(i))) for i in range(avro_records))
    )
    avro_spec = PipelineSpec(
        sink_path="-", value_format="avro", registry=RegistryConnection(url=registry_url), model=FormatEvent
    )
    avro_columns = avro_spec.with_readers([AVRO_TOPIC]).value_columns
    assert isinstance(avro_columns, T.StructType)
    return {
        "json": Topic(
            JSON_TOPIC,
            "json",
            _ends(config, JSON_TOPIC),
            json_records - json_records // 1000,
            PipelineSpec(sink_path="-", value_schema=SCHEMA, model=Event),
            SCHEMA,
        ),
        "avro": Topic(
            AVRO_TOPIC,
            "avro",
            _ends(config, AVRO_TOPIC),
            avro_records,
            avro_spec,
            avro_columns,
            json.dumps(AVRO_SCHEMA),
        ),
    }


def _ends(config: Mapping[str, Any], topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    consumer = Consumer({**config, "group.id": "peers-watermarks", "isolation.level": "read_committed"})
    try:
        return {p: consumer.get_watermark_offsets(KafkaTopicPartition(topic, p), 10.0)[1] for p in range(PARTITIONS)}
    finally:
        consumer.close()


def _session(app_name: str) -> Any:
    from cohort.pipelines import build_session
    from harness.spark_kafka import spark_jars_conf

    spark = build_session(app_name=app_name, conf=spark_jars_conf())
    spark.sparkContext.setLogLevel("ERROR")
    # start the Python worker pool: part of Spark's start, not of any case
    spark.range(2, numPartitions=2).mapInArrow(lambda batches: batches, "id long").count()
    return spark


def _cohort_run(config: Mapping[str, Any], tmp: str, name: str) -> CohortRun:
    from cohort.assignment.coordinator import Coordinator
    from cohort.pipelines import KafkaOffsetMirror

    return CohortRun(config, Coordinator.from_url(f"sqlite:///{tmp}/{name}.db"), KafkaOffsetMirror(config))


# --- a case's first batch, in a process of its own ----------------------------------------------------------------


def cold_child(job: Mapping[str, Any]) -> None:
    """`--cold JOB_JSON`: start Spark, land one case once, print its figures (REPLY + JSON) and exit."""
    ends = {int(p): end for p, end in job["topic"]["ends"].items()}
    spec = _spec_of(job)  # makes the described schema a StructType again
    topic = Topic(**{**job["topic"], "ends": ends, "spec": spec})
    case = next(c for c in CASES if c.name == job["case"])
    config = {"bootstrap.servers": job["bootstrap"]}
    started = time.perf_counter()
    spark = _session(f"cohort-peers-cold-{case.name}")
    startup = time.perf_counter() - started
    cohort = _cohort_run(config, job["tmp"], f"cold-{case.name}")
    landing = land(spark, job["bootstrap"], cohort, topic, case, f"{job['tmp']}/cold-{case.name}", f"cold-{case.name}")
    print(REPLY + json.dumps({"startup_s": startup, "seconds": landing.seconds, "cpu": landing.cpu}), flush=True)
    spark.stop()


def _spec_of(job: Mapping[str, Any]) -> Any:
    import pyspark.sql.types as T

    from benchmarks.formats import FormatEvent
    from cohort.pipelines import PipelineSpec
    from cohort.pipelines.formats.registry import RegistryConnection

    job["topic"]["spark_schema"] = T.StructType.fromJson(job["topic"]["spark_schema"])
    if job["topic"]["fmt"] == "json":
        return PipelineSpec(sink_path="-", value_schema=SCHEMA, model=Event)
    return PipelineSpec(
        sink_path="-", value_format="avro", registry=RegistryConnection(url=job["registry"]), model=FormatEvent
    )


def cold_first_batches(
    topics: Mapping[str, Topic], bootstrap: str, registry_url: str, tmp: str, names: Sequence[str] | None = None
) -> dict[str, dict[str, float]]:
    """Each case's first batch in a fresh process: {case: {startup_s, seconds, cpu}}."""
    found: dict[str, dict[str, float]] = {}
    for case in CASES:
        if names is not None and case.name not in names:
            continue
        topic = topic_of(case, topics)
        described = {
            "name": topic.name,
            "fmt": topic.fmt,
            "ends": {str(p): e for p, e in topic.ends.items()},
            "rows": topic.rows,
            "spark_schema": topic.spark_schema.jsonValue(),
            "avro_schema": topic.avro_schema,
        }
        job = {"case": case.name, "topic": described, "bootstrap": bootstrap, "registry": registry_url, "tmp": tmp}
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.peers", "--cold", json.dumps(job)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,
            stdin=subprocess.DEVNULL,
        )
        replies = [line[len(REPLY) :] for line in done.stdout.splitlines() if line.startswith(REPLY)]
        if done.returncode != 0 or not replies:
            raise SystemExit(f"the first batch of {case.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        found[case.name] = json.loads(replies[-1])
        shutil.rmtree(f"{tmp}/cold-{case.name}", ignore_errors=True)
        print(
            f"first batch {case.name:<20} {_rate(topic.records, found[case.name]['seconds']):>10,.0f} records/s",
            flush=True,
        )
    return found


def _rate(records: int, seconds: float) -> float:
    return records / seconds if seconds > 0 else 0.0


# --- warm rounds, increments ----------------------------------------------------------------------------------


def warm_rounds(
    spark: Any, bootstrap: str, cohort: CohortRun, topics: Mapping[str, Topic], tmp: str, repeats: int
) -> tuple[dict[str, list[Landing]], dict[str, Landing], bool]:
    """A warm-up round, then `repeats` rounds in rotated order; after each, the same-rows check. Returns the
    measured landings per case, the last round's landing per case (kept on disk) and whether all rows agreed."""
    measured: dict[str, list[Landing]] = {case.name: [] for case in CASES}
    last: dict[str, Landing] = {}
    same = True
    for round_ in range(repeats + 1):
        landed: dict[str, Landing] = {}
        for case in rotated(CASES, round_):
            out = f"{tmp}/warm-{round_}-{case.name}"
            landed[case.name] = land(
                spark, bootstrap, cohort, topic_of(case, topics), case, out, f"peers-{round_}-{case.name}"
            )
        agreed = same_rows(landed, topics)
        same = same and agreed
        print(f"round {round_}{' (warm-up)' if round_ == 0 else ''}: same rows {agreed}", flush=True)
        if round_:
            for name, landing in landed.items():
                measured[name].append(landing)
        if round_ < repeats:
            for landing in landed.values():
                shutil.rmtree(landing.root, ignore_errors=True)
                shutil.rmtree(f"{landing.root}.checkpoint", ignore_errors=True)
        last = landed
    return measured, last, same


def same_rows(landed: Mapping[str, Landing], topics: Mapping[str, Topic]) -> bool:
    """Every case's rows equal its reference's (`reference_of`), and each reference holds its topic's valid rows."""
    cases = {case.name: case for case in CASES}
    prints = fingerprints(landed, {name: _columns(cases[name], topics) for name in landed})
    agreed = True
    for name, found in prints.items():
        case = cases[name]
        expected = prints[reference_of(case)]
        rows = topic_of(case, topics).rows
        if found != expected or found[0] != rows or found[1] != rows:
            print(f"  {name}: {found} rows/distinct offsets/hash, expected {expected} ({rows} rows)", flush=True)
            agreed = False
    return agreed


def _columns(case: Case, topics: Mapping[str, Topic]) -> list[str]:
    names = list(topic_of(case, topics).spark_schema.names)
    return [*names, "amount_cents", "user_lc"] if case.transformed else names


def increments(
    spark: Any,
    bootstrap: str,
    cohort: CohortRun,
    topics: Mapping[str, Topic],
    last: Mapping[str, Landing],
    repeats: int,
) -> tuple[list[float], list[float], bool]:
    """`repeats` increments of INCREMENT JSON records: (Cohort's launch-to-commit seconds, availableNow's, the two
    outputs hold the same rows after them)."""
    from cohort.devtools.topics import produce

    config = {"bootstrap.servers": bootstrap}
    topic = topics["json"]
    stream_case = next(c for c in CASES if c.name == "spark-stream")
    cohort_case = next(c for c in CASES if c.name == "cohort")
    cohort_s: list[float] = []
    stream_s: list[float] = []
    produced = topic.records
    cohort_group = f"peers-{repeats}-cohort"
    for turn in range(repeats):
        produce(
            config,
            JSON_TOPIC,
            ((i % PARTITIONS, b"k", _increment_value(i)) for i in range(produced, produced + INCREMENT)),
        )
        produced += INCREMENT
        order = ["cohort", "stream"] if turn % 2 == 0 else ["stream", "cohort"]
        for which in order:
            if which == "cohort":
                landing = land(spark, bootstrap, cohort, topic, cohort_case, last["cohort"].root, cohort_group)
                cohort_s.append(landing.seconds)
            else:
                landing = land(spark, bootstrap, cohort, topic, stream_case, last["spark-stream"].root, "-")
                stream_s.append(landing.seconds)
    grown = Topic(topic.name, topic.fmt, topic.ends, topic.rows + repeats * INCREMENT, topic.spec, topic.spark_schema)
    both = {"cohort": last["cohort"], "spark-batch": last["spark-stream"]}
    prints = fingerprints(both, {name: list(topic.spark_schema.names) for name in both})
    agreed = prints["cohort"] == prints["spark-batch"] and prints["cohort"][0] == grown.rows
    return cohort_s, stream_s, agreed


def _increment_value(i: int) -> bytes:
    return json.dumps(
        {"id": i, "user": f"user-{i % 5000}", "amount": (i % 997) * 1.5, "country": "FR", "ts": 1_700_000_000_000 + i}
    ).encode()


# --- figures ------------------------------------------------------------------------------------------------------


def case_figures(landings: Sequence[Landing], records: int) -> dict[str, float]:
    per_1m = 1_000_000 / records
    return {
        "rate": round(statistics.median(_rate(records, landing.seconds) for landing in landings)),
        "cpu_s_per_1m": round(statistics.median(landing.cpu for landing in landings) * per_1m, 2),
        "seconds": round(statistics.median(landing.seconds for landing in landings), 3),
    }


def _over(figures: Mapping[str, Mapping[str, float]], ours: str, theirs: str, key: str) -> float:
    return round(figures[ours][key] / figures[theirs][key], 3)


def summarize(
    measured: Mapping[str, Sequence[Landing]],
    cold: Mapping[str, Mapping[str, float]],
    topics: Mapping[str, Topic],
    same: bool,
    latencies: tuple[list[float], list[float]],
    stages: Mapping[str, Any],
    loads: Sequence[float],
) -> dict[str, Any]:
    cases = {case.name: case for case in CASES}
    figures = {name: case_figures(runs, topic_of(cases[name], topics).records) for name, runs in measured.items()}
    for name, first in cold.items():
        records = topic_of(cases[name], topics).records
        figures[name]["first_batch_rate"] = round(_rate(records, first["seconds"]))
        figures[name]["first_batch_cpu_s_per_1m"] = round(first["cpu"] * 1_000_000 / records, 2)
        figures[name]["spark_startup_s"] = round(first["startup_s"], 2)
    cohort_s, stream_s = latencies
    found: dict[str, Any] = {
        "json_records": topics["json"].records,
        "avro_records": topics["avro"].records,
        "same_rows": same,
        "rate_vs_spark_json": _over(figures, "cohort", "spark-batch", "rate"),
        "cpu_vs_spark_json": _over(figures, "cohort", "spark-batch", "cpu_s_per_1m"),
        "rate_vs_spark_avro": _over(figures, "cohort-avro", "spark-batch-avro", "rate"),
        "cpu_vs_spark_avro": _over(figures, "cohort-avro", "spark-batch-avro", "cpu_s_per_1m"),
        "transform_rate_vs_spark": _over(figures, "cohort-light", "spark-batch-light", "rate"),
        "increment_latency_vs_available_now": round(statistics.median(cohort_s) / statistics.median(stream_s), 3),
        "rate_vs_stream_json": _over(figures, "cohort", "spark-stream", "rate"),
        "cpu_vs_stream_json": _over(figures, "cohort", "spark-stream", "cpu_s_per_1m"),
        "rate_vs_stream_avro": _over(figures, "cohort-avro", "spark-stream-avro", "rate"),
        "cpu_vs_stream_avro": _over(figures, "cohort-avro", "spark-stream-avro", "cpu_s_per_1m"),
        "transform_rate_vs_stream": _over(figures, "cohort-light", "spark-stream-light", "rate"),
        "arrow_transform_rate_vs_spark": _over(figures, "cohort-light-arrow", "spark-batch-light", "rate"),
        "increment_s": {
            "cohort": round(statistics.median(cohort_s), 3),
            "available_now": round(statistics.median(stream_s), 3),
        },
        "cases": figures,
        "stages": stages,
        "load": {"min": round(min(loads), 2), "max": round(max(loads), 2)},
    }
    return found


def print_table(summary: Mapping[str, Any]) -> None:
    print(f"{'case':<20} {'records/s':>10} {'CPU s/1M':>9} {'first batch/s':>13} {'first CPU':>9} {'Spark start':>11}")
    for name, f in summary["cases"].items():
        print(
            f"{name:<20} {f['rate']:>10,} {f['cpu_s_per_1m']:>9.2f} {f.get('first_batch_rate', 0):>13,} "
            f"{f.get('first_batch_cpu_s_per_1m', 0):>9.2f} {f.get('spark_startup_s', 0):>11.2f}"
        )
    print(f"increment of {INCREMENT:,} records, launch to commit (s): {summary['increment_s']}")
    for fmt, stages in summary["stages"].items():
        for side, figures in stages.items():
            listed = ", ".join(f"{name} {cpu:.2f}" for name, cpu in figures.items())
            print(f"stages, {fmt}, {side}, CPU s per 1M: {listed}")
    print(f"load average (1 min) {summary['load']['min']} to {summary['load']['max']} ({os.cpu_count()} cores)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="200k records of each format instead of 1M JSON and 500k Avro; first batches of the "
        "plain cases only (spark-batch, cohort, per format)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-cold", action="store_true", help="leave out the first batches in fresh processes")
    parser.add_argument(
        "--records", type=int, default=None, help="JSON records (Avro: half as many); overrides --quick"
    )
    parser.add_argument("--cold", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cold:
        cold_child(json.loads(args.cold))
        return
    json_records, avro_records = (200_000, 200_000) if args.quick else (1_000_000, 500_000)
    if args.records:
        json_records, avro_records = args.records, args.records // 2

    from harness.kafka_broker import KafkaBroker
    from harness.schema_registry import SchemaRegistryServer

    loads: list[float] = []
    with contextlib.ExitStack() as stack:
        broker = stack.enter_context(KafkaBroker())
        registry = stack.enter_context(SchemaRegistryServer())
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="cohort-peers-"))
        config = {"bootstrap.servers": broker.bootstrap_servers}
        servers = (broker.bootstrap_servers, registry.url)
        topics = _topics(config, registry.url, json_records, avro_records)
        print(
            f"topics: {topics['json'].records:,} JSON, {topics['avro'].records:,} Avro, {PARTITIONS} partitions",
            flush=True,
        )
        loads.append(os.getloadavg()[0])
        headline = QUICK_FIRST_BATCHES if args.quick else None
        cold = {} if args.skip_cold else cold_first_batches(topics, *servers, tmp, headline)
        spark = _session("cohort-peers")
        cohort = _cohort_run(config, tmp, "warm")
        measured, last, same = warm_rounds(spark, broker.bootstrap_servers, cohort, topics, tmp, args.repeats)
        loads.extend(landing.load for runs in measured.values() for landing in runs)
        stages = {fmt: stage_breakdown(spark, broker.bootstrap_servers, topic) for fmt, topic in topics.items()}
        cohort_s, stream_s, grown_same = increments(spark, broker.bootstrap_servers, cohort, topics, last, args.repeats)
        same = same and grown_same
        loads.append(os.getloadavg()[0])
        spark.stop()
        cohort.coordinator.close()
    if not same:
        print("the cases did not land the same rows: no figures")
        print(json.dumps({"same_rows": False}))
        raise SystemExit(1)
    summary = summarize(measured, cold, topics, same, (cohort_s, stream_s), stages, loads)
    print_table(summary)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
