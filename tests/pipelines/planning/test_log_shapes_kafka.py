"""Real log shapes on Apache Kafka: a compacted topic whose log cleaner really removed records (offset gaps, a
committed offset inside one, a tombstone), and a log start moved past the group's committed offset
(`AdminClient.delete_records`, as retention does). Each batch lands every record Kafka still holds once (in the sink
or the quarantine) or fails with its documented error; the sink is read back with DuckDB and compared with the log
as a plain consumer reads it.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import duckdb
import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from cohort.assignment.coordinator import Coordinator
from cohort.cli.ops import describe_rows
from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.kafka.client import watermarks
from cohort.pipelines.planning.plan import OffsetOutOfRangeError
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tasks.reader import OffsetSpan, ReadError, open_consumer, read_range
from cohort.runtime.kafka_access import KafkaAccess
from tests.fixtures.kafka import broker_choice
from tests.support.orders import ORDER_SCHEMA, Order, order

Logged = tuple[int, int, bytes | None, bytes | None]
"""(partition, offset, key, value) of a record in the log."""


@pytest.fixture(autouse=True)
def _apache_kafka() -> None:
    if broker_choice() == "embedded":
        pytest.skip("the embedded broker has no log cleaner and no DeleteRecords")


def read_log(kafka_config: dict[str, Any], topic: str, partitions: int) -> list[Logged]:
    """Every record the partitions hold, as a plain consumer reads them from the log start."""
    consumer = Consumer({**kafka_config, "group.id": f"log-{uuid.uuid4().hex}", "enable.partition.eof": True})
    consumer.assign([KafkaTopicPartition(topic, p, 0) for p in range(partitions)])
    found: list[Logged] = []
    ended: set[int] = set()
    try:
        deadline = time.monotonic() + 30
        while len(ended) < partitions:
            assert time.monotonic() < deadline, f"reading {topic}: no end-of-partition in 30 s"
            for message in consumer.consume(10_000, 0.5):
                error = message.error()
                if error is None:
                    found.append((message.partition(), message.offset(), message.key(), message.value()))
                elif error.code() == KafkaError._PARTITION_EOF:
                    ended.add(message.partition())
                else:
                    raise AssertionError(f"reading {topic}: {error}")
    finally:
        consumer.close()
    return sorted(found)


def landed(lake: Path) -> list[tuple[int, int, int]]:
    """(partition, offset, id) of every sink row, through DuckDB with the layout's glob."""
    if not any(lake.glob("topic=*/partition=*/*/*.parquet")):
        return []
    query = f"SELECT kafka.partition, kafka.offset, id FROM read_parquet('{lake}/topic=*/partition=*/*/*.parquet')"
    return sorted(duckdb.sql(query).fetchall())


def quarantined(lake: Path) -> list[tuple[int, int, str]]:
    """(partition, offset, reason) of every quarantined record (under the sink's `_quarantine`)."""
    root = lake / "_quarantine"
    if not any(root.glob("topic=*/partition=*/*/*.parquet")):
        return []
    query = f"SELECT kafka.partition, kafka.offset, reason FROM read_parquet('{root}/topic=*/partition=*/*/*.parquet')"
    return sorted(duckdb.sql(query).fetchall())


def ids(records: list[Logged]) -> list[tuple[int, int, int]]:
    """(partition, offset, id) of the records with a value."""
    return [(p, o, json.loads(v)["id"]) for p, o, _k, v in records if v is not None]


def lags(coordinator: Coordinator, group: str, kafka_config: dict[str, Any], topic: str, n: int) -> list[int | None]:
    """LAG per partition as `cohort describe --bootstrap-servers` shows it."""
    coordinator.report_topic_metadata(group, {topic: n})
    return [row.lag for row in describe_rows(coordinator, group, KafkaAccess(kafka_config).end_offsets)]


def spec_for(lake: Path, **kwargs: Any) -> PipelineSpec:
    return PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA, model=Order, **kwargs)


def alter_topic(kafka_config: dict[str, Any], topic: str, settings: dict[str, str]) -> None:
    admin = AdminClient(kafka_config)
    entries = [
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in settings.items()
    ]
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


