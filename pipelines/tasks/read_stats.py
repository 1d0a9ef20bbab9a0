"""What the reading tasks read (records, key + value bytes and seconds per span), carried to the driver as rows of
the tasks' own frame (`StatsRows`) or through an accumulator (classic sessions)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.accumulators import AccumulatorParam

from cohort.pipelines.tasks.spans import OffsetSpan

__all__ = [
    "READ_STATS_COLUMN",
    "READ_STATS_DDL",
    "READ_STATS_TYPE",
    "STATS_ONLY",
    "STATS_ONLY_DDL",
    "WRITER_STATS",
    "WRITER_STATS_DDL",
    "WRITTEN_COLUMN",
    "ReadStats",
    "SpanReading",
    "StatsRows",
    "gather_read_stats",
    "read_stats_accumulator",
]


ReadStats = dict[tuple[str, int], tuple[int, int, float]]
"""(topic, partition) -> (records, key + value bytes, seconds) read by the tasks of a job."""


READ_STATS_COLUMN = "_cohort_read"
"""The column of a span's stats row holding what its task read; null in every other row."""


READ_STATS_TYPE = pa.struct(
    [pa.field("records", pa.int64()), pa.field("bytes", pa.int64()), pa.field("seconds", pa.float64())]
)


READ_STATS_DDL = "struct<records: bigint, bytes: bigint, seconds: double>"
"""READ_STATS_COLUMN's type, in Arrow and as Spark DDL."""


@dataclass(frozen=True)
class StatsRows:
    """How the rows of `read_spans` carry what each task read: every row has READ_STATS_COLUMN, null but in the
    one stats row that ends each span that held a record: the span's topic and partition (in `topic_column` and
    `partition_column`) and its records, key + value bytes and seconds, every other column null.

    `schema` is the Arrow schema of the frame's rows: the rows the tasks yield, then READ_STATS_COLUMN (`after`).
    """

    schema: pa.Schema
    topic_column: str = "topic"
    partition_column: str = "partition"

    @classmethod
    def after(cls, schema: pa.Schema, topic_column: str = "topic", partition_column: str = "partition") -> StatsRows:
        """Stats rows among rows of `schema`: its fields, all nullable (a stats row has only its coordinates),
        then READ_STATS_COLUMN."""
        fields = [*(field.with_nullable(True) for field in schema), pa.field(READ_STATS_COLUMN, READ_STATS_TYPE)]
        return cls(pa.schema(fields), topic_column, partition_column)

    def data(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """A batch the task yields, as rows of `schema`: READ_STATS_COLUMN null."""
        nulls = pa.nulls(batch.num_rows, READ_STATS_TYPE)
        return pa.RecordBatch.from_arrays([*batch.columns, nulls], schema=self.schema)

    def row(self, span: OffsetSpan, records: int, size: int, seconds: float) -> pa.RecordBatch:
        """The stats row of `span`."""
        known: dict[str, pa.Array[Any]] = {
            self.topic_column: pa.array([span.topic], pa.string()),
            self.partition_column: pa.array([span.partition], pa.int32()),
            READ_STATS_COLUMN: pa.array([(records, size, seconds)], READ_STATS_TYPE),
        }
        columns = [known[f.name] if f.name in known else pa.nulls(1, f.type) for f in self.schema]
        return pa.RecordBatch.from_arrays(columns, schema=self.schema)


_STATS_ONLY_FIELDS: list[pa.Field[Any]] = [
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field(READ_STATS_COLUMN, READ_STATS_TYPE),
]


STATS_ONLY = StatsRows(pa.schema(_STATS_ONLY_FIELDS))


STATS_ONLY_DDL = f"topic string, partition int, `{READ_STATS_COLUMN}` {READ_STATS_DDL}"
"""The stats rows of tasks that hand Spark nothing else (they wrote their output themselves): one per span, in
Arrow and as the Spark DDL of the frame."""


WRITTEN_COLUMN = "_cohort_written"
"""The column of a writing task's report row: what it wrote for one span (cohort.pipelines.tasks.written, as bytes)."""


_WRITTEN_FIELDS: list[pa.Field[Any]] = [
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field(WRITTEN_COLUMN, pa.binary()),
]


WRITER_STATS = StatsRows.after(pa.schema(_WRITTEN_FIELDS))


WRITER_STATS_DDL = f"topic string, partition int, `{WRITTEN_COLUMN}` binary, `{READ_STATS_COLUMN}` {READ_STATS_DDL}"
"""The rows of tasks that wrote their spans' outputs themselves: per span, its report row (WRITTEN_COLUMN set) and,
when it held a record, its stats row (READ_STATS_COLUMN set), in Arrow and as the Spark DDL of the frame."""


class SpanReading:
    """The raw batches of one span as its task reads them (an iterator), and how much it has read so far."""

    def __init__(self, batches: Iterator[pa.RecordBatch]) -> None:
        self.records = 0
        self.bytes = 0
        self._batches = batches
        self._started = time.perf_counter()

    def __iter__(self) -> SpanReading:
        return self

    def __next__(self) -> pa.RecordBatch:
        raw = next(self._batches)
        self.records += raw.num_rows
        self.bytes += _size(raw)
        return raw

    @property
    def seconds(self) -> float:
        """Seconds since the span's reading started (reading, and whatever the task did with the batches)."""
        return time.perf_counter() - self._started


def gather_read_stats(rows: Iterable[Sequence[Any]]) -> ReadStats:
    """Sum stats rows per (topic, partition): (topic, partition, (records, bytes, seconds)) rows, as Spark returns
    those of STATS_ONLY (or the same fields selected from other stats rows); a row whose stats are null is
    skipped."""
    total: ReadStats = {}
    for topic, partition, read in rows:
        if read is None:
            continue
        records, size, seconds = read
        before = total.get((topic, partition), (0, 0, 0.0))
        total[(topic, partition)] = (before[0] + int(records), before[1] + int(size), before[2] + float(seconds))
    return total


class _ReadStatsParam(AccumulatorParam[ReadStats]):
    """Merges ReadStats dicts by summing per key."""

    def zero(self, value: ReadStats) -> ReadStats:
        return {}

    def addInPlace(self, total: ReadStats, more: ReadStats) -> ReadStats:
        for key, (records, size, seconds) in more.items():
            before = total.get(key, (0, 0, 0.0))
            total[key] = (before[0] + records, before[1] + size, before[2] + seconds)
        return total


def read_stats_accumulator(spark: Any) -> Any:
    """A Spark accumulator of ReadStats for `read_spans(read_stats=...)` (classic sessions only: a Spark Connect
    session has no SparkContext and no accumulators; `read_spans(stats_rows=...)` works with both).

    Spark applies a task's accumulator update once, when the task succeeds in a job's result stage, so
    when the read runs in a job without shuffles the figures count each record once. A job that had to read
    a span again (a lost cached block) would count it twice.
    """
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        raise TypeError(
            "read stats accumulators need a classic SparkSession (Spark Connect has no SparkContext): "
            "let the tasks yield stats rows instead (cohort.pipelines.tasks.reader.read_spans(stats_rows=...))"
        )
    return spark.sparkContext.accumulator({}, _ReadStatsParam())


def _size(batch: pa.RecordBatch) -> int:
    """Key + value bytes of a batch."""
    columns = (cast(pa.BinaryArray, batch.column(name)) for name in ("key", "value"))  # binary: RECORD_SCHEMA
    return sum(int(pc.sum(pc.binary_length(column)).as_py() or 0) for column in columns)
