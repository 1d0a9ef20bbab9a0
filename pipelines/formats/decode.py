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
after it (cohort.pipelines.formats.repeated_keys): one numpy count per batch clears the records whose quotes their
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
from typing import Annotated, Any, cast

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from msgspec.structs import astuple
from pyspark.sql.types import (
    ArrayType,
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
    StructType,
    TimestampType,
)

from cohort.pipelines.formats.columns import (
    INTERNAL_PREFIX,
    KAFKA_COLUMN,
    KAFKA_FIELDS,
    RAW_FORMATS,
    RAW_VALUE_COLUMN,
    REASON_COLUMN,
    REGISTRY_SCHEMA_TYPES,
    REGISTRY_VALUE_FORMATS,
    RESERVED_COLUMNS,
    ValueFormat,
    arrow_type,
    invalid_utf8,
    kafka_column,
    value_columns_schema,
)
from cohort.pipelines.formats.flat_json import FlatSchema, decode_flat, fast_available, flat_schema
from cohort.pipelines.formats.repeated_keys import find_repeated_keys

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
        flat = self._flat if fast and fast_available() else None  # asked where it runs: an executor may lack it
        columns = self._decode_json(values, reasons) if flat is None else self._decode_flat(values, reasons, flat)
        for field, column in zip(self.columns.fields, columns, strict=True):
            if not field.nullable and column.null_count:
                for i in cast("list[int]", pc.indices_nonzero(column.is_null()).to_pylist()):  # indices: no nulls
                    if reasons[i] is None:
                        reasons[i] = f"field {field.name!r} is missing or null but the schema requires it"
        return columns, reasons

    @cached_property
    def _flat(self) -> FlatSchema | None:
        """The fast path's view of the value schema, once per decoder (None: a schema it does not decode)."""
        return flat_schema(self.columns)

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
        rows = rest.tolist()
        rest_reasons = [reasons[i] for i in rows]
        rest_columns = self._decode_json(values.take(pa.array(rest, pa.int64())), rest_reasons)
        for i, reason in zip(rows, rest_reasons, strict=True):
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
        find_repeated_keys(self.columns, values, raw, columns, reasons)
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
