"""Transactional topics on Apache Kafka: aborted records, control markers and open transactions between committed
records, read by both readers (the C consumer and confluent-kafka's Python consumer, the fallback).

Under `read_committed` (the readers' default, set explicitly in `READER_DEFAULTS`) every committed record lands once
and no aborted one does; ranges end on control markers without waiting for a record that never comes; the end
offset of a partition with an open transaction is its last stable offset, so a batch never waits for the
transaction and reads its records in a later batch once it commits. Under `read_uncommitted` (the spec's
`consumer_config`) aborted records land too, and ranges still end at the last stable offset (docs/guarantees.md).
The sink is compared with the producers' delivery reports: (partition, offset, id) of each record.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from confluent_kafka import Consumer, Producer

from cohort.assignment.coordinator import Coordinator
from cohort.cli.ops import describe_rows
from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.kafka.client import read_watermarks, watermarks
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tasks.native_reader import NativeConsumer
from cohort.pipelines.tasks.reader import (
    READER_DEFAULTS,
    RECORD_SCHEMA,
    OffsetSpan,
    PythonConsumer,
    open_consumer,
    read_range,
)
from cohort.runtime.kafka_access import KafkaAccess
from tests.fixtures.kafka import broker_choice
from tests.support.orders import ORDER_SCHEMA, Order, order

Record = tuple[int, int, int]
"""(partition, offset, order id) of a delivered record."""


@pytest.fixture(autouse=True)
def _apache_kafka() -> None:
    if broker_choice() == "embedded":
        pytest.skip("the embedded broker does not hide aborted records, nor answer the last stable offset")


def ignore_errors(_error: Any) -> None:
    """An `error_cb`: a Python callback, so the reading tasks take confluent-kafka's consumer (the fallback)."""


READERS = {"native": {}, "python": {"error_cb": ignore_errors}}
"""consumer_config per reader: the C consumer by default, confluent-kafka's when a setting is a Python callback."""


class Orders:
    """Orders written by a transactional producer and a plain one, each record's (partition, offset, id) kept from
    its delivery report; `committed` and `aborted` hold the transactional records by outcome, `plain` the others."""

    def __init__(self, kafka_config: dict[str, Any], topic: str) -> None:
        self.topic = topic
        self.next_id = 0
        self.committed: list[Record] = []
        self.aborted: list[Record] = []
        self.plain: list[Record] = []
        self._pending: list[Record] = []
        self._tx = Producer({**kafka_config, "transactional.id": f"tx-{uuid.uuid4().hex}"})
        self._tx.init_transactions(30)
        self._plain = Producer(kafka_config)  # librdkafka's default batching

    def _send(self, producer: Producer, partitions: list[int], per_partition: int, into: list[Record]) -> None:
        for _ in range(per_partition):
            for partition in partitions:
                index = self.next_id
                self.next_id += 1

                def delivered(err: Any, msg: Any, index: int = index) -> None:
                    assert err is None, err
                    into.append((msg.partition(), msg.offset(), index + 1))

                producer.produce(self.topic, value=order(index), partition=partition, on_delivery=delivered)
        assert producer.flush(30) == 0

    def transaction(self, partitions: list[int], per_partition: int, *, commit: bool) -> None:
        """One transaction over `partitions`; its records reach the log (flushed) before it commits or aborts."""
        self.begin(partitions, per_partition)
        self.end(commit=commit)

    def begin(self, partitions: list[int], per_partition: int) -> None:
        """Begin a transaction and write its records; `end` decides it."""
        self._tx.begin_transaction()
        self._pending = []
        self._send(self._tx, partitions, per_partition, self._pending)

    def end(self, *, commit: bool) -> None:
        if commit:
            self._tx.commit_transaction(30)
            self.committed += self._pending
        else:
            self._tx.abort_transaction(30)
            self.aborted += self._pending
        self._pending = []

    def plain_records(self, partitions: list[int], per_partition: int) -> None:
        self._send(self._plain, partitions, per_partition, self.plain)

    def close(self) -> None:
        self._tx.close()
        self._plain.close()

    @property
    def landing(self) -> list[Record]:
        """What read_committed lands: every committed and plain record, by (partition, offset)."""
        return sorted(self.committed + self.plain)

    @property
    def every(self) -> list[Record]:
        """What read_uncommitted lands once every transaction is decided: aborted records too."""
        return sorted(self.committed + self.plain + self.aborted)


