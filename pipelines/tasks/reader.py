"""Executor-side Kafka reads: bounded offset ranges into Arrow batches through `mapInArrow`.

The driver builds one small DataFrame row per span (topic, partition, from, until); Spark ships each row to
a task, where `read_range` assigns a confluent-kafka consumer at `from` and consumes in batches until the
`until` offset (an offset bound, not a count: compacted topics and transaction markers leave holes, so a
span may hold fewer records than offsets). No Maven jars: the Kafka client runs in the Python worker.

Per-message Python work is kept to one attribute call per column: each consumed batch becomes one Arrow
record batch built column by column (`pa.array` once per column), not row by row.

What a task read (records, key + value bytes and seconds per span) can reach the driver as rows of the frame
itself (`read_spans(stats_rows=...)`, `StatsRows`), with classic and Spark Connect sessions alike: each span
ends with its stats row. A task that hands Spark nothing else (it wrote its output) yields only those
(`STATS_ONLY`), which the caller collects; among checked rows, the caller gathers them with an Observation
(cohort.pipelines.batch.frames). Spark keeps the rows of one successful attempt per task: each span counts once.
"""

from __future__ import annotations

import gc
import heapq
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Protocol, cast

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.accumulators import AccumulatorParam

from cohort.common.names import validate_topic_name
from cohort.pipelines.tasks.native_reader import open_native
from cohort.pipelines.tasks.records import (
    GONE,
    PARTITION_EOF,
    RECORD_SCHEMA,
    UNREADABLE_HEADERS,
    ConsumeError,
    header_column,
    raw_batch,
)

__all__ = [
    "READ_STATS_COLUMN",
    "RECORD_SCHEMA",
    "STATS_ONLY",
    "STATS_ONLY_DDL",
    "OffsetSpan",
    "ReadError",
    "ReadStats",
    "SpanProcessor",
    "StatsRows",
    "gather_read_stats",
    "read_range",
    "read_spans",
    "read_stats_accumulator",
    "record_spark_schema",
    "validate_partition",
]

_second = itemgetter(1)

READER_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",
    "fetch.max.bytes": 52_428_800,
    # librdkafka pauses fetching for fetch.queue.backoff.ms (1 s by default) whenever its local queue is
    # full; a bounded reader that drains the queue as fast as it can gains nothing from that pause.
    "fetch.queue.backoff.ms": 5,
}
"""librdkafka settings of the executor-side consumers; the caller's configuration overrides them."""


def validate_partition(topic: str, partition: object) -> int:
    """Return `partition` if it is an int >= 0 (not a bool), else raise ValueError naming it: partition
    numbers end up in directory names and Kafka requests."""
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise ValueError(f"partition must be an int >= 0, got {partition!r} for topic {topic!r}")
    return partition


class ReadError(RuntimeError):
    """A span could not be read: the broker stayed silent, an error persisted past its retries, or the
    records are gone (offset out of range)."""


