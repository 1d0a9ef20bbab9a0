"""Records an ordinary batching producer wrote are all consumed in one batch, and lag is true, on the embedded
broker too (whose high watermark stops at the base offset of a partition's last record batch + 1)."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest
from confluent_kafka import Consumer, Producer

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.kafka.client import read_watermarks, watermarks
from cohort.pipelines.kafka.mirror import KafkaOffsetMirror, kafka_committed
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tasks.reader import OffsetSpan, read_range
from cohort.resources.kafka import KafkaResource
from tests.support.orders import ORDER_SCHEMA, Order, order

PARTITIONS = 3


def _produce(config: dict, topic: str, first: int, count: int) -> Counter[int]:
    """`count` orders (every 40th malformed) through a plain producer with librdkafka's default batching."""
    producer = Producer(config)
    failed: list[str] = []
    per_partition: Counter[int] = Counter()
    for i in range(first, first + count):
        partition = (i % 5) % PARTITIONS  # 2 : 2 : 1
        value = b"not json" if i % 40 == 0 else order(i)
        producer.produce(
            topic,
            key=f"k{i}".encode(),
            value=value,
            partition=partition,
            on_delivery=lambda err, _msg: failed.append(str(err)) if err is not None else None,
        )
        per_partition[partition] += 1
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    assert not failed, f"{len(failed)} records not delivered, first: {failed[0]}"
    return per_partition


def _raw_highs(config: dict, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex}"})
    try:
        return {tp: high for tp, (_low, high) in read_watermarks(consumer, tps).items()}
    finally:
        consumer.close()


@pytest.mark.embedded_broker  # the workaround for Tansu's watermark: its raw watermarks fall short (README)
def test_default_batching_is_consumed_in_full_and_lag_is_true(
    spark, kafka_config, topic_factory, ledger, group, lake, sink_rows
):
    for _attempt in range(3):  # a machine stalled past linger.ms may send every partition's last record alone
        topic = topic_factory(PARTITIONS)
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        produced = _produce(kafka_config, topic, 0, 1800)
        ends = {tp: produced[tp.partition] for tp in tps}
        raw = _raw_highs(kafka_config, tps)
        if any(raw[tp] < ends[tp] for tp in tps):
            break
    assert any(raw[tp] < ends[tp] for tp in tps), f"the producer batched: the broker's watermarks fall short {raw}"
    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA, model=Order, consume_batch_size=100)
    kafka = KafkaResource(bootstrap_servers=kafka_config["bootstrap.servers"])
    mirror = KafkaOffsetMirror(kafka_config)

    result = run_batch(spark, spec, kafka_config, tps, ledger, group=group, mirror=mirror)

    assert result.mirror_error is None
    assert (result.records, result.quarantined) == (1800 - 45, 45)
    assert [(p.from_offset, p.until_offset, p.consumed) for p in result.partitions] == [
        (0, ends[tp], ends[tp]) for tp in tps
    ]
    good = [(r.kafka.partition, r.kafka.offset) for r in sink_rows(lake)]
    bad = [(r.kafka.partition, r.kafka.offset) for r in spark.read.parquet(str(lake / "_quarantine")).collect()]
    assert sorted(good + bad) == [(tp.partition, o) for tp in tps for o in range(ends[tp])]
    assert ledger.committed_offsets(tps) == ends
    assert {tp: offset for tp, (offset, _) in kafka_committed(kafka_config, group, tps).items()} == ends
    assert kafka.end_offsets(tps) == ends, "no lag: every record written is committed"

    added = _produce(kafka_config, topic, 1800, 700)
    lag = {tp: kafka.end_offsets(tps)[tp] - ledger.committed_offsets(tps)[tp] for tp in tps}
    assert lag == {tp: added[tp.partition] for tp in tps}, "the lag is what was produced since"

    again = run_batch(spark, spec, kafka_config, tps, ledger, group=group, mirror=mirror)

    total = {tp: ends[tp] + added[tp.partition] for tp in tps}
    assert [(p.from_offset, p.until_offset, p.consumed) for p in again.partitions] == [
        (ends[tp], total[tp], added[tp.partition]) for tp in tps
    ]
    assert ledger.committed_offsets(tps) == total and kafka.end_offsets(tps) == total
    assert len(sink_rows(lake)) + spark.read.parquet(str(lake / "_quarantine")).count() == 2500


def test_end_offsets_taken_while_a_producer_writes_are_prompt_and_readable(kafka_config, topic_factory):
    """A partition that keeps receiving records never reports end-of-partition: its probe stops soon after
    its first records, and every offset below the end it reports holds a record (a plan can read to it)."""
    topic = topic_factory(PARTITIONS)  # `_produce` writes to all three partitions
    tps = [TopicPartition(topic, p) for p in range(2)]  # 0 keeps receiving records below, 1 stays idle
    _produce(kafka_config, topic, 0, 300)
    stop = threading.Event()

    def keep_writing() -> None:
        producer = Producer({**kafka_config, "linger.ms": 1})
        while not stop.is_set():
            producer.produce(topic, value=b"more", partition=0)
            producer.poll(0.001)
        producer.flush(10)

    writer = threading.Thread(target=keep_writing, daemon=True)
    writer.start()
    try:
        time.sleep(0.3)
        started = time.monotonic()
        ends = watermarks(kafka_config, tps)
        took = time.monotonic() - started
    finally:
        stop.set()
        writer.join(15)
    assert took < 3.0, f"the probe of a busy partition took {took:.1f} s"
    (_, end0), (_, end1) = ends[tps[0]], ends[tps[1]]
    assert end1 == sum(1 for i in range(300) if (i % 5) % PARTITIONS == 1)  # idle: exact
    offsets = [
        o for b in read_range(kafka_config, OffsetSpan(topic, 0, 0, end0)) for o in b.column("offset").to_pylist()
    ]
    assert offsets == list(range(end0))
