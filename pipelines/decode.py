"""Decoding Kafka values inside the reading tasks: raw bytes, UTF-8 text, or JSON into a declared schema.

`ValueDecoder.decode` turns one Arrow batch of raw values into the declared value columns (the top-level
fields of the JSON schema, or a single `value` column) plus a failure reason per record (None when the
record decoded). It runs in the executor's Python worker right after the Kafka read, so no JVM work is
spent on decoding: UTF-8 is checked by one Arrow cast per batch, JSON by msgspec (C) per value.

JSON rules (strict, RFC 8259; docs/sink.md, "Decoding rules"): a value must be valid UTF-8 holding exactly
one JSON object and nothing after it (one leading byte order mark is skipped); each declared field must have
the declared type (no string <-> number coercion; integers must fit the declared width; timestamps are
RFC 3339 strings, read under the `naive_timestamps` policy when they carry no offset, and a bare date
`YYYY-MM-DD` is that day's midnight; dates are `YYYY-MM-DD`); a key the schema declares may appear only once
per object; fields the schema does not declare are ignored; a missing field or JSON `null` is a null, which a
non-nullable field refuses. A null value (a tombstone) has nothing to decode and is quarantined in JSON mode;
in `utf8` and `bytes` mode it stays a null `value`.

JSON is parsed and type-checked by msgspec (C), one value at a time into a struct type built from the Spark
schema, and the fields become Arrow columns in one conversion each; a value that fails gets msgspec's
message, which names the offending field. msgspec keeps the last of repeated keys, so repeats are found
after it, per batch: a record can repeat a key only if it holds more quote characters than its decoded
fields account for (counted with numpy), and only such records are searched for the declared names and,
when one may repeat, parsed again with the standard library, which reports every key.
"""

from __future__ import annotations

