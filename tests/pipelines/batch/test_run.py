"""run_batch end to end on the real broker, real Spark and the real coordinator (SQLite store)."""

from __future__ import annotations

import json

import pytest

from cohort.assignment.errors import UnknownMemberIdError
from cohort.assignment.member import GroupMember
from cohort.assignment.settings import MemberSettings
from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.planning.plan import OffsetOutOfRangeError
from cohort.pipelines.spec import PipelineSpec
from tests.support.orders import ORDER_SCHEMA, Order, order, range_dirs


def spec_for(lake, **kwargs) -> PipelineSpec:  # type: ignore[no-untyped-def]
    return PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA, model=Order, **kwargs)


def test_exact_records_across_tasks_and_consume_batches(
    spark, kafka_config, topic_factory, produce_records, ledger, lake, sink_rows
):
    topic = topic_factory(3)
    records = [(i % 3, f"k{i}".encode(), order(i)) for i in range(300)]
    produce_records(topic, records, one_per_batch=False)
    tps = [TopicPartition(topic, p) for p in range(3)]
    spec = spec_for(lake, max_records_per_task=30, consume_batch_size=7, min_task_records=1)

    result = run_batch(spark, spec, kafka_config, tps, ledger)

    assert [(p.from_offset, p.until_offset, p.records, p.quarantined) for p in result.partitions] == [
        (0, 100, 100, 0)
    ] * 3
    assert result.records == 300 and result.quarantined == 0
    assert all(p.bytes > 0 and p.start == "earliest" for p in result.partitions)
    assert ledger.committed_offsets(tps) == dict.fromkeys(tps, 100)
    by_partition = {p: [(k, v) for q, k, v in records if q == p] for p in range(3)}
    expected = [(p, offset, k, v) for p in range(3) for offset, (k, v) in enumerate(by_partition[p])]
    rows = sink_rows(lake)
    assert [(r.kafka.partition, r.kafka.offset) for r in rows] == [(p, o) for p, o, _, _ in expected]
    for row, (_, _, key, value) in zip(rows, expected, strict=True):
        assert (row.kafka.topic, row.kafka.key) == (topic, key)
        assert (row.id, row.user, row.amount) == tuple(json.loads(value).values())
    assert range_dirs(lake) == [f"topic={topic}/partition={p}/{topic}-{p}-0-100.parquet" for p in range(3)]

    again = run_batch(spark, spec, kafka_config, tps, ledger)  # nothing new: no task, no commit
    assert again.records == 0 and again.committed == ()
    assert len(sink_rows(lake)) == 300


def test_caps_continue_from_the_committed_offset(spark, kafka_config, topic, produce_records, ledger, lake, sink_rows):
    produce_records(topic, [(0, None, order(i)) for i in range(50)], one_per_batch=False)
    spec = spec_for(lake, max_records_per_partition=20)
    tp = TopicPartition(topic, 0)
    ranges = [
        (p.from_offset, p.until_offset)
        for _ in range(3)
        for p in run_batch(spark, spec, kafka_config, [tp], ledger).partitions
    ]
    assert ranges == [(0, 20), (20, 40), (40, 50)]
    assert [r.kafka.offset for r in sink_rows(lake)] == list(range(50))
    assert len(range_dirs(lake)) == 3


def test_empty_partitions_make_no_task_and_no_files(spark, kafka_config, topic_factory, produce_records, ledger, lake):
    topic = topic_factory(2)
    produce_records(topic, [(1, None, order(i)) for i in range(5)])
    result = run_batch(
        spark, spec_for(lake), kafka_config, [TopicPartition(topic, 0), TopicPartition(topic, 1)], ledger
    )
    empty, full = result.partitions
    assert (empty.from_offset, empty.until_offset, empty.records, empty.seconds) == (0, 0, 0, 0.0)
    assert (full.records, full.until_offset) == (5, 5)
    assert range_dirs(lake) == [f"topic={topic}/partition=1/{topic}-1-0-5.parquet"]


def test_rerun_of_the_same_range_leaves_exactly_one_copy(
    spark, kafka_config, topic, produce_records, coordinator, lake, sink_rows
):
    """A rerun whose earlier commit never happened (here: another group's ledger) writes the same range."""
    produce_records(topic, [(0, None, order(i)) for i in range(40)], one_per_batch=False)
    tp = TopicPartition(topic, 0)
    first = run_batch(
        spark, spec_for(lake, max_records_per_partition=25), kafka_config, [tp], coordinator.standalone_ledger("first")
    )
    assert range_dirs(lake) == [f"topic={topic}/partition=0/{topic}-0-0-25.parquet"]
    for name in ("second", "third"):  # the same range again, then an overlapping longer one
        cap = 25 if name == "second" else None
        run_batch(
            spark,
            spec_for(lake, max_records_per_partition=cap),
            kafka_config,
            [tp],
            coordinator.standalone_ledger(name),
        )
    assert first.records == 25
    assert range_dirs(lake) == [f"topic={topic}/partition=0/{topic}-0-0-40.parquet"]
    assert [r.kafka.offset for r in sink_rows(lake)] == list(range(40))


