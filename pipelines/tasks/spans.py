"""Offset spans, the unit a reading task reads ([from, until) of one partition), the error a read raises, and what
a span's consumer must do (`SpanConsumer`: confluent-kafka's Python consumer or the C one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from cohort.common.names import validate_topic_name
from cohort.pipelines.tasks.records import (
    ConsumeError,
)

__all__ = ["OffsetSpan", "ReadError", "SpanConsumer", "record_spark_schema", "validate_partition"]


def validate_partition(topic: str, partition: object) -> int:
    """Return `partition` if it is an int >= 0 (not a bool), else raise ValueError naming it: partition
    numbers end up in directory names and Kafka requests."""
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ValueError(f"partition must be an int >= 0, got {partition!r} for topic {topic!r}")
    return partition


class ReadError(RuntimeError):
    """A span could not be read: the broker stayed silent, an error persisted past its retries, or the
    records are gone (offset out of range)."""


@dataclass(frozen=True)
class OffsetSpan:
    """A range [from_offset, until_offset) of one partition that a single Spark task reads."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        validate_partition(self.topic, self.partition)
        if self.from_offset < 0 or self.until_offset < self.from_offset:
            raise ValueError(
                f"invalid span [{self.from_offset}, {self.until_offset}) for {self.topic}-{self.partition}"
            )


def record_spark_schema() -> str:
    """The Spark DDL schema matching RECORD_SCHEMA."""
    return (
        "topic string, partition int, offset long, timestamp long, key binary, value binary, "
        "headers array<struct<key:string,value:binary>>, error string"
    )


class SpanConsumer(Protocol):
    """A consumer assigned at the start of one span: confluent-kafka's (`PythonConsumer`) or the C one
    (cohort.pipelines.tasks.native_reader.NativeConsumer), which return the same batches."""

    def consume(self, max_messages: int, timeout_s: float) -> tuple[pa.RecordBatch | None, list[ConsumeError]]:
        """Up to `max_messages` records as one RECORD_SCHEMA batch (None if none came) and the error messages,
        within `timeout_s`, returned as soon as an error or end-of-partition message is among them (a span ending
        on holes does not wait out the timeout)."""
        ...

    def close(self) -> None:
        """Leave and free the consumer."""
        ...
