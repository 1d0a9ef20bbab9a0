"""Record formats: the same records as JSON and as Schema Registry Avro through the same pipeline, in one run.

On the embedded Tansu broker, with a Schema Registry (harness/schema_registry.py's HTTP server, on
loopback): produce N records of the same logical content twice, over 8 partitions (batched), as JSON to one
topic and as Confluent-framed Avro to another. The record has 8 fields: long, string, double, string, long,
int, a nullable union `["null", "double"]` (null one record in 7) and a boolean. The Avro values are what
confluent-kafka's `AvroSerializer` writes: it registers the schema under `<topic>-value` and its output is
compared byte for byte with the fast path on the first records (every shape of the record: null and
non-null union branch, both booleans); the rest are written with fastavro's `schemaless_writer` behind the
same 5-byte header (magic 0, the registered schema id), which is what the serializer does inside.

Then a single plain confluent-kafka consumer reads the Avro topic (`consume(10000)` loop touching each
value, librdkafka's defaults, as benchmarks/pipeline.py does): the **raw rate**; and again with the one
setting the pipeline's readers change (`fetch.queue.backoff.ms`), for comparison. Spark starts (session +
Python worker pool, timed separately), and `run_batch` lands every record of each topic into its own sink
with a fresh group: JSON with an explicit StructType equal to the columns Cohort derives from the Avro
schema, Avro with the reader schema read from the registry (the subject's latest version); both with the
same pandera model. First one batch per format, reported but left out of the medians (JSON, then Avro: they
carry the Python workers' first imports and the JVM's first jobs), then `--repeats` rounds alternating which
format goes first (JSON/Avro, Avro/JSON, ...). Every batch is checked: N rows in its sink, none
quarantined; the first timed sinks of both formats must hold the same values at the same offsets.

Reported: per-run rates, the median per format, the ratio Avro/JSON and each against the raw rate, CPU
seconds per 1M records (driver + JVM + its Python workers, from /proc; the driver alone from getrusage;
the broker's separately), the rows per consume batch the tasks saw (the sink's Parquet row groups: one per
batch), and, in the driver after Spark has stopped, the CPU of decoding alone (the tasks' decoders, same
values, batches of 10,000 and of the median size the tasks saw) to show where the time goes.

Usage:
    python -m benchmarks.formats            # 1M records per format
    python -m benchmarks.formats --quick    # 200k records per format

The last line printed is one JSON object: {"records", "raw_rate", "json_rate", "avro_rate",
"ratio_avro_vs_json", "ratio_avro_vs_raw", "ratio_json_vs_raw", "spark_startup_s", "json_cpu_s_per_1m",
"avro_cpu_s_per_1m", "json_rates", "avro_rates"}; rates are records per second, medians over the repeats.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import resource
import statistics
import struct
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import fastavro
import pandera.pyspark as pa
import pyarrow as arrow
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pyspark.sql.types as T
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from benchmarks.pipeline import _own_cpu_s, _tree_cpu_s, raw_consume
from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.devtools.embedded_broker import EmbeddedBroker
from cohort.devtools.topics import create_topic, produce
from cohort.pipelines import KafkaOffsetMirror, PipelineSpec, build_session, run_batch
from cohort.pipelines.batch.results import BatchResult
from cohort.pipelines.formats.registry import RegistryConnection
from cohort.pipelines.tasks.reader import READER_DEFAULTS, RECORD_SCHEMA
from harness.schema_registry import SchemaRegistryServer

JSON_TOPIC = "bench-formats-json"
AVRO_TOPIC = "bench-formats-avro"
GROUP = "bench-formats"
FORMATS = ("json", "avro")
CHECKED_SERIALIZATIONS = 2_100  # the record's shapes repeat every 7 * 3 * 4 = 84 records
DECODE_SAMPLE = 200_000  # values per format kept in memory for the decode-only measurement
AVRO_SCHEMA = {
    "type": "record",
    "name": "Event",
    "namespace": "cohort.bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "country", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "quantity", "type": "int"},
        {"name": "score", "type": ["null", "double"], "default": None},
        {"name": "active", "type": "boolean"},
    ],
}
JSON_SCHEMA = T.StructType(
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
"""The JSON topic's schema: exactly the columns Cohort derives from AVRO_SCHEMA (checked at start)."""
COUNTRIES = ["FR", "DE", "ES", "IT"]


