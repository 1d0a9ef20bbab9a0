"""A user transform over Arrow, run by the reading tasks themselves (`PipelineSpec.arrow_transform`).

A Spark transform (`PipelineSpec.transform`) needs the JVM: the valid rows cross into it and back, which costs
more CPU than the whole batch without a transform. An Arrow transform is a function `pyarrow.Table ->
pyarrow.Table` (pyarrow.compute, or any library that takes and returns Arrow: Polars, DuckDB), applied by each
reading task to each batch of its valid sink rows before it writes them: nothing crosses into the JVM.

It sees the rows the sink would get (the `kafka` struct, `key` when decoded, the value columns) and keeps the
contract of a Spark transform: every row it returns keeps its record's `kafka` struct, so it may drop records
(counted as filtered) and return several rows per record (counted as expanded), never move a row to another
partition. Its output schema must be the same for every batch (a file, and the sink, has one schema).

Example:
    >>> import pyarrow as pa, pyarrow.compute as pc
    >>> def cents(rows: pa.Table) -> pa.Table:
    ...     return rows.append_column("cents", pc.multiply(rows.column("amount"), 100))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["ArrowTransform", "ArrowTransformError", "apply_arrow_transform"]

ArrowTransform = Callable[[pa.Table], Any]
"""pyarrow Table -> pyarrow Table (a RecordBatch is accepted too)."""


class ArrowTransformError(ValueError):
    """The Arrow transform returned rows the sink cannot attribute to the partition and offsets they came from."""


def apply_arrow_transform(transform: ArrowTransform, rows: pa.Table, topic: str, partition: int) -> pa.Table:
    """`transform` applied to `rows` (valid sink rows of `topic`-`partition`), its result checked: a Table (or a
    RecordBatch) with the `kafka` struct, every row still in `topic`-`partition`."""
    result = transform(rows)
    if isinstance(result, pa.RecordBatch):
        result = pa.Table.from_batches([result])
    if not isinstance(result, pa.Table):
        raise ArrowTransformError(f"the arrow_transform returned {type(result).__name__}, not a pyarrow Table")
    kafka = result.schema.field("kafka").type if "kafka" in result.column_names else None
    if not isinstance(kafka, pa.StructType) or not {"topic", "partition", "offset"} <= {f.name for f in kafka}:
        raise ArrowTransformError(
            "the arrow_transform must keep the 'kafka' struct column (topic, partition, offset): the sink lays "
            "records out by it and the batch counts them per offset range"
        )
    if "topic" in result.column_names or "partition" in result.column_names:
        raise ArrowTransformError(
            "the arrow_transform's output may not have columns 'topic' or 'partition': the sink's directories use them"
        )
    if result.num_rows:
        column = result.column("kafka")
        topics, partitions = pc.struct_field(column, "topic"), pc.struct_field(column, "partition")
        same = pc.and_(pc.equal(topics, pa.scalar(topic)), pc.equal(partitions, pa.scalar(partition, pa.int32())))
        if not pc.all(pc.fill_null(same, False)).as_py():
            raise ArrowTransformError(
                f"the arrow_transform returned rows of {topic}-{partition} with another kafka.topic or "
                "kafka.partition: a row keeps its record's coordinates"
            )
    return result
