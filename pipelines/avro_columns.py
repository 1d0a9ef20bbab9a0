"""Column-wise Avro decoding with writer-to-reader schema resolution, in numpy over a batch's value buffer.

Avro's binary encoding has no per-record framing: a record is its fields in order, each a zig-zag varint, a
length-prefixed byte string, fixed-width bytes, or a union's branch index followed by the branch. Decoding a
batch record by record in Python (fastavro's `schemaless_reader`) costs several microseconds a record, ten
times msgspec's JSON. Here every record of one writer schema is decoded *field by field across all records*:
one cursor per record (a numpy array of positions), each field one vectorised read for every record at once,
so the Python work is per field and per batch, not per record. Unions read their branch index for all records
and then each branch for the records that took it; arrays and maps read one item per pass for the records that
still have items.

Resolution follows the Avro specification, applied while decoding: reader fields are matched by name (or
alias), writer fields the reader lacks are read and dropped, reader fields the writer lacks take their
default (a reader field without one makes the writer schema unreadable: every record written with it is
quarantined), numbers are promoted (int -> long -> float -> double), strings and bytes interchange, enum
symbols are mapped by name (an unknown symbol takes the reader's default, or quarantines its record).

A record whose bytes do not fit its writer schema (a varint that does not end, a length past the end of the
value, an invalid union index or enum index, invalid UTF-8 in a string, bytes left over after the record) is
marked bad and gets a reason; its columns are nulled.
"""

from __future__ import annotations

import decimal
import io
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cohort.pipelines.avro_schema import (
    AvroArray,
    AvroEnum,
    AvroField,
    AvroFixed,
    AvroMap,
    AvroNode,
    AvroPrimitive,
    AvroRecord,
    AvroUnion,
    non_null_branch,
    nullable,
    spark_type,
)
from cohort.pipelines.decode import arrow_type, invalid_utf8

__all__ = ["AvroBatch", "AvroResolutionError", "decode_avro", "gather_payloads", "scatter"]

_VARINT_BYTES = 10
_PAD = 16
_INT32 = (-(2**31), 2**31 - 1)
_MAX_ZERO_SIZE_ITEMS = 1 << 20
_NUMBERS = ("int", "long", "float", "double")
_MILLIS = ("timestamp-millis", "local-timestamp-millis")
_MAX_MILLIS = (2**63 - 1) // 1000  # the largest millisecond timestamp whose microseconds fit in 64 bits
_EXACT = decimal.Context(prec=100)  # more digits than any Arrow decimal holds


class AvroResolutionError(ValueError):
    """The writer schema cannot be read as the reader schema (every record written with it is refused)."""


def arrow_of(node: AvroNode) -> pa.DataType:
    """The Arrow type a reader type decodes into."""
    return arrow_type(spark_type(node), where="avro")


@dataclass
class _Cursor:
    """Read positions of the records being decoded, and which of them failed (with a reason when known)."""

    buf: np.ndarray
    pos: np.ndarray
    end: np.ndarray
    bad: np.ndarray
    why: dict[int, str] = field(default_factory=dict)

    def fail(self, rows: np.ndarray, mask: np.ndarray, reason: str | None = None) -> None:
        """Mark `rows[mask]` bad (keeping the first reason of each) and stop their cursors."""
        if not mask.any():
            return
        failed = rows[mask]
        self.bad[failed] = True
        self.pos[failed] = self.end[failed]
        if reason is not None:
            for row in failed.tolist():
                self.why.setdefault(row, reason)

    def advance(self, rows: np.ndarray, new_pos: np.ndarray) -> None:
        over = new_pos > self.end[rows]
        self.pos[rows] = np.minimum(new_pos, self.end[rows])
        self.fail(rows, over)

    def varint(self, rows: np.ndarray) -> np.ndarray:
        """The zig-zag varints (Avro int and long) at `rows`' positions, as int64."""
        if rows.size == 0:
            return np.zeros(0, np.int64)
        start = self.pos[rows]
        byte = self.buf[start]
        raw = (byte & 0x7F).astype(np.uint64)
        length = np.ones(rows.size, np.int64)
        going = np.flatnonzero(byte & 0x80)  # one byte more per pass, for the rows whose varint goes on
        for k in range(1, _VARINT_BYTES):
            if going.size == 0:
                break
            byte = self.buf[start[going] + k]
            raw[going] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
            length[going] += 1
            going = going[(byte & 0x80) != 0]
        value = (raw >> np.uint64(1)).astype(np.int64) ^ -((raw & np.uint64(1)).astype(np.int64))
        ended = np.ones(rows.size, bool)
        ended[going] = False  # still going after 10 bytes: not a varint
        self.fail(rows, ~ended)
        self.advance(rows, start + length)
        return np.where(self.bad[rows], 0, value)

    def fixed(self, rows: np.ndarray, size: int) -> np.ndarray:
        """`size` bytes at each row's position, as an (n, size) uint8 array."""
        start = self.pos[rows]
        index = np.minimum(start[:, None] + np.arange(size, dtype=np.int64), self.buf.size - 1)  # past the end: bad
        block = self.buf[index] if size else np.zeros((rows.size, 0), np.uint8)
        self.advance(rows, start + size)
        return np.where(self.bad[rows][:, None], 0, block).astype(np.uint8)

    def blob(self, rows: np.ndarray, arrow: pa.DataType) -> pa.Array:
        """Length-prefixed byte strings at `rows` as an Arrow binary (or string) array; invalid UTF-8 in a
        string fails its record."""
        length = self.varint(rows)
        start = self.pos[rows]
        too_long = (length < 0) | (length > self.end[rows] - start)  # not start + length: it can overflow
        self.fail(rows, too_long)
        length = np.where(self.bad[rows], 0, length)
        self.pos[rows] = start + length
        array = _gather(self.buf, start, length, pa.binary())
        if pa.types.is_string(arrow) or pa.types.is_large_string(arrow):
            invalid = np.array(invalid_utf8(array), dtype=bool)
            if invalid.any():
                self.fail(rows, invalid, "Avro string is not valid UTF-8")
                array = pc.if_else(pa.array(invalid), pa.scalar(b"", pa.binary()), array)
            return array.cast(pa.string())
        return array


