"""The Schema Registry's wire framing, split for a whole batch at once.

A framed value is a magic byte 0, the schema id (4 bytes, big-endian) and the payload; a Protobuf payload is
preceded by the message indexes (a zig-zag varint count, then that many varints; a single 0 byte stands for
`[0]`, the file's first message). `split_frames` reads the headers of every value of a batch with numpy and
gives each one a reason when it cannot be framed (null, too short, another magic byte). Malformed message
indexes keep their schema id: the decoder looks the schema up first, since a record written for another
schema type (an Avro record on a topic read as Protobuf) is better told as such.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["Frames", "binary_buffers", "split_frames"]

HEADER = 5


@dataclass(frozen=True)
class Frames:
    """Per value: the schema id (-1 when the value cannot be framed) and its payload's [start, end) in
    `data`; `reasons` holds why a value cannot be framed; `indexes` the Protobuf message indexes, and
    `malformed` why a value's indexes cannot be read (its schema id is kept)."""

    data: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    schema_ids: np.ndarray
    reasons: dict[int, str]
    indexes: tuple[tuple[int, ...], ...] = ()
    malformed: dict[int, str] = field(default_factory=dict)


def binary_buffers(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(data bytes, offsets with len + 1 entries) of an Arrow binary array, without copying."""
    values = values.cast(pa.binary()) if not pa.types.is_binary(values.type) else values
    buffers: list[Any] = values.buffers()
    offsets = np.frombuffer(buffers[1], np.int32)[values.offset : values.offset + len(values) + 1].astype(np.int64)
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return data, offsets


def split_frames(values: pa.Array, *, what: str = "value", message_indexes: bool = False) -> Frames:
    """The framing of every value of a batch (see the module doc)."""
    data, offsets = binary_buffers(values)
    starts, ends = offsets[:-1], offsets[1:]
    n = len(values)
    null = np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    short = ~null & (ends - starts < HEADER)
    padded = np.concatenate([data, np.zeros(HEADER, np.uint8)])
    head = padded[np.where(null | short, 0, starts)[:, None] + np.arange(HEADER)]
    magic = head[:, 0]
    wrong = ~null & ~short & (magic != 0)
    ids = (head[:, 1].astype(np.int64) << 24) | (head[:, 2].astype(np.int64) << 16)
    ids |= (head[:, 3].astype(np.int64) << 8) | head[:, 4].astype(np.int64)
    reasons: dict[int, str] = {}
    for row in np.flatnonzero(null).tolist():
        reasons[row] = f"null {what} (a tombstone): nothing to decode"
    for row in np.flatnonzero(short).tolist():
        reasons[row] = (
            f"{what} is too short for the Schema Registry framing ({int(ends[row] - starts[row])} bytes; a magic "
            "byte and a 4-byte schema id come first)"
        )
    for row in np.flatnonzero(wrong).tolist():
        reasons[row] = (
            f"{what} does not start with the Schema Registry magic byte 0 (found 0x{int(magic[row]):02x}): it "
            "was not written by a Schema Registry serializer"
        )
    failed = null | short | wrong
    ids = np.where(failed, -1, ids)
    payload = np.where(failed, ends, starts + HEADER)
    indexes: tuple[tuple[int, ...], ...] = ()
    malformed: dict[int, str] = {}
    if message_indexes:
        found: list[tuple[int, ...]] = []
        for row in range(n):
            if failed[row]:
                found.append(())
                continue
            read = _message_indexes(data, int(payload[row]), int(ends[row]))
            if read is None:
                malformed[row] = f"{what} has malformed Protobuf message indexes after its schema id"
                found.append(())
            else:
                found.append(read[0])
                payload[row] = read[1]
        indexes = tuple(found)
    return Frames(data, payload, ends, ids, reasons, indexes, malformed)


def _varint(data: np.ndarray, pos: int, end: int) -> tuple[int, int] | None:
    """The zig-zag varint at `pos` and the position after it; None when it does not end before `end`."""
    result = shift = 0
    while pos < end and shift < 64:
        byte = int(data[pos])
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    return None


def _message_indexes(data: np.ndarray, pos: int, end: int) -> tuple[tuple[int, ...], int] | None:
    first = _varint(data, pos, end)
    if first is None or first[0] < 0:
        return None
    count, pos = first
    if count == 0:
        return (0,), pos
    found = []
    for _ in range(count):
        read = _varint(data, pos, end)
        if read is None or read[0] < 0:
            return None
        found.append(read[0])
        pos = read[1]
    return tuple(found), pos
