"""The executor-side reader against the real broker: exact records, batching, headers, failures."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer

from cohort.pipelines.tasks.reader import RECORD_SCHEMA, OffsetSpan, ReadError, read_range, read_spans


def test_exact_records_across_many_consume_batches(kafka_config, topic, produce_records):
    produce_records(topic, [(0, f"k{i}".encode(), f"v{i}".encode()) for i in range(100)])
    batches = list(read_range(kafka_config, OffsetSpan(topic, 0, 13, 90), batch_size=7))
    assert all(b.schema == RECORD_SCHEMA and b.num_rows <= 7 for b in batches)
    assert len(batches) == 11  # 77 records in batches of at most 7
    rows = [row for b in batches for row in b.to_pylist()]
    assert [r["offset"] for r in rows] == list(range(13, 90))
    assert [(r["key"], r["value"]) for r in rows] == [(f"k{i}".encode(), f"v{i}".encode()) for i in range(13, 90)]
    assert {(r["topic"], r["partition"]) for r in rows} == {(topic, 0)}
    now_ms = time.time() * 1000
    assert all(now_ms - 600_000 < r["timestamp"] <= now_ms for r in rows)


def test_headers_and_null_keys_and_values(kafka_config, topic):
    producer = Producer({**kafka_config, "linger.ms": 0})
    producer.produce(topic, value=b"a", key=None, partition=0, headers=[("trace", b"t1"), ("empty", None)])
    producer.produce(topic, value=None, key=b"tombstone", partition=0)
    producer.flush(10)
    rows = [r for b in read_range(kafka_config, OffsetSpan(topic, 0, 0, 2)) for r in b.to_pylist()]
    assert rows[0]["headers"] == [{"key": "trace", "value": b"t1"}, {"key": "empty", "value": None}]
    assert (rows[0]["key"], rows[1]["value"], rows[1]["headers"]) == (None, None, None)


def test_an_empty_span_reads_nothing_without_contacting_kafka():
    assert list(read_range({"bootstrap.servers": "127.0.0.1:1"}, OffsetSpan("t", 0, 5, 5))) == []


def test_silence_before_the_end_of_a_span_fails_with_a_clear_error(kafka_config, topic, produce_records):
    produce_records(topic, [(0, None, b"x")] * 3)
    started = time.monotonic()
    with pytest.raises(ReadError, match=rf"no data from {topic}-0 at offset 3 \(reading until 10\)"):
        list(read_range(kafka_config, OffsetSpan(topic, 0, 0, 10), read_timeout_s=1.0, poll_timeout_s=0.2))
    assert time.monotonic() - started < 10


def test_spans_split_over_tasks_read_each_offset_once(spark, kafka_config, topic_factory, produce_records):
    topic = topic_factory(2)
    produce_records(topic, [(i % 2, None, str(i).encode()) for i in range(200)])
    spans = [OffsetSpan(topic, p, a, b) for p in range(2) for a, b in [(0, 30), (30, 31), (31, 100)]]
    frame = read_spans(spark, kafka_config, spans, batch_size=16)
    assert frame.rdd.getNumPartitions() == 6
    got = sorted((r.partition, r.offset, r.value) for r in frame.collect())
    assert got == [(p, o, str(2 * o + p).encode()) for p in range(2) for o in range(100)]
