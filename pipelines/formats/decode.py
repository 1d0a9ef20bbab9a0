"""Decoding Kafka values inside the reading tasks: raw bytes, UTF-8 text, or JSON into a declared schema.

`ValueDecoder.decode` turns one Arrow batch of raw values into the declared value columns (the top-level
fields of the JSON schema, or a single `value` column) plus a failure reason per record (None when the
record decoded). It runs in the executor's Python worker right after the Kafka read, so no JVM work is
spent on decoding: UTF-8 is checked by one Arrow cast per batch, JSON by msgspec (C) per value.

JSON rules (strict, RFC 8259; docs/sink.md, "Decoding rules"): a value must be valid UTF-8 holding exactly
one JSON object and nothing after it (one leading byte order mark is skipped); each declared field must have
the declared type (no string <-> number coercion; integers must fit the declared width; timestamps are
RFC 3339 strings, read under the `naive_timestamps` policy when they carry no offset, and a bare date
`YYYY-MM-DD` is that day's midnight; dates are `YYYY-MM-DD`); no object may repeat a key, at any depth;
fields the schema does not declare are ignored; a missing field or JSON `null` is a null, which a
non-nullable field refuses. A null value (a tombstone) has nothing to decode and is quarantined in JSON mode;
in `utf8` and `bytes` mode it stays a null `value`.

JSON is parsed and type-checked by msgspec (C), one value at a time into a struct type built from the Spark
schema, and the fields become Arrow columns in one conversion each; a value that fails gets msgspec's
message, which names the offending field. msgspec keeps the last of repeated keys, so repeats are found
after it (see "repeated keys" below): one numpy count per batch clears the records whose quotes their
decoded fields account for, and only the others are looked at again.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import re
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, cached_property
from itertools import compress, islice
from typing import Annotated, Any, Literal, cast

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from msgspec.structs import astuple
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

from cohort.pipelines.formats.flat_json import FlatSchema, decode_flat, fast_available, flat_schema

__all__ = [
    "INTERNAL_PREFIX",
    "KAFKA_COLUMN",
    "KAFKA_FIELDS",
    "NAIVE_TIMESTAMP_POLICIES",
    "RAW_FORMATS",
    "RAW_VALUE_COLUMN",
    "REASON_COLUMN",
    "REGISTRY_SCHEMA_TYPES",
    "REGISTRY_VALUE_FORMATS",
    "RESERVED_COLUMNS",
    "ValueDecoder",
    "ValueFormat",
    "arrow_type",
    "invalid_utf8",
    "kafka_column",
    "naive_timestamp_policy",
    "value_columns_schema",
]

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
    DateType: datetime.date,
}

# ----------------------------------------------------------------------------------- naive timestamps

NAIVE_TIMESTAMP_POLICIES: tuple[str, ...] = ("utc", "quarantine")
"""`naive_timestamps` values besides an IANA time-zone name: a timestamp without an offset is read as UTC, or
quarantined."""

_TIMESTAMP_TYPES: dict[str, Any] = {
    "any": datetime.datetime,  # RFC 3339, with or without an offset
    "aware": Annotated[datetime.datetime, msgspec.Meta(tz=True)],  # an offset is required
    "text": str,  # read by `_timestamp_from_text` (bare dates)
}


def naive_timestamp_policy(policy: object) -> str:
    """`policy` checked: 'utc', 'quarantine' or an IANA time-zone name such as 'Europe/Paris'.

    Example:
        >>> naive_timestamp_policy("Europe/Paris")
        'Europe/Paris'
    """
    if isinstance(policy, str) and policy:
        if policy in NAIVE_TIMESTAMP_POLICIES:
            return policy
        try:
            _zone(policy)
            return policy
        except (KeyError, OSError, ValueError):  # zoneinfo: not found, a directory, not a normalised key
            pass
    raise ValueError(
        f"naive_timestamps must be 'utc', 'quarantine' or an IANA time zone name such as 'Europe/Paris', got {policy!r}"
    )


@cache
def _zone(policy: str) -> datetime.tzinfo:
    """The zone a timestamp without an offset is read in under `policy`."""
    return datetime.UTC if policy in NAIVE_TIMESTAMP_POLICIES else zoneinfo.ZoneInfo(policy)


def _msgspec_type(data_type: DataType, timestamps: str) -> Any:
    """The msgspec annotation that accepts exactly the JSON a Spark type's values may be written as."""
    if isinstance(data_type, StructType):
        return _struct_type(data_type, timestamps)
    if isinstance(data_type, ArrayType):
        return list[_msgspec_type(data_type.elementType, timestamps) | None]  # type: ignore[misc]
    if isinstance(data_type, TimestampType):
        return _TIMESTAMP_TYPES[timestamps]
    return _MSGSPEC_TYPES[type(data_type)]


