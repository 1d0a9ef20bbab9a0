"""Decoding Kafka values in the JVM: raw bytes, UTF-8 text, or JSON into a declared Spark schema.

`decode` turns the raw record frame (pipelines.reader.RECORD_SCHEMA) into the shape the batch persists:
the Kafka coordinates as flat internal columns (`_cohort_topic`, `_cohort_partition`, ...: flat columns
cache far more cheaply than a struct), the decoded value columns (the top-level fields of the JSON
schema, or a single `value` column), the raw value bytes (kept for quarantine) and a failure reason
(null when the record decoded). `kafka_struct()` later gathers the coordinates into the public `kafka`
struct column (topic, partition, offset, timestamp, key, headers) that the transform and the sinks see.

JSON goes through Spark's `from_json` in PERMISSIVE mode with a corrupt-record column, so no Python runs
per record; a record is malformed when the reader could not read it in full (`error`), its value is not
valid UTF-8, not a JSON object (empty, malformed, or valid JSON of another type), does not fit the
schema, or leaves a field the schema declares non-nullable empty. (Like Spark's JSON reader, the parser stops
after the first complete JSON value, so trailing text after an object is ignored.) A null value (a
tombstone) has nothing to decode and is quarantined in JSON mode; in `utf8` and `bytes` mode it stays a
null `value`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

__all__ = [
    "INTERNAL_PREFIX",
    "KAFKA_COLUMN",
    "KAFKA_FIELDS",
    "RAW_VALUE_COLUMN",
    "REASON_COLUMN",
    "RESERVED_COLUMNS",
    "ValueFormat",
    "decode",
    "kafka_column",
    "kafka_struct",
    "value_columns_schema",
]

ValueFormat = Literal["bytes", "utf8", "json"]
VALUE_FORMATS: tuple[str, ...] = ("bytes", "utf8", "json")

INTERNAL_PREFIX = "_cohort_"
KAFKA_COLUMN = "kafka"
"""The struct column carrying each record's Kafka coordinates from the transform to the sinks."""
KAFKA_FIELDS: tuple[str, ...] = ("topic", "partition", "offset", "timestamp", "key", "headers")
RAW_VALUE_COLUMN = f"{INTERNAL_PREFIX}raw_value"
REASON_COLUMN = f"{INTERNAL_PREFIX}reason"
_READ_ERROR = f"{INTERNAL_PREFIX}read_error"
_CORRUPT_FIELD = f"{INTERNAL_PREFIX}corrupt_record"
RESERVED_COLUMNS: frozenset[str] = frozenset({KAFKA_COLUMN, "topic", "partition"})
"""Names a value schema may not use (nor any name starting with `_cohort_`): `kafka` carries the
coordinates, `topic` and `partition` are the sink's directory partitions."""


def kafka_column(field: str) -> str:
    """The internal flat column holding one Kafka coordinate (`offset` -> `_cohort_offset`)."""
    if field not in KAFKA_FIELDS:
        raise ValueError(f"unknown Kafka field {field!r}; fields are {KAFKA_FIELDS}")
    return f"{INTERNAL_PREFIX}{field}"


def kafka_struct() -> Column:
    """The public `kafka` struct from the flat coordinates; the timestamp becomes a Spark timestamp."""
    fields = [
        (F.timestamp_millis(F.col(kafka_column(f))) if f == "timestamp" else F.col(kafka_column(f))).alias(f)
        for f in KAFKA_FIELDS
    ]
    return F.struct(*fields).alias(KAFKA_COLUMN)


def value_columns_schema(value_format: str, value_schema: StructType | None) -> StructType:
    """The decoded value columns for a format: the JSON schema's fields, or one `value` column.

    Raises ValueError naming the problem for an unknown format, a JSON format without a schema, a schema
    given for another format, or a field name reserved by the pipeline.
    """
    if value_format not in VALUE_FORMATS:
        raise ValueError(f"unknown value format {value_format!r}; use one of {', '.join(VALUE_FORMATS)}")
    if value_format != "json":
        if value_schema is not None:
            raise ValueError(f"a value schema only applies to the 'json' format, not {value_format!r}")
        return StructType([StructField("value", BinaryType() if value_format == "bytes" else StringType())])
    if not isinstance(value_schema, StructType) or not value_schema.fields:
        raise ValueError("the 'json' value format needs a non-empty Spark StructType schema for the values")
    names = [f.name for f in value_schema.fields]
    clashes = sorted(n for n in names if n in RESERVED_COLUMNS or n.startswith(INTERNAL_PREFIX))
    if clashes:
        raise ValueError(
            f"value schema field(s) {clashes} clash with names the pipeline reserves "
            f"({sorted(RESERVED_COLUMNS)} and the {INTERNAL_PREFIX!r} prefix); rename them in the schema"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"value schema has duplicate field names: {names}")
    return value_schema


