"""Record shapes on Apache Kafka, through both readers (the C consumer and confluent-kafka's, the fallback): values
near the topic's `max.message.bytes` (900 KB under 1 MiB, fetched with fetch sizes smaller than one record too),
records with 100 headers (a repeated header key, a null header value), null keys and null values (tombstones).

In `bytes` mode (and `utf8`) a null value lands as a null `value`; in `json` mode it is quarantined (docs/sink.md).
The sink, read with pyarrow, is compared with what the producer's delivery reports say was written.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from confluent_kafka import Producer

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tasks.reader import RECORD_SCHEMA, OffsetSpan, open_consumer, read_range
from tests.fixtures.kafka import broker_choice

LARGE = 900_000
"""Bytes of a large value: under the topic's max.message.bytes (1 MiB) with its key, headers and batch overhead."""

Written = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]
"""(partition, offset, key, value, headers) of a delivered record."""


@pytest.fixture(autouse=True)
def _apache_kafka() -> None:
    if broker_choice() == "embedded":
        pytest.skip("the embedded broker enforces no max.message.bytes")


def ignore_errors(_error: Any) -> None:
    """An `error_cb`: a Python callback, so the reading tasks take confluent-kafka's consumer (the fallback)."""


READERS = {"native": {}, "python": {"error_cb": ignore_errors}}

SMALL_FETCHES = {"max.partition.fetch.bytes": 65_536, "fetch.max.bytes": 131_072, "message.max.bytes": 131_072}
"""Fetch sizes far below one large record (librdkafka wants fetch.max.bytes >= message.max.bytes)."""


def large_value(i: int) -> bytes:
    """900 KB that differ from record to record (and do not compress to nothing)."""
    block = hashlib.sha256(str(i).encode()).digest()
    return (block * (LARGE // len(block) + 1))[:LARGE]


def many_headers(i: int) -> list[tuple[str, bytes | None]]:
    """100 headers: a null value first, a key given twice, the rest numbered."""
    return [("first", None), ("dup", b"a"), ("dup", b"b"), *((f"h{j}", f"{i}-{j}".encode()) for j in range(97))]


def produce_shapes(kafka_config: dict[str, Any], topic: str) -> list[Written]:
    """Partition 0: 16 values of 900 KB (null keys on even records, 100 headers on one); partition 1: 300 small
    records with 100 headers each, a null key on every third, a null value (with its key) on every fifth."""
    producer = Producer(kafka_config)  # librdkafka's default batching
    written: list[Written] = []

    def send(partition: int, key: bytes | None, value: bytes | None, headers: Any) -> None:
        def delivered(err: Any, msg: Any) -> None:
            assert err is None, err
            written.append((partition, msg.offset(), key, value, headers))

        producer.produce(topic, value=value, key=key, partition=partition, headers=headers, on_delivery=delivered)

    for i in range(16):
        send(0, None if i % 2 == 0 else f"big-{i}".encode(), large_value(i), many_headers(i) if i == 5 else None)
        producer.poll(0)
    for i in range(300):
        key = None if i % 3 == 0 else f"k{i}".encode()
        send(1, key if i % 5 else f"gone-{i}".encode(), None if i % 5 == 0 else f"v{i}".encode(), many_headers(i))
    assert producer.flush(60) == 0
    producer.close()
    return sorted(written, key=lambda w: (w[0], w[1]))


def as_rows(written: list[Written]) -> list[tuple[int, int, bytes | None, bytes | None, Any]]:
    """The records as the sink holds them: headers as [{key, value}], or None."""
    return [
        (p, o, k, v, None if h is None else [{"key": name, "value": value} for name, value in h])
        for p, o, k, v, h in written
    ]


@pytest.fixture
def shapes(kafka_config: dict[str, Any], topic_factory: Any) -> tuple[str, list[Written]]:
    topic = topic_factory(2, config={"max.message.bytes": str(1024 * 1024)})
    return topic, produce_shapes(kafka_config, topic)


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
@pytest.mark.parametrize("fetch", [{}, SMALL_FETCHES], ids=["default", "small-fetches"])
def test_the_readers_read_every_shape_as_written(kafka_config, shapes, native, fetch):
    """Fetch sizes smaller than one record still return it whole (the broker answers at least one batch)."""
    topic, written = shapes
    config = {**kafka_config, **fetch}
    rows = []
    for partition, until in ((0, 16), (1, 300)):
        span = OffsetSpan(topic, partition, 0, until)
        consumer = open_consumer(config, span, native=native)
        table = pa.Table.from_batches(list(read_range(config, span, consumer=consumer)), schema=RECORD_SCHEMA)
        assert table.column("error").null_count == table.num_rows
        columns = ["partition", "offset", "key", "value", "headers"]
        rows += list(zip(*(table.column(c).to_pylist() for c in columns), strict=True))
    assert rows == as_rows(written)


def sink_rows(lake: Path) -> list[tuple[int, int, bytes | None, bytes | None, Any]]:
    table = ds.dataset(str(lake), format="parquet", partitioning="hive").to_table(columns=["kafka", "value"])
    kafka = table.column("kafka").combine_chunks()
    columns = [kafka.field(f).to_pylist() for f in ("partition", "offset", "key", "headers")]
    rows = zip(*columns[:3], table.column("value").to_pylist(), columns[3], strict=True)
    return sorted(rows, key=lambda r: (r[0], r[1]))


@pytest.mark.parametrize("reader", ["native", "python"])
def test_every_shape_lands_once_as_written(spark, kafka_config, shapes, ledger, lake, reader):
    """`bytes` mode: 900 KB values, 100 headers, null keys and null values (a null `value` column) land as
    written, in one batch, with the default settings."""
    topic, written = shapes
    tps = [TopicPartition(topic, p) for p in range(2)]
    spec = PipelineSpec(sink_path=str(lake), value_format="bytes", consumer_config=READERS[reader])

    result = run_batch(spark, spec, kafka_config, tps, ledger)

    assert sink_rows(lake) == as_rows(written)
    assert [(p.until_offset, p.records, p.quarantined) for p in result.partitions] == [(16, 16, 0), (300, 300, 0)]
    for partition in result.partitions:
        size = sum(len(k or b"") + len(v or b"") for p, _o, k, v, _h in written if p == partition.partition)
        assert partition.bytes == size
    assert sum(1 for *_, v, _h in written if v is None) == 60


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_large_records_make_batches_of_fewer_rows(kafka_config, shapes, native):
    """Batches stay near `max_batch_bytes` (64 MiB by default): here 2 MiB, two records of 900 KB."""
    topic, written = shapes
    span = OffsetSpan(topic, 0, 0, 16)
    consumer = open_consumer(kafka_config, span, native=native)
    batches = list(read_range(kafka_config, span, consumer=consumer, max_batch_bytes=2 * 1024 * 1024))
    assert [b.num_rows for b in batches] == [2] * 8
    values = [v for b in batches for v in b.column("value").to_pylist()]
    assert values == [v for p, _o, _k, v, _h in written if p == 0]
