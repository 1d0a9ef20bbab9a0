"""Pins each Tansu 0.6 deviation from Apache Kafka that Cohort works around (README lists them).

If an upgrade of the embedded broker fixes one of these, its test fails: then drop the workaround it
names. Each test states the workaround it justifies.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from cohort.common.types import TopicPartition
from cohort.devtools.topics import produce
from cohort.pipelines.kafka_client import watermarks
from cohort.pipelines.reader import OffsetSpan, read_range


def _consume_all(config: dict, topic: str, isolation: str = "read_uncommitted") -> list[bytes]:
    consumer = Consumer(
        {**config, "group.id": f"g-{uuid.uuid4().hex}", "enable.partition.eof": True, "isolation.level": isolation}
    )
    consumer.assign([KafkaTopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise KafkaException(message.error())
            values.append(message.value())
    finally:
        consumer.close()
    return values


def test_create_partitions_is_unsupported(kafka_config, topic_factory):
    """Workaround: partition growth is tested through pattern subscriptions (a new matching topic)."""
    topic = topic_factory(1)
    admin = AdminClient(kafka_config)
    futures = admin.create_partitions([NewPartitions(topic, 3)])
    with pytest.raises(KafkaException) as info:
        for future in futures.values():
            future.result(timeout=10)
    assert info.value.args[0].code() == KafkaError._UNSUPPORTED_FEATURE


def test_high_watermark_is_last_batch_base_plus_one(kafka_config, topic):
    """Workaround: producers end each partition with a one-record batch; readers stop at `until` or EOF."""
    producer = Producer({**kafka_config, "linger.ms": 2000, "batch.num.messages": 100})
    for i in range(5):
        producer.produce(topic, value=str(i).encode(), partition=0)
    assert producer.flush(15) == 0
    (low, high) = watermarks(kafka_config, [TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
    assert (low, high) == (0, 1), "one batch of 5 records: Kafka says 5, Tansu says base offset 0 + 1"
    # the reader trusts the planned `until`, not the watermark: all five records are there
    rows = [v for b in read_range(kafka_config, OffsetSpan(topic, 0, 0, 5)) for v in b.column("value").to_pylist()]
    assert rows == [b"0", b"1", b"2", b"3", b"4"]


def test_holding_back_the_last_record_makes_the_watermark_exact(kafka_config, topic_factory):
    """The workaround itself: `produce` sends each partition's last record in a batch of its own."""
    topic = topic_factory(2)
    produce(kafka_config, topic, ((i % 2, None, b"x") for i in range(2001)))
    marks = watermarks(kafka_config, [TopicPartition(topic, 0), TopicPartition(topic, 1)])
    assert marks == {TopicPartition(topic, 0): (0, 1001), TopicPartition(topic, 1): (0, 1000)}


def test_offsets_for_times_always_answers_zero(kafka_config, topic, produce_records):
    """Workaround: the timestamp reset policy is tested on its planning logic, not against Tansu."""
    produce_records(topic, [(0, None, b"a"), (0, None, b"b"), (0, None, b"c")])
    consumer = Consumer({**kafka_config, "group.id": f"g-{uuid.uuid4().hex}"})
    try:
        far_future = int((time.time() + 3600) * 1000)
        answer = consumer.offsets_for_times([KafkaTopicPartition(topic, 0, far_future)], timeout=10)
    finally:
        consumer.close()
    assert answer[0].offset == 0, "Kafka answers -1 (no such record) for a future timestamp"


def test_read_committed_does_not_hide_aborted_records(kafka_config, topic):
    """Workaround: tests never rely on read_committed hiding aborted transactional records."""
    producer = Producer({**kafka_config, "transactional.id": f"tx-{uuid.uuid4().hex}"})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, value=b"aborted", partition=0)
    producer.flush(15)
    producer.abort_transaction(15)
    assert b"aborted" in _consume_all(kafka_config, topic, isolation="read_committed")


def test_describe_consumer_groups_lists_no_members(kafka_config, topic, produce_records):
    """Workaround: Cohort reads membership from its own coordinator, never from Kafka's describe."""
    produce_records(topic, [(0, None, b"a")])
    group = f"g-{uuid.uuid4().hex}"
    consumer = Consumer({**kafka_config, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not consumer.assignment():
            consumer.poll(0.5)
        assert consumer.assignment(), "the consumer joined Kafka's group and got its partition"
        admin = AdminClient(kafka_config)  # keep the handle alive while the future resolves
        description = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assert list(description.members) == []
    finally:
        consumer.close()