class FormatEvent(pa.DataFrameModel):
    """The benchmark's validation, the same for both formats: bounded numbers, a known country."""

    id: T.LongType() = pa.Field(ge=0)  # type: ignore[valid-type]
    amount: T.DoubleType() = pa.Field(ge=0, lt=10_000)  # type: ignore[valid-type]
    country: T.StringType() = pa.Field(isin=COUNTRIES)  # type: ignore[valid-type]
    quantity: T.IntegerType() = pa.Field(ge=0, lt=100)  # type: ignore[valid-type]


def record(i: int) -> dict[str, Any]:
    """Record `i`: the logical content both topics carry."""
    return {
        "id": i,
        "user": f"user-{i % 5000}",
        "amount": (i % 997) * 1.5,
        "country": COUNTRIES[i % 4],
        "ts": 1_700_000_000_000 + i,
        "quantity": i % 100,
        "score": None if i % 7 == 0 else (i % 1000) / 10,
        "active": i % 3 != 0,
    }


def avro_writer(schema_id: int) -> Callable[[dict[str, Any]], bytes]:
    """A Confluent-framed Avro serializer: magic 0, the 4-byte big-endian schema id, fastavro's payload."""
    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    header = b"\x00" + struct.pack(">I", schema_id)
    out = io.BytesIO()

    def write(value: dict[str, Any]) -> bytes:
        out.seek(0)
        out.truncate()
        fastavro.schemaless_writer(out, parsed, value)
        return header + out.getvalue()

    return write


def registered_avro_writer(registry_url: str) -> tuple[Callable[[dict[str, Any]], bytes], int]:
    """(fast Avro writer, schema id): the schema registered by confluent-kafka's AvroSerializer, and the fast
    writer's bytes checked equal to the serializer's on the first CHECKED_SERIALIZATIONS records."""
    serializer = AvroSerializer(SchemaRegistryClient({"url": registry_url}), json.dumps(AVRO_SCHEMA))
    context = SerializationContext(AVRO_TOPIC, MessageField.VALUE)
    first = serializer(record(0), context)
    if first is None or first[:1] != b"\x00":
        raise SystemExit(f"AvroSerializer wrote {first!r}: not a Confluent-framed value")
    schema_id = struct.unpack(">I", first[1:5])[0]
    write = avro_writer(schema_id)
    for i in range(CHECKED_SERIALIZATIONS):
        expected, got = serializer(record(i), context), write(record(i))
        if expected != got:
            raise SystemExit(f"record {i}: the fast Avro writer wrote {got!r}, AvroSerializer {expected!r}")
    return write, schema_id


def records(
    count: int, partitions: int, encode: Callable[[dict[str, Any]], bytes], sample: list[bytes]
) -> Iterator[tuple[int, bytes, bytes]]:
    """(partition, key, value) for every record, the first DECODE_SAMPLE values kept in `sample`."""
    for i in range(count):
        value = encode(record(i))
        if i < DECODE_SAMPLE:
            sample.append(value)
        yield i % partitions, f"key-{i}".encode(), value


def encode_json(value: dict[str, Any]) -> bytes:
    return json.dumps(value).encode()


@dataclass(frozen=True)
class Run:
    """One timed `run_batch`: wall and CPU seconds (driver + JVM + Python workers; driver alone; broker)."""

    fmt: str
    label: str
    sink: str
    seconds: float
    cpu_s: float
    driver_cpu_s: float
    broker_cpu_s: float
    load: float
    result: BatchResult

    @property
    def task_seconds(self) -> float:
        """The reading tasks' summed time (read, decode, validate, write), over all partitions."""
        return sum(p.seconds for p in self.result.partitions)


def _sink_rows(sink: str) -> int:
    """Rows in a sink (its Parquet footers; the `_quarantine` directory and staging are ignored)."""
    return ds.dataset(sink, format="parquet", partitioning="hive").count_rows()


def _row_groups(sink: str) -> list[int]:
    """Rows of every Parquet row group in a sink: the reading tasks write one per consumed batch."""
    sizes: list[int] = []
    for fragment in ds.dataset(sink, format="parquet", partitioning="hive").get_fragments():
        metadata = pq.ParquetFile(fragment.path).metadata
        sizes.extend(metadata.row_group(g).num_rows for g in range(metadata.num_row_groups))
    return sizes


def _values_by_offset(sink: str) -> arrow.Table:
    """A sink's value columns, ordered by (partition, offset)."""
    table = ds.dataset(sink, format="parquet", partitioning="hive").to_table(columns=["kafka", *JSON_SCHEMA.names])
    kafka = table.column("kafka")
    keyed = table.append_column("p", pc.struct_field(kafka, "partition")).append_column(
        "o", pc.struct_field(kafka, "offset")
    )
    return keyed.sort_by([("p", "ascending"), ("o", "ascending")]).select(JSON_SCHEMA.names)