# --- compaction ----------------------------------------------------------------------------------------------

KEYS = 10
VERSIONS = 30


def _cleaned(records: list[Logged], partitions: int) -> bool:
    """Whether the cleaner left one record per data key in each partition."""
    for partition in range(partitions):
        keys = [k for p, _o, k, _v in records if p == partition and k is not None and k.startswith(b"k")]
        if len(keys) != len(set(keys)) or len(keys) != KEYS:
            return False
    return True


ROLL_IDS = 100_000
"""Ids of the orders `compact_now` appends start here."""


def compact_now(kafka_config: dict[str, Any], topic: str, partitions: int) -> list[Logged]:
    """Let the log cleaner compact `topic` and wait (90 s at most) until it has: segments roll every 100 ms at the
    next append, so an order with a key of its own (never compacted away) is appended to each partition every
    second until only the latest record of each data key is left. Returns the log then."""
    alter_topic(kafka_config, topic, {"segment.ms": "100"})
    producer = Producer(kafka_config)
    rolls = iter(range(ROLL_IDS, ROLL_IDS + 10_000))
    try:
        deadline = time.monotonic() + 90
        while True:
            time.sleep(1)
            for partition in range(partitions):
                key = f"roll-{uuid.uuid4().hex}".encode()
                producer.produce(topic, key=key, value=order(next(rolls)), partition=partition)
            assert producer.flush(30) == 0
            log = read_log(kafka_config, topic, partitions)
            if _cleaned(log, partitions):
                return log
            assert time.monotonic() < deadline, f"the log cleaner did not compact {topic} in 90 s"
    finally:
        producer.close()


def test_a_compacted_log_lands_every_surviving_record_once(
    spark, kafka_config, topic_factory, coordinator, group, ledger, lake
):
    """The first batch reads 50 offsets of each partition before the cleaner runs; the cleaner then removes all
    but the latest record of each key, offset 50 among them, so the second batch starts inside a gap, and reads
    every record the log still holds past it: the latest orders, the tombstone (quarantined: JSON mode has nothing
    to decode) and the orders that rolled the segments."""
    config = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0"}
    topic = topic_factory(2, config=config)
    producer = Producer(kafka_config)  # librdkafka's default batching
    for i in range(KEYS * VERSIONS):
        for partition in range(2):
            producer.produce(topic, key=f"k{i % KEYS}".encode(), value=order(2 * i + partition), partition=partition)
    producer.produce(topic, key=b"k3", value=None, partition=0)  # a tombstone: the latest record of k3
    assert producer.flush(30) == 0
    producer.close()
    tps = [TopicPartition(topic, p) for p in range(2)]
    spec = spec_for(lake)

    first = run_batch(spark, spec_for(lake, max_records_per_partition=50), kafka_config, tps, ledger)
    assert [(p.from_offset, p.until_offset, p.records) for p in first.partitions] == [(0, 50, 50)] * 2
    before = read_log(kafka_config, topic, 2)

    log = compact_now(kafka_config, topic, 2)
    survivors = [r for r in log if r[1] >= 50]
    assert len(log) < len(before) // 10, "the cleaner removed most records"
    assert not any(o == 50 for _p, o, _k, _v in log), "the committed offset 50 is a gap now"
    assert (0, KEYS * VERSIONS, b"k3", None) in log, "the tombstone survives (delete.retention.ms: a day)"
    ends = {tp: high for tp, (_low, high) in watermarks(kafka_config, tps).items()}
    assert {tp: low for tp, (low, _high) in watermarks(kafka_config, tps).items()} == dict.fromkeys(tps, 0)

    second = run_batch(spark, spec, kafka_config, tps, ledger)

    assert landed(lake) == sorted(ids([r for r in before if r[1] < 50]) + ids(survivors))
    assert quarantined(lake) == [(0, KEYS * VERSIONS, "null value (tombstone): nothing to decode as JSON")]
    for result, tp in zip(second.partitions, tps, strict=True):
        in_log = [r for r in survivors if r[0] == tp.partition]
        assert (result.from_offset, result.until_offset) == (50, ends[tp])
        assert result.records + result.quarantined == len(in_log) < result.until_offset - result.from_offset
    assert ledger.committed_offsets(tps) == ends
    assert second.lag_after(ends) == dict.fromkeys(tps, 0)
    assert lags(coordinator, group, kafka_config, topic, 2) == [0, 0]
    assert run_batch(spark, spec, kafka_config, tps, ledger).committed == (), "nothing left to read"


