"""Raw Kafka records as the reading tasks hand them on: their Arrow schema, and the errors a consume call returns
instead of records. Shared by the Python and the C consumers (cohort.pipelines.tasks.reader, .native_reader)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

__all__ = [
    "FATAL",
    "GONE",
    "HEADER_TYPE",
    "PARTITION_EOF",
    "RECORD_SCHEMA",
    "UNREADABLE_HEADERS",
    "ConsumeError",
    "header_column",
    "raw_batch",
]

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

# Annotated: the fields' types differ, and mypy would infer list[object] for the list literal.
_RECORD_FIELDS: list[pa.Field[Any]] = [
    pa.field("topic", pa.string(), nullable=False),
    pa.field("partition", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),
    pa.field("timestamp", pa.int64()),  # milliseconds since the epoch, as Kafka carries it; null if absent
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", HEADER_TYPE),
    pa.field("error", pa.string()),  # why the record could not be read in full; null when it was
]
RECORD_SCHEMA = pa.schema(_RECORD_FIELDS)
"""The Arrow schema of raw records, one row per Kafka message. A record with an `error` is quarantined."""

UNREADABLE_HEADERS = "record headers cannot be read: a header key that is not valid UTF-8 (headers not kept)"


@dataclass(frozen=True)
class ConsumeError:
    """A message that carried an error instead of a record (end of partition, offset out of range, a broker
    error), or a consume call that failed as a whole (`offset` -1)."""

    offset: int
    code: int
    reason: str
    fatal: bool = False


PARTITION_EOF = -191  # librdkafka's RD_KAFKA_RESP_ERR__PARTITION_EOF
GONE = (1, -140)  # OFFSET_OUT_OF_RANGE, RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET: the records were deleted
FATAL = -150  # RD_KAFKA_RESP_ERR__FATAL
"""librdkafka's error codes a reading task tells apart."""

Headers = Sequence[tuple[str, bytes | None]]


def header_column(per_record: Sequence[Headers | None], n: int) -> pa.Array:
    """The headers column: each record's (key, value) pairs, null for a record with none."""
    if not any(per_record):
        return pa.nulls(n, type=HEADER_TYPE)
    rows = [[{"key": k, "value": v} for k, v in pairs] if pairs else None for pairs in per_record]
    return pa.array(rows, type=HEADER_TYPE)


def raw_batch(
    topic: str,
    partition: int,
    offsets: pa.Array,
    timestamps: pa.Array,
    keys: pa.Array,
    values: pa.Array,
    headers: pa.Array,
    errors: pa.Array | None,
) -> pa.RecordBatch:
    """One RECORD_SCHEMA batch of a partition's records from its columns (`errors` None: none)."""
    n = len(offsets)
    columns: list[pa.Array[Any]] = [
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        offsets,
        timestamps,
        keys,
        values,
        headers,
        pa.nulls(n, type=pa.string()) if errors is None else errors,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=RECORD_SCHEMA)