def _bad_utf8(column: str) -> Column:
    """True for a non-null binary column whose bytes are not valid UTF-8."""
    return F.col(column).isNotNull() & ~F.is_valid_utf8(F.col(column).cast("string"))


def _first_reason(*cases: tuple[Column, Column]) -> Column:
    """The reason of the first case whose condition holds, else null."""
    result: Any = F
    for condition, reason in cases:
        result = result.when(condition, reason)
    return result


def decode(
    raw: DataFrame, value_format: str, value_schema: StructType | None = None, *, keep: Sequence[str] = ()
) -> DataFrame:
    """Decode `raw` (RECORD_SCHEMA rows) into coordinates + value columns + raw value + reason.

    Columns named in `keep` are carried through unchanged, after the value columns.
    """
    columns = value_columns_schema(value_format, value_schema)
    coordinates = [F.col(f).alias(kafka_column(f)) for f in KAFKA_FIELDS]
    kept = [F.col(name) for name in keep]
    raw_value = F.col("value").alias(RAW_VALUE_COLUMN)
    read_error = (F.col("error").isNotNull(), F.col("error"))  # the reader could not read the whole record
    if value_format == "bytes":
        return raw.select(*coordinates, F.col("value"), *kept, raw_value, F.col("error").alias(REASON_COLUMN))
    text = F.col("value").cast("string")  # Spark's cast does not check UTF-8: _bad_utf8 does
    if value_format == "utf8":
        reason = _first_reason(read_error, (_bad_utf8("value"), F.lit("value is not valid UTF-8")))
        return raw.select(*coordinates, text.alias("value"), *kept, raw_value, reason.alias(REASON_COLUMN))

    parse_schema = StructType([*columns.fields, StructField(_CORRUPT_FIELD, StringType())])
    parsed = F.from_json(text, parse_schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": _CORRUPT_FIELD})
    staged = raw.select(*coordinates, parsed.alias("_parsed"), *kept, raw_value, F.col("error").alias(_READ_ERROR))
    corrupt = F.col("_parsed").getField(_CORRUPT_FIELD)
    not_object = corrupt.isNotNull() & F.json_object_keys(corrupt).isNull()
    required = [f.name for f in columns.fields if not f.nullable]
    reason = _first_reason(
        (F.col(_READ_ERROR).isNotNull(), F.col(_READ_ERROR)),
        (F.col(RAW_VALUE_COLUMN).isNull(), F.lit("null value (tombstone): nothing to decode as JSON")),
        (_bad_utf8(RAW_VALUE_COLUMN), F.lit("value is not valid UTF-8")),
        (F.col("_parsed").isNull(), F.lit("value is not a JSON object: it is not valid JSON (empty or blank)")),
        (
            not_object & F.get_json_object(corrupt, "$").isNull(),
            F.lit("value is not a JSON object: it is not valid JSON (malformed, truncated or nested too deeply)"),
        ),
        (not_object, F.lit("value is not a JSON object (an array, string, number, boolean or null)")),
        (corrupt.isNotNull(), F.lit(f"JSON does not match the value schema {columns.simpleString()}")),
        *[
            (
                F.col("_parsed").getField(name).isNull(),
                F.lit(f"field {name!r} is missing or null but the schema requires it"),
            )
            for name in required
        ],
    )
    return staged.select(
        *[kafka_column(f) for f in KAFKA_FIELDS],
        *[F.col("_parsed").getField(f.name).alias(f.name) for f in columns.fields],
        *keep,
        RAW_VALUE_COLUMN,
        reason.alias(REASON_COLUMN),
    )
