"""Executor-side Kafka reads: bounded offset ranges into Arrow batches through `mapInArrow`.

The driver builds one small DataFrame row per range (topic, partition, from, until); Spark ships each row
to a task, where `read_range` assigns a confluent-kafka consumer at `from` and consumes in batches until
the `until` offset (an offset bound, not a count: compacted topics and transaction markers leave holes)
or the end of the partition. No Maven jars: the Kafka client runs in the Python worker.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from assignment.names import validate_topic_name

__all__ = ["RECORD_SCHEMA", "OffsetSpan", "read_range", "read_spans", "record_spark_schema"]

RECORD_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64()),  # milliseconds since the epoch, as Kafka carries it
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field(
            "headers",
            pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])),
        ),
    ]
)
"""The Arrow schema of raw records, one row per Kafka message."""

_SPAN_SCHEMA = "topic string, partition int, from_offset long, until_offset long"


@dataclass(frozen=True)
class OffsetSpan:
    """A range [from_offset, until_offset) of one partition that a single Spark task reads."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        if self.partition < 0:
            raise ValueError(f"partition must be >= 0, got {self.partition} for topic {self.topic!r}")
        if self.from_offset < 0 or self.until_offset < self.from_offset:
            raise ValueError(
                f"invalid span [{self.from_offset}, {self.until_offset}) for {self.topic}-{self.partition}"
            )


def record_spark_schema() -> str:
    """The Spark DDL schema matching RECORD_SCHEMA."""
    return (
        "topic string, partition int, offset long, timestamp long, key binary, value binary, "
        "headers array<struct<key:string,value:binary>>"
    )


def _batch(columns: dict[str, list[Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(columns[f.name], type=f.type) for f in RECORD_SCHEMA], schema=RECORD_SCHEMA
    )


def read_range(
    config: Mapping[str, Any],
    span: OffsetSpan,
    *,
    batch_size: int = 10_000,
    poll_timeout_s: float = 1.0,
    max_idle_polls: int = 30,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of `span` as Arrow batches of at most `batch_size` rows.

    Stops at `until_offset` or at end-of-partition. A partition that stays silent for `max_idle_polls`
    consecutive polls before reaching `until_offset` is an error: the range was planned from offsets
    the broker reported, so silence means the broker is unreachable.
    """
    from confluent_kafka import Consumer, KafkaError, KafkaException
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    if span.from_offset >= span.until_offset:
        return
    consumer = Consumer(
        {
            **config,
            "group.id": f"cohort-reader-{span.topic}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            "fetch.max.bytes": 52_428_800,
        }
    )
    try:
        consumer.assign([KafkaTopicPartition(span.topic, span.partition, span.from_offset)])
        columns: dict[str, list[Any]] = {f.name: [] for f in RECORD_SCHEMA}
        next_offset = span.from_offset
        idle = 0
        while next_offset < span.until_offset:
            messages = consumer.consume(min(batch_size, span.until_offset - next_offset), poll_timeout_s)
            if not messages:
                idle += 1
                if idle >= max_idle_polls:
                    raise TimeoutError(
                        f"no data from {span.topic}-{span.partition} at offset {next_offset} "
                        f"(want until {span.until_offset}) after {idle} polls of {poll_timeout_s} s"
                    )
                continue
            idle = 0
            reached_end = False
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        reached_end = True
                        continue
                    raise KafkaException(error)
                offset = message.offset()
                if offset >= span.until_offset:
                    reached_end = True
                    break
                columns["topic"].append(span.topic)
                columns["partition"].append(span.partition)
                columns["offset"].append(offset)
                columns["timestamp"].append(message.timestamp()[1])
                columns["key"].append(message.key())
                columns["value"].append(message.value())
                headers = message.headers()
                columns["headers"].append([{"key": k, "value": v} for k, v in headers] if headers else None)
                next_offset = offset + 1
            if len(columns["offset"]) >= batch_size:
                yield _batch(columns)
                columns = {f.name: [] for f in RECORD_SCHEMA}
            if reached_end:
                break
        if columns["offset"]:
            yield _batch(columns)
    finally:
        consumer.close()


def read_spans(spark: Any, config: Mapping[str, Any], spans: Sequence[OffsetSpan]) -> Any:
    """A Spark DataFrame of the raw records of `spans`, one Spark task per span."""
    kafka_config = dict(config)

    def read_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for row in batch.to_pylist():
                span = OffsetSpan(row["topic"], row["partition"], row["from_offset"], row["until_offset"])
                yield from read_range(kafka_config, span)

    rows = [(s.topic, s.partition, s.from_offset, s.until_offset) for s in spans]
    # parallelize with one slice per span: exactly one span per Spark task.
    plan = spark.createDataFrame(spark.sparkContext.parallelize(rows, max(len(rows), 1)), _SPAN_SCHEMA)
    return plan.mapInArrow(read_partition, record_spark_schema())
