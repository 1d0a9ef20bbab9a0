"""Where a partition starts, end to end: a first batch that finds nothing pins the reset policy's position."""

from __future__ import annotations

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.spec import PipelineSpec
from tests.support.orders import ORDER_SCHEMA, order, range_dirs


def test_a_latest_start_that_finds_nothing_reads_the_records_produced_after_it(
    spark, kafka_config, topic, produce_records, coordinator, ledger, group, lake, sink_rows
):
    produce_records(topic, [(0, None, order(i)) for i in range(5)])
    tp = TopicPartition(topic, 0)
    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA, reset="latest")

    first = run_batch(spark, spec, kafka_config, [tp], ledger, run_id="first")
    (part,) = first.partitions
    assert (part.start, part.from_offset, part.until_offset, part.records) == ("latest", 5, 5, 0)
    assert ledger.committed_offsets([tp]) == {tp: 5} and range_dirs(lake) == []
    assert [(e.from_offset, e.until_offset, e.run_id) for e in coordinator.ledger_history(group, topic, 0)] == [
        (5, 5, "first")
    ]

    produce_records(topic, [(0, None, order(i)) for i in range(5, 8)])
    second = run_batch(spark, spec, kafka_config, [tp], ledger, run_id="second")
    (part,) = second.partitions
    assert (part.start, part.from_offset, part.until_offset, part.records) == ("committed", 5, 8, 3)
    assert [r.kafka.offset for r in sink_rows(lake)] == [5, 6, 7]
    assert [(e.from_offset, e.until_offset) for e in coordinator.ledger_history(group, topic, 0)] == [(5, 5), (5, 8)]
