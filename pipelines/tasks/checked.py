"""Checked records: raw Kafka batches decoded and validated inside the reading task, with Arrow.

`RecordChecker.check` turns one raw batch (cohort.pipelines.tasks.reader.RECORD_SCHEMA) into the shape the rest of the
batch works with: the Kafka coordinates as flat internal columns (`_cohort_topic`, `_cohort_partition`,
...), the decoded value columns, the raw value bytes (kept only for records that failed, for the quarantine)
and a failure reason (null when the record decoded and passed every check). The sink and quarantine rows
are cut from a checked batch by `sink_rows` and `quarantine_rows`, with the coordinates gathered into the
public `kafka` struct (topic, partition, offset, timestamp, key, headers) the transform and the outputs see.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from cohort.pipelines.formats.decode import (
    KAFKA_COLUMN,
    KAFKA_FIELDS,
    RAW_VALUE_COLUMN,
    REASON_COLUMN,
    ValueDecoder,
    kafka_column,
)
from cohort.pipelines.tasks.reader import RECORD_SCHEMA
from cohort.pipelines.tasks.validate import RowCheck, failure_reasons

__all__ = ["KEY_COLUMN", "Decoder", "RecordChecker", "is_scalar_key"]

KEY_COLUMN = "key"
"""The decoded key's column (when the key format decodes): a struct for record schemas, else the value."""


class Decoder(Protocol):
    """Raw Kafka bytes (an Arrow binary array) into decoded columns, with a reason per failed record."""

    @property
    def columns(self) -> StructType: ...

    @property
    def arrow_schema(self) -> pa.Schema: ...

    def decode(self, values: pa.Array) -> tuple[list[pa.Array], list[str | None]]: ...


_KAFKA_SPARK_TYPES = {
    "topic": StringType(),
    "partition": IntegerType(),
    "offset": LongType(),
    "timestamp": LongType(),
    "key": BinaryType(),
    "headers": ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
}
_TIMESTAMP = pa.timestamp("us", tz="UTC")


def is_scalar_key(columns: StructType) -> bool:
    """Whether a decoded key is its one `value` column (a scalar key) rather than a struct of its columns."""
    return len(columns.fields) == 1 and columns.fields[0].name == "value"


