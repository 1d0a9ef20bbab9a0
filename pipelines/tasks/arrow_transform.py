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

from collections.abc import Callable, Collection
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cohort.pipelines.formats.decode import KAFKA_COLUMN

__all__ = ["ArrowTransform", "ArrowTransformError", "apply_arrow_transform", "contract_problem"]

ArrowTransform = Callable[[pa.Table], Any]
"""pyarrow Table -> pyarrow Table (a RecordBatch is accepted too)."""


class ArrowTransformError(ValueError):
    """The Arrow transform returned rows the sink cannot attribute to the partition and offsets they came from."""


_PARTITION_COLUMNS = ("topic", "partition")
"""The names the sink's directories use (`topic=<t>/partition=<p>`): no transform output column may take them."""


def contract_problem(kind: str, columns: Collection[str], kafka_fields: Collection[str] | None) -> str | None:
    """What a transform's output (`columns`; `kafka_fields`: its `kafka` column's struct fields, None when that
    column is missing or no struct) breaks of the contract both kinds of transform keep, or None. `kind` names the
    transform in the message ('transform', 'arrow_transform')."""
    if kafka_fields is None or not {"topic", "partition", "offset"} <= set(kafka_fields):
        return (
            f"the {kind} must keep the '{KAFKA_COLUMN}' struct column (topic, partition, offset): the sink lays "
            "records out by it and the batch counts them per offset range"
        )
    clashes = sorted(set(columns) & set(_PARTITION_COLUMNS))
    if clashes:
        return f"the {kind}'s output may not have columns {clashes}: the sink's directories use them"
    return None


def apply_arrow_transform(transform: ArrowTransform, rows: pa.Table, topic: str, partition: int) -> pa.Table:
    """`transform` applied to `rows` (valid sink rows of `topic`-`partition`), its result checked: a Table (or a
    RecordBatch) with the `kafka` struct, every row still in `topic`-`partition`."""
    result = transform(rows)
    if isinstance(result, pa.RecordBatch):
        result = pa.Table.from_batches([result])
    if not isinstance(result, pa.Table):
        raise ArrowTransformError(f"the arrow_transform returned {type(result).__name__}, not a pyarrow Table")
    kafka = result.schema.field(KAFKA_COLUMN).type if KAFKA_COLUMN in result.column_names else None
    fields = [f.name for f in kafka] if isinstance(kafka, pa.StructType) else None
    problem = contract_problem("arrow_transform", result.column_names, fields)
    if problem is not None:
        raise ArrowTransformError(problem)
    if result.num_rows:
        column = result.column(KAFKA_COLUMN)
        topics, partitions = pc.struct_field(column, "topic"), pc.struct_field(column, "partition")
        same = pc.and_(pc.equal(topics, pa.scalar(topic)), pc.equal(partitions, pa.scalar(partition, pa.int32())))
        if not pc.all(pc.fill_null(same, False)).as_py():
            raise ArrowTransformError(
                f"the arrow_transform returned rows of {topic}-{partition} with another kafka.topic or "
                "kafka.partition: a row keeps its record's coordinates"
            )
    return result