def _raw_batches(values: list[bytes], size: int) -> list[arrow.RecordBatch]:
    """Raw record batches (the reader's RECORD_SCHEMA) of `size` rows holding `values`."""
    batches = []
    for start in range(0, len(values), size):
        chunk = values[start : start + size]
        n = len(chunk)
        batches.append(
            arrow.RecordBatch.from_arrays(
                [
                    arrow.repeat(arrow.scalar("t", arrow.string()), n),
                    arrow.repeat(arrow.scalar(0, arrow.int32()), n),
                    arrow.array(range(start, start + n), arrow.int64()),
                    arrow.array([1_700_000_000_000] * n, arrow.int64()),
                    arrow.array([b"k"] * n, arrow.binary()),
                    arrow.array(chunk, arrow.binary()),
                    arrow.nulls(n, RECORD_SCHEMA.field("headers").type),
                    arrow.nulls(n, arrow.string()),
                ],
                schema=RECORD_SCHEMA,
            )
        )
    return batches


def decode_cpu(spec: PipelineSpec, values: list[bytes], size: int) -> tuple[float, float]:
    """(decode, decode + validate) CPU seconds per 1M values, in this process, in batches of `size` rows:
    the reading tasks' own decoder and checker, warm (one batch first, untimed)."""
    batches = _raw_batches(values, size)
    checker = spec.checker
    checker.decoder.decode(batches[0].column("value"))
    checker.check(batches[0])
    cpu = time.process_time()
    for batch in batches:
        checker.decoder.decode(batch.column("value"))
    decode_s = time.process_time() - cpu
    cpu = time.process_time()
    for batch in batches:
        checker.check(batch)
    check_s = time.process_time() - cpu
    scale = 1_000_000 / len(values)
    return decode_s * scale, check_s * scale


