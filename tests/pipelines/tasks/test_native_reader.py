"""The C consumer against the real broker: the same batches as confluent-kafka's Python consumer, record for
record (keys, values, nulls and empties, timestamps, headers, holes, the span's end), the same failures, and
confluent-kafka's consumer whenever the C one cannot be used."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaException, Producer

from cohort.pipelines.tasks import native_reader
from cohort.pipelines.tasks.native_reader import NativeConsumer, librdkafka_settings
from cohort.pipelines.tasks.reader import PythonConsumer, ReadError, open_consumer, read_range, read_spans
from cohort.pipelines.tasks.records import RECORD_SCHEMA, UNREADABLE_HEADERS
from tests.pipelines.batch.corpus_records import RawHeaderKey


def _read(config: dict[str, Any], span: Any, *, native: bool, **options: Any) -> pa.Table:
    consumer = open_consumer(config, span, native=native)
    assert isinstance(consumer, NativeConsumer if native else PythonConsumer)
    batches = list(read_range(config, span, consumer=consumer, **options))
    assert all(b.schema == RECORD_SCHEMA for b in batches)
    return pa.Table.from_batches(batches, schema=RECORD_SCHEMA)


def _both(config: dict[str, Any], span: Any, **options: Any) -> pa.Table:
    native = _read(config, span, native=True, **options)
    python = _read(config, span, native=False, **options)
    assert native.equals(python), "the C consumer's batches differ from confluent-kafka's"
    return native


def test_the_extension_is_built_and_drives_confluent_kafkas_librdkafka():
    """`pip install` builds it with gcc; without it every read would quietly take the slower Python path."""
    import confluent_kafka

    assert native_reader.native_available()
    module = native_reader._module()
    assert module is not None and module.version() == confluent_kafka.libversion()[0]


def test_every_kind_of_record_reads_as_confluent_kafka_reads_it(kafka_config, topic):
    producer = Producer({**kafka_config, "linger.ms": 5})
    producer.produce(topic, value=b"a", key=b"k", partition=0, headers=[("trace", b"t1"), ("empty", None)])
    producer.produce(topic, value=None, key=b"tombstone", partition=0)
    producer.produce(topic, value=b"", key=b"", partition=0)
    producer.produce(topic, value=b"\x00\xff" * 5000, key=None, partition=0, timestamp=1)
    producer.produce(topic, value=b"early", partition=0, timestamp=2)
    for i in range(2000):
        producer.produce(topic, value=f"v{i}".encode(), key=str(i % 7).encode() if i % 3 else None, partition=0)
    producer.flush(15)
    table = _both(kafka_config, native_reader_span(topic, 0, 2005), batch_size=333)
    rows = table.slice(0, 5).to_pylist()
    assert [r["key"] for r in rows] == [b"k", b"tombstone", b"", None, None]
    assert [r["value"] for r in rows] == [b"a", None, b"", b"\x00\xff" * 5000, b"early"]
    assert rows[0]["headers"] == [{"key": "trace", "value": b"t1"}, {"key": "empty", "value": None}]
    assert [r["timestamp"] for r in rows][3:] == [1, 2]
    assert table.column("offset").to_pylist() == list(range(2005))
    assert table.column("error").null_count == 2005


def test_a_header_key_that_is_not_utf8_quarantines_its_record_in_both(kafka_config, topic):
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka_config["bootstrap.servers"], linger_ms=0)
    try:
        for value in (b"before", b"hostile", b"after"):
            headers = [(RawHeaderKey(b"\xff\xfe-key"), b"x")] if value == b"hostile" else [("ok", b"1")]
            producer.send(topic, value=value, headers=headers, partition=0).get(30)
    finally:
        producer.close()
    rows = _both(kafka_config, native_reader_span(topic, 0, 3)).to_pylist()
    assert [(r["value"], r["error"], r["headers"]) for r in rows] == [
        (b"before", None, [{"key": "ok", "value": b"1"}]),
        (b"hostile", UNREADABLE_HEADERS, None),
        (b"after", None, [{"key": "ok", "value": b"1"}]),
    ]


def test_a_span_ends_at_its_bound_or_at_a_transaction_marker(kafka_config, topic, produce_records):
    producer = Producer({**kafka_config, "transactional.id": f"tx-{uuid.uuid4().hex}"})
    producer.init_transactions(15)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"t{i}".encode(), partition=0)
    producer.commit_transaction(15)  # offsets 0-2 and the commit marker at 3: the span [0, 4) holds 3 records
    assert _both(kafka_config, native_reader_span(topic, 0, 4)).column("value").to_pylist() == [b"t0", b"t1", b"t2"]
    produce_records(topic, [(0, None, str(i).encode()) for i in range(50)])  # offsets 4-53
    middle = _both(kafka_config, native_reader_span(topic, 0, 20), batch_size=1000)
    assert middle.column("offset").to_pylist() == [0, 1, 2, *range(4, 20)]  # cut at the bound, past the marker


def test_silence_fails_the_same_way(kafka_config, topic, produce_records):
    produce_records(topic, [(0, None, b"x")] * 3)
    for native in (True, False):
        with pytest.raises(ReadError, match=rf"no data from {topic}-0 at offset 3 \(reading until 10\)"):
            _read(kafka_config, native_reader_span(topic, 0, 10), native=native, read_timeout_s=1, poll_timeout_s=0.2)


def test_settings_the_c_consumer_cannot_take_fall_back_to_confluent_kafka(kafka_config, topic):
    assert librdkafka_settings({"a": True, "b": 5, "c": 0.5, "d": "x"}) == [
        ("a", "true"), ("b", "5"), ("c", "0.5"), ("d", "x")
    ]  # fmt: skip
    assert librdkafka_settings({"error_cb": print}) is None
    with_callback = {**kafka_config, "error_cb": lambda error: None}
    assert isinstance(open_consumer(with_callback, native_reader_span(topic, 0, 1)), PythonConsumer)
    with pytest.raises(KafkaException, match=r"no\.such\.setting"):  # confluent-kafka's own words for a bad setting
        open_consumer({**kafka_config, "no.such.setting": "1"}, native_reader_span(topic, 0, 1))


def test_reading_tasks_read_through_the_c_consumer(spark, kafka_config, topic_factory, produce_records):
    """The Spark path: each task's consumer is the C one (its Python worker built the extension's batches)."""
    topic = topic_factory(2)
    produce_records(topic, [(i % 2, None, str(i).encode()) for i in range(400)])
    spans = [native_reader_span(topic, p, 0, 200) for p in range(2)]

    def kinds(batches: Any) -> Any:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                consumer = open_consumer(kafka_config, spans[index])
                consumer.close()
                yield pa.RecordBatch.from_pydict({"kind": [type(consumer).__name__]})

    assert {r.kind for r in spark.range(0, 2, 1, 2).mapInArrow(kinds, "kind string").collect()} == {"NativeConsumer"}
    got = sorted((r.partition, r.offset, r.value) for r in read_spans(spark, kafka_config, spans).collect())
    assert got == [(p, o, str(2 * o + p).encode()) for p in range(2) for o in range(200)]


def native_reader_span(topic: str, partition: int, *bounds: int) -> Any:
    """OffsetSpan(topic, partition, from, until); one bound: [0, bound)."""
    from cohort.pipelines.tasks.reader import OffsetSpan

    start, until = (0, bounds[0]) if len(bounds) == 1 else bounds
    return OffsetSpan(topic, partition, start, until)