def _struct_type(schema: StructType, timestamps: str) -> type[msgspec.Struct]:
    """A msgspec struct with one optional field per schema field (internal names f0, f1, ... renamed to
    the JSON names, which need not be Python identifiers)."""
    fields = [(f"f{i}", _msgspec_type(f.dataType, timestamps) | None, None) for i, f in enumerate(schema.fields)]
    rename = {f"f{i}": f.name for i, f in enumerate(schema.fields)}
    return msgspec.defstruct("Value", fields, rename=rename, gc=False)


@cache
def _json_decoder(schema_json: str, timestamps: str = "any") -> msgspec.json.Decoder:
    """One msgspec decoder per value schema, timestamp reading (`_TIMESTAMP_TYPES`) and process (decoders
    are not pickled into tasks)."""
    return msgspec.json.Decoder(_struct_type(StructType.fromJson(json.loads(schema_json)), timestamps))


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_BARE_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_AT = re.compile(r" - at `(?P<path>[^`]*)`$")
_NO_OFFSET = "Expected `datetime` with a timezone component"
_NOT_A_DATETIME = "Invalid RFC3339 encoded datetime"


def _has_timestamp(data_type: DataType) -> bool:
    if isinstance(data_type, StructType):
        return any(_has_timestamp(f.dataType) for f in data_type.fields)
    if isinstance(data_type, ArrayType):
        return _has_timestamp(data_type.elementType)
    return isinstance(data_type, TimestampType)


def _epoch_micros(value: Any, zone: datetime.tzinfo) -> Any:
    """Datetimes (anywhere in a decoded value) as microseconds since the epoch, read in `zone` when naive:
    the offset is applied here, exactly, rather than left to each consumer of a Python datetime (pyarrow
    drops it when PYARROW_IGNORE_TIMEZONE is set, as importing pandera does). A naive time a clock change
    skips or repeats in `zone` resolves as `fold=0` does (as java.time does): the offset in force before
    the change."""
    if isinstance(value, datetime.datetime):
        delta = (value if value.tzinfo is not None else value.replace(tzinfo=zone)) - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(value, dict):
        return {k: _epoch_micros(v, zone) for k, v in value.items()}
    if isinstance(value, list):
        return [_epoch_micros(v, zone) for v in value]
    return value


class _Refused(Exception):
    """A value the fallback reading of timestamps refuses; the argument is the record's reason."""


def _timestamp_from_text(text: str, path: str, aware: bool, schema: str) -> datetime.datetime:
    """A timestamp field's text: a bare ISO 8601 date is midnight (naive), anything else RFC 3339."""
    if _BARE_DATE.fullmatch(text):
        if aware:
            raise _Refused(
                f"timestamp without a time zone at `{path}`: {text!r} is a date (naive_timestamps is 'quarantine')"
            )
        try:
            return datetime.datetime.combine(datetime.date.fromisoformat(text), datetime.time())
        except ValueError:
            raise _Refused(f"JSON does not match the value schema {schema}: {_NOT_A_DATETIME} - at `{path}`") from None
    try:
        return cast("datetime.datetime", msgspec.convert(text, _TIMESTAMP_TYPES["aware" if aware else "any"]))
    except msgspec.ValidationError as exc:
        message = _AT.sub("", str(exc))
        if message.startswith(_NO_OFFSET):
            raise _Refused(f"timestamp without a time zone at `{path}` (naive_timestamps is 'quarantine')") from None
        raise _Refused(f"JSON does not match the value schema {schema}: {message} - at `{path}`") from None