@dataclass(frozen=True)
class RecordChecker:
    """Decode + validate raw batches (pickled into the reading tasks: plain values only)."""

    decoder: ValueDecoder | Decoder
    checks: tuple[RowCheck, ...] = ()
    key_decoder: ValueDecoder | Decoder | None = None

    @cached_property
    def key_field(self) -> tuple[StructField, pa.Field[Any]] | None:
        """The `key` column's Spark and Arrow fields: the key's one column, or a struct of its columns."""
        if self.key_decoder is None:
            return None
        columns, arrow = self.key_decoder.columns, self.key_decoder.arrow_schema
        if is_scalar_key(columns):
            return StructField(KEY_COLUMN, columns.fields[0].dataType, True), pa.field(KEY_COLUMN, arrow.field(0).type)
        return StructField(KEY_COLUMN, columns, True), pa.field(KEY_COLUMN, pa.struct(list(arrow)))

    @cached_property
    def output_names(self) -> list[str]:
        """The decoded columns of sink rows, in order: `key` (when decoded), then the value columns."""
        key = [KEY_COLUMN] if self.key_field is not None else []
        return key + [f.name for f in self.decoder.columns.fields]

    def _key_fields(self) -> tuple[list[StructField], list[pa.Field[Any]]]:
        return ([self.key_field[0]], [self.key_field[1]]) if self.key_field is not None else ([], [])

    @cached_property
    def spark_schema(self) -> StructType:
        """The Spark schema of checked rows (what the reading tasks hand to Spark)."""
        coordinates = [StructField(kafka_column(f), _KAFKA_SPARK_TYPES[f]) for f in KAFKA_FIELDS]
        values = [StructField(f.name, f.dataType, True) for f in self.decoder.columns.fields]
        tail = [StructField(RAW_VALUE_COLUMN, BinaryType()), StructField(REASON_COLUMN, StringType())]
        return StructType([*coordinates, *self._key_fields()[0], *values, *tail])

    @cached_property
    def arrow_schema(self) -> pa.Schema:
        coordinates = [pa.field(kafka_column(f), RECORD_SCHEMA.field(f).type) for f in KAFKA_FIELDS]
        return pa.schema(
            [
                *coordinates,
                *self._key_fields()[1],
                *self.decoder.arrow_schema,
                pa.field(RAW_VALUE_COLUMN, pa.binary()),
                pa.field(REASON_COLUMN, pa.string()),
            ]
        )

    @cached_property
    def sink_schema(self) -> pa.Schema:
        """Arrow schema of sink rows: `kafka` struct, then the value columns."""
        return pa.schema([pa.field(KAFKA_COLUMN, _kafka_type()), *self._key_fields()[1], *self.decoder.arrow_schema])

    @cached_property
    def quarantine_schema(self) -> pa.Schema:
        """Arrow schema of quarantine rows: `kafka` struct, the raw `value` bytes and the `reason`."""
        return pa.schema(
            [pa.field(KAFKA_COLUMN, _kafka_type()), pa.field("value", pa.binary()), pa.field("reason", pa.string())]
        )

    def check(self, raw: pa.RecordBatch) -> pa.RecordBatch:
        """One checked batch (see the module doc) for a raw batch."""
        values, reasons = self.decoder.decode(raw.column("value"))
        keys: list[pa.Array] = []
        if self.key_decoder is not None and self.key_field is not None:
            raw_keys = raw.column("key")
            key_columns, key_reasons = self.key_decoder.decode(raw_keys)
            absent = raw_keys.is_null()  # a record produced without a key: a null `key`, nothing to decode
            unkeyed = absent.to_pylist() if raw_keys.null_count else [False] * len(raw_keys)
            for i, problem in enumerate(key_reasons):
                if problem is not None and reasons[i] is None and not unkeyed[i]:
                    reasons[i] = f"key: {problem}"
            if pa.types.is_struct(self.key_field[1].type):
                keys = [pa.StructArray.from_arrays(key_columns, fields=list(self.key_field[1].type), mask=absent)]
            else:
                keys = [pc.if_else(absent, pa.scalar(None, key_columns[0].type), key_columns[0])]
        if self.checks:
            decoded = pa.Table.from_arrays(values, schema=self.decoder.arrow_schema)
            for i, failed in enumerate(failure_reasons(self.checks, decoded)):
                if failed is not None and reasons[i] is None:
                    reasons[i] = failed
        errors = raw.column("error")  # the reader could not read the whole record: that reason comes first
        if errors.null_count < len(errors):
            for i, error in enumerate(errors.to_pylist()):
                if error is not None:
                    reasons[i] = error
        reason = pa.array(reasons, pa.string())
        if reason.null_count == len(reason):  # the common case: every record passed
            raw_value = pa.nulls(len(reason), pa.binary())
        else:
            raw_value = pc.if_else(reason.is_null(), pa.scalar(None, pa.binary()), raw.column("value"))
        columns = [raw.column(f) for f in KAFKA_FIELDS]
        return pa.RecordBatch.from_arrays([*columns, *keys, *values, raw_value, reason], schema=self.arrow_schema)

    def sink_rows(self, checked: pa.RecordBatch) -> pa.Table:
        """The checked batch's valid rows as sink rows."""
        valid = checked.filter(checked.column(REASON_COLUMN).is_null())
        values = [valid.column(name) for name in self.output_names]
        return pa.Table.from_arrays([_kafka_struct(valid), *values], schema=self.sink_schema)

    def quarantine_rows(self, checked: pa.RecordBatch) -> pa.Table:
        """The checked batch's failed rows as quarantine rows."""
        failed = checked.filter(checked.column(REASON_COLUMN).is_valid())
        return pa.Table.from_arrays(
            [_kafka_struct(failed), failed.column(RAW_VALUE_COLUMN), failed.column(REASON_COLUMN)],
            schema=self.quarantine_schema,
        )


def _kafka_type() -> pa.StructType:
    types = {f: RECORD_SCHEMA.field(f).type for f in KAFKA_FIELDS}
    types["timestamp"] = _TIMESTAMP
    return pa.struct([pa.field(f, types[f]) for f in KAFKA_FIELDS])


def _kafka_struct(checked: pa.RecordBatch) -> pa.StructArray:
    """The public `kafka` struct from the flat coordinates; Kafka's millisecond timestamp becomes a UTC
    timestamp (microseconds, as Spark stores timestamps)."""
    columns = [checked.column(kafka_column(f)) for f in KAFKA_FIELDS]
    index = KAFKA_FIELDS.index("timestamp")
    columns[index] = pc.multiply(columns[index], 1000).cast(_TIMESTAMP)
    return pa.StructArray.from_arrays(columns, fields=list(_kafka_type()))
