"""Column-wise Avro decoding with writer-to-reader schema resolution, in numpy over a batch's value buffer.

Avro's binary encoding has no per-record framing: a record is its fields in order, each a zig-zag varint, a
length-prefixed byte string, fixed-width bytes, or a union's branch index followed by the branch. Decoding a
batch record by record in Python (fastavro's `schemaless_reader`) costs several microseconds a record, ten
times msgspec's JSON. Here every record of one writer schema is decoded *field by field across all records*:
one cursor per record (cohort.pipelines.formats.avro.cursor), each field one vectorised read for every record at once,
so the Python work is per field and per batch, not per record. Unions read their branch index for all records
and then each branch for the records that took it; arrays and maps read one item per pass for the records that
still have items.

Resolution follows the Avro specification, applied while decoding: reader fields are matched by name (or
alias), writer fields the reader lacks are read and dropped, reader fields the writer lacks take their
default (a reader field without one makes the writer schema unreadable: every record written with it is
quarantined), numbers are promoted (int -> long -> float -> double), strings and bytes interchange, enum
symbols are mapped by name (an unknown symbol takes the reader's default, or quarantines its record). A writer
type is read into a reader union's first branch it matches (cohort.pipelines.formats.avro.match decides which, per
type); a writer union's branch that the reader cannot take quarantines only the records that took it. A
writer schema equal to the reader schema is read as written, each union branch into itself.

A record whose bytes do not fit its writer schema (a varint that does not end, a length past the end of the
value, an invalid union index or enum index, invalid UTF-8 in a string, bytes left over after the record) is
marked bad and gets a reason; its columns are nulled.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cohort.pipelines.formats.avro.cursor import PAD, Cursor, as_type, gather, gather_payloads, scatter
from cohort.pipelines.formats.avro.defaults import MILLIS, arrow_of, constant, exact_decimal
from cohort.pipelines.formats.avro.match import AvroResolutionError, branch_plan, reads
from cohort.pipelines.formats.avro.schema import (
    AvroArray,
    AvroEnum,
    AvroFixed,
    AvroMap,
    AvroNode,
    AvroPrimitive,
    AvroRecord,
    AvroUnion,
    non_null_branch,
)

__all__ = ["AvroBatch", "AvroResolutionError", "arrow_of", "decode_avro", "gather_payloads", "scatter"]

_INT32 = (-(2**31), 2**31 - 1)
_MAX_ZERO_SIZE_ITEMS = 1 << 20
_NUMBERS = ("int", "long", "float", "double")
_MAX_MILLIS = (2**63 - 1) // 1000  # the largest millisecond timestamp whose microseconds fit in 64 bits


def _is_null(node: AvroNode) -> bool:
    return isinstance(node, AvroPrimitive) and node.kind == "null"


class _Decoder:
    """Decodes one writer schema's records into one reader schema's Arrow types (see the module doc).
    `resolving` is False when the writer schema is the reader schema: unions are then read branch for branch,
    as they are in a writer field the reader lacks (read only to get past it)."""

    def __init__(self, cursor: Cursor, *, resolving: bool) -> None:
        self.c = cursor
        self.resolving = resolving
        self.plans: dict[tuple[int, int], tuple[int | None, ...]] = {}  # by id of (writer, reader): kept alive
        self.arrows: dict[int, pa.DataType] = {}  # by id of the reader type
        self.as_written = _Decoder(cursor, resolving=False) if resolving else self  # for fields the reader lacks

    def arrow(self, node: AvroNode) -> pa.DataType:
        """The Arrow type of a reader type, worked out once a decode."""
        found = self.arrows.get(id(node))
        if found is None:
            found = self.arrows[id(node)] = arrow_of(node)
        return found

    def plan(self, w: AvroNode, r: AvroNode) -> tuple[int | None, ...]:
        """The reader branch of each writer branch (either may be a single type): decided once a decode."""
        key = (id(w), id(r))
        if key not in self.plans:
            written = w.branches if isinstance(w, AvroUnion) else (w,)
            if not self.resolving:  # the same union on both sides: each branch is read as itself
                self.plans[key] = tuple(range(len(written)))
            else:
                self.plans[key] = branch_plan(written, r.branches if isinstance(r, AvroUnion) else (r,))
        return self.plans[key]

    def read(self, w: AvroNode, r: AvroNode, rows: np.ndarray, path: str) -> pa.Array:
        if isinstance(w, AvroUnion) or isinstance(r, AvroUnion):
            return self.union(w, r, rows, path)
        arrow = self.arrow(r)
        if isinstance(w, AvroPrimitive):
            if w.kind == "null" and not _is_null(r):
                raise AvroResolutionError(f"`{path}`: null cannot be read as {_describe(r)}")
            return self.primitive(w, r, rows, path, arrow)
        if isinstance(w, AvroEnum):
            return self.enum(w, r, rows, path)
        if isinstance(w, AvroFixed):
            if isinstance(r, AvroFixed) and r.size != w.size:
                raise AvroResolutionError(f"`{path}`: fixed size {w.size} cannot be read as fixed size {r.size}")
            if not isinstance(r, AvroFixed) and not (isinstance(r, AvroPrimitive) and r.kind == "bytes"):
                raise AvroResolutionError(f"`{path}`: fixed {w.name} cannot be read as {_describe(r)}")
            block = self.c.fixed(rows, w.size)
            if w.logical == "decimal" and pa.types.is_decimal(arrow):
                return self.decimals([bytes(b) for b in block], w.scale, rows, arrow)
            return gather(
                block.reshape(-1), np.arange(rows.size, dtype=np.int64) * w.size, np.full(rows.size, w.size), arrow
            )
        if isinstance(w, AvroRecord):
            if not isinstance(r, AvroRecord):
                raise AvroResolutionError(f"`{path}`: record {w.name} cannot be read as {_describe(r)}")
            return self.record(w, r, rows, path)
        if isinstance(w, AvroArray):
            if not isinstance(r, AvroArray) or not reads(w.items, r.items):
                raise AvroResolutionError(f"`{path}`: {_describe(w)} cannot be read as {_describe(r)}")
            items = cast(Any, arrow).value_type
            counts, values = self.blocks(
                rows,
                lambda sub: as_type(self.read(w.items, r.items, sub, f"{path}[]"), items),
                _min_size(w.items),
                items,
            )
            return pa.ListArray.from_arrays(cast(Any, _offsets(counts)), cast(Any, values))
        if isinstance(w, AvroMap):
            if not isinstance(r, AvroMap) or not reads(w.values, r.values):
                raise AvroResolutionError(f"`{path}`: {_describe(w)} cannot be read as {_describe(r)}")
            item_type = cast(Any, arrow).item_type
            entry_type = pa.struct([pa.field("key", pa.string()), pa.field("value", item_type)])

            def entry(sub: np.ndarray) -> pa.Array:
                key = self.c.blob(sub, pa.string())
                value = as_type(self.read(w.values, r.values, sub, f"{path}{{}}"), item_type)
                return pa.StructArray.from_arrays([key, value], fields=list(entry_type))

            counts, entries = self.blocks(rows, entry, 1 + _min_size(w.values), entry_type)  # a key takes >= 1 byte
            found = cast(Any, entries)
            return pa.MapArray.from_arrays(cast(Any, _offsets(counts)), found.field("key"), found.field("value"))
        raise AvroResolutionError(f"`{path}`: unsupported Avro type {w!r}")

    # ------------------------------------------------------------------------------------------- kinds

    def primitive(self, w: AvroPrimitive, r: AvroNode, rows: np.ndarray, path: str, arrow: pa.DataType) -> pa.Array:
        if w.kind == "null":
            return pa.nulls(rows.size, cast(Any, arrow))
        reader_kind = r.kind if isinstance(r, AvroPrimitive) else None
        if w.kind == "boolean":
            if reader_kind != "boolean":
                raise AvroResolutionError(f"`{path}`: boolean cannot be read as {_describe(r)}")
            byte = self.c.fixed(rows, 1)[:, 0]
            self.c.fail(rows, byte > 1, "Avro boolean byte is neither 0 nor 1")
            return pa.array(byte == 1, pa.bool_())
        if w.kind in _NUMBERS:
            allowed = _NUMBERS[_NUMBERS.index(w.kind) :]
            if reader_kind not in allowed:
                raise AvroResolutionError(f"`{path}`: {w.kind} cannot be read as {_describe(r)}")
            if w.kind in ("int", "long"):
                value = self.c.varint(rows)
                if w.kind == "int":
                    self.c.fail(rows, (value < _INT32[0]) | (value > _INT32[1]), "Avro int out of the 32-bit range")
                if w.logical in MILLIS and pa.types.is_timestamp(arrow):
                    self.c.fail(rows, np.abs(value) > _MAX_MILLIS, "Avro timestamp out of range")
                    value = np.where(self.c.bad[rows], 0, value)
                return _number(value, w, arrow)
            width = 4 if w.kind == "float" else 8
            block = self.c.fixed(rows, width)
            numbers = block.copy().view("<f4" if width == 4 else "<f8").reshape(-1)
            return pa.array(numbers).cast(arrow)
        if reader_kind not in ("bytes", "string"):
            raise AvroResolutionError(f"`{path}`: {w.kind} cannot be read as {_describe(r)}")
        if w.logical == "decimal" and pa.types.is_decimal(arrow):
            return self.decimals(self.c.blob(rows, pa.binary()).to_pylist(), w.scale, rows, arrow)
        return self.c.blob(rows, arrow)

    def decimals(self, raw: list[bytes | None], scale: int, rows: np.ndarray, arrow: pa.DataType) -> pa.Array:
        """Avro decimals as Arrow decimals; an unscaled value with more digits than the reader's precision
        fails its record."""
        unscaled = [None if b is None else int.from_bytes(b, "big", signed=True) for b in raw]
        limit = 10 ** cast(Any, arrow).precision
        too_big = np.array([u is not None and abs(u) >= limit for u in unscaled], dtype=bool)
        self.c.fail(rows, too_big, f"Avro decimal does not fit {arrow}")
        values = [
            None if u is None or bad else exact_decimal(u, scale) for u, bad in zip(unscaled, too_big, strict=True)
        ]
        return pa.array(values, arrow)

    def enum(self, w: AvroEnum, r: AvroNode, rows: np.ndarray, path: str) -> pa.Array:
        if not isinstance(r, AvroEnum) and not (isinstance(r, AvroPrimitive) and r.kind == "string"):
            raise AvroResolutionError(f"`{path}`: enum {w.name} cannot be read as {_describe(r)}")
        index = self.c.varint(rows)
        self.c.fail(rows, (index < 0) | (index >= len(w.symbols)), f"Avro enum index out of range for {w.name}")
        symbols = list(w.symbols)
        if isinstance(r, AvroEnum):
            known = set(r.symbols)
            mapped = [s if s in known else r.default for s in symbols]
            unknown = np.array([m is None or m not in known for m in mapped], dtype=bool)
            if unknown.any():
                hit = unknown[np.clip(index, 0, len(symbols) - 1)]
                self.c.fail(rows, hit, f"`{path}`: enum symbol not in the reader's {r.name} and no default")
            symbols = [m if m is not None else "" for m in mapped]
        index = np.where(self.c.bad[rows], 0, index).astype(np.int32)
        return pa.DictionaryArray.from_arrays(pa.array(index), pa.array(symbols, pa.string())).cast(pa.string())

    def record(self, w: AvroRecord, r: AvroRecord, rows: np.ndarray, path: str) -> pa.Array:
        by_name: dict[str, int] = {}
        for k, f in enumerate(r.fields):
            for name in (f.name, *f.aliases):
                by_name.setdefault(name, k)
        columns: dict[int, pa.Array] = {}
        for f in w.fields:
            found_at = by_name.get(f.name)
            if found_at is None:
                self.as_written.read(f.type, f.type, rows, f"{path}.{f.name}")  # read past it, resolving nothing
            else:
                columns[found_at] = self.read(
                    f.type, r.fields[found_at].type, rows, f"{path}.{r.fields[found_at].name}"
                )
        arrays = []
        for k, f in enumerate(r.fields):
            if k in columns:
                arrays.append(as_type(columns[k], self.arrow(f.type)))
            elif f.has_default:
                arrays.append(constant(f, rows.size))
            else:
                raise AvroResolutionError(f"`{path}.{f.name}` is not in the writer schema and has no default")
        fields = [pa.field(f.name, self.arrow(f.type)) for f in r.fields]
        return (
            pa.StructArray.from_arrays(arrays, fields=fields) if fields else pa.array([{}] * rows.size, pa.struct([]))
        )

    def union(self, w: AvroNode, r: AvroNode, rows: np.ndarray, path: str) -> pa.Array:
        """A union on either side: each writer branch read into the reader branch the plan gives it (one
        type on a side is a union of one branch). A writer branch the reader cannot take fails the records
        that took it; a writer that is not a union and cannot be read at all refuses the writer schema."""
        written = w.branches if isinstance(w, AvroUnion) else (w,)
        targets = r.branches if isinstance(r, AvroUnion) else (r,)
        if isinstance(w, AvroUnion):
            index = self.c.varint(rows)
            self.c.fail(rows, (index < 0) | (index >= len(written)), "Avro union index out of range")
        else:
            index = np.zeros(rows.size, np.int64)
        plan = self.plan(w, r)
        taken = np.full(rows.size, -1, np.int64)  # the reader branch of each row
        parts: dict[int, list[tuple[np.ndarray, pa.Array]]] = {}
        for b, (node, j) in enumerate(zip(written, plan, strict=True)):
            took = (index == b) & ~self.c.bad[rows]
            if j is None:
                problem = f"`{path}`: {_describe(node)} cannot be read as {_describe(r)}"
                if not isinstance(w, AvroUnion):
                    raise AvroResolutionError(problem)
                self.c.fail(rows, took, f"Avro value cannot be read: {problem}")
                continue
            where = np.flatnonzero(took)
            taken[where] = j
            if _is_null(targets[j]):
                continue
            try:
                parts.setdefault(j, []).append((where, self.read(node, targets[j], rows[where], path)))
            except AvroResolutionError as exc:  # only the records that took this branch fail
                if not isinstance(w, AvroUnion):
                    raise
                self.c.fail(rows, took, f"Avro value cannot be read: {exc}")
        arrow = self.arrow(r)
        if not isinstance(r, AvroUnion) or non_null_branch(r) is not None:  # one column: the non-null branch
            return scatter([part for found in parts.values() for part in found], rows.size, arrow)
        members = [j for j, node in enumerate(targets) if not _is_null(node)]
        fields = list(cast(Any, arrow))
        if not members:
            return pa.nulls(rows.size, cast(Any, arrow))
        arrays = [scatter(parts.get(j, []), rows.size, f.type) for j, f in zip(members, fields, strict=True)]
        return pa.StructArray.from_arrays(arrays, fields=fields, mask=pa.array(~np.isin(taken, members)))

    def blocks(
        self, rows: np.ndarray, item: Callable[[np.ndarray], pa.Array], item_bytes: int, arrow: pa.DataType
    ) -> tuple[np.ndarray, pa.Array]:
        """Avro array/map blocks: (item count per row, the items in row order, of Arrow type `arrow`).
        `item_bytes`, the fewest bytes an item takes, bounds a block's count by the bytes left; items of no
        bytes (nulls, empty records) are read a whole block at once."""
        counts = np.zeros(rows.size, np.int64)
        pieces: list[pa.Array] = []
        owners: list[np.ndarray] = []
        seqs: list[np.ndarray] = []
        active = np.arange(rows.size, dtype=np.int64)
        while active.size:
            count = self.c.varint(rows[active])
            negative = count < 0
            if negative.any():
                count = np.abs(count)  # -(2**63) stays negative: refused below
                self.c.varint(rows[active[negative]])  # the block's size in bytes
                self.c.fail(rows[active], count < 0, "Avro array or map block count out of range")
            room = self.c.end[rows[active]] - self.c.pos[rows[active]]
            limit = room if item_bytes > 0 else np.full(active.size, _MAX_ZERO_SIZE_ITEMS)
            self.c.fail(rows[active], count > limit, "Avro array or map block longer than the value")
            count = np.where(self.c.bad[rows[active]], 0, count)
            keep = count > 0
            active, remaining = active[keep], count[keep]
            if active.size and item_bytes == 0:  # items of no bytes: all of a block in one read
                sel = np.repeat(active, remaining)
                first = np.repeat(np.cumsum(remaining) - remaining, remaining)
                pieces.append(item(rows[sel]))
                owners.append(sel)
                seqs.append(np.repeat(counts[active], remaining) + np.arange(sel.size, dtype=np.int64) - first)
                counts[active] += remaining
                continue
            while remaining.size and remaining.max() > 0:
                taking = remaining > 0
                sel = active[taking]
                pieces.append(item(rows[sel]))
                owners.append(sel)
                seqs.append(counts[sel].copy())
                counts[sel] += 1
                remaining = np.where(self.c.bad[rows[active]], 0, remaining - taking)  # a failed row reads no more
        if not pieces:
            return counts, pa.array([], arrow)
        order = pa.array(np.lexsort((np.concatenate(seqs), np.concatenate(owners))))
        return counts, pa.concat_arrays(pieces).take(cast(Any, order))


def _offsets(counts: np.ndarray) -> pa.Array:
    offsets = np.zeros(counts.size + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.array(offsets)


def _min_size(node: AvroNode) -> int:
    """The fewest bytes a value of this type takes (0 for null, empty records and some unions)."""
    if isinstance(node, AvroPrimitive):
        return 0 if node.kind == "null" else 1
    if isinstance(node, AvroFixed):
        return node.size
    if isinstance(node, AvroRecord):
        return sum(_min_size(f.type) for f in node.fields)
    return 1


def _number(value: np.ndarray, w: AvroPrimitive, arrow: pa.DataType) -> pa.Array:
    """Integers into the reader's type: a number, a date (days) or a UTC timestamp (micros)."""
    if pa.types.is_timestamp(arrow):
        micros = value * 1000 if w.logical in MILLIS else value
        return pa.array(micros, pa.int64()).cast(arrow)
    if pa.types.is_date32(arrow):
        return pa.array(value.astype(np.int32), pa.int32()).cast(pa.date32())
    return pa.array(value, pa.int64()).cast(arrow, safe=False)


