"""Small confluent-kafka helpers the data path and the resources share: partition counts and offsets.

Everything here talks to Kafka through confluent-kafka only (no Spark, no Dagster). `config` is a plain
librdkafka configuration dict (bootstrap servers plus any security settings).

End offsets are taken from a fetch, not only from the broker's watermark answer (`watermarks`): a consumer
assigned at each partition's high watermark reads until end-of-partition, and the end offset is where that
fetch ended. On Apache Kafka the watermark is exact, so the fetch finds nothing past it and the end offset
is the watermark. Some Kafka-compatible brokers (the embedded Tansu broker among them) answer the base
offset of the partition's last record batch + 1; the records after it come back in that batch's fetch, so
the end offset is exact there too, and a plan or a lag built on it covers every record written.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from cohort.common.types import TopicPartition

__all__ = ["fetched_ends", "offsets_for_times", "read_partition_counts", "read_watermarks", "watermarks"]

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
    """(low, high) watermark per partition as the broker answers it, through an existing consumer.

    The high watermark is the broker's word only: see `watermarks` for the end offset a fetch confirms.
    """
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


_PROBE_CONFIG: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",  # a watermark gone out of range ends the probe of that partition, no reset
    "isolation.level": "read_uncommitted",  # end-of-partition at the log end, not at the last stable offset
    "fetch.wait.max.ms": 10,  # the broker answers an empty fetch (end-of-partition) after 10 ms, not 500
    "fetch.queue.backoff.ms": 5,
}
"""librdkafka settings of the consumer that confirms end offsets with a fetch; they override the caller's."""

_SETTLE_S = 0.5
"""How long a partition whose fetch returned records may go on returning more before its probe stops."""


def fetched_ends(
    consumer: Consumer, highs: Mapping[TopicPartition, int], *, timeout_s: float = 10.0
) -> dict[TopicPartition, int]:
    """The end offset per partition as a fetch from its high watermark `highs[tp]` sees it.

    `consumer` must report end-of-partition (`enable.partition.eof`, as `_PROBE_CONFIG` sets); its
    assignment is replaced, then cleared. Each partition's end is the largest of its watermark, the offset
    after the last record fetched and the offset of its end-of-partition event, so every offset below it
    is one the broker served (or a hole it skipped): a plan may read up to it without waiting for records
    that do not exist. A partition is done at its end-of-partition event; one still receiving records
    `_SETTLE_S` after its first (producers are writing) stops there, and one the fetch never answers (or
    answers with an error) keeps its watermark, an end that is never too far; both are safe, as the next
    batch reads the rest.
    """
    if not highs:
        return {}
    ends = dict(highs)
    consumer.assign([KafkaTopicPartition(tp.topic, tp.partition, high) for tp, high in highs.items()])
    try:
        pending = set(highs)
        first_record: dict[TopicPartition, float] = {}
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            try:
                messages = consumer.consume(100_000, 0.05)
            except KafkaException:
                break  # the broker cannot be fetched from now: the watermarks stand
            now = time.monotonic()
            for message in messages:
                topic, partition, offset = message.topic(), message.partition(), message.offset()
                tp = TopicPartition(topic, partition) if topic is not None and partition is not None else None
                if tp is None or tp not in pending:
                    continue  # a client-wide error (no partition), or a partition already done
                error = message.error()
                if error is None and offset is not None:
                    ends[tp] = max(ends[tp], offset + 1)
                    first_record.setdefault(tp, now)
                elif error is not None and error.code() == KafkaError._PARTITION_EOF and offset is not None:
                    ends[tp] = max(ends[tp], offset)
                    pending.discard(tp)
                elif error is not None and not error.retriable():
                    pending.discard(tp)  # out of range, not authorized...: the watermark stands
            settled = [tp for tp in pending if tp in first_record and now - first_record[tp] >= _SETTLE_S]
            if settled:
                consumer.pause([KafkaTopicPartition(tp.topic, tp.partition) for tp in settled])
                pending.difference_update(settled)
    finally:
        consumer.unassign()
    return ends


def watermarks(
    config: KafkaConfig, partitions: Sequence[TopicPartition], *, timeout_s: float = 10.0
) -> dict[TopicPartition, tuple[int, int]]:
    """(low, end) per partition: the first available offset, and the end offset a fetch from the high
    watermark confirms (`fetched_ends`; on Apache Kafka it is the high watermark)."""
    consumer = Consumer({**config, "group.id": "cohort-watermarks", **_PROBE_CONFIG})
    try:
        marks = read_watermarks(consumer, partitions, timeout_s=timeout_s)
        ends = fetched_ends(consumer, {tp: high for tp, (_low, high) in marks.items()}, timeout_s=timeout_s)
        return {tp: (low, ends[tp]) for tp, (low, _high) in marks.items()}
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
