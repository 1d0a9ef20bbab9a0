"""An oracle for the column-wise Avro decoder: payloads written and read back by fastavro, and both sides' values
in one canonical Python form, so a decoded Arrow row can be compared with what fastavro reads.

The canonical form:

* enums are strings, fixed and bytes `bytes`; a map is its (key, value) pairs in writing order, a repeated
  key keeping its first place and its last value (as fastavro's dict does); `["null", T]` is T or None, and a
  union of several types is the struct `member0, member1, ...` with the taken member set (Spark's layout);
* `date` is a `datetime.date`, the timestamps (local ones too, read as UTC) UTC datetimes, `decimal` a Decimal,
  `uuid` its string; with `raw`, dates and timestamps are their integers (days, microseconds);
* a reader `float` holds the value rounded to 32 bits; NaN equals NaN and -0.0 differs from 0.0;
* reader defaults mean what the specification says (fastavro returns them untouched): bytes and fixed defaults
  are code points 0-255, date and timestamp defaults count days / the type's unit from the epoch.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

from cohort.pipelines.formats.avro.columns import AvroBatch, arrow_of, decode_avro
from cohort.pipelines.formats.avro.schema import (
    TIMESTAMPS,
    AvroArray,
    AvroEnum,
    AvroFixed,
    AvroMap,
    AvroNode,
    AvroPrimitive,
    AvroRecord,
    AvroUnion,
    non_null_branch,
    parse_avro,
)

Schema = dict[str, Any]

UTC = datetime.UTC
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)
EPOCH_DAY = datetime.date(1970, 1, 1)
SCHEMA_ID = 7
ENOUGH_DIGITS = decimal.Context(prec=80)


# --------------------------------------------------------------------------------------------- schemas


def record(name: str, *fields: Schema) -> Schema:
    return {"type": "record", "name": name, "fields": list(fields)}


def fld(name: str, avro_type: Any, **extra: Any) -> Schema:
    return {"name": name, "type": avro_type, **extra}


def enum(name: str, *symbols: str, **extra: Any) -> Schema:
    return {"type": "enum", "name": name, "symbols": list(symbols), **extra}


def fixed(name: str, size: int, **extra: Any) -> Schema:
    return {"type": "fixed", "name": name, "size": size, **extra}


def array(items: Any) -> Schema:
    return {"type": "array", "items": items}


def amap(values: Any) -> Schema:
    return {"type": "map", "values": values}


def logical(base: str, name: str, **extra: Any) -> Schema:
    return {"type": base, "logicalType": name, **extra}


# --------------------------------------------------------------------------------- encoding and decoding


@functools.cache
def node_of(text: str) -> AvroNode:
    """Cohort's tree of a schema's JSON text (kept: the union tests parse the same few schemas thousands of times)."""
    return parse_avro(text)


@functools.cache
def _parsed(text: str) -> Any:
    return fastavro.parse_schema(json.loads(text))


def encode(schema: Schema, value: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, _parsed(json.dumps(schema)), value)
    return out.getvalue()


def without_logical_types(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [without_logical_types(s) for s in schema]
    return schema


@dataclass(frozen=True)
class Reference:
    """What fastavro reads from one payload: the value, or why it cannot (an error or bytes left over)."""

    value: Any = None
    error: str | None = None


def fastavro_read(writer: Schema, reader: Schema | None, payload: bytes, *, logical_types: bool = True) -> Reference:
    if not logical_types:
        writer = without_logical_types(writer)
        reader = None if reader is None else without_logical_types(reader)
    stream = io.BytesIO(payload)
    try:
        value = fastavro.schemaless_reader(
            stream, _parsed(json.dumps(writer)), None if reader is None else _parsed(json.dumps(reader))
        )
    except Exception as exc:  # fastavro raises many exception types for malformed input
        return Reference(error=f"{type(exc).__name__}: {exc}")
    left = len(payload) - stream.tell()
    if left:
        return Reference(error=f"{left} byte(s) left after the record")
    return Reference(value)


def layout(payloads: Sequence[bytes], gap: bytes = b"") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One buffer holding the payloads, `gap` before each (bytes the decoder must not read); the last payload
    ends the buffer."""
    data = bytearray()
    starts: list[int] = []
    ends: list[int] = []
    for payload in payloads:
        data += gap
        starts.append(len(data))
        data += payload
        ends.append(len(data))
    return np.frombuffer(bytes(data), np.uint8), np.array(starts, np.int64), np.array(ends, np.int64)