import datetime
import json
import re
import zoneinfo
from dataclasses import dataclass
from functools import cache, cached_property
from operator import attrgetter
from typing import Annotated, Any, Literal, cast

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = [
    "INTERNAL_PREFIX",
    "KAFKA_COLUMN",
    "KAFKA_FIELDS",
    "NAIVE_TIMESTAMP_POLICIES",
    "RAW_VALUE_COLUMN",
    "REASON_COLUMN",
    "RESERVED_COLUMNS",
    "ValueDecoder",
    "ValueFormat",
    "arrow_type",
    "kafka_column",
    "naive_timestamp_policy",
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
    raise ValueError(
        f"field {where!r} has type {data_type.simpleString()}, which the JSON decoder does not support; use "
        "string, boolean, byte/short/int/long, float/double, timestamp, date, struct or array"
    )


def value_columns_schema(value_format: str, value_schema: StructType | None) -> StructType:
    """The decoded value columns for a format: the JSON schema's fields, or one `value` column.

    Raises ValueError naming the problem for an unknown format, a JSON format without a schema, a schema
    given for another format, a field name reserved by the pipeline or a type the decoder cannot produce.
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
    for f in value_schema.fields:
        if isinstance(f.dataType, BinaryType):
            raise ValueError(f"field {f.name!r}: binary fields cannot be decoded from JSON; declare a string")
        arrow_type(f.dataType, where=f.name)
    return value_schema


def _invalid_utf8(values: pa.Array) -> list[bool]:
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


def _bounded(bits: int) -> Any:
    return Annotated[int, msgspec.Meta(ge=-(2 ** (bits - 1)), le=2 ** (bits - 1) - 1)]


_MSGSPEC_TYPES: dict[type[DataType], Any] = {
    StringType: str,
    BooleanType: bool,
    ByteType: _bounded(8),
    ShortType: _bounded(16),
    IntegerType: _bounded(32),
    LongType: _bounded(64),
    FloatType: float,
    DoubleType: float,
    TimestampType: datetime.datetime,
    DateType: datetime.date,
}


def _msgspec_type(data_type: DataType) -> Any:
    """The msgspec annotation that accepts exactly the JSON a Spark type's values may be written as."""
    if isinstance(data_type, StructType):
        return _struct_type(data_type)
    if isinstance(data_type, ArrayType):
        return list[_msgspec_type(data_type.elementType) | None]  # type: ignore[misc]
    return _MSGSPEC_TYPES[type(data_type)]


def _struct_type(schema: StructType) -> type[msgspec.Struct]:
    """A msgspec struct with one optional field per schema field (internal names f0, f1, ... renamed to
    the JSON names, which need not be Python identifiers)."""
    fields = [(f"f{i}", _msgspec_type(f.dataType) | None, None) for i, f in enumerate(schema.fields)]
    rename = {f"f{i}": f.name for i, f in enumerate(schema.fields)}
    return msgspec.defstruct("Value", fields, rename=rename, gc=False)


@cache
def _json_decoder(schema_json: str) -> msgspec.json.Decoder:
    """One msgspec decoder per value schema and process (decoders are not pickled into tasks)."""
    return msgspec.json.Decoder(_struct_type(StructType.fromJson(__import__("json").loads(schema_json))))


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _has_timestamp(data_type: DataType) -> bool:
    if isinstance(data_type, StructType):
        return any(_has_timestamp(f.dataType) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return _has_timestamp(data_type.elementType)
    return isinstance(data_type, TimestampType)


def _epoch_micros(value: Any) -> Any:
    """Datetimes (anywhere in a decoded value) as microseconds since the epoch, UTC when naive: the offset
    is applied here, exactly, rather than left to each consumer of a Python datetime."""
    if isinstance(value, datetime.datetime):
        delta = (value if value.tzinfo is not None else value.replace(tzinfo=datetime.UTC)) - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, dict):
        return {k: _epoch_micros(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_epoch_micros(v) for v in value]
    return value


def _column(values: list[Any], data_type: DataType, arrow: pa.DataType) -> tuple[pa.Array, dict[int, str]]:
    """One Arrow column from the decoded Python values of a field, and the rows whose value Arrow cannot
    hold (a string with a lone surrogate escape such as "\\ud800", which UTF-8 cannot encode), nulled."""
    if isinstance(data_type, (StructType, ArrayType)):
        values = msgspec.to_builtins(values, builtin_types=(datetime.datetime, datetime.date))
    if _has_timestamp(data_type):
        values = [_epoch_micros(v) for v in values]
    try:
        return pa.array(values, arrow), {}
    except (UnicodeError, pa.ArrowException, OverflowError, ValueError):
        refused: dict[int, str] = {}
        for i, value in enumerate(values):
            try:
                pa.array([value], arrow)
            except (UnicodeError, pa.ArrowException, OverflowError, ValueError) as exc:
                refused[i] = f"{type(exc).__name__}: {exc}"
                values[i] = None
        return pa.array(values, arrow), refused


@dataclass(frozen=True)
class ValueDecoder:
    """Decodes raw values (Arrow binary) into the value columns with one reason per failed record.

    Pickled into the reading tasks: holds only the format and the Spark schema.
    """

    value_format: str
    columns: StructType

    @cached_property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of the decoded value columns (all nullable: failed rows hold nulls)."""
        return pa.schema([pa.field(f.name, arrow_type(f.dataType, where=f.name)) for f in self.columns])

    def decode(self, values: pa.Array) -> tuple[list[pa.Array], list[str | None]]:
        """(value columns, reason per record) for a batch of raw values."""
        n = len(values)
        reasons: list[str | None] = [None] * n
        if self.value_format == "bytes":
            return [values.cast(pa.binary())], reasons
        bad_text = _invalid_utf8(values)
        for i in range(n):
            if bad_text[i]:
                reasons[i] = "value is not valid UTF-8"
        if self.value_format == "utf8":
            safe = pc.if_else(pa.array(bad_text, pa.bool_()), pa.scalar(None, pa.binary()), values)
            return [safe.cast(pa.string())], reasons
        return self._decode_json(values.to_pylist(), reasons), reasons

    def _decode_json(self, raw: list[bytes | None], reasons: list[str | None]) -> list[pa.Array]:
        decoder = _json_decoder(self.columns.json())
        decode, schema = decoder.decode, self.columns.simpleString()
        empty = decoder.type()  # every field None: stands in for records that failed
        decoded: list[Any] = [empty] * len(raw)
        for i, value in enumerate(raw):
            if reasons[i] is not None:
                continue
            if value is None:
                reasons[i] = "null value (tombstone): nothing to decode as JSON"
                continue
            try:
                decoded[i] = decode(value)
            except msgspec.ValidationError as exc:
                message = str(exc)
                if message.startswith("Expected `object`"):
                    reasons[i] = f"value is not a JSON object ({message})"
                else:
                    reasons[i] = f"JSON does not match the value schema {schema}: {message}"
            except msgspec.DecodeError as exc:
                blank = not value.strip()
                reasons[i] = f"value is not valid JSON: {'it is empty or blank' if blank else exc}"
            except RecursionError:
                reasons[i] = "value is not valid JSON for this schema: it is nested too deeply to decode"
        columns = []
        for k, field in enumerate(self.columns.fields):
            get = attrgetter(f"f{k}")
            values = list(map(get, decoded))
            column, refused = _column(values, field.dataType, self.arrow_schema.field(k).type)
            for i, problem in refused.items():
                reasons[i] = reasons[i] or f"field {field.name!r} holds a value Arrow cannot store ({problem})"
            if not field.nullable and column.null_count:
                for i in cast("list[int]", pc.indices_nonzero(column.is_null()).to_pylist()):  # indices: no nulls
                    if reasons[i] is None:
                        reasons[i] = f"field {field.name!r} is missing or null but the schema requires it"
            columns.append(column)
        return columns
