"""Delta's `stats` JSON for a Parquet file, from its footer alone (the Delta table store's `add` actions carry it, so
that readers can prune on `kafka.offset`...): bounds only where they are exactly representable."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["parquet_stats"]

_MAX_STRING_STAT = 64  # longer string bounds are left out (Delta itself truncates them) to keep the log small


def parquet_stats(metadata: pq.FileMetaData) -> str:
    """Delta's `stats` JSON for a Parquet file, from its footer alone: numRecords, and minValues / maxValues /
    nullCount per primitive leaf column (struct fields nest: `{"kafka": {"offset": 5}}`). Columns inside lists
    and maps get none; a bound left out only costs pruning, a wrong one would hide rows, so anything not exactly
    representable (binary, decimal, bool, unsigned, nanosecond or zone-less timestamps, long strings) is left out."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    leaves = [leaf for f in metadata.schema.to_arrow_schema() for leaf in _leaves(f.type, (f.name,))]
    if len(leaves) == metadata.num_columns:  # else an unexpected layout: numRecords only
        for index, leaf in enumerate(leaves):
            if leaf is not None:
                _column_stats(metadata, index, leaf[0], leaf[1], mins, maxs, nulls)
    return json.dumps(
        {"numRecords": metadata.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls},
        separators=(",", ":"),
    )


def _leaves(arrow_type: pa.DataType, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], pa.DataType] | None]:
    """Per Parquet leaf column under `path`, in file order: its path and type, or None when it gets no stats."""
    if pa.types.is_struct(arrow_type):
        for i in range(arrow_type.num_fields):
            child = arrow_type.field(i)
            yield from _leaves(child.type, (*path, child.name))
    elif pa.types.is_dictionary(arrow_type):
        yield from _leaves(arrow_type.value_type, path)
    elif pa.types.is_map(arrow_type):
        yield from (None for _ in range(_leaf_count(arrow_type.key_type) + _leaf_count(arrow_type.item_type)))
    elif pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        yield from (None for _ in range(_leaf_count(arrow_type.value_type)))
    else:
        yield path, arrow_type


def _leaf_count(arrow_type: pa.DataType) -> int:
    """How many Parquet leaf columns a value of `arrow_type` takes."""
    return sum(1 for _ in _leaves(arrow_type, ("",)))


def _column_stats(
    metadata: pq.FileMetaData,
    index: int,
    path: tuple[str, ...],
    arrow_type: pa.DataType,
    mins: dict[str, Any],
    maxs: dict[str, Any],
    nulls: dict[str, Any],
) -> None:
    """Fold column `index`'s row-group statistics into the three maps; leave out what is unknown."""
    null_count = 0
    low: Any = None
    high: Any = None
    bounded = True
    for group in range(metadata.num_row_groups):
        chunk = metadata.row_group(group)
        stats = chunk.column(index).statistics
        if stats is None or stats.null_count is None:
            return  # nothing known about this column
        null_count += stats.null_count
        if stats.has_min_max:
            low = stats.min if low is None else min(low, stats.min)
            high = stats.max if high is None else max(high, stats.max)
        elif stats.null_count != chunk.num_rows:  # values without bounds: the file's bounds are unknown
            bounded = False
    _nest(nulls, path, null_count)
    if bounded and low is not None:
        low_json, high_json = _bound(low, arrow_type), _bound(high, arrow_type)
        if low_json is not None and high_json is not None:
            _nest(mins, path, low_json)
            _nest(maxs, path, high_json)


def _bound(value: Any, arrow_type: pa.DataType) -> Any:
    """A statistics bound as Delta's stats JSON writes it, None when the type gets no bounds."""
    if pa.types.is_signed_integer(arrow_type):
        return int(value)
    if pa.types.is_float32(arrow_type) or pa.types.is_float64(arrow_type):
        number = float(value)
        return number if number == number and abs(number) != float("inf") else None
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return value if isinstance(value, str) and len(value) <= _MAX_STRING_STAT else None
    if pa.types.is_date32(arrow_type) and isinstance(value, dt.date):
        return value.isoformat()
    if (
        pa.types.is_timestamp(arrow_type)
        and arrow_type.tz is not None
        and arrow_type.unit in ("s", "ms", "us")
        and isinstance(value, dt.datetime)
        and value.tzinfo is not None
    ):
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return None


def _nest(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    """Set `value` at `path` in `target`, making the nested objects a struct field's path goes through."""
    for name in path[:-1]:
        target = target.setdefault(name, {})
    target[path[-1]] = value
