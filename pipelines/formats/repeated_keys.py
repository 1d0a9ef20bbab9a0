"""Repeated keys in JSON objects: msgspec keeps the last value of a repeated key; a repeat is refused here, after
it, in three steps (the JSON decoder, cohort.pipelines.formats.decode, calls `find_repeated_keys`).

1. Per batch, with numpy: a value holds 2 quote characters per key and per string, plus one per escaped
   quote. Its decoded columns account for 2 per non-null declared field (its key) and 2 more per non-null
   string, timestamp or date (its value). A value with no more quotes than that has as many keys as
   distinct declared fields: no key repeats. That clears the common case without touching a record.
2. Each remaining record (undeclared fields, nulls, escaped quotes) is parsed by msgspec into plain
   objects and encoded again, in C: dropping a repeated key drops its quotes, so fewer quotes after the
   round trip means a repeat (a `\\u0022` escape, the only way a string gains quotes on the way, is
   passed on to step 3).
3. Those few are parsed again by the standard library, which sees every key, to name the repeat.
"""

from __future__ import annotations

import json
from typing import Any, cast

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DateType,
    StringType,
    StructType,
    TimestampType,
)

__all__ = ["find_repeated_keys"]


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


def find_repeated_keys(
    schema: StructType, values: pa.Array, raw: list[bytes | None], columns: list[pa.Array], reasons: list[str | None]
) -> None:
    """Set the reason of each decoded record of `values` that repeats a key (the three steps above): `raw` are the
    values as bytes, `columns` the decoded columns of `schema`."""
    budget: np.ndarray | int = 0
    for column, field in zip(columns, schema.fields, strict=True):
        if not isinstance(field.dataType, (StructType, ArrayType)) and _set_where_decoded(column, reasons):
            budget = budget + (4 if isinstance(field.dataType, (StringType, TimestampType, DateType)) else 2)
        else:
            budget = budget + 2 * _valid(column) + _value_quotes(column, field.dataType)
    for i in np.flatnonzero(_quotes(values) > budget).tolist():
        value = raw[i]
        if reasons[i] is None and value is not None and _may_repeat(value):
            reasons[i] = _repeated_key(value)