def _gather(buf: np.ndarray, start: np.ndarray, length: np.ndarray, arrow: pa.DataType) -> pa.Array:
    """An Arrow binary array of the byte slices [start, start + length) of `buf`, in one numpy gather."""
    offsets = np.zeros(length.size + 1, np.int64)
    np.cumsum(length, out=offsets[1:])
    total = int(offsets[-1])
    if total:
        index = np.repeat(start - offsets[:-1], length) + np.arange(total, dtype=np.int64)
        data = buf[index]
    else:
        data = np.zeros(0, np.uint8)
    return pa.Array.from_buffers(
        pa.large_binary(), length.size, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data.tobytes())]
    ).cast(arrow if not pa.types.is_string(arrow) else pa.binary())


def gather_payloads(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The byte slices [starts[i], ends[i]) of `data` as an Arrow binary array."""
    return _gather(
        np.concatenate([data, np.zeros(_PAD, np.uint8)]),
        starts.astype(np.int64),
        (ends - starts).astype(np.int64),
        pa.binary(),
    )


def _nulls(size: int, arrow: pa.DataType) -> pa.Array:
    return pa.nulls(size, cast(Any, arrow))


def _as(array: pa.Array, arrow: pa.DataType) -> pa.Array:
    """`array` as `arrow` (no cast when it already is: pyarrow breaks lists of nulls cast to their own type)."""
    return array if array.type == arrow else array.cast(arrow)


def scatter(parts: list[tuple[np.ndarray, pa.Array]], size: int, arrow: pa.DataType) -> pa.Array:
    """One array of `size` rows from arrays that each hold the rows given with them (others null)."""
    present = [(where, array) for where, array in parts if where.size]
    if not present:
        return _nulls(size, arrow)
    values = pa.concat_arrays([_as(array, arrow) for _, array in present])
    index = np.full(size, -1, np.int64)
    index[np.concatenate([where for where, _ in present])] = np.arange(len(values), dtype=np.int64)
    return values.take(cast(Any, pa.array(index, mask=index < 0)))


class _Decoder:
    """Decodes one writer schema's records into one reader schema's Arrow types (see the module doc)."""

    def __init__(self, cursor: _Cursor) -> None:
        self.c = cursor

    def read(self, w: AvroNode, r: AvroNode, rows: np.ndarray, path: str) -> pa.Array:
        arrow = arrow_of(r)
        takes_null = nullable(r)
        if isinstance(r, AvroUnion):
            single = non_null_branch(r)
            if single is None:
                if w != r:
                    raise AvroResolutionError(f"`{path}`: a union of several types is read only from the same union")
                return self.general_union(w, rows, path)
            if not isinstance(w, AvroUnion):
                if isinstance(w, AvroPrimitive) and w.kind == "null":
                    return _nulls(rows.size, arrow)
                return self.read(w, single, rows, path)
            r = single
        if isinstance(w, AvroUnion):
            return self.union(w, r, rows, path, arrow, takes_null)
        if isinstance(w, AvroPrimitive) and w.kind == "null" and not takes_null:
            raise AvroResolutionError(f"`{path}`: null cannot be read as {_describe(r)}")
        if isinstance(w, AvroPrimitive):
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
            return _gather(
                block.reshape(-1), np.arange(rows.size, dtype=np.int64) * w.size, np.full(rows.size, w.size), arrow
            )
        if isinstance(w, AvroRecord):
            if not isinstance(r, AvroRecord):
                raise AvroResolutionError(f"`{path}`: record {w.name} cannot be read as {_describe(r)}")
            return self.record(w, r, rows, path)
        if isinstance(w, AvroArray):
            if not isinstance(r, AvroArray):
                raise AvroResolutionError(f"`{path}`: an array cannot be read as {_describe(r)}")
            items = cast(Any, arrow).value_type
            counts, values = self.blocks(
                rows, lambda sub: _as(self.read(w.items, r.items, sub, f"{path}[]"), items), _min_size(w.items), items
            )
            return pa.ListArray.from_arrays(cast(Any, _offsets(counts)), cast(Any, values))
        if isinstance(w, AvroMap):
            if not isinstance(r, AvroMap):
                raise AvroResolutionError(f"`{path}`: a map cannot be read as {_describe(r)}")
            item_type = cast(Any, arrow).item_type
            entry_type = pa.struct([pa.field("key", pa.string()), pa.field("value", item_type)])

            def entry(sub: np.ndarray) -> pa.Array:
                key = self.c.blob(sub, pa.string())
                value = _as(self.read(w.values, r.values, sub, f"{path}{{}}"), item_type)
                return pa.StructArray.from_arrays([key, value], fields=list(entry_type))

            counts, entries = self.blocks(rows, entry, 1 + _min_size(w.values), entry_type)  # a key takes >= 1 byte
            found = cast(Any, entries)
            return pa.MapArray.from_arrays(cast(Any, _offsets(counts)), found.field("key"), found.field("value"))
        raise AvroResolutionError(f"`{path}`: unsupported Avro type {w!r}")

    # ------------------------------------------------------------------------------------------- kinds

    def primitive(self, w: AvroPrimitive, r: AvroNode, rows: np.ndarray, path: str, arrow: pa.DataType) -> pa.Array:
        if w.kind == "null":
            return _nulls(rows.size, arrow)
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
                if w.logical in _MILLIS and pa.types.is_timestamp(arrow):
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
        values = [None if u is None or bad else _decimal(u, scale) for u, bad in zip(unscaled, too_big, strict=True)]
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
                self.read(f.type, f.type, rows, f"{path}.{f.name}")  # read past it
            else:
                columns[found_at] = self.read(
                    f.type, r.fields[found_at].type, rows, f"{path}.{r.fields[found_at].name}"
                )
        arrays = []
        for k, f in enumerate(r.fields):
            if k in columns:
                arrays.append(_as(columns[k], arrow_of(f.type)))
            elif f.has_default:
                arrays.append(_constant(f, rows.size))
            else:
                raise AvroResolutionError(f"`{path}.{f.name}` is not in the writer schema and has no default")
        fields = [pa.field(f.name, arrow_of(f.type)) for f in r.fields]
        return (
            pa.StructArray.from_arrays(arrays, fields=fields) if fields else pa.array([{}] * rows.size, pa.struct([]))
        )

    def union(
        self, w: AvroUnion, r: AvroNode, rows: np.ndarray, path: str, arrow: pa.DataType, takes_null: bool
    ) -> pa.Array:
        branch = self.c.varint(rows)
        self.c.fail(rows, (branch < 0) | (branch >= len(w.branches)), "Avro union index out of range")
        parts: list[tuple[np.ndarray, pa.Array]] = []
        for b, node in enumerate(w.branches):
            where = np.flatnonzero((branch == b) & ~self.c.bad[rows])
            if isinstance(node, AvroPrimitive) and node.kind == "null":
                if not takes_null:  # the specification refuses it; a null would break the column's promise
                    self.c.fail(rows, branch == b, f"`{path}`: null cannot be read as {_describe(r)}")
                continue
            try:
                parts.append((where, self.read(node, r, rows[where], path)))
            except AvroResolutionError as exc:  # only the records that took this branch fail
                self.c.fail(rows, np.isin(np.arange(rows.size), where), f"Avro value cannot be read: {exc}")
        return scatter(parts, rows.size, arrow)

    def general_union(self, w: AvroNode, rows: np.ndarray, path: str) -> pa.Array:
        assert isinstance(w, AvroUnion)
        branch = self.c.varint(rows)
        self.c.fail(rows, (branch < 0) | (branch >= len(w.branches)), "Avro union index out of range")
        members: list[pa.Array] = []
        names: list[pa.Field] = []
        for b, node in enumerate(w.branches):
            if isinstance(node, AvroPrimitive) and node.kind == "null":
                continue
            where = np.flatnonzero((branch == b) & ~self.c.bad[rows])
            member_type = arrow_of(node)
            members.append(scatter([(where, self.read(node, node, rows[where], path))], rows.size, member_type))
            names.append(pa.field(f"member{len(names)}", member_type))
        null = np.isin(
            branch, [b for b, n in enumerate(w.branches) if isinstance(n, AvroPrimitive) and n.kind == "null"]
        )
        return pa.StructArray.from_arrays(members, fields=names, mask=pa.array(null))

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
        micros = value * 1000 if w.logical in _MILLIS else value
        return pa.array(micros, pa.int64()).cast(arrow)
    if pa.types.is_date32(arrow):
        return pa.array(value.astype(np.int32), pa.int32()).cast(pa.date32())
    return pa.array(value, pa.int64()).cast(arrow, safe=False)


def _decimal(unscaled: int, scale: int) -> decimal.Decimal:
    """An unscaled integer as a Decimal, exactly (scaleb in the default context rounds to 28 digits)."""
    return decimal.Decimal(unscaled).scaleb(-scale, _EXACT)


def _constant(f: AvroField, size: int) -> pa.Array:
    """A reader field's default, repeated."""
    return pa.array([_default_value(f.type, f.default, f.name)] * size, arrow_of(f.type))


def _default_value(node: AvroNode, value: Any, path: str) -> Any:
    """A default as given in an Avro schema (its JSON encoding: bytes are code points 0-255, a union's default
    belongs to its first branch that takes it) as the Python value of the node's Arrow type."""
    if value is None:
        return None
    if isinstance(node, AvroUnion):
        single = non_null_branch(node)
        if single is not None:
            return _default_value(single, value, path)
        members = [b for b in node.branches if not nullable(b)]
        for k, branch in enumerate(members):
            if _json_fits(branch, value):
                chosen = {f"member{i}": None for i in range(len(members))}
                chosen[f"member{k}"] = _default_value(branch, value, path)
                return chosen
        raise AvroResolutionError(f"`{path}`: the default {value!r} fits no branch of its union")
    if isinstance(node, AvroRecord):
        given = value if isinstance(value, dict) else {}
        return {f.name: _default_value(f.type, given.get(f.name, f.default), f"{path}.{f.name}") for f in node.fields}
    if isinstance(node, AvroArray):
        return [_default_value(node.items, item, f"{path}[]") for item in value]
    if isinstance(node, AvroMap):
        return [(key, _default_value(node.values, item, f"{path}{{}}")) for key, item in value.items()]
    if isinstance(node, AvroFixed) or (isinstance(node, AvroPrimitive) and node.kind == "bytes"):
        raw = str(value).encode("latin-1")
        return _decimal(int.from_bytes(raw, "big", signed=True), node.scale) if node.logical == "decimal" else raw
    if isinstance(node, AvroPrimitive) and node.logical in _MILLIS:
        return int(value) * 1000  # the column holds microseconds
    return value


def _json_fits(node: AvroNode, value: Any) -> bool:
    """Whether a JSON default value can be of this (non-union) type."""
    if isinstance(node, AvroPrimitive):
        kinds: dict[str, tuple[type, ...]] = {
            "boolean": (bool,),
            "int": (int,),
            "long": (int,),
            "float": (int, float),
            "double": (int, float),
            "bytes": (str,),
            "string": (str,),
        }
        return isinstance(value, kinds.get(node.kind, ())) and not (isinstance(value, bool) and node.kind != "boolean")
    if isinstance(node, AvroEnum | AvroFixed):
        return isinstance(value, str)
    if isinstance(node, AvroArray):
        return isinstance(value, list)
    return isinstance(value, dict)


def _describe(node: AvroNode) -> str:
    if isinstance(node, AvroPrimitive):
        return node.kind
    return type(node).__name__.removeprefix("Avro").lower() + (f" {node.name}" if hasattr(node, "name") else "")


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
    buf = np.concatenate([data, np.zeros(_PAD, np.uint8)])
    cursor = _Cursor(buf, starts.astype(np.int64).copy(), ends.astype(np.int64), np.zeros(n, bool))
    rows = np.arange(n, dtype=np.int64)
    values = _Decoder(cursor).read(writer, reader, rows, "$")
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
