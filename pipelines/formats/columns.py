"""The value columns: the value formats, the reserved and internal column names, and the Arrow type of each Spark type
the decoders fill (cohort.pipelines.formats.decode and the Schema Registry formats)."""

from __future__ import annotations

from typing import Literal

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

ValueFormat = Literal["bytes", "raw", "utf8", "json", "json-schema", "avro", "protobuf"]
VALUE_FORMATS: tuple[str, ...] = ("bytes", "raw", "utf8", "json", "json-schema", "avro", "protobuf")
"""`raw` is `bytes` by another name: the value as Kafka holds it, no decoding."""
RAW_FORMATS: tuple[str, ...] = ("bytes", "raw")
"""Formats that keep the bytes as they are."""
REGISTRY_SCHEMA_TYPES: dict[str, str] = {"json-schema": "JSON", "avro": "AVRO", "protobuf": "PROTOBUF"}
"""Formats framed for the Schema Registry (a magic byte and a schema id before each payload), and the
registry's schema type of each."""
REGISTRY_VALUE_FORMATS: tuple[str, ...] = tuple(REGISTRY_SCHEMA_TYPES)

INTERNAL_PREFIX = "_cohort_"
KAFKA_COLUMN = "kafka"
"""The struct column carrying each record's Kafka coordinates from the transform to the sinks."""
KAFKA_FIELDS: tuple[str, ...] = ("topic", "partition", "offset", "timestamp", "key", "headers")
RAW_VALUE_COLUMN = f"{INTERNAL_PREFIX}raw_value"
REASON_COLUMN = f"{INTERNAL_PREFIX}reason"
RESERVED_COLUMNS: frozenset[str] = frozenset({KAFKA_COLUMN, "topic", "partition"})
"""Names a value schema may not use (nor any name starting with `_cohort_`): `kafka` carries the
coordinates, `topic` and `partition` are the sink's directory partitions."""

_SIMPLE_TYPES: dict[type[DataType], pa.DataType] = {
    StringType: pa.string(),
    BooleanType: pa.bool_(),
    ByteType: pa.int8(),
    ShortType: pa.int16(),
    IntegerType: pa.int32(),
    LongType: pa.int64(),
    FloatType: pa.float32(),
    DoubleType: pa.float64(),
    TimestampType: pa.timestamp("us", tz="UTC"),
    DateType: pa.date32(),
}


def kafka_column(field: str) -> str:
    """The internal flat column holding one Kafka coordinate (`offset` -> `_cohort_offset`)."""
    if field not in KAFKA_FIELDS:
        raise ValueError(f"unknown Kafka field {field!r}; fields are {KAFKA_FIELDS}")
    return f"{INTERNAL_PREFIX}{field}"


def arrow_type(data_type: DataType, *, where: str = "value") -> pa.DataType:
    """The Arrow type of a Spark type the decoder supports; ValueError naming `where` otherwise."""
    if isinstance(data_type, BinaryType):
        return pa.binary()
    simple = _SIMPLE_TYPES.get(type(data_type))
    if simple is not None:
        return simple
    if isinstance(data_type, StructType):
        return pa.struct(
            [pa.field(f.name, arrow_type(f.dataType, where=f"{where}.{f.name}")) for f in data_type.fields]
        )
    if isinstance(data_type, ArrayType):
        return pa.list_(arrow_type(data_type.elementType, where=f"{where}[]"))
    if isinstance(data_type, MapType) and isinstance(data_type.keyType, StringType):
        return pa.map_(pa.string(), arrow_type(data_type.valueType, where=f"{where}{{}}"))
    if isinstance(data_type, DecimalType):
        return pa.decimal128(data_type.precision, data_type.scale)
    if isinstance(data_type, NullType):
        return pa.null()
    raise ValueError(
        f"field {where!r} has type {data_type.simpleString()}, which Cohort cannot decode into; use "
        "string, binary, boolean, byte/short/int/long, float/double, decimal, timestamp, date, struct, array or a "
        "map with string keys"
    )


def value_columns_schema(value_format: str, value_schema: StructType | None, *, what: str = "value") -> StructType:
    """The decoded columns for a format: the schema's fields (JSON and the registry formats), or one `value`
    column (raw formats).

    Raises ValueError naming the problem for an unknown format, a JSON format without a schema, a schema
    given for a raw format, a field name reserved by the pipeline or a type the decoder cannot produce. A
    registry format without a schema is resolved from the registry at batch time (see PipelineSpec).
    """
    if value_format not in VALUE_FORMATS:
        raise ValueError(f"unknown {what} format {value_format!r}; use one of {', '.join(VALUE_FORMATS)}")
    if value_format in (*RAW_FORMATS, "utf8"):
        if value_schema is not None:
            raise ValueError(f"a {what} schema only applies to decoded formats, not {value_format!r}")
        return StructType([StructField("value", StringType() if value_format == "utf8" else BinaryType())])
    if not isinstance(value_schema, StructType) or not value_schema.fields:
        raise ValueError(f"the {value_format!r} {what} format needs a non-empty Spark StructType schema")
    names = [f.name for f in value_schema.fields]
    clashes = sorted(n for n in names if n in RESERVED_COLUMNS or n.startswith(INTERNAL_PREFIX))
    if clashes:
        raise ValueError(
            f"{what} schema field(s) {clashes} clash with names the pipeline reserves "
            f"({sorted(RESERVED_COLUMNS)} and the {INTERNAL_PREFIX!r} prefix); rename them in the schema"
        )
    if len(set(names)) != len(names):
        raise ValueError(f"{what} schema has duplicate field names: {names}")
    for f in value_schema.fields:
        if value_format in ("json", "json-schema"):
            _json_decodable(f.dataType, f.name)
        arrow_type(f.dataType, where=f.name)
    return value_schema


def _json_decodable(data_type: DataType, where: str) -> None:
    """ValueError for a type JSON values cannot be decoded into (binary, maps, decimals)."""
    if isinstance(data_type, BinaryType):
        raise ValueError(f"field {where!r}: binary fields cannot be decoded from JSON; declare a string")
    if isinstance(data_type, (MapType, DecimalType, NullType)):
        raise ValueError(
            f"field {where!r} has type {data_type.simpleString()}, which the JSON decoder does not support; use "
            "string, boolean, byte/short/int/long, float/double, timestamp, date, struct or array"
        )
    if isinstance(data_type, StructType):
        for f in data_type.fields:
            _json_decodable(f.dataType, f"{where}.{f.name}")
    if isinstance(data_type, ArrayType):
        _json_decodable(data_type.elementType, f"{where}[]")


def invalid_utf8(values: pa.Array) -> list[bool]:
    """Per value: bytes that are not valid UTF-8 (null values are not)."""
    try:
        values.cast(pa.string())
        return [False] * len(values)
    except pa.ArrowInvalid:
        flags = []
        for raw in values.to_pylist():
            try:
                if raw is not None:
                    raw.decode("utf-8")
                flags.append(False)
            except UnicodeDecodeError:
                flags.append(True)
        return flags
