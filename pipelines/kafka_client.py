"""Small confluent-kafka helpers the data path and the resources share: partition counts and offsets.

Everything here talks to Kafka through confluent-kafka only (no Spark, no Dagster). `config` is a plain
librdkafka configuration dict (bootstrap servers plus any security settings).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from cohort.common.types import TopicPartition

__all__ = ["offsets_for_times", "read_partition_counts", "read_watermarks", "watermarks"]

KafkaConfig = Mapping[str, Any]


def read_partition_counts(
    admin: AdminClient, topics: Iterable[str] | None = None, *, timeout_s: float = 10.0
) -> dict[str, int]:
    """Partition count per topic through an existing admin client (see `partition_counts`)."""
    metadata = admin.list_topics(timeout=timeout_s)
    wanted = None if topics is None else set(topics)
    return {
        name: len(meta.partitions)
        for name, meta in metadata.topics.items()
        if meta.error is None and not name.startswith("__") and (wanted is None or name in wanted)
    }


def read_watermarks(
    consumer: Consumer, partitions: Sequence[TopicPartition], *, timeout_s: float = 10.0
) -> dict[TopicPartition, tuple[int, int]]:
    """(low, high) watermark per partition through an existing consumer (see `watermarks`)."""
    result: dict[TopicPartition, tuple[int, int]] = {}
    for tp in partitions:
        try:
            low, high = consumer.get_watermark_offsets(
                KafkaTopicPartition(tp.topic, tp.partition), timeout=timeout_s, cached=False
            )
        except KafkaException as exc:
            raise KafkaException(f"could not read the watermarks of {tp}: {exc}") from exc
        result[TopicPartition(tp.topic, tp.partition)] = (int(low), int(high))
    return result


def watermarks(
    config: KafkaConfig, partitions: Sequence[TopicPartition], *, timeout_s: float = 10.0
) -> dict[TopicPartition, tuple[int, int]]:
    """(low, high) watermark per partition: the first available offset and the end offset."""
    consumer = Consumer({**config, "group.id": "cohort-watermarks", "enable.auto.commit": False})
    try:
        return read_watermarks(consumer, partitions, timeout_s=timeout_s)
    finally:
        consumer.close()


def offsets_for_times(
    config: KafkaConfig, partitions: Sequence[TopicPartition], timestamp_ms: int, *, timeout_s: float = 10.0
) -> dict[TopicPartition, int | None]:
    """The first offset whose timestamp is at or after `timestamp_ms`, per partition; None when no record
    is that recent. (The embedded Tansu broker always answers 0: see cohort/devtools/embedded_broker.py.)"""
    if not partitions:
        return {}
    consumer = Consumer({**config, "group.id": "cohort-offsets", "enable.auto.commit": False})
    try:
        query = [KafkaTopicPartition(tp.topic, tp.partition, timestamp_ms) for tp in partitions]
        try:
            answers = consumer.offsets_for_times(query, timeout=timeout_s)
        except KafkaException as exc:
            raise KafkaException(f"could not look up offsets for timestamp {timestamp_ms}: {exc}") from exc
        result: dict[TopicPartition, int | None] = {}
        for answer in answers:
            if answer.error is not None:
                raise KafkaException(f"offsets_for_times failed for {answer.topic}-{answer.partition}: {answer.error}")
            result[TopicPartition(answer.topic, answer.partition)] = answer.offset if answer.offset >= 0 else None
        return result
    finally:
        consumer.close()