def _timestamps_from_text(value: Any, data_type: DataType, path: str, aware: bool, schema: str) -> Any:
    """`value` decoded with timestamps as text (`_json_decoder(..., "text")`), its timestamps read in place."""
    if value is None or not _has_timestamp(data_type):
        return value
    if isinstance(data_type, TimestampType):
        return _timestamp_from_text(value, path, aware, schema)
    if isinstance(data_type, StructType):
        for k, f in enumerate(data_type.fields):
            name = f"f{k}"
            read = _timestamps_from_text(getattr(value, name), f.dataType, f"{path}.{f.name}", aware, schema)
            setattr(value, name, read)
        return value
    element = cast("ArrayType", data_type).elementType
    return [_timestamps_from_text(e, element, f"{path}[{i}]", aware, schema) for i, e in enumerate(value)]


def _column(
    values: list[Any], data_type: DataType, arrow: pa.DataType, zone: datetime.tzinfo
) -> tuple[pa.Array, dict[int, str]]:
    """One Arrow column from the decoded Python values of a field, and the rows whose value Arrow cannot
    hold (a string with a lone surrogate escape such as "\\ud800", which UTF-8 cannot encode), nulled."""
    if isinstance(data_type, (StructType, ArrayType)):
        values = msgspec.to_builtins(values, builtin_types=(datetime.datetime, datetime.date))
    if _has_timestamp(data_type):
        values = [_epoch_micros(v, zone) for v in values]
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


# ------------------------------------------------------------------------------------- repeated keys
#
# msgspec keeps the last value of a repeated key; a repeat is refused here, after it, in three steps.
# 1. Per batch, with numpy: a value holds 2 quote characters per key and per string, plus one per escaped
#    quote. Its decoded columns account for 2 per non-null declared field (its key) and 2 more per non-null
#    string, timestamp or date (its value). A value with no more quotes than that has as many keys as
#    distinct declared fields: no key repeats. That clears the common case without touching a record.
# 2. Each remaining record (undeclared fields, nulls, escaped quotes) is parsed by msgspec into plain
#    objects and encoded again, in C: dropping a repeated key drops its quotes, so fewer quotes after the
#    round trip means a repeat (a `\u0022` escape, the only way a string gains quotes on the way, is
#    passed on to step 3).
# 3. Those few are parsed again by the standard library, which sees every key, to name the repeat.


def _valid(array: pa.Array) -> np.ndarray:
    return array.is_valid().to_numpy(zero_copy_only=False).astype(np.int64)


def _value_quotes(array: pa.Array, data_type: DataType) -> np.ndarray | int:
    """Per element: the quotes a decoded value accounts for (step 1 above)."""
    if isinstance(data_type, (StringType, TimestampType, DateType)):
        return 2 * _valid(array)
    if isinstance(data_type, StructType):
        total: np.ndarray | int = 0
        for child, f in zip(cast("pa.StructArray", array).flatten(), data_type.fields, strict=True):
            total = total + 2 * _valid(child) + _value_quotes(child, f.dataType)
        return total
    if isinstance(data_type, ArrayType):
        inner = _value_quotes(cast("pa.ListArray", array).flatten(), data_type.elementType)
        if isinstance(inner, int):  # no string-like element: nothing to count
            return inner
        parents = np.asarray(pc.list_parent_indices(array))
        return np.bincount(parents, weights=inner, minlength=len(array)).astype(np.int64)
    return 0


