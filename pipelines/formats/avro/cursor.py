"""Read positions over a batch's Avro value buffer, and the Arrow gathers and scatters columns are built with.

`Cursor` holds one read position per record and reads the same kind of value (a zig-zag varint, fixed-width
bytes, a length-prefixed byte string) at every position at once, in numpy; a record whose bytes do not fit is
marked bad and its cursor stopped at its end, so later reads for it take nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cohort.pipelines.formats.decode import invalid_utf8

__all__ = ["PAD", "Cursor", "as_type", "gather", "gather_payloads", "scatter"]

_VARINT_BYTES = 10
PAD = 16
"""Zero bytes after the buffer, so that a read past a value's end stays inside the array (and fails)."""


@dataclass
class Cursor:
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
        array = gather(self.buf, start, length, pa.binary())
        if pa.types.is_string(arrow) or pa.types.is_large_string(arrow):
            invalid = np.array(invalid_utf8(array), dtype=bool)
            if invalid.any():
                self.fail(rows, invalid, "Avro string is not valid UTF-8")
                array = pc.if_else(pa.array(invalid), pa.scalar(b"", pa.binary()), array)
            return array.cast(pa.string())
        return array


def gather(buf: np.ndarray, start: np.ndarray, length: np.ndarray, arrow: pa.DataType) -> pa.Array:
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
    return gather(
        np.concatenate([data, np.zeros(PAD, np.uint8)]),
        starts.astype(np.int64),
        (ends - starts).astype(np.int64),
        pa.binary(),
    )


def as_type(array: pa.Array, arrow: pa.DataType) -> pa.Array:
    """`array` as `arrow` (no cast when it already is: pyarrow breaks lists of nulls cast to their own type)."""
    return array if array.type == arrow else array.cast(arrow)


def scatter(parts: list[tuple[np.ndarray, pa.Array]], size: int, arrow: pa.DataType) -> pa.Array:
    """One array of `size` rows from arrays that each hold the rows given with them (others null)."""
    present = [(where, array) for where, array in parts if where.size]
    if not present:
        return pa.nulls(size, cast(Any, arrow))
    values = pa.concat_arrays([as_type(array, arrow) for _, array in present])
    index = np.full(size, -1, np.int64)
    index[np.concatenate([where for where, _ in present])] = np.arange(len(values), dtype=np.int64)
    return values.take(cast(Any, pa.array(index, mask=index < 0)))
