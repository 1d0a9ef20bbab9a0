"""Raw Kafka records as the reading tasks hand them on: their Arrow schema, and the errors a consume call returns
instead of records. Shared by the Python and the C consumers (cohort.pipelines.reader, .native_reader)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

__all__ = ["HEADER_TYPE", "RECORD_SCHEMA", "UNREADABLE_HEADERS", "ConsumeError"]

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