def _set_where_decoded(column: pa.Array, reasons: list[str | None]) -> bool:
    """Whether `column` holds a value in every record that decoded (its nulls, if a few, are failed records:
    the common case, where one constant accounts for its quotes)."""
    if column.null_count == 0:
        return True
    if column.null_count > 100:
        return False
    return all(reasons[i] is not None for i in cast("list[int]", pc.indices_nonzero(column.is_null()).to_pylist()))


def _quotes(values: pa.Array) -> np.ndarray:
    """The number of `"` bytes in each raw value (numpy over the Arrow buffers; 0 for nulls)."""
    n = len(values)
    counts = np.zeros(n, np.int64)
    _validity, offsets_buffer, data = values.buffers()[:3]
    if n == 0 or offsets_buffer is None or data is None:
        return counts
    large = pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type)
    width = np.dtype(np.int64 if large else np.int32)
    offsets = np.frombuffer(memoryview(offsets_buffer), width, n + 1, values.offset * width.itemsize).astype(np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    filled = np.flatnonzero(np.diff(offsets))
    if end > start and len(filled):
        quotes = (np.frombuffer(memoryview(data), np.uint8, end - start, start) == 0x22).view(np.uint8)
        counts[filled] = np.add.reduceat(quotes, offsets[:-1][filled] - start, dtype=np.int32)
    return counts


_plain = msgspec.json.Decoder().decode
_compact = msgspec.json.Encoder().encode


def _may_repeat(value: bytes) -> bool:
    """Step 2 above: whether `value` (valid JSON) may repeat a key."""
    try:
        return value.count(b'"') > _compact(_plain(value)).count(b'"') or b"\\u0022" in value
    except (msgspec.MsgspecError, RecursionError):
        return True


class _Object(dict[str, Any]):
    """A JSON object parsed by the standard library, with the first key it repeats (or None)."""

    __slots__ = ("repeated",)
    repeated: str | None


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    found = _Object(pairs)
    found.repeated = None
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                found.repeated = key
                break
            seen.add(key)
    return found


def _repeat_in(value: Any, path: str) -> str | None:
    """The first repeated key within `value` (parsed with `_object`), depth first, as a reason."""
    if isinstance(value, _Object):
        if value.repeated is not None:
            return f"duplicate JSON key {value.repeated!r} in the object at `{path}`: a key may appear only once"
        for key, item in value.items():
            found = _repeat_in(item, f"{path}.{key}")
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _repeat_in(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def _repeated_key(value: bytes) -> str | None:
    """Step 3 above: the standard library's parse of `value` (valid JSON), a reason if a key repeats."""
    try:
        return _repeat_in(json.loads(value, object_pairs_hook=_object), "$")
    except RecursionError:
        return "value is not valid JSON for this schema: it is nested too deeply to decode"
    except ValueError:  # what msgspec accepts, the standard library parses; kept for safety
        return None


@dataclass(frozen=True)
class ValueDecoder:
    """Decodes raw values (Arrow binary) into the value columns with one reason per failed record.

    Pickled into the reading tasks: holds only the format, the Spark schema and the naive-timestamp policy
    ('utc', 'quarantine' or an IANA time-zone name; see `naive_timestamp_policy`).
    """

    value_format: str
    columns: StructType
    naive_timestamps: str = "utc"

    def __post_init__(self) -> None:
        naive_timestamp_policy(self.naive_timestamps)

    @cached_property
    def arrow_schema(self) -> pa.Schema:
        """The Arrow schema of the decoded value columns (all nullable: failed rows hold nulls)."""
        return pa.schema([pa.field(f.name, arrow_type(f.dataType, where=f.name)) for f in self.columns])

    def decode(self, values: pa.Array, *, fast: bool = True) -> tuple[list[pa.Array], list[str | None]]:
        """(value columns, reason per record) for a batch of raw values. `fast=False` turns the C fast path of
        flat schemas off (cohort.pipelines.formats.flat_json: same answers; for tests and benchmarks)."""
        n = len(values)
        reasons: list[str | None] = [None] * n
        if self.value_format in RAW_FORMATS:
            return [values.cast(pa.binary())], reasons
        bad_text = invalid_utf8(values)
        if any(bad_text):
            for i in compress(range(n), bad_text):
                reasons[i] = "value is not valid UTF-8"
        if self.value_format == "utf8":
            safe = pc.if_else(pa.array(bad_text, pa.bool_()), pa.scalar(None, pa.binary()), values)
            return [safe.cast(pa.string())], reasons
        flat = flat_schema(self.columns) if fast and fast_available() else None
        columns = self._decode_json(values, reasons) if flat is None else self._decode_flat(values, reasons, flat)
        for field, column in zip(self.columns.fields, columns, strict=True):
            if not field.nullable and column.null_count:
                for i in cast("list[int]", pc.indices_nonzero(column.is_null()).to_pylist()):  # indices: no nulls
                    if reasons[i] is None:
                        reasons[i] = f"field {field.name!r} is missing or null but the schema requires it"
        return columns, reasons

    def _decode_flat(self, values: pa.Array, reasons: list[str | None], flat: FlatSchema) -> list[pa.Array]:
        """The fast path's columns, with the records it deferred (and those refused before) decoded by
        `_decode_json` and put in their places."""
        batch = decode_flat(values, flat)
        rest = batch.deferred
        if any(reasons):  # text that is not UTF-8 (the fast path defers it too; said here so it cannot slip)
            refused = np.flatnonzero(np.fromiter((r is not None for r in reasons), bool, len(reasons)))
            rest = np.union1d(rest, refused)
        if not len(rest):
            return batch.columns
        indices = pa.array(rest, pa.int64())
        rest_reasons = [reasons[i] for i in rest.tolist()]
        rest_columns = self._decode_json(values.take(indices), rest_reasons)
        for i, reason in zip(rest.tolist(), rest_reasons, strict=True):
            reasons[i] = reason
        order = np.arange(len(values), dtype=np.int64)
        order[rest] = len(values) + np.arange(len(rest), dtype=np.int64)
        return [
            pa.concat_arrays([fast, slow]).take(order) for fast, slow in zip(batch.columns, rest_columns, strict=True)
        ]

    def _decode_json(self, values: pa.Array, reasons: list[str | None]) -> list[pa.Array]:
        """The full decoder (msgspec): every record, with the reasons of those it refuses."""
        raw: list[bytes | None] = values.to_pylist()
        bom = pc.starts_with(values, "\ufeff")  # a UTF-8 byte order mark: RFC 8259 lets a parser skip it
        if bom.true_count:
            for i in np.flatnonzero(bom.fill_null(False).to_numpy(zero_copy_only=False)).tolist():
                raw[i] = cast("bytes", raw[i])[3:]
        schema_json = self.columns.json()
        aware = self.naive_timestamps == "quarantine"
        decoder = _json_decoder(schema_json, "aware" if aware else "any")
        decode: Callable[[Any], Any] = decoder.decode  # a tombstone's None raises TypeError, judged below
        empty = decoder.type()  # every field None: stands in for records that failed
        # Decoded by `map` in C, one Python call per batch, not per record: a record that fails stops it, is
        # judged on its own (`_decode_one`), and the map resumes after it (list.extend keeps what came before).
        refused_before = [i for i, reason in enumerate(reasons) if reason is not None] if any(reasons) else []
        decoded: list[Any] = []
        while len(decoded) < len(raw):
            done = len(decoded)
            with contextlib.suppress(msgspec.MsgspecError, RecursionError, TypeError, UnicodeDecodeError):
                decoded.extend(map(decode, islice(raw, done, None) if done else raw))
            if len(decoded) < len(raw):
                failed = len(decoded)
                decoded.append(self._decode_one(decode, raw[failed], failed, reasons, empty))
        for i in refused_before:  # text that is not UTF-8: no value, whatever msgspec made of it
            decoded[i] = empty
        zone = _zone(self.naive_timestamps)
        fields = self.columns.fields
        by_field = list(zip(*map(astuple, decoded), strict=True)) if decoded else [()] * len(fields)
        columns = []
        for k, field in enumerate(fields):
            column, refused = _column(list(by_field[k]), field.dataType, self.arrow_schema.field(k).type, zone)
            for i, problem in refused.items():
                reasons[i] = reasons[i] or f"field {field.name!r} holds a value Arrow cannot store ({problem})"
            columns.append(column)
        self._find_repeated_keys(values, raw, columns, reasons)
        return columns

    def _decode_one(
        self, decode: Callable[[bytes], Any], value: bytes | None, i: int, reasons: list[str | None], empty: Any
    ) -> Any:
        """Record `i` decoded, or `empty` with its reason set (a reason set before stays)."""
        if reasons[i] is not None:
            return empty
        if value is None:
            reasons[i] = "null value (tombstone): nothing to decode as JSON"
            return empty
        try:
            return decode(value)
        except msgspec.ValidationError as exc:
            decoded, reasons[i] = self._mismatch(value, str(exc), empty)
            return decoded
        except msgspec.DecodeError as exc:
            blank = not value.strip()
            reasons[i] = f"value is not valid JSON: {'it is empty or blank' if blank else exc}"
        except RecursionError:
            reasons[i] = "value is not valid JSON for this schema: it is nested too deeply to decode"
        except UnicodeDecodeError:
            reasons[i] = "value is not valid UTF-8"
        return empty

    def _mismatch(self, value: bytes, message: str, empty: Any, *, dates: bool = True) -> tuple[Any, str | None]:
        """(decoded value, reason) for a value msgspec parsed but refused for the schema."""
        schema = self.columns.simpleString()
        if dates and message.startswith(_NOT_A_DATETIME) and _has_timestamp(self.columns):
            return self._with_bare_dates(value, schema, empty)
        if message.startswith(_NO_OFFSET):
            at = _AT.search(message)
            path = at["path"] if at else "$"
            return empty, f"timestamp without a time zone at `{path}` (naive_timestamps is 'quarantine')"
        if message.startswith("Expected `object`"):
            return empty, f"value is not a JSON object ({message})"
        return empty, f"JSON does not match the value schema {schema}: {message}"

    def _with_bare_dates(self, value: bytes, schema: str, empty: Any) -> tuple[Any, str | None]:
        """Decode again with timestamps as text, reading a bare date as midnight (the rare path)."""
        aware = self.naive_timestamps == "quarantine"
        try:
            loose = _json_decoder(self.columns.json(), "text").decode(value)
        except msgspec.ValidationError as exc:  # another field is wrong: its message
            return self._mismatch(value, str(exc), empty, dates=False)
        try:
            return _timestamps_from_text(loose, self.columns, "$", aware, schema), None
        except _Refused as refused:
            return empty, str(refused)

    def _find_repeated_keys(
        self, values: pa.Array, raw: list[bytes | None], columns: list[pa.Array], reasons: list[str | None]
    ) -> None:
        """Set the reason of each decoded record that repeats a key (see "repeated keys" above)."""
        budget: np.ndarray | int = 0
        for column, field in zip(columns, self.columns.fields, strict=True):
            if not isinstance(field.dataType, (StructType, ArrayType)) and _set_where_decoded(column, reasons):
                budget = budget + (4 if isinstance(field.dataType, (StringType, TimestampType, DateType)) else 2)
            else:
                budget = budget + 2 * _valid(column) + _value_quotes(column, field.dataType)
        for i in np.flatnonzero(_quotes(values) > budget).tolist():
            value = raw[i]
            if reasons[i] is None and value is not None and _may_repeat(value):
                reasons[i] = _repeated_key(value)
