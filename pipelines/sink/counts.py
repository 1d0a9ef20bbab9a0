"""What a range's staged output accounts for: rows written, records quarantined, and with a user transform the
valid records it filtered out and the rows it added by flattening.

Without a transform every valid record is one row: consumed == written + quarantined, exactly. A transform may
drop records and return several rows per record; each row keeps its record's `kafka` struct, so the rows of a
range are told apart by their offsets: the distinct offsets among them are the records that got rows, the
valid records without a row were filtered, and the rows beyond one per record were added. What a transform
cannot do is invent offsets: a row whose offset is outside the range it read, or more records with rows than
valid records read, refuses the batch before anything commits.

Example:
    >>> import pyarrow as pa
    >>> shape = OutputShape.of(pa.array([3, 3, 5]))
    >>> account(consumed=6, quarantined=1, rows=3, shape=shape, bounds=(0, 10))
    StagedCounts(written=3, quarantined=1, filtered=3, expanded=1)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["OutputShape", "StagedCounts", "account"]


@dataclass(frozen=True)
class OutputShape:
    """A range's staged sink rows by the offsets they carry: how many rows, how many distinct offsets, and the
    lowest and highest offset (None without rows)."""

    rows: int
    records: int
    lowest: int | None = None
    highest: int | None = None

    @classmethod
    def of(cls, offsets: pa.Array | pa.ChunkedArray) -> OutputShape:
        """The shape of the rows whose `kafka.offset` values are `offsets`."""
        if len(offsets) == 0:
            return cls(0, 0)
        bounds = pc.min_max(offsets)
        return cls(len(offsets), pc.count_distinct(offsets).as_py(), bounds["min"].as_py(), bounds["max"].as_py())

    @classmethod
    def of_rows(cls, tables: Sequence[pa.Table]) -> OutputShape:
        """The shape of sink rows (their `kafka` struct's `offset`), as read from a range's files or as written."""
        offsets = [chunk for t in tables for chunk in pc.struct_field(t.column("kafka"), "offset").chunks]
        return cls.of(pa.chunked_array(offsets, pa.int64()))


@dataclass(frozen=True)
class StagedCounts:
    """One range's staged output, counted: `written` rows in the sink, `quarantined` records, and the valid
    records a transform `filtered` out and the rows it `expanded` the output by (both 0 without a transform)."""

    written: int
    quarantined: int
    filtered: int = 0
    expanded: int = 0


def account(
    *, consumed: int, quarantined: int, rows: int, shape: OutputShape | None, bounds: tuple[int, int]
) -> StagedCounts | str:
    """The counts of a range that consumed `consumed` records in `bounds` [from, until), quarantined
    `quarantined` and wrote `rows` (the staged footers), or what does not add up. `shape` is given when a
    transform ran (its rows read back by offset), None when every valid record must be exactly one row."""
    if shape is None:
        if consumed != rows + quarantined:
            return f"consumed {consumed}, written {rows}, quarantined {quarantined}"
        return StagedCounts(rows, quarantined)
    lo, hi = bounds
    if shape.rows != rows:
        return f"{rows} rows staged, {shape.rows} read back"
    if shape.lowest is not None and shape.highest is not None and (shape.lowest < lo or shape.highest >= hi):
        return f"the transform wrote rows with offsets [{shape.lowest}, {shape.highest}] outside the range read"
    valid = consumed - quarantined
    if shape.records > valid:
        return f"the transform wrote rows for {shape.records} records, {valid} valid records were read"
    return StagedCounts(rows, quarantined, filtered=valid - shape.records, expanded=rows - shape.records)
