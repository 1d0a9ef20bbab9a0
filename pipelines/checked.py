"""Checked records: raw Kafka batches decoded and validated inside the reading task, with Arrow.

`RecordChecker.check` turns one raw batch (cohort.pipelines.reader.RECORD_SCHEMA) into the shape the rest of the
batch works with: the Kafka coordinates as flat internal columns (`_cohort_topic`, `_cohort_partition`,
...), the decoded value columns, the raw value bytes (kept only for records that failed, for the quarantine)
and a failure reason (null when the record decoded and passed every check). The sink and quarantine rows
are cut from a checked batch by `sink_rows` and `quarantine_rows`, with the coordinates gathered into the
public `kafka` struct (topic, partition, offset, timestamp, key, headers) the transform and the outputs see.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

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

from cohort.pipelines.decode import (
    KAFKA_COLUMN,
    KAFKA_FIELDS,
    RAW_VALUE_COLUMN,
    REASON_COLUMN,
    ValueDecoder,
    kafka_column,
)
from cohort.pipelines.reader import RECORD_SCHEMA
from cohort.pipelines.validate import RowCheck, failure_reasons

__all__ = ["RecordChecker"]

_KAFKA_SPARK_TYPES = {
    "topic": StringType(),
    "partition": IntegerType(),
    "offset": LongType(),
    "timestamp": LongType(),
    "key": BinaryType(),
    "headers": ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
}
_TIMESTAMP = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class RecordChecker:
    """Decode + validate raw batches (pickled into the reading tasks: plain values only)."""

    decoder: ValueDecoder
    checks: tuple[RowCheck, ...] = ()

    @cached_property
    def spark_schema(self) -> StructType:
        """The Spark schema of checked rows (what the reading tasks hand to Spark)."""
        coordinates = [StructField(kafka_column(f), _KAFKA_SPARK_TYPES[f]) for f in KAFKA_FIELDS]
        values = [StructField(f.name, f.dataType, True) for f in self.decoder.columns.fields]
        tail = [StructField(RAW_VALUE_COLUMN, BinaryType()), StructField(REASON_COLUMN, StringType())]
        return StructType([*coordinates, *values, *tail])

    @cached_property
    def arrow_schema(self) -> pa.Schema:
        coordinates = [pa.field(kafka_column(f), RECORD_SCHEMA.field(f).type) for f in KAFKA_FIELDS]
        return pa.schema(
            [
                *coordinates,
                *self.decoder.arrow_schema,
                pa.field(RAW_VALUE_COLUMN, pa.binary()),
                pa.field(REASON_COLUMN, pa.string()),
            ]
        )

    @cached_property
    def sink_schema(self) -> pa.Schema:
        """Arrow schema of sink rows: `kafka` struct, then the value columns."""
        return pa.schema([pa.field(KAFKA_COLUMN, _kafka_type()), *self.decoder.arrow_schema])

    @cached_property
    def quarantine_schema(self) -> pa.Schema:
        """Arrow schema of quarantine rows: `kafka` struct, the raw `value` bytes and the `reason`."""
        return pa.schema(
            [pa.field(KAFKA_COLUMN, _kafka_type()), pa.field("value", pa.binary()), pa.field("reason", pa.string())]
        )

    def check(self, raw: pa.RecordBatch) -> pa.RecordBatch:
        """One checked batch (see the module doc) for a raw batch."""
        values, reasons = self.decoder.decode(raw.column("value"))
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
        return pa.RecordBatch.from_arrays([*columns, *values, raw_value, reason], schema=self.arrow_schema)

    def sink_rows(self, checked: pa.RecordBatch) -> pa.Table:
        """The checked batch's valid rows as sink rows."""
        valid = checked.filter(checked.column(REASON_COLUMN).is_null())
        values = [valid.column(f.name) for f in self.decoder.arrow_schema]
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
