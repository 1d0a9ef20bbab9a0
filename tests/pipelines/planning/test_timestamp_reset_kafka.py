"""The timestamp reset policy end to end on records with real timestamps, on Apache Kafka (the embedded broker answers
offset 0 to every time, so only the planning logic was tested there): a group's first batch starts each partition at
its first record at or after the time (the end when none is that recent), pins that position even where it read
nothing, and the next batch reads on from there; the sink holds exactly the records from that time on."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.spec import PipelineSpec
from harness.dagster_group import VALUE_SCHEMA
from tests.support.kafka_records import produce_events, require_kafka, sink_events

MINUTE_MS = 60_000


def test_a_first_batch_starts_each_partition_at_its_first_record_from_the_time(
    spark, kafka_config, topic_factory, ledger, lake
):
    require_kafka("offsets_for_times")
    topic = topic_factory(3, suffix="fromtime")
    tps = [TopicPartition(topic, p) for p in range(3)]
    t0 = int(time.time() * 1000) - 60 * MINUTE_MS
    # partitions 0 and 1: a record a minute from t0 (1's half a minute later); 2: one every 30 s, all before the time
    steps = {0: MINUTE_MS, 1: MINUTE_MS, 2: MINUTE_MS // 2}
    produced = produce_events(
        kafka_config,
        topic,
        range(60),
        partition=lambda i: i % 3,
        timestamp_ms=lambda i: t0 + (i // 3) * steps[i % 3] + (i % 3 == 1) * MINUTE_MS // 2,
    )
    at = t0 + 12 * MINUTE_MS + 10_000  # between partition 0's records 12 and 13, and 1's 11 and 12
    spec = PipelineSpec(
        sink_path=str(lake),
        value_format="json",
        value_schema=VALUE_SCHEMA,
        reset=datetime.fromtimestamp(at / 1000, UTC),
    )

    first = run_batch(spark, spec, kafka_config, tps, ledger)

    assert [(p.partition, p.start, p.from_offset, p.until_offset) for p in first.partitions] == [
        (0, "timestamp", 13, 20),
        (1, "timestamp", 12, 20),
        (2, "timestamp", 20, 20),  # no record that recent: its end, pinned as the partition's first position
    ]
    assert sink_events(lake) == [e for e in produced if e.timestamp_ms >= at]
    assert ledger.committed_offsets(tps) == {tps[0]: 20, tps[1]: 20, tps[2]: 20}

    later = produce_events(kafka_config, topic, range(60, 66), partition=lambda i: i % 3)  # timestamps: now
    second = run_batch(spark, spec, kafka_config, tps, ledger)

    assert [(p.partition, p.start, p.from_offset, p.until_offset) for p in second.partitions] == [
        (0, "committed", 20, 22),
        (1, "committed", 20, 22),
        (2, "committed", 20, 22),
    ]
    assert sink_events(lake) == sorted([e for e in produced if e.timestamp_ms >= at] + later)