def task_setup_ms(spec: PipelineSpec, value: bytes, repeats: int = 7) -> float:
    """Median milliseconds a reading task spends on its checker's first record, the checker unpickled fresh
    as each Spark task receives it: for Avro, the registry client (an SSL context, even for http), the
    writer schema's fetch and the schemas' parsing; for JSON, the msgspec types."""
    blob = pickle.dumps(spec.checker)
    batch = _raw_batches([value], 1)[0]
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        pickle.loads(blob).check(batch)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="200k records per format instead of 1M")
    parser.add_argument("--records", type=int, default=None, help="records per format (overrides --quick)")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="timed batches per format (after one first batch)")
    args = parser.parse_args()
    count = args.records or (200_000 if args.quick else 1_000_000)
    per_1m = 1_000_000 / count
    began = time.perf_counter()

    with (
        SchemaRegistryServer() as registry_server,
        EmbeddedBroker() as broker,
        tempfile.TemporaryDirectory(prefix="cohort-formats-") as tmp,
    ):
        config = {"bootstrap.servers": broker.bootstrap_servers}
        registry = RegistryConnection(url=registry_server.url)
        for topic in (JSON_TOPIC, AVRO_TOPIC):
            create_topic(config, topic, args.partitions)
        samples: dict[str, list[bytes]] = {"json": [], "avro": []}
        started = time.perf_counter()
        produce(config, JSON_TOPIC, records(count, args.partitions, encode_json, samples["json"]))
        produce_json_s = time.perf_counter() - started
        started = time.perf_counter()
        write_avro, schema_id = registered_avro_writer(registry.url)
        produce(config, AVRO_TOPIC, records(count, args.partitions, write_avro, samples["avro"]))
        produce_avro_s = time.perf_counter() - started
        sizes = {fmt: sum(map(len, samples[fmt])) / len(samples[fmt]) for fmt in FORMATS}

        raw_s, raw_cpu = raw_consume(config, args.partitions, count, {}, AVRO_TOPIC)
        tuned = {"fetch.queue.backoff.ms": READER_DEFAULTS["fetch.queue.backoff.ms"]}
        raw_tuned_s, raw_tuned_cpu = raw_consume(config, args.partitions, count, tuned, AVRO_TOPIC)

        def spec_for(fmt: str, sink: str) -> PipelineSpec:
            if fmt == "json":
                return PipelineSpec(sink_path=sink, value_schema=JSON_SCHEMA, model=FormatEvent)
            return PipelineSpec(sink_path=sink, value_format="avro", registry=registry, model=FormatEvent)

        resolved = spec_for("avro", f"{tmp}/check").with_readers([AVRO_TOPIC])
        if resolved.value_columns != JSON_SCHEMA:
            raise SystemExit(f"the Avro reader's columns {resolved.value_columns} differ from the JSON schema")

        started = time.perf_counter()
        spark = build_session(app_name="cohort-formats-bench")
        spark.sparkContext.setLogLevel("ERROR")
        # start the Python worker pool: part of starting Spark, not of any batch
        spark.range(2, numPartitions=2).mapInArrow(lambda batches: batches, "id long").count()
        startup_s = time.perf_counter() - started

        gateway: Any = spark.sparkContext._jvm
        jvm_pid = int(gateway.java.lang.ProcessHandle.current().pid())
        coordinator = Coordinator.from_url(f"sqlite:///{tmp}/cohort.db")
        mirror = KafkaOffsetMirror(config)
        topics = {"json": JSON_TOPIC, "avro": AVRO_TOPIC}

        def timed(fmt: str, label: str) -> Run:
            sink, group = f"{tmp}/lake-{fmt}-{label}", f"{GROUP}-{fmt}-{label}"
            spec = spec_for(fmt, sink)
            partitions = [TopicPartition(topics[fmt], p) for p in range(args.partitions)]
            ledger = coordinator.standalone_ledger(group)
            load = os.getloadavg()[0]
            jvm, everything, own = _tree_cpu_s(jvm_pid), _tree_cpu_s(os.getpid()), _own_cpu_s()
            driver = resource.getrusage(resource.RUSAGE_SELF)
            started = time.perf_counter()
            result = run_batch(spark, spec, config, partitions, ledger, group=group, mirror=mirror)
            seconds = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_SELF)
            driver_s = after.ru_utime + after.ru_stime - driver.ru_utime - driver.ru_stime
            jvm = _tree_cpu_s(jvm_pid) - jvm
            broker_s = _tree_cpu_s(os.getpid()) - everything - jvm - (_own_cpu_s() - own)
            if result.records != count or result.quarantined:
                raise SystemExit(f"{fmt} {label}: {result.records} records landed, {result.quarantined} quarantined")
            if result.mirror_error:
                raise SystemExit(f"{fmt} {label}: mirror failed: {result.mirror_error}")
            landed = _sink_rows(sink)
            if landed != count:
                raise SystemExit(f"{fmt} {label}: the sink holds {landed} rows, not {count}")
            return Run(fmt, label, sink, seconds, jvm + driver_s, driver_s, broker_s, load, result)

        firsts = [timed(fmt, "first") for fmt in FORMATS]
        runs: list[Run] = []
        for repeat in range(args.repeats):
            for fmt in FORMATS if repeat % 2 == 0 else FORMATS[::-1]:
                runs.append(timed(fmt, f"run{repeat}"))
        spark.stop()
        coordinator.close()

        by_format = {fmt: [r for r in runs if r.fmt == fmt] for fmt in FORMATS}
        first_values = {fmt: _values_by_offset(by_format[fmt][0].sink) for fmt in FORMATS}
        if not first_values["json"].equals(first_values["avro"]):
            raise SystemExit("the JSON and Avro sinks hold different values")
        del first_values
        batch_rows = {fmt: _row_groups(by_format[fmt][0].sink) for fmt in FORMATS}

        decode: dict[str, dict[int, tuple[float, float]]] = {}
        setup_ms: dict[str, float] = {}
        for fmt in FORMATS:
            spec = spec_for(fmt, f"{tmp}/decode-{fmt}").with_readers([topics[fmt]])
            setup_ms[fmt] = task_setup_ms(spec, samples[fmt][0])
            median_batch = max(1, round(statistics.median(batch_rows[fmt])))
            decode[fmt] = {size: decode_cpu(spec, samples[fmt], size) for size in sorted({10_000, median_batch})}
        load_end = os.getloadavg()[0]

    median_s = {fmt: statistics.median(r.seconds for r in by_format[fmt]) for fmt in FORMATS}
    median_cpu = {fmt: statistics.median(r.cpu_s for r in by_format[fmt]) for fmt in FORMATS}
    rate = {fmt: count / median_s[fmt] for fmt in FORMATS}
    raw_rate = count / raw_s
    ratio = rate["avro"] / rate["json"]

    print(f"records                 {count:>12,} per format over {args.partitions} partitions")
    for fmt, produced in (("json", produce_json_s), ("avro", produce_avro_s)):
        print(f"  {fmt:<5} produced in {produced:>8.1f} s, {sizes[fmt]:.1f} bytes a value (Avro: with the header)")
    print(f"  Avro schema id {schema_id}; fast writer = AvroSerializer on the first {CHECKED_SERIALIZATIONS:,} records")
    print(f"raw consumer (default)  {raw_rate:>12,.0f} records/s  ({raw_s:.2f} s, {raw_cpu:.1f} CPU s), Avro topic")
    print(
        f"raw consumer (tuned)    {count / raw_tuned_s:>12,.0f} records/s  "
        f"({raw_tuned_s:.2f} s, {raw_tuned_cpu:.1f} CPU s)"
    )
    print(f"spark start-up          {startup_s:>12.2f} s (session + Python worker pool)")
    print("batches (rate, wall s, CPU s per 1M: driver+JVM+workers / driver alone / broker, task s, load before):")
    for run in [*firsts, *runs]:
        print(
            f"  {run.fmt:<4} {run.label:<6} {count / run.seconds:>12,.0f} records/s  {run.seconds:6.2f} s  "
            f"{run.cpu_s * per_1m:5.1f} / {run.driver_cpu_s * per_1m:4.2f} / {run.broker_cpu_s * per_1m:4.1f} CPU s  "
            f"tasks {run.task_seconds:5.1f} s  load {run.load:4.2f}"
        )
    for fmt in FORMATS:
        middle = sorted(by_format[fmt], key=lambda r: r.seconds)[len(by_format[fmt]) // 2]
        stages = ", ".join(f"{k} {v:.2f}" for k, v in middle.result.stage_seconds.items())
        print(
            f"{fmt} (median of {len(by_format[fmt])})  {rate[fmt]:>12,.0f} records/s  ({median_s[fmt]:.2f} s, "
            f"{median_cpu[fmt] * per_1m:.1f} CPU s per 1M); stages of the median run: {stages}"
        )
    rounds = [round(j.seconds / a.seconds, 2) for j, a in zip(by_format["json"], by_format["avro"], strict=True)]
    print(f"ratio avro/json         {ratio:>12.2f}  (per round: {rounds})")
    print(
        f"ratio vs raw            {rate['avro'] / raw_rate:>12.2f} avro, {rate['json'] / raw_rate:.2f} json "
        f"(vs tuned raw: {raw_tuned_s / median_s['avro']:.2f} and {raw_tuned_s / median_s['json']:.2f})"
    )
    for fmt in FORMATS:
        rows = batch_rows[fmt]
        print(
            f"{fmt} consume batches      {len(rows):>8,} (rows: median {statistics.median(rows):,.0f}, "
            f"min {min(rows):,}, max {max(rows):,})"
        )
    print("decode only, in the driver (CPU s per 1M: decode / decode + model checks):")
    for fmt in FORMATS:
        for size, (decode_s, check_s) in decode[fmt].items():
            print(f"  {fmt:<4} batches of {size:>6,}  {decode_s:5.2f} / {check_s:5.2f}")
    tasks = len(runs[0].result.partitions)
    print(
        f"per-task set-up (fresh checker, first record): json {setup_ms['json']:.1f} ms, avro "
        f"{setup_ms['avro']:.1f} ms; x {tasks} tasks = {setup_ms['json'] * tasks / 1000:.2f} s and "
        f"{setup_ms['avro'] * tasks / 1000:.2f} s of task time per batch (one task per partition)"
    )
    print(f"load average (1 min)    {load_end:>12.2f} at the end ({os.cpu_count()} cores)")
    print(f"benchmark wall time     {time.perf_counter() - began:>12.1f} s")
    summary = {
        "records": count,
        "raw_rate": round(raw_rate),
        "json_rate": round(rate["json"]),
        "avro_rate": round(rate["avro"]),
        "ratio_avro_vs_json": round(ratio, 3),
        "ratio_avro_vs_raw": round(rate["avro"] / raw_rate, 3),
        "ratio_json_vs_raw": round(rate["json"] / raw_rate, 3),
        "spark_startup_s": round(startup_s, 2),
        "json_cpu_s_per_1m": round(median_cpu["json"] * per_1m, 2),
        "avro_cpu_s_per_1m": round(median_cpu["avro"] * per_1m, 2),
        "json_rates": [round(count / r.seconds) for r in by_format["json"]],
        "avro_rates": [round(count / r.seconds) for r in by_format["avro"]],
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