# --- a log start past the committed offset ------------------------------------------------------------------


def delete_records(kafka_config: dict[str, Any], topic: str, partition: int, before: int) -> int:
    """Delete the records of `topic`-`partition` before offset `before` (what retention does); the new log start."""
    admin = AdminClient(kafka_config)
    futures = admin.delete_records([KafkaTopicPartition(topic, partition, before)], operation_timeout=30)
    (future,) = futures.values()
    return int(future.result(timeout=30).low_watermark)


def test_a_log_start_past_the_committed_offset_fails_or_records_a_gap(
    spark, kafka_config, topic_factory, produce_records, coordinator, group, ledger, lake
):
    topic = topic_factory(2)
    produce_records(topic, [(p, None, order(2 * i + p)) for i in range(100) for p in range(2)])
    tps = [TopicPartition(topic, p) for p in range(2)]
    capped = spec_for(lake, max_records_per_partition=30)
    run_batch(spark, capped, kafka_config, tps, ledger)
    assert delete_records(kafka_config, topic, 0, 60) == 60  # past partition 0's committed offset, 30
    assert watermarks(kafka_config, tps) == {tps[0]: (60, 100), tps[1]: (0, 100)}
    before = landed(lake)

    with pytest.raises(OffsetOutOfRangeError) as failure:
        run_batch(spark, spec_for(lake), kafka_config, tps, ledger)
    assert str(failure.value).startswith(
        f"{topic}-0: committed offset 30 is no longer in Kafka (the earliest available offset is 60); "
        "records 30..59 were deleted"
    )
    assert "set fail_on_data_loss=False" in str(failure.value)
    assert ledger.committed_offsets(tps) == dict.fromkeys(tps, 30), "nothing committed, partition 1 either"
    assert landed(lake) == before

    result = run_batch(spark, spec_for(lake, fail_on_data_loss=False), kafka_config, tps, ledger)

    gap = result.partition(topic, 0).gap
    assert gap is not None and (gap.from_offset, gap.until_offset) == (30, 60)
    assert "deleted from Kafka before they were read (log start 60)" in (gap.gap_reason or "")
    assert [(p.from_offset, p.until_offset, p.records) for p in result.partitions] == [(60, 100, 40), (30, 100, 70)]
    history = coordinator.ledger_history(group, topic, 0)
    assert [(e.from_offset, e.until_offset, e.records, e.gap_reason is not None) for e in history] == [
        (0, 30, 30, False),
        (30, 60, 0, True),
        (60, 100, 40, False),
    ]
    expected = [(0, o, 2 * o + 1) for o in [*range(30), *range(60, 100)]] + [(1, o, 2 * o + 2) for o in range(100)]
    assert landed(lake) == sorted(expected)
    assert ledger.committed_offsets(tps) == dict.fromkeys(tps, 100)
    assert lags(coordinator, group, kafka_config, topic, 2) == [0, 0]


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_records_deleted_before_a_span_is_read_fail_it_naming_them(kafka_config, topic, produce_records, native):
    """A span planned before the log start moved past it: the reading task fails with ReadError naming the
    partition and the offsets; nothing of it is read."""
    produce_records(topic, [(0, None, order(i)) for i in range(20)])
    span = OffsetSpan(topic, 0, 0, 20)
    assert delete_records(kafka_config, topic, 0, 10) == 10
    consumer = open_consumer(kafka_config, span, native=native)
    with pytest.raises(ReadError, match=rf"{topic}-0: offset 0 is out of range: the records of \[0, 20\) are no"):
        list(read_range(kafka_config, span, consumer=consumer, read_timeout_s=10))
