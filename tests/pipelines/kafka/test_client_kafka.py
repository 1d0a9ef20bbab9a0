"""The driver's Kafka requests (cohort.pipelines.kafka.client) on Apache Kafka and on the embedded broker.

End offsets: Kafka's high watermark is the log's end as a consumer reads it, so `watermarks` takes it as it is, with
no fetch; only a cluster whose metadata names a deviating broker (the embedded Tansu broker's cluster id) gets the
fetch that finds the records past its watermark. Times: `offsets_for_times` answers the first offset at or after a
time on records with real timestamps (Tansu answers 0 to every time: README).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from cohort.common.types import TopicPartition
from cohort.devtools.embedded_broker import TANSU_CLUSTER_ID
from cohort.pipelines.kafka import client
from cohort.pipelines.kafka.client import (
    DEVIATING_CLUSTER_IDS,
    offsets_for_times,
    read_watermarks,
    watermark_falls_short,
    watermarks,
)
from cohort.runtime.kafka_access import KafkaAccess
from tests.support.kafka_records import produce_events, require_kafka

MINUTE_MS = 60_000


def _batched(config: dict[str, Any], topic: str, partitions: int, per_partition: int) -> None:
    """Records through a producer with librdkafka's default batching (several records per batch)."""
    producer = Producer(config)
    for i in range(partitions * per_partition):
        producer.produce(topic, value=b"x", partition=i % partitions)
    assert producer.flush(30) == 0


def _raw(config: dict[str, Any], tps: list[TopicPartition]) -> tuple[dict[TopicPartition, tuple[int, int]], bool]:
    """The broker's own watermark answers, and whether the cluster counts as one whose watermark falls short."""
    consumer = Consumer({**config, "group.id": f"g-{uuid.uuid4().hex}"})
    try:
        return read_watermarks(consumer, tps), watermark_falls_short(consumer, tps[0].topic)
    finally:
        consumer.close()


def test_on_kafka_the_end_offset_is_the_high_watermark_taken_without_a_fetch(
    kafka_config, topic_factory, monkeypatch: pytest.MonkeyPatch
):
    require_kafka("an exact high watermark")
    topic = topic_factory(3)
    tps = [TopicPartition(topic, p) for p in range(3)]
    _batched(kafka_config, topic, 3, 1000)
    raw, falls_short = _raw(kafka_config, tps)
    assert raw == dict.fromkeys(tps, (0, 1000)) and not falls_short, "Kafka's watermark is the end of the log"
    assert watermarks(kafka_config, tps, confirm_ends=True) == raw, "a fetch from it finds nothing past it"

    def no_fetch(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no fetch on Apache Kafka")

    monkeypatch.setattr(client, "fetched_ends", no_fetch)
    assert watermarks(kafka_config, tps) == raw
    assert KafkaAccess(kafka_config).end_offsets(tps) == dict.fromkeys(tps, 1000), "plans, lag, describe, audit"


@pytest.mark.embedded_broker  # Tansu's watermark falls short of the log's end after default batching (README)
def test_on_the_embedded_broker_a_fetch_confirms_the_end_offsets(kafka_config, topic_factory):
    assert TANSU_CLUSTER_ID in DEVIATING_CLUSTER_IDS
    topic = topic_factory(3)
    tps = [TopicPartition(topic, p) for p in range(3)]
    _batched(kafka_config, topic, 3, 1000)
    raw, falls_short = _raw(kafka_config, tps)
    assert falls_short, "the embedded broker's metadata names Tansu's cluster id"
    assert any(high < 1000 for _low, high in raw.values()), raw
    assert watermarks(kafka_config, tps) == dict.fromkeys(tps, (0, 1000))
    assert watermarks(kafka_config, tps, confirm_ends=False) == raw


def test_offsets_for_times_answers_the_first_record_at_or_after_each_time(kafka_config, topic_factory):
    require_kafka("offsets_for_times")
    topic = topic_factory(2)
    tps = [TopicPartition(topic, p) for p in range(2)]
    t0 = int(time.time() * 1000) - 60 * MINUTE_MS
    # partition 0: a record a minute from t0; partition 1: one every two minutes from t0 + 30 s
    produce_events(
        kafka_config,
        topic,
        range(40),
        partition=lambda i: i % 2,
        timestamp_ms=lambda i: t0 + (i // 2) * (i % 2 + 1) * MINUTE_MS + (i % 2) * MINUTE_MS // 2,
    )
    assert offsets_for_times(kafka_config, tps, t0 - MINUTE_MS) == {tps[0]: 0, tps[1]: 0}
    assert offsets_for_times(kafka_config, tps, t0) == {tps[0]: 0, tps[1]: 0}
    assert offsets_for_times(kafka_config, tps, t0 + 10 * MINUTE_MS) == {tps[0]: 10, tps[1]: 5}
    assert offsets_for_times(kafka_config, tps, t0 + 25 * MINUTE_MS) == {tps[0]: None, tps[1]: 13}
    assert offsets_for_times(kafka_config, tps, t0 + 19 * MINUTE_MS + 1) == {tps[0]: None, tps[1]: 10}
    assert offsets_for_times(kafka_config, tps, int(time.time() * 1000) + MINUTE_MS) == dict.fromkeys(tps, None)