def _describe(node: AvroNode) -> str:
    """A type as an error message names it: `long`, `record Point`, `array of long`, `[null, long, string]`."""
    if isinstance(node, AvroPrimitive):
        return node.kind
    if isinstance(node, AvroUnion):
        return "[" + ", ".join(_describe(b) for b in node.branches) + "]"
    if isinstance(node, AvroArray):
        return f"array of {_describe(node.items)}"
    if isinstance(node, AvroMap):
        return f"map of {_describe(node.values)}"
    return f"{type(node).__name__.removeprefix('Avro').lower()} {node.name}"


@dataclass(frozen=True)
class AvroBatch:
    """A batch decoded with one writer schema: the reader-typed struct and a reason per failed row."""

    values: pa.StructArray | pa.Array
    reasons: dict[int, str]


def decode_avro(
    data: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    writer: AvroNode,
    reader: AvroNode,
    *,
    writer_text: str,
    schema_id: int,
    writer_named: Sequence[str] = (),
) -> AvroBatch:
    """Decode the payloads `data[starts[i]:ends[i]]` (all written with `writer`) into `reader`'s Arrow type.

    Raises AvroResolutionError when the writer schema as a whole cannot be read as the reader schema.
    """
    n = starts.size
    buf = np.concatenate([data, np.zeros(PAD, np.uint8)])
    cursor = Cursor(buf, starts.astype(np.int64).copy(), ends.astype(np.int64), np.zeros(n, bool))
    rows = np.arange(n, dtype=np.int64)
    values = _Decoder(cursor, resolving=writer is not reader and writer != reader).read(writer, reader, rows, "$")
    left = cursor.end - cursor.pos
    cursor.fail(rows, (left > 0) & ~cursor.bad)  # bytes after the record: the schema did not describe them
    reasons: dict[int, str] = {}
    for row in np.flatnonzero(cursor.bad).tolist():
        payload = bytes(data[starts[row] : ends[row]])
        reasons[row] = cursor.why.get(row) or _fastavro_reason(payload, writer_text, schema_id, writer_named)
    if reasons:
        keep = np.ones(n, bool)
        keep[list(reasons)] = False
        values = pc.if_else(pa.array(keep), values, pa.scalar(None, values.type))
    return AvroBatch(values, reasons)


def _fastavro_reason(payload: bytes, writer_text: str, schema_id: int, named: Sequence[str] = ()) -> str:
    """Why a payload does not decode with its writer schema, in fastavro's words (the rare path)."""
    import json

    import fastavro

    stream = io.BytesIO(payload)
    try:
        known: dict[str, Any] = {}
        for text in named:
            fastavro.parse_schema(json.loads(text), named_schemas=known)
        schema = fastavro.parse_schema(json.loads(writer_text), named_schemas=known)
        fastavro.schemaless_reader(stream, schema, None)
    except Exception as exc:  # fastavro raises many types for malformed input; only the message is kept
        message = re.sub(r" (from|in) <[^>]*>", "", str(exc))  # fastavro names the stream object
        return f"Avro value does not match its writer schema (id {schema_id}): {type(exc).__name__}: {message}"
    extra = len(payload) - stream.tell()
    if extra > 0:
        return f"Avro value has {extra} byte(s) after the record its writer schema (id {schema_id}) describes"
    return f"Avro value does not match its writer schema (id {schema_id})"
