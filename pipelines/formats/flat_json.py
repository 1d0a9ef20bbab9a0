"""The JSON decoder's fast path: flat objects straight into Arrow columns, in C (pipelines/formats/flat_json.c).

For a value schema of booleans, integers, doubles and strings only, the C code parses each record it is
certain about into Arrow buffers, with no Python object per value, and defers every other record (a tombstone,
a repeated key, nesting, a type mismatch, an overflow, an escape UTF-8 cannot hold, ...) to the full decoder
(cohort.pipelines.formats.decode), which decodes or refuses it with its reason. The two give the same columns and
reasons for any input (tested record for record); the extension is optional: without it every record takes the
full decoder.

Example:
    >>> import pyarrow as pa
    >>> from pyspark.sql import types as T
    >>> schema = flat_schema(T.StructType([T.StructField("id", T.LongType())]))
    >>> batch = decode_flat(pa.array([b'{"id": 7}', b'{"id": 1.5}']), schema) if fast_available() else None
    >>> batch is None or (batch.columns[0].to_pylist(), batch.deferred.tolist()) == ([7, None], [1])
    True
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

try:
    from cohort.pipelines.formats import _flat_json
except ImportError:  # the extension was not built (no C compiler at install): the full decoder does all
    _flat_json = None  # type: ignore[assignment]

__all__ = ["FlatBatch", "FlatSchema", "decode_flat", "fast_available", "flat_schema"]

_KINDS: dict[type[DataType], tuple[str, pa.DataType]] = {
    BooleanType: ("b", pa.bool_()),
    ByteType: ("1", pa.int8()),
    ShortType: ("2", pa.int16()),
    IntegerType: ("4", pa.int32()),
    LongType: ("8", pa.int64()),
    DoubleType: ("d", pa.float64()),
    StringType: ("s", pa.string()),
}


_UNNAMEABLE = re.compile(r'["\\\x00-\x1f]')
"""Characters msgspec refuses in a field name (the full decoder then fails the batch, naming the field)."""


@dataclass(frozen=True)
class FlatSchema:
    """A value schema the fast path decodes: each field's JSON name (UTF-8), its kind code and Arrow type."""

    names: tuple[bytes, ...]
    kinds: bytes
    types: tuple[pa.DataType, ...]


@dataclass(frozen=True)
class FlatBatch:
    """A batch through the fast path: the decoded columns (null at deferred rows) and the deferred rows."""

    columns: list[pa.Array]
    deferred: np.ndarray
    """Indices (int64) of the records left to the full decoder."""


def fast_available() -> bool:
    """Whether the C extension was built."""
    return _flat_json is not None


def flat_schema(columns: StructType) -> FlatSchema | None:
    """The fast path's view of a value schema, or None when a field is of a type it does not decode."""
    kinds = [_KINDS.get(type(f.dataType)) for f in columns.fields]
    if not kinds or any(k is None for k in kinds) or any(_UNNAMEABLE.search(f.name) for f in columns.fields):
        return None
    known = [k for k in kinds if k is not None]
    return FlatSchema(
        names=tuple(f.name.encode("utf-8") for f in columns.fields),
        kinds="".join(code for code, _ in known).encode("ascii"),
        types=tuple(arrow for _, arrow in known),
    )


def decode_flat(values: pa.Array, schema: FlatSchema) -> FlatBatch:
    """Decode what the fast path can of `values` (Arrow binary or large binary)."""
    assert _flat_json is not None, "the fast path needs the C extension (check fast_available())"
    n = len(values)
    validity, offsets, data = values.buffers()[:3]
    large = pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type)
    if n == 0 or offsets is None:
        return FlatBatch([pa.array([], t) for t in schema.types], np.zeros(0, np.int64))
    deferred, _count, buffers = _flat_json.decode(
        data if data is not None else b"",
        offsets,
        large,
        validity,
        values.offset,
        n,
        schema.kinds,
        schema.names,
    )
    columns = []
    for arrow, (bits, vals, text) in zip(schema.types, buffers, strict=True):
        parts: list[pa.Buffer | None] = [pa.py_buffer(bits), pa.py_buffer(vals)]
        if text is not None:
            parts.append(pa.py_buffer(text))
        columns.append(pa.Array.from_buffers(arrow, n, parts))
    return FlatBatch(columns, np.flatnonzero(np.frombuffer(deferred, np.uint8)))
