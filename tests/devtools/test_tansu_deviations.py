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

from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.kafka.client import read_watermarks, watermarks
from cohort.pipelines.kafka.mirror import KafkaOffsetMirror, kafka_committed
from cohort.pipelines.tasks.reader import OffsetSpan, read_range

# Tansu's deviations, so on Tansu whichever broker the session runs (tests/fixtures/kafka.py).
pytestmark = pytest.mark.embedded_broker


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


def _raw_watermarks(config: dict, tps: list[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
    """The broker's own watermark answer, without the fetch that confirms the end offset."""
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex}"})
    try:
        return read_watermarks(consumer, tps)
    finally:
        consumer.close()


def test_high_watermark_is_last_batch_base_plus_one(kafka_config, topic):
    """Workaround: end offsets come from a fetch from the watermark (`kafka_client.watermarks`), which returns
    the rest of the last batch; plans, lag and audits all use them."""
    producer = Producer({**kafka_config, "linger.ms": 2000, "batch.num.messages": 100})
    for i in range(5):
        producer.produce(topic, value=str(i).encode(), partition=0)
    assert producer.flush(15) == 0
    tp = TopicPartition(topic, 0)
    assert _raw_watermarks(kafka_config, [tp])[tp] == (0, 1), "one batch of 5 records: Kafka says 5, Tansu 0 + 1"
    assert watermarks(kafka_config, [tp])[tp] == (0, 5), "the fetch from the watermark finds the real end"
    rows = [v for b in read_range(kafka_config, OffsetSpan(topic, 0, 0, 5)) for v in b.column("value").to_pylist()]
    assert rows == [b"0", b"1", b"2", b"3", b"4"]


def test_end_offsets_confirmed_by_a_fetch_are_exact_after_default_batching(kafka_config, topic_factory):
    """The workaround itself, with an ordinary producer: the raw watermarks fall short, the fetched ends do not."""
    topic = topic_factory(3)
    producer = Producer(kafka_config)  # librdkafka's default batching
    for i in range(3000):
        producer.produce(topic, value=b"x", partition=i % 3)
    assert producer.flush(15) == 0
    tps = [TopicPartition(topic, p) for p in range(3)]
    raw = _raw_watermarks(kafka_config, tps)
    assert any(high < 1000 for _low, high in raw.values()), f"default batching, Tansu's watermarks fall short: {raw}"
    assert watermarks(kafka_config, tps) == dict.fromkeys(tps, (0, 1000))
    producer.produce(topic, value=b"y", partition=1)
    assert producer.flush(15) == 0
    assert watermarks(kafka_config, tps)[tps[1]] == (0, 1001)


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


@pytest.mark.slow
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


def test_commit_metadata_is_dropped(kafka_config, topic, produce_records):
    """Workaround: the run id of a commit lives in the ledger and in the materializations (`cohort/run_id`);
    nothing reads it back from Kafka's committed-offset metadata, where Kafka keeps it and Tansu does not."""
    produce_records(topic, [(0, None, b"a"), (0, None, b"b")])
    group = f"g-{uuid.uuid4().hex}"
    tp = TopicPartition(topic, 0)
    KafkaOffsetMirror(kafka_config).mirror(group, [OffsetRange(topic, 0, 0, 2, records=2)], run_id="run-42")
    assert kafka_committed(kafka_config, group, [tp]) == {tp: (2, None)}, "Kafka answers (2, 'run-42')"