def test_out_of_range_committed_offset_under_both_policies(spark, kafka_config, topic, produce_records, ledger, lake):
    """Tansu cannot delete records (no DeleteRecords), so the ledger is made to run ahead of the log: the
    other out-of-range case. The retention case (committed < log start) is covered in test_plan.py."""
    from cohort.common.types import OffsetRange

    produce_records(topic, [(0, None, order(i)) for i in range(5)])
    tp = TopicPartition(topic, 0)
    ledger.commit([OffsetRange(topic, 0, 0, 50, records=50)])
    with pytest.raises(OffsetOutOfRangeError, match=f"{topic}-0: committed offset 50 is beyond the end offset 5"):
        run_batch(spark, spec_for(lake), kafka_config, [tp], ledger)
    result = run_batch(spark, spec_for(lake, fail_on_data_loss=False), kafka_config, [tp], ledger)
    (partition,) = result.partitions
    assert (partition.from_offset, partition.until_offset, partition.records) == (50, 50, 0)
    assert "beyond the end offset" in (partition.warning or "")
    assert result.committed == () and ledger.committed_offsets([tp]) == {tp: 50}
    assert not lake.exists() or range_dirs(lake) == []


def test_reset_latest_reads_only_new_records(spark, kafka_config, topic, produce_records, ledger, lake):
    produce_records(topic, [(0, None, order(i)) for i in range(5)])
    tp = TopicPartition(topic, 0)
    result = run_batch(spark, spec_for(lake, reset="latest"), kafka_config, [tp], ledger)
    (partition,) = result.partitions
    assert (partition.start, partition.from_offset, partition.until_offset, partition.records) == ("latest", 5, 5, 0)
    assert range_dirs(lake) == []


def test_unsafe_topic_names_are_rejected_before_any_io(spark, kafka_config, ledger, lake):
    from cohort.common.names import InvalidNameError

    with pytest.raises(InvalidNameError, match="illegal characters"):
        run_batch(spark, spec_for(lake), kafka_config, [TopicPartition("../../etc", 0)], ledger)
    assert not lake.exists()


def test_refused_commit_withdraws_the_published_output(
    spark, kafka_config, topic, produce_records, coordinator, group, lake
):
    """A zombie's commit (here: a standalone commit while the group has a live member) is refused and its
    output is not left in the sink."""
    produce_records(topic, [(0, None, order(i)) for i in range(10)])
    tp = TopicPartition(topic, 0)
    member = GroupMember(
        coordinator, group, MemberSettings(topics=(topic,), session_timeout=30.0), topic_metadata=lambda: {topic: 1}
    )
    with member:
        member.ensure_active()
        with pytest.raises(UnknownMemberIdError):
            run_batch(spark, spec_for(lake), kafka_config, [tp], coordinator.standalone_ledger(group))
        assert range_dirs(lake) == []
        assert coordinator.fetch_offsets(group, [tp]) == {tp: None}
        result = run_batch(spark, spec_for(lake), kafka_config, member.assignment, member)
        assert result.records == 10 and member.committed_offsets([tp]) == {tp: 10}
        assert len(range_dirs(lake)) == 1


def test_tasks_and_spark_write_the_same_sink(
    spark, kafka_config, topic_factory, produce_records, coordinator, tmp_path
):
    """A plain path: the reading tasks write Parquet with pyarrow; a Hadoop `file:` URI (which pyarrow does
    not take) makes Spark write it, through the JVM's FileSystem: both sinks read back identical."""
    topic = topic_factory(2)
    values = [order(i) if i % 7 else b'{"id": "x"}' for i in range(60)]
    produce_records(topic, [(i % 2, f"k{i}".encode(), v) for i, v in enumerate(values)], one_per_batch=False)
    tps = [TopicPartition(topic, p) for p in range(2)]
    outputs = {}
    for name, root in (("arrow", str(tmp_path / "a")), ("spark", f"file:{tmp_path / 's'}")):
        result = run_batch(spark, spec_for(root), kafka_config, tps, coordinator.standalone_ledger(f"g-{name}"))
        assert "read_and_write" in result.stage_seconds if name == "arrow" else "write" in result.stage_seconds
        assert (result.records, result.quarantined) == (51, 9)
        sink = spark.read.parquet(root).drop("topic", "partition")
        quarantine = spark.read.parquet(f"{root}/_quarantine").drop("topic", "partition")
        outputs[name] = (
            sorted(map(tuple, sink.collect())),
            sorted(map(tuple, quarantine.collect())),
            sink.schema.simpleString(),
            quarantine.schema.simpleString(),
        )
    assert outputs["arrow"] == outputs["spark"]
    assert outputs["arrow"][2].startswith(
        "struct<kafka:struct<topic:string,partition:int,offset:bigint,timestamp:timestamp"
    )