def high_watermarks(kafka_config: dict[str, Any], tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """The broker's high watermarks (read_uncommitted: the log end, an open transaction's records included)."""
    consumer = Consumer({**kafka_config, "group.id": "hw", "isolation.level": "read_uncommitted"})
    try:
        return {tp: high for tp, (_low, high) in read_watermarks(consumer, tps).items()}
    finally:
        consumer.close()


def sink_records(lake: Path) -> list[Record]:
    """(partition, offset, id) of every row under the sink root, read with pyarrow as readers do."""
    if not lake.exists():
        return []
    table = ds.dataset(str(lake), format="parquet", partitioning="hive").to_table(columns=["kafka", "id"])
    kafka = table.column("kafka").combine_chunks()
    columns = (kafka.field("partition"), kafka.field("offset"), table.column("id"))
    return sorted(zip(*(column.to_pylist() for column in columns), strict=True))


def spec_for(lake: Path, reader: str, **kwargs: Any) -> PipelineSpec:
    consumer_config = {**READERS[reader], **kwargs.pop("consumer_config", {})}
    return PipelineSpec(
        sink_path=str(lake), value_schema=ORDER_SCHEMA, model=Order, consumer_config=consumer_config, **kwargs
    )


def test_the_readers_read_committed_explicitly():
    """librdkafka's default, made explicit: a change of default in librdkafka cannot change what lands."""
    assert READER_DEFAULTS["isolation.level"] == "read_committed"


# --- the readers on spans that end on markers, in aborted records and before an open transaction ---------------


@pytest.fixture
def make_orders(kafka_config: dict[str, Any]) -> Iterator[Callable[[str], Orders]]:
    """`make_orders(topic)`: an `Orders` on the topic; its producers are closed after the test."""
    made: list[Orders] = []

    def make(topic: str) -> Orders:
        made.append(Orders(kafka_config, topic))
        return made[-1]

    yield make
    for orders in made:
        orders.close()


@pytest.fixture
def marked(make_orders: Callable[[str], Orders], topic: str) -> Iterator[Orders]:
    """Partition 0: a committed transaction (ids 1-3 at offsets 0-2, its marker at 3), an aborted one (ids 4-6 at
    4-6, its marker at 7), then an open one (id 7 at offset 8): last stable offset 8, high watermark 9."""
    orders = make_orders(topic)
    orders.transaction([0], 3, commit=True)
    orders.transaction([0], 3, commit=False)
    orders.begin([0], 1)
    yield orders
    orders.end(commit=False)


def _read(config: dict[str, Any], span: OffsetSpan, *, native: bool) -> list[tuple[int, int]]:
    """(offset, id) of each record `read_range` yields, through the C consumer or confluent-kafka's."""
    consumer = open_consumer(config, span, native=native)
    assert isinstance(consumer, NativeConsumer if native else PythonConsumer)
    started = time.monotonic()
    batches = list(read_range(config, span, consumer=consumer, read_timeout_s=5))
    assert time.monotonic() - started < 4, "the span waited for a record that never comes"
    rows = pa.Table.from_batches(batches, schema=RECORD_SCHEMA)
    ids = [json.loads(v)["id"] for v in rows.column("value").to_pylist()]
    return list(zip(rows.column("offset").to_pylist(), ids, strict=True))


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
@pytest.mark.parametrize(
    ("bounds", "committed", "uncommitted"),
    [
        ((0, 4), [(0, 1), (1, 2), (2, 3)], [(0, 1), (1, 2), (2, 3)]),  # ends on the commit marker
        ((4, 8), [], [(4, 4), (5, 5), (6, 6)]),  # aborted records and their marker, up to the last stable offset
        ((0, 8), [(0, 1), (1, 2), (2, 3)], [(0, 1), (1, 2), (2, 3), (4, 4), (5, 5), (6, 6)]),
        ((2, 5), [(2, 3)], [(2, 3), (4, 4)]),  # ends inside the aborted transaction
        ((3, 4), [], []),  # a marker alone
        ((7, 8), [], []),  # the abort marker alone, the open transaction right after it
    ],
)
def test_a_span_ends_on_markers_and_aborted_records_without_waiting(
    kafka_config, marked, native, bounds, committed, uncommitted
):
    span = OffsetSpan(marked.topic, 0, *bounds)
    assert _read(kafka_config, span, native=native) == committed
    uncommitted_config = {**kafka_config, "isolation.level": "read_uncommitted"}
    assert _read(uncommitted_config, span, native=native) == uncommitted


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_end_of_partition_proves_a_span_complete_without_the_brokers_long_poll(kafka_config, marked, native):
    """The span [4, 8) holds no committed record and ends at the last stable offset: only end-of-partition proves
    it complete, and it comes from an empty fetch, which the broker answers after `fetch.wait.max.ms` (500 ms by
    librdkafka's default, 100 ms in READER_DEFAULTS), and the consume call returns with it."""
    span = OffsetSpan(marked.topic, 0, 4, 8)
    durations = []
    for _ in range(3):
        consumer = open_consumer(kafka_config, span, native=native)
        started = time.monotonic()
        assert list(read_range(kafka_config, span, consumer=consumer)) == []
        durations.append(time.monotonic() - started)
    assert min(durations) < 0.4, durations


def test_end_offsets_stop_at_the_last_stable_offset_until_the_transaction_ends(kafka_config, marked):
    """Planning, `cohort describe` and the lag-sticky assignor see the last stable offset (8) while the
    transaction is open, not the high watermark (9); once it commits, the end is past its marker (10)."""
    tp = TopicPartition(marked.topic, 0)
    assert high_watermarks(kafka_config, [tp]) == {tp: 9}
    assert watermarks(kafka_config, [tp]) == {tp: (0, 8)}
    assert watermarks({**kafka_config, "isolation.level": "read_uncommitted"}, [tp]) == {tp: (0, 8)}
    marked.end(commit=True)
    assert watermarks(kafka_config, [tp]) == {tp: (0, 10)}
    assert _read(kafka_config, OffsetSpan(marked.topic, 0, 8, 10), native=True) == [(8, 7)]
    marked.begin([0], 0)  # the fixture's teardown ends a transaction


# --- batches --------------------------------------------------------------------------------------------------


def _interleaved(orders: Orders) -> None:
    """Commits, aborts and plain records over partitions 0-2; each partition's log ends on a control marker
    (partition 2 on an abort marker), and spans split every few offsets fall on markers and aborted records."""
    orders.transaction([0, 1, 2], 4, commit=True)
    orders.transaction([0, 1], 3, commit=False)
    orders.plain_records([0, 2], 5)
    orders.transaction([1, 2], 6, commit=True)
    orders.transaction([0, 1, 2], 2, commit=False)
    orders.transaction([0], 1, commit=False)
    orders.transaction([2], 3, commit=True)
    orders.plain_records([1], 2)
    orders.transaction([0, 1], 5, commit=True)
    orders.transaction([2], 4, commit=False)


def _lags(coordinator: Coordinator, group: str, kafka_config: dict[str, Any], topic: str) -> dict[int, int | None]:
    """LAG per partition as `cohort describe --bootstrap-servers` shows it."""
    coordinator.report_topic_metadata(group, {topic: 3})
    access = KafkaAccess(kafka_config)
    return {row.partition: row.lag for row in describe_rows(coordinator, group, access.end_offsets)}


@pytest.mark.parametrize("reader", ["native", "python"])
def test_committed_records_land_once_and_aborted_ones_never(
    spark, kafka_config, topic_factory, make_orders, coordinator, group, ledger, lake, reader
):
    topic = topic_factory(3)
    orders = make_orders(topic)
    _interleaved(orders)
    tps = [TopicPartition(topic, p) for p in range(3)]
    ends = high_watermarks(kafka_config, tps)  # no open transaction: the last stable offset is the log end
    spec = spec_for(lake, reader, max_records_per_task=3, min_task_records=1, consume_batch_size=2)

    result = run_batch(spark, spec, kafka_config, tps, ledger)

    assert sink_records(lake) == orders.landing
    assert not {id_ for *_, id_ in orders.aborted} & {id_ for *_, id_ in sink_records(lake)}
    per_partition = {p: sum(1 for q, *_ in orders.landing if q == p) for p in range(3)}
    assert [(p.partition, p.from_offset, p.until_offset, p.records, p.quarantined) for p in result.partitions] == [
        (p, 0, ends[TopicPartition(topic, p)], per_partition[p], 0) for p in range(3)
    ]
    assert all(p.records < p.until_offset for p in result.partitions), "markers and aborted records are holes"
    assert ledger.committed_offsets(tps) == ends, "the committed offsets are past the last markers"
    assert result.lag_after(KafkaAccess(kafka_config).end_offsets(tps)) == dict.fromkeys(tps, 0), "the run's lag"
    assert _lags(coordinator, group, kafka_config, topic) == {0: 0, 1: 0, 2: 0}

    again = run_batch(spark, spec, kafka_config, tps, ledger)
    assert again.records == 0 and again.committed == (), "nothing left to read: no range ends short of a marker"
    assert sink_records(lake) == orders.landing


def test_an_open_transaction_does_not_hold_the_batch(
    spark, kafka_config, topic_factory, make_orders, coordinator, group, ledger, lake
):
    """The batch ends at the last stable offset and completes promptly (it would wait `read_timeout_s` and fail
    for an end at the high watermark); the transaction's records land in the batch after it commits."""
    topic = topic_factory(3)
    orders = make_orders(topic)
    orders.transaction([0, 1, 2], 3, commit=True)
    orders.plain_records([1], 4)
    orders.begin([0, 2], 5)  # open: partitions 0 and 2 hold its records past their last stable offsets
    tps = [TopicPartition(topic, p) for p in range(3)]
    stable = {tp: high for tp, (_low, high) in watermarks(kafka_config, tps).items()}
    assert stable == {tps[0]: 4, tps[1]: 8, tps[2]: 4}
    assert high_watermarks(kafka_config, tps) == {tps[0]: 9, tps[1]: 8, tps[2]: 9}
    spec = spec_for(lake, "native", read_timeout_s=20)

    started = time.monotonic()
    first = run_batch(spark, spec, kafka_config, tps, ledger)
    assert time.monotonic() - started < 20, "the batch waited for the open transaction"

    assert [(p.from_offset, p.until_offset, p.records) for p in first.partitions] == [(0, 4, 3), (0, 8, 7), (0, 4, 3)]
    assert sink_records(lake) == orders.landing
    assert first.lag_after(KafkaAccess(kafka_config).end_offsets(tps)) == dict.fromkeys(tps, 0)
    assert _lags(coordinator, group, kafka_config, topic) == {0: 0, 1: 0, 2: 0}, "lag counts decided records"
    assert run_batch(spark, spec, kafka_config, tps, ledger).committed == ()

    orders.end(commit=True)
    second = run_batch(spark, spec, kafka_config, tps, ledger)
    assert [(p.from_offset, p.until_offset, p.records) for p in second.partitions] == [
        (4, 10, 5),
        (8, 8, 0),
        (4, 10, 5),
    ]
    assert sink_records(lake) == orders.landing and len(orders.landing) == 23
    assert ledger.committed_offsets(tps) == high_watermarks(kafka_config, tps)
    assert _lags(coordinator, group, kafka_config, topic) == {0: 0, 1: 0, 2: 0}


@pytest.mark.parametrize("reader", ["native", "python"])
def test_read_uncommitted_lands_aborted_records_too_and_stops_at_the_last_stable_offset(
    spark, kafka_config, topic_factory, make_orders, ledger, lake, reader
):
    """`consumer_config={"isolation.level": "read_uncommitted"}`: every data record lands, aborted ones included,
    markers stay holes; an open transaction's records wait for a later batch (ranges end at the last stable
    offset whatever the readers' isolation), and land there even when the transaction aborts."""
    topic = topic_factory(3)
    orders = make_orders(topic)
    _interleaved(orders)
    orders.begin([1], 3)
    tps = [TopicPartition(topic, p) for p in range(3)]
    stable = {tp: high for tp, (_low, high) in watermarks(kafka_config, tps).items()}
    spec = spec_for(lake, reader, consumer_config={"isolation.level": "read_uncommitted"}, read_timeout_s=20)

    first = run_batch(spark, spec, kafka_config, tps, ledger)
    assert {p.topic_partition: p.until_offset for p in first.partitions} == stable
    assert sink_records(lake) == orders.every

    orders.end(commit=False)
    second = run_batch(spark, spec, kafka_config, tps, ledger)
    assert [p.records for p in second.partitions] == [0, 3, 0]
    assert sink_records(lake) == orders.every, "the aborted transaction's records landed in the second batch"
    assert ledger.committed_offsets(tps) == high_watermarks(kafka_config, tps)
    assert run_batch(spark, spec, kafka_config, tps, ledger).committed == (), "nothing left to read"
