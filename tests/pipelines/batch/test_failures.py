"""Faults: a read task failing mid-range, a failing write task, and the Kafka mirror (working and down)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Producer
from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from cohort.common.types import TopicPartition
from cohort.devtools.topics import produce
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.kafka.mirror import KafkaOffsetMirror, kafka_committed
from cohort.pipelines.spec import PipelineSpec
from tests.fixtures.kafka import LARGE_RECORDS
from tests.support.orders import ORDER_SCHEMA, order, range_dirs

# A consumer that may not receive responses over ~1 MB cannot read past a 3 MB record: reading stalls there.
SMALL_FETCHES = {
    "fetch.max.bytes": 100_000,
    "message.max.bytes": 100_000,
    "max.partition.fetch.bytes": 50_000,
    "receive.message.max.bytes": 1_100_000,
}


def assert_nothing_visible(lake) -> None:  # type: ignore[no-untyped-def]
    assert range_dirs(lake) == [] and range_dirs(lake / "_quarantine") == []
    assert not any(p.is_file() for p in lake.rglob("*")) if lake.exists() else True


def test_a_task_failing_mid_read_leaves_no_files_and_no_commit(spark, kafka_config, topic_factory, ledger, lake):
    topic = topic_factory(2, config=LARGE_RECORDS)  # Kafka refuses the 3 MB record by default
    produce(kafka_config, topic, [(p, None, order(i)) for i in range(3000) for p in (0, 1)])
    big = Producer({**kafka_config, "message.max.bytes": 10_000_000})
    refused: list[object] = []
    big.produce(topic, b"x" * 3_000_000, partition=1, on_delivery=lambda err, _msg: err and refused.append(err))
    assert big.flush(10) == 0 and not refused, f"the big record was not written: {refused}"
    produce(kafka_config, topic, [(1, None, order(i)) for i in range(10)])
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    spec = PipelineSpec(
        sink_path=str(lake),
        value_schema=ORDER_SCHEMA,
        consumer_config=SMALL_FETCHES,
        read_timeout_s=2.0,
        max_records_per_task=1000,
        min_task_records=1000,
    )

    # the task reading [2258, 3011) of partition 1 stalls at the big record (or loses its connection to
    # it) and fails; on a loaded machine a task of the same partition reading beside it can be starved by the
    # broker while it serves the big record and fail first: either way a task of partition 1 fails the batch
    with pytest.raises(Exception, match=rf"ReadError: .*{topic}-1 at offset \d+"):
        run_batch(spark, spec, kafka_config, tps, ledger)

    assert_nothing_visible(lake)
    assert ledger.committed_offsets(tps) == dict.fromkeys(tps)


def test_a_write_task_failing_leaves_no_files_and_no_commit(spark, kafka_config, topic, produce_records, ledger, lake):
    produce_records(topic, [(0, None, order(i)) for i in range(50)], one_per_batch=False)

    @F.udf(LongType())
    def explode_at_40(offset):  # type: ignore[no-untyped-def]  (hints would make Spark guess a pandas UDF)
        if offset == 40:
            raise RuntimeError("injected failure at offset 40")
        return offset

    spec = PipelineSpec(
        sink_path=str(lake),
        value_schema=ORDER_SCHEMA,
        transform=lambda frame: frame.withColumn("checked", explode_at_40("kafka.offset")),
    )
    with pytest.raises(Exception, match="injected failure at offset 40"):
        run_batch(spark, spec, kafka_config, [TopicPartition(topic, 0)], ledger)
    assert_nothing_visible(lake)
    assert ledger.committed_offsets([TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): None}


def test_commits_are_mirrored_to_kafka_under_the_group(
    spark, kafka_config, topic_factory, produce_records, ledger, group, lake
):
    topic = topic_factory(2)
    produce_records(topic, [(i % 2, None, order(i)) for i in range(12)])
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA)
    result = run_batch(spark, spec, kafka_config, tps, ledger, group=group, mirror=KafkaOffsetMirror(kafka_config))
    assert result.mirror_error is None and "mirror" in result.stage_seconds
    # Tansu keeps the offsets but drops commit metadata (the run id): only offsets are compared here.
    assert {tp: offset for tp, (offset, _) in kafka_committed(kafka_config, group, tps).items()} == dict.fromkeys(
        tps, 6
    )
    assert ledger.committed_offsets(tps) == dict.fromkeys(tps, 6)


def test_a_mirror_failure_is_reported_and_the_ledger_commit_stands(
    spark, kafka_config, topic, produce_records, ledger, group, lake
):
    produce_records(topic, [(0, None, order(i)) for i in range(5)])
    tp = TopicPartition(topic, 0)
    down = KafkaOffsetMirror({"bootstrap.servers": "127.0.0.1:9"}, attempts=2, backoff_s=0.05, timeout_s=1.0)
    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA)
    result = run_batch(spark, spec, kafka_config, [tp], ledger, group=group, mirror=down, run_id="run-7")
    assert result.mirror_error is not None and "failed after 2 attempts" in result.mirror_error
    assert ledger.committed_offsets([tp]) == {tp: 5} and result.records == 5
    assert len(range_dirs(lake)) == 1


def test_a_mirror_to_an_unreachable_kafka_gives_up_within_its_attempts_timeouts():
    """Each attempt costs about its timeout, not the consumer's 45 s default session timeout (which its close once
    waited for an unanswered commit)."""
    from cohort.common.types import OffsetRange
    from cohort.pipelines.kafka.mirror import MirrorError

    down = KafkaOffsetMirror({"bootstrap.servers": "127.0.0.1:9"}, attempts=2, backoff_s=0.05, timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(MirrorError, match="failed after 2 attempts"):
        down.mirror("g", [OffsetRange("t", 0, 0, 5)], run_id="r")
    assert time.monotonic() - started < 20, "2 attempts of 1 s took longer than 20 s"


def test_mirror_needs_a_valid_group(kafka_config):
    from cohort.common.names import InvalidNameError
    from cohort.common.types import OffsetRange

    with pytest.raises(InvalidNameError):
        KafkaOffsetMirror(kafka_config).mirror("../g", [OffsetRange("t", 0, 0, 1)], run_id=None)
