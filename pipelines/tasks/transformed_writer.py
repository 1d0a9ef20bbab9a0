"""The transform's output written by Python workers (pyarrow), not by Spark's Parquet writer.

With a user transform the valid rows must go through Spark (the transform is a DataFrame function), but the
sink's Parquet need not be written by the JVM: its row-by-row writer costs more than the rest of the batch.
`TransformedWriter.write` runs in `DataFrame.mapInArrow` over the transformed frame: each task receives its
rows as Arrow batches, writes them into the staging layout the tasks' own writer and Spark's both use
(`<root>/_staging/<attempt>/topic=<t>/partition=<p>/`), one file per (task, range directory), and yields one
row per file (its directory and row count) for the driver.

A task's files are named by its Spark partition (`part-t<index>.parquet`), so a retried task overwrites what
an earlier attempt of it left instead of adding to it, and a file appears under that name only when complete
(cohort.pipelines.tasks.writer writes it under a hidden temporary name first).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc

from cohort.pipelines.formats.decode import KAFKA_COLUMN
from cohort.pipelines.sink.layout import StagedDirs
from cohort.pipelines.tasks.writer import ArrowCodec, SpanFile, arrow_compression

__all__ = ["WRITTEN_DDL", "TransformedWriter", "arrow_writable"]

WRITTEN_DDL = "directory string, rows long"
"""What each writing task yields per file it wrote (Spark's schema of `TransformedWriter.write`'s output)."""

_WRITTEN_FIELDS: list[pa.Field[Any]] = [pa.field("directory", pa.string()), pa.field("rows", pa.int64())]
_WRITTEN = pa.schema(_WRITTEN_FIELDS)


@dataclass(frozen=True)
class TransformedWriter:
    """Writes transformed rows into one attempt's sink staging (pickled into the tasks)."""

    sink: StagedDirs
    attempt: str
    compression: str

    def write(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """`mapInArrow`'s function: write every batch's rows into their (topic, partition) directory."""
        from pyspark import TaskContext  # the worker's; imported here so the driver need not hold a task

        context = TaskContext.get()
        name = f"part-t{context.partitionId() if context is not None else 0:05d}"
        codec: ArrowCodec | None = arrow_compression(self.compression)
        files: dict[tuple[str, int], SpanFile] = {}
        rows: dict[tuple[str, int], int] = {}
        target: pa.Schema | None = None
        try:
            for batch in batches:
                if target is None:
                    target = utc_schema(batch.schema)
                if target != batch.schema:
                    batch = batch.cast(target)
                for (topic, partition), part in _by_partition(batch):
                    key = (topic, partition)
                    file = files.get(key)
                    if file is None:
                        directory = self.sink.staged_range_dir(self.attempt, topic, partition)
                        file = files[key] = SpanFile(directory, name, codec)
                    file.write(pa.Table.from_batches([part]), part.schema)
                    rows[key] = rows.get(key, 0) + part.num_rows
            for file in files.values():
                file.commit()
        finally:
            for file in files.values():
                file.abandon()
        if rows:
            directories = [files[key].directory for key in rows]
            yield pa.RecordBatch.from_arrays([pa.array(directories), pa.array(list(rows.values()))], schema=_WRITTEN)


def arrow_writable(schema: Any) -> bool:
    """Whether Spark can hand rows of `schema` (a Spark StructType) to Python as Arrow (a few types, such as
    intervals, it cannot: their frame is written by Spark)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        to_arrow_schema(schema, timezone="UTC")
    except Exception:  # pyspark raises its own error classes (PySparkTypeError, ...) for unsupported types
        return False
    return True


def _utc(data_type: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(data_type) and data_type.tz is not None and data_type.tz != "UTC":
        return pa.timestamp(data_type.unit, tz="UTC")
    if pa.types.is_struct(data_type):
        return pa.struct([field.with_type(_utc(field.type)) for field in data_type])
    if pa.types.is_list(data_type):
        return pa.list_(data_type.value_field.with_type(_utc(data_type.value_type)))
    if pa.types.is_large_list(data_type):
        return pa.large_list(data_type.value_field.with_type(_utc(data_type.value_type)))
    if pa.types.is_map(data_type):
        return pa.map_(data_type.key_type, _utc(data_type.item_type))
    return data_type


def utc_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with every zoned timestamp (nested ones too) in UTC: Spark hands timestamps over in the session's
    time zone; the sink's files, whoever writes them, say UTC (the instants are the same)."""
    return pa.schema([field.with_type(_utc(field.type)) for field in schema], metadata=cast(Any, schema.metadata))


def _by_partition(batch: pa.RecordBatch) -> Iterator[tuple[tuple[str, int], pa.RecordBatch]]:
    """`batch`'s rows grouped by their `kafka` struct's (topic, partition). Rows usually come span by span (a
    reading task's rows in order), so the groups are runs of the batch, sliced without copying; a batch whose
    partitions interleave (a transform that shuffled) is sorted by them first."""
    if not batch.num_rows:
        return
    kafka: Any = batch.column(KAFKA_COLUMN)
    topics, partitions = pc.struct_field(kafka, "topic"), pc.struct_field(kafka, "partition")
    if topics.null_count or partitions.null_count:
        raise ValueError(
            "the transform returned rows whose kafka.topic or kafka.partition is null: each row must keep its "
            "record's kafka coordinates"
        )
    starts = _run_starts(topics, partitions)
    if len(starts) > 1 and len(starts) > len(pc.unique(partitions)) * len(pc.unique(topics)):
        keys = pa.table({"t": topics, "p": partitions})
        order = pc.sort_indices(keys, sort_keys=[("t", "ascending"), ("p", "ascending")])
        batch = batch.take(order)
        topics, partitions = topics.take(order), partitions.take(order)
        starts = _run_starts(topics, partitions)
    ends = [*starts[1:], batch.num_rows]
    for start, end in zip(starts, ends, strict=True):
        yield (topics[start].as_py(), partitions[start].as_py()), batch.slice(start, end - start)


def _run_starts(topics: pa.Array, partitions: pa.Array) -> list[int]:
    """Where each run of equal (topic, partition) begins."""
    if len(partitions) < 2:
        return [0]
    changed = pc.or_(pc.not_equal(partitions[1:], partitions[:-1]), pc.not_equal(topics[1:], topics[:-1]))
    return [0, *(int(index) + 1 for index in pc.indices_nonzero(changed).to_numpy())]
