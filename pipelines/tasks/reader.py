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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from operator import itemgetter
from typing import Any, cast

import pyarrow as pa

from cohort.pipelines.tasks.native_reader import open_native
from cohort.pipelines.tasks.python_consumer import PythonConsumer
from cohort.pipelines.tasks.read_stats import (
    READ_STATS_COLUMN,
    READ_STATS_DDL,
    STATS_ONLY,
    STATS_ONLY_DDL,
    ReadStats,
    SpanReading,
    StatsRows,
    gather_read_stats,
    read_stats_accumulator,
)
from cohort.pipelines.tasks.records import (
    GONE,
    PARTITION_EOF,
    RECORD_SCHEMA,
    ConsumeError,
)
from cohort.pipelines.tasks.spans import OffsetSpan, ReadError, SpanConsumer, record_spark_schema, validate_partition

__all__ = [
    "READ_STATS_COLUMN",
    "RECORD_SCHEMA",
    "STATS_ONLY",
    "STATS_ONLY_DDL",
    "OffsetSpan",
    "PythonConsumer",
    "ReadError",
    "ReadStats",
    "SpanConsumer",
    "SpanProcessor",
    "StatsRows",
    "gather_read_stats",
    "read_range",
    "read_spans",
    "read_stats_accumulator",
    "record_spark_schema",
    "validate_partition",
]


READER_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",
    # librdkafka's default, made explicit: aborted transactional records and control markers are holes a span
    # skips. The ranges end at the last stable offset (cohort.pipelines.kafka.client), so a span never waits on
    # an open transaction; `read_uncommitted` in the caller's configuration lands aborted records too.
    "isolation.level": "read_committed",
    "fetch.max.bytes": 52_428_800,
    # librdkafka pauses fetching for fetch.queue.backoff.ms (1 s by default) whenever its local queue is
    # full; a bounded reader that drains the queue as fast as it can gains nothing from that pause.
    "fetch.queue.backoff.ms": 5,
    # A span whose last offsets are holes (a control marker, aborted or compacted records) at the partition's
    # end is proven complete by end-of-partition, which comes from an empty fetch: the broker holds that fetch
    # for fetch.wait.max.ms (500 ms by default) waiting for records that a bounded reader does not want. The
    # wait matters only there (a fetch with records to return is answered at once); shorter still would make a
    # consumer opened ahead (`_prefetched`) and idle at the end of its partition ask the broker more often.
    "fetch.wait.max.ms": 100,
}
"""librdkafka settings of the executor-side consumers; the caller's configuration overrides them."""

MAX_BATCH_BYTES = 64 * 1024 * 1024
"""About the most one consume call brings into one Arrow batch. librdkafka fetches records of any size whole (a
record larger than max.partition.fetch.bytes comes back alone), and a call gathers up to `batch_size` of them: 10,000
records near Kafka's 1 MB max.message.bytes would be 10 GB in one batch (past Arrow's 2 GiB for a binary column).
So each call asks for as many records as fit this many bytes at the size of the span's last batch's records."""

_FIRST_RECORD_BYTES = 1024 * 1024
"""The record size a span's first consume call assumes (Kafka's default max.message.bytes): 64 records at most."""


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
    max_batch_bytes: int = MAX_BATCH_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of `span` as Arrow batches of at most `batch_size` rows and about `max_batch_bytes`
    (`MAX_BATCH_BYTES`: large records make batches of fewer rows), in offset order.

    `consumer`, when given, is one `open_consumer` opened for this span (it may have fetched already); it is
    closed when the reading ends, as the one opened here otherwise is.

    Stops once the next offset reaches `until_offset` (or end-of-partition lies at or beyond it): a span whose
    last offsets hold no record (a transaction's control marker, aborted or compacted records) is complete at
    the first record past it or at end-of-partition, never waiting for a record at `until_offset - 1`. Under
    read_committed, end-of-partition is the last stable offset, which planned spans never pass (they end at the
    end offsets of cohort.pipelines.kafka.client.watermarks). Fails
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
        rows = max(1, min(batch_size, max_batch_bytes // _FIRST_RECORD_BYTES))
        while next_offset < span.until_offset:
            batch, errors = consumer.consume(min(rows, span.until_offset - next_offset), poll_timeout_s)
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
                rows = max(1, min(batch_size, max_batch_bytes * good.num_rows // max(good.nbytes, 1)))
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
        reading = SpanReading(read_range(kafka_config, span, consumer=consumer, **read_options))
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
