"""The transform's output written by Python workers: grouping rows by partition, time zones, which frames."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import (
    ArrayType,
    CalendarIntervalType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from cohort.pipelines.sink.layout import SinkLayout
from cohort.pipelines.tasks.transformed_writer import TransformedWriter, _by_partition, arrow_writable, utc_schema


def _batch(keys: list[tuple[str, int]], offsets: list[int] | None = None) -> pa.RecordBatch:
    offsets = offsets if offsets is not None else list(range(len(keys)))
    kafka = pa.StructArray.from_arrays(
        [pa.array([t for t, _ in keys]), pa.array([p for _, p in keys], pa.int32()), pa.array(offsets, pa.int64())],
        names=["topic", "partition", "offset"],
    )
    return pa.RecordBatch.from_arrays([kafka, pa.array(offsets, pa.int64())], names=["kafka", "v"])


def _groups(batch: pa.RecordBatch) -> dict[tuple[str, int], list[int]]:
    found: dict[tuple[str, int], list[int]] = {}
    for key, part in _by_partition(batch):
        found.setdefault(key, []).extend(part.column("v").to_pylist())
    return found


def test_rows_of_one_partition_pass_whole_and_runs_are_sliced_in_order():
    batch = _batch([("a", 0)] * 3)
    [(key, part)] = list(_by_partition(batch))
    assert key == ("a", 0) and part.num_rows == 3
    assert _groups(_batch([("a", 0), ("a", 0), ("a", 1), ("b", 1)])) == {("a", 0): [0, 1], ("a", 1): [2], ("b", 1): [3]}


def test_interleaved_partitions_are_grouped_each_once():
    keys = [("a", 0), ("a", 1), ("a", 0), ("b", 0), ("a", 1), ("a", 0)]
    groups = list(_by_partition(_batch(keys)))
    assert [key for key, _ in groups] == [("a", 0), ("a", 1), ("b", 0)]
    assert {k: sorted(p.column("v").to_pylist()) for k, p in groups} == {
        ("a", 0): [0, 2, 5],
        ("a", 1): [1, 4],
        ("b", 0): [3],
    }


def test_a_row_without_its_partition_is_refused_with_a_reason():
    kafka = pa.StructArray.from_arrays(
        [pa.array(["a", None]), pa.array([0, 0], pa.int32()), pa.array([0, 1], pa.int64())],
        names=["topic", "partition", "offset"],
    )
    batch = pa.RecordBatch.from_arrays([kafka], names=["kafka"])
    with pytest.raises(ValueError, match=r"kafka\.topic or kafka\.partition is null"):
        list(_by_partition(batch))


def test_zoned_timestamps_become_utc_nested_ones_too():
    zoned = pa.timestamp("us", tz="Europe/Paris")
    schema = pa.schema(
        [
            pa.field("t", zoned),
            pa.field("kafka", pa.struct([pa.field("timestamp", zoned)])),
            pa.field("ts", pa.list_(zoned)),
            pa.field("naive", pa.timestamp("us")),
        ]
    )
    utc = pa.timestamp("us", tz="UTC")
    assert utc_schema(schema) == pa.schema(
        [
            pa.field("t", utc),
            pa.field("kafka", pa.struct([pa.field("timestamp", utc)])),
            pa.field("ts", pa.list_(utc)),
            pa.field("naive", pa.timestamp("us")),
        ]
    )


def test_frames_spark_hands_over_as_arrow_are_written_by_python_the_others_by_spark():
    kafka = StructType([StructField("topic", StringType()), StructField("timestamp", TimestampType())])
    assert arrow_writable(StructType([StructField("kafka", kafka), StructField("tags", ArrayType(LongType()))]))
    assert not arrow_writable(StructType([StructField("kafka", kafka), StructField("every", CalendarIntervalType())]))


def test_the_writer_names_files_by_task_so_a_retry_rewrites_them(tmp_path):
    """Outside Spark (no task context) the writer still writes one file per range directory; writing the same
    rows again (a retried task) replaces the file rather than adding one."""
    writer = TransformedWriter(SinkLayout(str(tmp_path)), "a1", "snappy")
    batch = _batch([("a", 0), ("a", 0), ("a", 1)])
    for _ in range(2):
        written = pa.Table.from_batches(list(writer.write(iter([batch]))))
        assert sorted(zip(written.column("rows").to_pylist(), written.column("directory").to_pylist(), strict=True))
    directory = SinkLayout(str(tmp_path)).staged_range_dir("a1", "a", 0)
    files = [p for p in tmp_path.rglob("*.parquet")]
    assert len(files) == 2 and all(p.name == "part-t00000.parquet" for p in files)
    assert pq.read_table(f"{directory}/part-t00000.parquet").column("v").to_pylist() == [0, 1]