def decode(writer: Schema, reader: Schema, payloads: Sequence[bytes], gap: bytes = b"") -> AvroBatch:
    """decode_avro over the payloads, checking the batch's shape and that bad rows are null with a reason."""
    data, starts, ends = layout(payloads, gap)
    writer_text = json.dumps(writer)
    reader_node = node_of(json.dumps(reader))
    batch = decode_avro(
        data,
        starts,
        ends,
        node_of(writer_text),
        reader_node,
        writer_text=writer_text,
        schema_id=SCHEMA_ID,
    )
    assert batch.values.type == arrow_of(reader_node)
    assert len(batch.values) == len(payloads)
    assert set(batch.reasons) <= set(range(len(payloads)))
    for row, reason in batch.reasons.items():
        assert isinstance(reason, str) and reason.strip(), f"row {row} is bad without a reason: {reason!r}"
        assert not batch.values[row].is_valid, f"bad row {row} is not null"
    return batch


# ------------------------------------------------------------------------------------- canonical forms


def _is_null(node: AvroNode) -> bool:
    return isinstance(node, AvroPrimitive) and node.kind == "null"


def _members(node: AvroUnion) -> list[AvroNode]:
    return [b for b in node.branches if not _is_null(b)]


def _holds(node: AvroNode, value: Any) -> bool:
    """Whether fastavro's value came from this branch of a union (the test schemas keep branches distinct)."""
    if isinstance(node, AvroRecord | AvroMap):
        return isinstance(value, dict)
    if isinstance(node, AvroArray):
        return isinstance(value, list)
    if isinstance(node, AvroEnum):
        return isinstance(value, str)
    if isinstance(node, AvroFixed):
        return isinstance(value, bytes)
    assert isinstance(node, AvroPrimitive)
    python = {"boolean": bool, "int": int, "long": int, "float": float, "double": float, "bytes": bytes}
    kind = python.get(node.kind, str)
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def _float32(value: float) -> float:
    return float(np.float32(value))


def _binary(value: Any, node: AvroPrimitive | AvroFixed) -> Any:
    """Bytes, fixed and decimals; a str is a default in the JSON encoding (code points 0-255)."""
    if isinstance(value, decimal.Decimal):
        return value
    raw = value.encode("latin-1") if isinstance(value, str) else value
    if node.logical == "decimal":
        return decimal.Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-node.scale, ENOUGH_DIGITS)
    return raw


def _primitive(value: Any, node: AvroPrimitive, raw: bool) -> Any:
    if value is None:
        return None
    if node.kind == "long" and node.logical in TIMESTAMPS:
        if isinstance(value, datetime.datetime):  # local timestamps come naive from fastavro; read as UTC
            value = value if value.tzinfo else value.replace(tzinfo=UTC)
            return (value - EPOCH) // datetime.timedelta(microseconds=1) if raw else value
        micros = value * 1000 if node.logical.endswith("millis") else value
        return micros if raw else EPOCH + datetime.timedelta(microseconds=micros)
    if node.kind == "int" and node.logical == "date":
        if isinstance(value, datetime.date):
            return (value - EPOCH_DAY).days if raw else value
        return value if raw else EPOCH_DAY + datetime.timedelta(days=value)
    if node.kind == "bytes":
        return _binary(value, node)
    if node.kind == "string":
        return str(value)  # a uuid comes as uuid.UUID from fastavro, as its string from the decoder
    if node.kind == "float":
        return _float32(value)
    if node.kind == "double":
        return float(value)
    return value


def expected(value: Any, node: AvroNode, *, raw: bool = False) -> Any:
    """fastavro's value (or a reader default) of reader type `node`, in the canonical form (module doc);
    `raw` gives dates and timestamps as integers (days, microseconds)."""
    if isinstance(node, AvroUnion):
        if value is None:
            return None
        single = non_null_branch(node)
        if single is not None:
            return expected(value, single, raw=raw)
        members = _members(node)
        taken = next(k for k, b in enumerate(members) if _holds(b, value))
        return {f"member{k}": expected(value, b, raw=raw) if k == taken else None for k, b in enumerate(members)}
    if isinstance(node, AvroRecord):
        return {f.name: expected(value[f.name], f.type, raw=raw) for f in node.fields}
    if isinstance(node, AvroArray):
        return [expected(v, node.items, raw=raw) for v in value]
    if isinstance(node, AvroMap):
        return [(k, expected(v, node.values, raw=raw)) for k, v in value.items()]
    if isinstance(node, AvroEnum):
        return value
    if isinstance(node, AvroFixed):
        return _binary(value, node)
    return _primitive(value, node, raw)