@dataclass(frozen=True)
class OffsetSpan:
    """A range [from_offset, until_offset) of one partition that a single Spark task reads."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        validate_partition(self.topic, self.partition)
        if self.from_offset < 0 or self.until_offset < self.from_offset:
            raise ValueError(
                f"invalid span [{self.from_offset}, {self.until_offset}) for {self.topic}-{self.partition}"
            )


def record_spark_schema() -> str:
    """The Spark DDL schema matching RECORD_SCHEMA."""
    return (
        "topic string, partition int, offset long, timestamp long, key binary, value binary, "
        "headers array<struct<key:string,value:binary>>, error string"
    )


def _to_batch(span: OffsetSpan, messages: list[Any]) -> pa.RecordBatch:
    """One Arrow batch from error-free messages, column by column (map over the C methods: no Python
    frame per message)."""
    from confluent_kafka import Message

    timestamps = pa.array(list(map(_second, map(Message.timestamp, messages))), type=pa.int64())
    headers, errors = _headers(messages)
    return raw_batch(
        span.topic,
        span.partition,
        pa.array(list(map(Message.offset, messages)), type=pa.int64()),
        # -1: no timestamp. (pyarrow-stubs type compute functions' operands as Arrow scalars, not Python ones.)
        pc.if_else(pc.less(timestamps, 0), pa.scalar(None, pa.int64()), timestamps),  # type: ignore[call-overload]
        pa.array(list(map(Message.key, messages)), type=pa.binary()),
        pa.array(list(map(Message.value, messages)), type=pa.binary()),
        header_column(headers, len(messages)),
        None if errors is None else pa.array(errors, type=pa.string()),
    )


def _headers(messages: list[Any]) -> tuple[list[Any], list[str | None] | None]:
    """(headers per message, read error per message or None when every message's headers were read).

    confluent-kafka cannot decode a header key that is not valid UTF-8 (any client may send one: the
    protocol carries raw bytes): `headers()` raises SystemError once and afterwards returns a list holding
    a NULL, which crashes the worker when touched. So it is called once per message, in C (`map`), and a
    message whose call fails keeps its key and value but gets no headers and an error (it is quarantined).
    """
    from confluent_kafka import Message

    headers: list[Any] = []
    errors: list[str | None] | None = None
    while len(headers) < len(messages):
        done = len(headers)
        try:
            headers.extend(map(Message.headers, messages[done:] if done else messages))
        except (SystemError, UnicodeDecodeError):  # headers now holds the messages before the failed one
            errors = errors or [None] * len(messages)
            errors[len(headers)] = UNREADABLE_HEADERS
            headers.append(None)
    return headers, errors


class SpanConsumer(Protocol):
    """A consumer assigned at the start of one span: confluent-kafka's (`PythonConsumer`) or the C one
    (cohort.pipelines.tasks.native_reader.NativeConsumer), which return the same batches."""

    def consume(self, max_messages: int, timeout_s: float) -> tuple[pa.RecordBatch | None, list[ConsumeError]]:
        """Up to `max_messages` records as one RECORD_SCHEMA batch (None if none came) and the error messages."""
        ...

    def close(self) -> None:
        """Leave and free the consumer."""
        ...


class PythonConsumer:
    """confluent-kafka's consumer, its messages turned into RECORD_SCHEMA batches column by column."""

    def __init__(self, consumer: Any, span: OffsetSpan) -> None:
        self._consumer = consumer
        self._span = span

    def consume(self, max_messages: int, timeout_s: float) -> tuple[pa.RecordBatch | None, list[ConsumeError]]:
        from confluent_kafka import KafkaException, Message

        try:
            messages = self._consumer.consume(max_messages, timeout_s)
        except KafkaException as exc:
            error = exc.args[0]
            return None, [ConsumeError(-1, error.code(), str(exc), fatal=error.fatal())]
        errors: list[ConsumeError] = []
        if any(map(Message.error, messages)):
            good = []
            for message in messages:
                error = message.error()
                if error is None:
                    good.append(message)
                else:
                    offset = message.offset()
                    errors.append(
                        ConsumeError(-1 if offset is None else offset, error.code(), error.str(), error.fatal())
                    )
            messages = good
        return (_to_batch(self._span, messages) if messages else None), errors

    def close(self) -> None:
        self._consumer.close()


def open_consumer(config: Mapping[str, Any], span: OffsetSpan, *, native: bool = True) -> SpanConsumer:
    """A consumer assigned at the start of `span`: librdkafka connects and starts fetching in its own threads
    right away, so a task can open the next span's consumer while it works on the current one.

    The C consumer (cohort.pipelines.tasks.native_reader) when `native` and it is available here, else
    confluent-kafka's.
    """
    settings = {"group.id": f"cohort-reader-{span.topic}", **READER_DEFAULTS, **config}
    if native:
        opened = open_native(settings, span.topic, span.partition, span.from_offset)
        if opened is not None:
            return opened
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    consumer = Consumer(settings)
    try:
        consumer.assign([KafkaTopicPartition(span.topic, span.partition, span.from_offset)])
    except BaseException:
        consumer.close()
        raise
    return PythonConsumer(consumer, span)


def read_range(
    config: Mapping[str, Any],
    span: OffsetSpan,
    *,
    batch_size: int = 10_000,
    poll_timeout_s: float = 1.0,
    read_timeout_s: float = 30.0,
    max_retries: int = 5,
    consumer: SpanConsumer | None = None,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of `span` as Arrow batches of at most `batch_size` rows, in offset order.

    `consumer`, when given, is one `open_consumer` opened for this span (it may have fetched already); it is
    closed when the reading ends, as the one opened here otherwise is.

    Stops once the next offset reaches `until_offset` (or end-of-partition lies at or beyond it). Fails
    with ReadError when no record arrives for `read_timeout_s` (the range was planned from offsets the
    broker reported, so silence means the broker is unreachable or the log shrank), when transient
    errors persist past `max_retries` consecutive attempts (with exponential backoff), or at once on a
    fatal error such as an offset that retention has deleted.
    """
    if span.from_offset >= span.until_offset:
        if consumer is not None:
            consumer.close()
        return
    where = f"{span.topic}-{span.partition}"
    consumer = consumer if consumer is not None else open_consumer(config, span)
    try:
        next_offset = span.from_offset
        last_progress = time.monotonic()
        retries = 0
        while next_offset < span.until_offset:
            batch, errors = consumer.consume(min(batch_size, span.until_offset - next_offset), poll_timeout_s)
            good, transient, past_end = _triage(batch, errors, span, next_offset)
            if transient is not None and good is None:
                retries += 1
                if retries > max_retries:
                    raise ReadError(f"reading {where} at offset {next_offset}: {transient} ({max_retries} retries)")
                time.sleep(min(0.05 * 2**retries, 2.0))
            if good is not None:
                retries = 0
                last_progress = time.monotonic()
                next_offset = cast(int, good.column("offset")[-1].as_py()) + 1
                yield good
            if past_end:
                return  # a message or end-of-partition at or past `until`: the rest of the span is holes
            if good is None and time.monotonic() - last_progress > read_timeout_s:
                raise ReadError(
                    f"no data from {where} at offset {next_offset} (reading until {span.until_offset}) for "
                    f"{read_timeout_s:.0f} s: the broker is unreachable or the partition's log shrank"
                )
    finally:
        consumer.close()


def _triage(
    batch: pa.RecordBatch | None, errors: list[ConsumeError], span: OffsetSpan, next_offset: int
) -> tuple[pa.RecordBatch | None, str | None, bool]:
    """Split a consume result into (records inside the span or None, a transient error or None, whether the
    span is proven complete); raise ReadError for errors that retrying cannot fix."""
    transient, past_end = None, False
    for error in errors:
        if error.code == PARTITION_EOF:
            past_end = past_end or error.offset >= span.until_offset
        elif error.code in GONE:
            raise ReadError(
                f"{span.topic}-{span.partition}: offset {next_offset} is out of range: the records of "
                f"[{next_offset}, {span.until_offset}) are no longer in Kafka (retention?)"
            )
        elif error.fatal:
            raise ReadError(f"reading {span.topic}-{span.partition} at offset {next_offset}: {error.reason}")
        else:
            transient = error.reason
    if batch is not None and cast(int, batch.column("offset")[-1].as_py()) >= span.until_offset:
        offsets = batch.column("offset").to_numpy()
        inside = int(offsets.searchsorted(span.until_offset))
        batch = batch.slice(0, inside) if inside else None
        past_end = True
    return batch, transient, past_end


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


class _SpanReading:
    """The raw batches of one span as its task reads them (an iterator), and how much it has read so far."""

    def __init__(self, batches: Iterator[pa.RecordBatch]) -> None:
        self.records = 0
        self.bytes = 0
        self._batches = batches
        self._started = time.perf_counter()

    def __iter__(self) -> _SpanReading:
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


SpanProcessor = Callable[[OffsetSpan, Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]
"""What a reading task does with the raw batches of one span; it yields the rows the task hands to Spark."""


def read_spans(
    spark: Any,
    config: Mapping[str, Any],
    spans: Sequence[OffsetSpan],
    *,
    read_stats: Any = None,
    process: SpanProcessor | None = None,
    schema: Any = None,
    stats_rows: StatsRows | None = None,
    tasks: int | None = None,
    **read_options: Any,
) -> Any:
    """A Spark DataFrame of the records of `spans`, one Spark task per span, or `tasks` tasks sharing them.

    Without `process` the rows are the raw records (schema RECORD_SCHEMA); with it, each task passes its
    span's raw batches through `process` (run in the task, e.g. decoding and validating) and the rows are
    what it yields, of Spark schema `schema`. With `stats_rows`, the rows also carry what the tasks read
    (`StatsRows`: `schema` must then name READ_STATS_COLUMN last; added for the raw records). `read_stats`,
    when given, is an accumulator from `read_stats_accumulator` that each task adds its records, bytes and
    reading time to, keyed by (topic, partition) (classic sessions only). `read_options` are passed to
    `read_range` (batch_size, poll_timeout_s, read_timeout_s, max_retries).

    With `tasks` (e.g. the cluster's parallelism), the spans are dealt to that many tasks (`span_groups`), each
    reading its spans one after the other with the next span's consumer already fetching: no task start-up
    and no consumer start-up between spans.
    """
    if (process is None) != (schema is None):
        raise ValueError("give both `process` and its output `schema`, or neither")
    if schema is None:
        schema = record_spark_schema()
        if stats_rows is not None:
            schema += f", `{READ_STATS_COLUMN}` {READ_STATS_DDL}"
    kafka_config = dict(config)
    groups = span_groups(spans, tasks) if tasks else [[s] for s in spans]
    table = [[(s.topic, s.partition, s.from_offset, s.until_offset) for s in group] for group in groups]

    def read_span(span: OffsetSpan, consumer: Any) -> Iterator[pa.RecordBatch]:
        reading = _SpanReading(read_range(kafka_config, span, consumer=consumer, **read_options))
        rows = reading if process is None else process(span, reading)
        if stats_rows is None:
            yield from rows
        else:
            yield from map(stats_rows.data, rows)
            if reading.records:  # a span of holes only: nothing to count
                yield stats_rows.row(span, reading.records, reading.bytes, reading.seconds)
        if read_stats is not None:
            read_stats.add({(span.topic, span.partition): (reading.records, reading.bytes, reading.seconds)})

    def read_groups(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in cast("list[int]", batch.column(0).to_pylist()):  # spark.range: no nulls
                for span, consumer in _prefetched(kafka_config, [OffsetSpan(*row) for row in table[index]]):
                    yield from read_span(span, consumer)

    def read_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return _gc_paused_within(read_groups(batches))

    # One row (the group's index) per partition, so exactly one group of spans per Spark task. spark.range
    # runs in the JVM: no Python RDD (and no second Python worker per task) just to hand out the spans.
    plan = spark.range(0, len(table), 1, numPartitions=max(len(table), 1))
    return plan.mapInArrow(read_partition, schema)


def span_groups(spans: Sequence[OffsetSpan], tasks: int) -> list[list[OffsetSpan]]:
    """`spans` dealt to at most `tasks` groups of near-equal offsets (longest first, each to the lightest group),
    each group in the order given."""
    if tasks < 1:
        raise ValueError(f"tasks must be >= 1, got {tasks}")
    heap = [(0, k, list[int]()) for k in range(min(tasks, len(spans)))]
    for index in sorted(range(len(spans)), key=lambda i: spans[i].from_offset - spans[i].until_offset):
        load, k, members = heapq.heappop(heap)
        members.append(index)
        heapq.heappush(heap, (load + spans[index].until_offset - spans[index].from_offset, k, members))
    return [[spans[i] for i in sorted(members)] for _load, _k, members in sorted(heap, key=itemgetter(1))]


def _prefetched(config: Mapping[str, Any], spans: Sequence[OffsetSpan]) -> Iterator[tuple[OffsetSpan, Any]]:
    """Each span with its consumer, opened while the span before it is read (one consumer ahead at most);
    the caller's reading closes it, and one left open by a failure is closed here."""

    def opened(span: OffsetSpan) -> Any:
        return open_consumer(config, span) if span.until_offset > span.from_offset else None

    ahead: Any = None
    try:
        for k, span in enumerate(spans):
            consumer = ahead if ahead is not None else opened(span)
            ahead = opened(spans[k + 1]) if k + 1 < len(spans) else None
            yield span, consumer
    finally:
        if ahead is not None:
            ahead.close()


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block: a reading task makes Python objects by the million (a
    message, its key and value, decoded fields), none of them in a cycle, and each collection would walk them."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _gc_paused_within(rows: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """`rows`, each computed with the garbage collector paused (`_gc_paused`); it runs again whenever the rows
    wait for their reader, so a worker whose task stopped reading early (a limit) is left as it was found."""
    while True:
        with _gc_paused():
            row = next(rows, None)
        if row is None:
            return
        yield row
