"""Small confluent-kafka helpers the data path and the resources share: partition counts and offsets.

Everything here talks to Kafka through confluent-kafka only (no Spark, no Dagster). `config` is a plain
librdkafka configuration dict (bootstrap servers plus any security settings).

End offsets (`watermarks`): on Apache Kafka the end the broker answers (the high watermark; the last stable
offset while a transaction is open, as the probe reads read_committed) is the log's end as a consumer reads it
(a fetch from it finds nothing), so it is the end offset. The embedded Tansu broker answers the base offset of
the partition's last record batch + 1 instead; on a cluster that identifies itself as one (its metadata's
cluster id is in `DEVIATING_CLUSTER_IDS`), a consumer assigned at each partition's high watermark reads until
end-of-partition, and the end offset is where that fetch ended (`fetched_ends`): the rest of the last batch
comes back in its fetch, so a plan or a lag built on it covers every record written. Kafka is spared that
fetch (about 50 ms a call on 8 partitions, against 1 ms for the metadata request).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from cohort.common.types import TopicPartition

__all__ = [
    "DEVIATING_CLUSTER_IDS",
    "fetched_ends",
    "offsets_for_times",
    "read_partition_counts",
    "read_watermarks",
    "watermark_falls_short",
    "watermarks",
]

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

    The high watermark is the broker's word only: see `watermarks` for the end offset (a fetch confirms it on a
    broker whose watermark falls short).
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
    # The last stable offset, whatever the caller's isolation: the watermark query answers it under read_committed
    # (and end-of-partition stops there), so no range ends inside an open transaction, which a read_committed
    # reader would wait on until its read timeout (docs/guarantees.md, "Transactions, compaction and record shapes").
    "isolation.level": "read_committed",
    "fetch.wait.max.ms": 10,  # the broker answers an empty fetch (end-of-partition) after 10 ms, not 500
    "fetch.queue.backoff.ms": 5,
}
"""librdkafka settings of the consumer that reads the watermarks and confirms end offsets with a fetch; they override
the caller's."""

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


DEVIATING_CLUSTER_IDS: Final = frozenset({"tansu_cluster"})
"""Cluster ids of brokers whose high watermark may fall short of the log's end: Tansu's default id, which the
embedded broker (cohort/devtools/embedded_broker.py) gives its cluster explicitly."""


def watermark_falls_short(consumer: Consumer, topic: str, *, timeout_s: float = 10.0) -> bool:
    """True when the cluster `consumer` reaches is one whose high watermark may stop short of the log's end
    (its metadata names a cluster id of `DEVIATING_CLUSTER_IDS`), so end offsets need a fetch to confirm them.
    One metadata request for `topic` (about 1 ms); a cluster whose metadata cannot be read counts as one that
    falls short: the fetch is then tried, and it keeps the watermarks when it fails too."""
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
    except KafkaException:
        return True
    return metadata.cluster_id in DEVIATING_CLUSTER_IDS


def watermarks(
    config: KafkaConfig,
    partitions: Sequence[TopicPartition],
    *,
    timeout_s: float = 10.0,
    confirm_ends: bool | None = None,
) -> dict[TopicPartition, tuple[int, int]]:
    """(low, end) per partition: the first available offset, and the end offset: the high watermark on Apache
    Kafka, the end a fetch from the high watermark confirms (`fetched_ends`) on a broker whose watermark falls
    short (`watermark_falls_short`: the embedded Tansu broker). `confirm_ends` forces the fetch (True) or skips
    it (False) whatever the cluster."""
    consumer = Consumer({**config, "group.id": "cohort-watermarks", **_PROBE_CONFIG})
    try:
        marks = read_watermarks(consumer, partitions, timeout_s=timeout_s)
        confirm = confirm_ends
        if confirm is None:
            confirm = bool(marks) and watermark_falls_short(consumer, next(iter(marks)).topic, timeout_s=timeout_s)
        if not confirm:
            return marks
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