def decoded(value: Any, node: AvroNode) -> Any:
    """A decoded row (Arrow's to_pylist) in the canonical form: a map keeps a repeated key's last value."""
    if value is None:
        return None
    if isinstance(node, AvroUnion):
        single = non_null_branch(node)
        if single is not None:
            return decoded(value, single)
        members = _members(node)
        assert list(value) == [f"member{k}" for k in range(len(members))]
        return {f"member{k}": decoded(value[f"member{k}"], b) for k, b in enumerate(members)}
    if isinstance(node, AvroRecord):
        assert list(value) == [f.name for f in node.fields]
        return {f.name: decoded(value[f.name], f.type) for f in node.fields}
    if isinstance(node, AvroArray):
        return [decoded(v, node.items) for v in value]
    if isinstance(node, AvroMap):
        return list({k: decoded(v, node.values) for k, v in value}.items())
    return value


def same(a: Any, b: Any) -> bool:
    """Equality of canonical forms: same Python types, NaN equal to NaN, -0.0 not equal to 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def plain(arrow: pa.DataType) -> pa.DataType:
    """The Arrow type with dates and timestamps as their integers (out-of-range ones cannot become Python)."""
    if pa.types.is_timestamp(arrow):
        return pa.int64()
    if pa.types.is_date32(arrow):
        return pa.int32()
    if pa.types.is_struct(arrow):
        fields = [arrow.field(k) for k in range(arrow.num_fields)]
        return pa.struct([pa.field(f.name, plain(f.type), f.nullable) for f in fields])
    if pa.types.is_map(arrow):
        return pa.map_(arrow.key_type, plain(arrow.item_type))
    if pa.types.is_list(arrow):
        return pa.list_(plain(arrow.value_type))
    return arrow


def check_like_fastavro(writer: Schema, reader: Schema, payloads: Sequence[bytes], batch: AvroBatch) -> None:
    """Each row is what fastavro resolves its payload to; a payload fastavro cannot read is a bad row."""
    node = parse_avro(json.dumps(reader))
    rows = batch.values.to_pylist()
    for row, payload in enumerate(payloads):
        ref = fastavro_read(writer, None if reader == writer else reader, payload)
        if ref.error is None:
            assert row not in batch.reasons, f"row {row} bad ({batch.reasons.get(row)}), fastavro reads {ref.value!r}"
            got, want = decoded(rows[row], node), expected(ref.value, node)
            assert same(got, want), f"row {row} ({payload.hex()}):\n decoded  {got!r}\n fastavro {want!r}"
        else:
            assert row in batch.reasons, f"row {row} decoded as {rows[row]!r}, fastavro cannot read it: {ref.error}"


def check_bad_or_exact(schema: Schema, payloads: Sequence[bytes], batch: AvroBatch, intact: set[int]) -> None:
    """Each row is marked bad, or is exactly what fastavro reads from all of its bytes; intact rows are good."""
    node = parse_avro(json.dumps(schema))
    rows = batch.values.cast(plain(batch.values.type)).to_pylist()
    for row, payload in enumerate(payloads):
        if row in batch.reasons:
            assert row not in intact, f"intact row {row} marked bad: {batch.reasons[row]}"
            continue
        ref = fastavro_read(schema, None, payload, logical_types=False)
        assert ref.error is None, f"row {row} ({payload.hex()}) decoded as {rows[row]!r}; fastavro: {ref.error}"
        got, want = decoded(rows[row], node), expected(ref.value, node, raw=True)
        assert same(got, want), f"row {row} ({payload.hex()}):\n decoded  {got!r}\n fastavro {want!r}"


# ---------------------------------------------------------------------------------------------- varints


def zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def unzigzag(z: int) -> int:
    return (z >> 1) ^ -(z & 1)


def varint(z: int, width: int = 1) -> bytes:
    """`z` (unsigned) in base-128 groups, padded with zero groups to `width` bytes when it needs fewer."""
    groups = []
    while True:
        groups.append(z & 0x7F)
        z >>= 7
        if not z:
            break
    groups += [0] * (width - len(groups))
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])
