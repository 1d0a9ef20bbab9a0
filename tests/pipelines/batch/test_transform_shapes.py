"""Transforms users write (real broker, real Spark, the SQLite ledger): one that filters records out and one
that flattens a record into several rows. Both commit with their counts in the ledger (consumed = rows - added
rows + quarantined + filtered), a replay of either replaces exactly the replayed offsets, and `cohort audit`
(the command) finds the sink whole; a transform that writes rows for offsets it did not read is refused."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from pyspark.sql import functions as F

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.results import CountMismatchError
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.spec import PipelineSpec
from harness.tables import table_offsets
from tests.support.audit_command import cohort_audit
from tests.support.orders import ORDER_SCHEMA, Order, order, range_dirs
from tests.support.table_batches import spec_for

MALFORMED = {4, 13}


def _values() -> list[bytes]:
    return [b"{not json" if i in MALFORMED else order(i) for i in range(20)]


def _offsets(root: Path) -> Counter[int]:
    """How many sink rows each offset has, as a pyarrow reader of the sink sees them."""
    table = ds.dataset(str(root), format="parquet", partitioning="hive").to_table(columns=["kafka"])
    return Counter(k["offset"] for k in table.column("kafka").to_pylist())


def _no_heartbeats(frame):  # type: ignore[no-untyped-def]
    """Drop every record whose id is a multiple of 3 (what an ingestion job does to test events)."""
    return frame.filter(F.col("id") % 3 != 0)


def _one_row_per_item(frame):  # type: ignore[no-untyped-def]
    """Flatten: a record of id n becomes n % 3 rows (none for multiples of 3), one per item."""
    return frame.withColumn("item", F.explode(F.sequence(F.lit(1), F.col("id") % 3))).filter(F.col("id") % 3 != 0)


def test_a_filtering_transform_commits_what_it_kept_and_counts_what_it_dropped(
    spark, kafka_config, topic, produce_records, coordinator, ledger, group, sqlite_url, lake
):
    produce_records(topic, [(0, None, v) for v in _values()], one_per_batch=False)
    tp = TopicPartition(topic, 0)
    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA, model=Order, transform=_no_heartbeats)
    result = run_batch(spark, spec, kafka_config, [tp], ledger, run_id="filtering")

    kept = [i for i in range(20) if i not in MALFORMED and (i + 1) % 3 != 0]  # record i has id i + 1
    dropped = [i for i in range(20) if i not in MALFORMED and (i + 1) % 3 == 0]
    (part,) = result.partitions
    assert (part.records, part.quarantined, part.filtered, part.expanded) == (len(kept), 2, len(dropped), 0)
    assert part.consumed == 20
    [entry] = coordinator.ledger_history(group, topic, 0)
    assert (entry.records, entry.quarantined, entry.filtered, entry.consumed) == (len(kept), 2, len(dropped), 20)
    assert _offsets(lake) == Counter(kept)
    code, report, _ = cohort_audit(group, "--store-url", sqlite_url, "--sink", str(lake))
    assert (code, report["ok"]) == (0, True), report


def test_a_flattening_transform_lands_several_rows_per_record_and_its_replay_replaces_them_exactly(
    spark, kafka_config, topic, produce_records, coordinator, ledger, group, sqlite_url, lake
):
    produce_records(topic, [(0, None, v) for v in _values()], one_per_batch=False)
    tp = TopicPartition(topic, 0)
    spec = PipelineSpec(
        sink_path=str(lake), value_schema=ORDER_SCHEMA, transform=_one_row_per_item, max_records_per_partition=10
    )
    run_batch(spark, spec, kafka_config, [tp], ledger, run_id="first")  # [0, 10)
    run_batch(spark, spec, kafka_config, [tp], ledger, run_id="second")  # [10, 20)
    rows = {i: (i + 1) % 3 for i in range(20) if i not in MALFORMED and (i + 1) % 3}  # record i has id i + 1
    assert _offsets(lake) == Counter(rows)
    first, second = coordinator.ledger_history(group, topic, 0)
    for entry, (lo, hi) in ((first, (0, 10)), (second, (10, 20))):
        window = {i: n for i, n in rows.items() if lo <= i < hi}
        valid = [i for i in range(lo, hi) if i not in MALFORMED]
        assert (entry.records, entry.expanded) == (sum(window.values()), sum(window.values()) - len(window))
        assert (entry.filtered, entry.quarantined, entry.consumed) == (len(valid) - len(window), 1, hi - lo)

    coordinator.reset_offsets(group, {tp: 6}, actor="test", reason="replay a flattened range")
    replay = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA, transform=_one_row_per_item)
    (part,) = run_batch(spark, replay, kafka_config, [tp], ledger, run_id="replay").partitions
    assert (part.from_offset, part.until_offset, part.replay_changed) == (6, 20, False)
    assert _offsets(lake) == Counter(rows)  # every offset's rows once: the replayed ones replaced, not added
    assert range_dirs(lake)[-1].endswith(f"{topic}-0-6-20.parquet")
    code, report, _ = cohort_audit(group, "--store-url", sqlite_url, "--sink", str(lake))
    assert (code, report["ok"]) == (0, True), report


def test_a_transform_writing_rows_for_offsets_it_did_not_read_is_refused(
    spark, kafka_config, topic, produce_records, ledger, lake
):
    produce_records(topic, [(0, None, order(i)) for i in range(10)])
    tp = TopicPartition(topic, 0)

    def shifted(frame):  # type: ignore[no-untyped-def]
        return frame.withColumn("kafka", F.col("kafka").withField("offset", F.col("kafka.offset") + 100))

    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA, transform=shifted)
    with pytest.raises(CountMismatchError, match=r"offsets \[100, 109\] outside the range read"):
        run_batch(spark, spec, kafka_config, [tp], ledger)
    assert ledger.committed_offsets([tp]) == {tp: None}
    assert range_dirs(lake) == [] and not any((lake / "_staging").glob("*/topic=*"))


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_a_flattening_filtering_transform_into_a_table_and_its_replay(
    table_format, spark, kafka_config, topic, produce_records, coordinator, ledger, group, sqlite_url, lake
):
    produce_records(topic, [(0, None, v) for v in _values()], one_per_batch=False)
    tp = TopicPartition(topic, 0)
    spec = spec_for(lake, table_format, transform=_one_row_per_item)
    (part,) = run_batch(spark, spec, kafka_config, [tp], ledger, run_id="first").partitions
    rows = {i: (i + 1) % 3 for i in range(20) if i not in MALFORMED and (i + 1) % 3}
    assert (part.records, part.expanded, part.quarantined) == (sum(rows.values()), sum(rows.values()) - len(rows), 2)
    assert (part.filtered, part.consumed) == (18 - len(rows), 20)
    assert Counter(o for _p, o in table_offsets(spec)) == Counter(rows)

    coordinator.reset_offsets(group, {tp: 5}, actor="test", reason="replay")
    (again,) = run_batch(spark, spec, kafka_config, [tp], ledger, run_id="replay").partitions
    assert (again.from_offset, again.until_offset, again.replay_changed) == (5, 20, False)
    assert Counter(o for _p, o in table_offsets(spec)) == Counter(rows)
    [entry] = [e for e in coordinator.ledger_history(group, topic, 0) if e.run_id == "replay"]
    assert entry.consumed == 15 and entry.expanded == sum(n - 1 for i, n in rows.items() if i >= 5)
    code, report, _ = cohort_audit(group, "--store-url", sqlite_url, "--sink", spec.sink_path)
    assert (code, report["ok"]) == (0, True), report


def test_a_shuffling_transform_lands_every_record_once_in_its_own_partition_directory(
    spark, kafka_config, topic_factory, produce_records, coordinator, ledger, group, sqlite_url, lake
):
    """A transform that repartitions hands each writing task rows of several partitions, interleaved: every
    record still lands once, under its own partition's directory."""
    topic = topic_factory(3)
    produce_records(topic, [(i % 3, None, order(i)) for i in range(60)], one_per_batch=False)
    partitions = [TopicPartition(topic, p) for p in range(3)]

    def shuffled(frame):  # type: ignore[no-untyped-def]
        return frame.repartition(2, F.col("id"))

    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA, model=Order, transform=shuffled)
    result = run_batch(spark, spec, kafka_config, partitions, ledger, run_id="shuffled")
    assert sorted((p.partition, p.records) for p in result.partitions) == [(0, 20), (1, 20), (2, 20)]
    table = ds.dataset(str(lake), format="parquet", partitioning="hive").to_table(columns=["kafka", "partition"])
    landed = Counter((k["partition"], k["offset"], d) for k, d in zip(*table.to_pydict().values(), strict=True))
    assert sorted(landed) == sorted((p, o, p) for p in range(3) for o in range(20))
    assert set(landed.values()) == {1}
    code, report, _ = cohort_audit(group, "--store-url", sqlite_url, "--sink", str(lake))
    assert (code, report["ok"]) == (0, True), report
