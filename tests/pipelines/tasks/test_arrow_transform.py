"""Arrow transforms (`PipelineSpec.arrow_transform`), run by the reading tasks (real broker, real Spark, the SQLite
ledger): derived columns land; filtering and flattening are counted per range and replay exactly; `cohort audit`
finds the sink whole; a transform that moves rows to another partition, changes its schema between batches or
meets a sink only Spark writes is refused before anything commits."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.executor_errors import ReadingTaskError
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.sink.layout import SinkError
from cohort.pipelines.spec import PipelineSpec
from harness.tables import table_offsets
from tests.pipelines.batch.test_transform_shapes import MALFORMED, _offsets, _values
from tests.support.audit_command import cohort_audit
from tests.support.orders import ORDER_SCHEMA, Order, order, range_dirs
from tests.support.table_batches import spec_for


def _sink(root: Path) -> pa.Table:
    return ds.dataset(str(root), format="parquet", partitioning="hive").to_table()


def cents_and_lower(rows: pa.Table) -> pa.Table:
    """The light transform: a derived amount and a lower-cased string."""
    cents = pc.cast(pc.multiply(rows.column("amount"), 100), pa.int64())
    return rows.append_column("amount_cents", cents).append_column("user_uc", pc.utf8_upper(rows.column("user")))


def one_row_per_item(rows: pa.Table) -> pa.Table:
    """Record of id n becomes n % 3 rows (none for multiples of 3), each with its item number."""
    counts = pc.remainder(rows.column("id"), 3).to_pylist()
    index = [i for i, n in enumerate(counts) for _ in range(n)]
    items = [k + 1 for n in counts for k in range(n)]
    return rows.take(pa.array(index, pa.int64())).append_column("item", pa.array(items, pa.int64()))


def test_an_arrow_transform_lands_its_columns_and_audits_whole(
    spark, kafka_config, topic, produce_records, coordinator, ledger, group, sqlite_url, lake
):
    produce_records(topic, [(0, None, v) for v in _values()], one_per_batch=False)
    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA, model=Order, arrow_transform=cents_and_lower)
    (part,) = run_batch(spark, spec, kafka_config, [TopicPartition(topic, 0)], ledger).partitions
    assert (part.records, part.quarantined, part.filtered, part.expanded) == (18, 2, 0, 0)
    table = _sink(lake).sort_by([("id", "ascending")])
    assert table.column("amount_cents").to_pylist()[:3] == [0, 100, 200]
    assert table.column("user_uc").to_pylist()[:3] == ["U0", "U1", "U2"]
    code, report, _ = cohort_audit(group, "--store-url", sqlite_url, "--sink", str(lake))
    assert (code, report["ok"]) == (0, True), report


def test_an_arrow_transform_that_flattens_and_filters_is_counted_and_replays_exactly(
    spark, kafka_config, topic, produce_records, coordinator, ledger, group, sqlite_url, lake
):
    produce_records(topic, [(0, None, v) for v in _values()], one_per_batch=False)
    tp = TopicPartition(topic, 0)
    spec = PipelineSpec(
        sink_path=str(lake),
        value_schema=ORDER_SCHEMA,
        arrow_transform=one_row_per_item,
        max_records_per_partition=10,
        consume_batch_size=3,  # several batches per span: the transform runs per batch
    )
    run_batch(spark, spec, kafka_config, [tp], ledger, run_id="first")
    run_batch(spark, spec, kafka_config, [tp], ledger, run_id="second")
    rows = {i: (i + 1) % 3 for i in range(20) if i not in MALFORMED and (i + 1) % 3}
    assert _offsets(lake) == Counter(rows)
    first, second = coordinator.ledger_history(group, topic, 0)
    for entry, (lo, hi) in ((first, (0, 10)), (second, (10, 20))):
        kept = {i: n for i, n in rows.items() if lo <= i < hi}
        assert entry.records == sum(kept.values()) and entry.expanded == sum(n - 1 for n in kept.values())
        assert entry.consumed == hi - lo

    coordinator.reset_offsets(group, {tp: 5}, actor="test", reason="replay")
    (again,) = run_batch(spark, spec, kafka_config, [tp], ledger, run_id="replay").partitions
    assert (again.from_offset, again.until_offset, again.replay_changed) == (5, 15, False)
    assert _offsets(lake) == Counter(rows)
    code, report, _ = cohort_audit(group, "--store-url", sqlite_url, "--sink", str(lake))
    assert (code, report["ok"]) == (0, True), report


def test_an_arrow_transform_into_a_delta_table(spark, kafka_config, topic, produce_records, ledger, lake):
    produce_records(topic, [(0, None, v) for v in _values()], one_per_batch=False)
    spec = spec_for(lake, "delta", arrow_transform=one_row_per_item)
    (part,) = run_batch(spark, spec, kafka_config, [TopicPartition(topic, 0)], ledger).partitions
    rows = {i: (i + 1) % 3 for i in range(20) if i not in MALFORMED and (i + 1) % 3}
    assert (part.records, part.filtered, part.consumed) == (sum(rows.values()), 18 - len(rows), 20)
    assert Counter(o for _p, o in table_offsets(spec)) == Counter(rows)


def _moved(rows: pa.Table) -> pa.Table:
    kafka = rows.column("kafka").combine_chunks()
    one = pa.scalar(1, pa.int32())
    names = [field.name for field in kafka.type]
    moved = pa.StructArray.from_arrays(
        [pc.add(kafka.field(f), one) if f == "partition" else kafka.field(f) for f in names], fields=list(kafka.type)
    )
    return rows.set_column(rows.schema.get_field_index("kafka"), "kafka", moved)


def _unsteady(rows: pa.Table) -> pa.Table:
    """A column whose type follows the data: int for the first batch of a span, string after."""
    first = rows.column("kafka").combine_chunks().field("offset")[0].as_py() == 0
    return rows.append_column("x", pa.array([1] * rows.num_rows) if first else pa.array(["a"] * rows.num_rows))


@pytest.mark.parametrize(
    ("transform", "reason"),
    [
        (_moved, r"rows of .*-0 with another kafka\.topic or kafka\.partition"),
        (lambda rows: rows.drop_columns(["kafka"]), r"must keep the 'kafka' struct"),
        (lambda rows: rows.to_pylist(), r"returned list, not a pyarrow Table"),
        (_unsteady, r"changed schema within one file"),
    ],
    ids=["moves-partition", "drops-kafka", "not-arrow", "unsteady-schema"],
)
def test_an_arrow_transform_breaking_the_contract_is_refused_before_anything_commits(
    transform, reason, spark, kafka_config, topic, produce_records, ledger, lake
):
    produce_records(topic, [(0, None, order(i)) for i in range(10)], one_per_batch=False)
    tp = TopicPartition(topic, 0)
    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA, arrow_transform=transform, consume_batch_size=4)
    with pytest.raises(ReadingTaskError, match=reason):
        run_batch(spark, spec, kafka_config, [tp], ledger)
    assert ledger.committed_offsets([tp]) == {tp: None}
    assert range_dirs(lake) == []


def test_an_arrow_transform_with_a_sink_only_spark_writes_is_refused_with_the_reason(
    spark, kafka_config, topic, produce_records, ledger, lake
):
    produce_records(topic, [(0, None, order(i)) for i in range(3)])
    spec = PipelineSpec(
        sink_path=str(lake), value_schema=ORDER_SCHEMA, arrow_transform=cents_and_lower, compression="brotli"
    )
    with pytest.raises(SinkError, match="arrow_transform runs in the reading tasks"):
        run_batch(spark, spec, kafka_config, [TopicPartition(topic, 0)], ledger)


def test_a_spec_takes_one_transform_kind():
    with pytest.raises(ValueError, match="not both"):
        PipelineSpec(sink_path="/tmp/x", value_schema=ORDER_SCHEMA, transform=lambda f: f, arrow_transform=lambda r: r)
    with pytest.raises(ValueError, match="arrow_transform must be a callable"):
        PipelineSpec(sink_path="/tmp/x", value_schema=ORDER_SCHEMA, arrow_transform="cents")  # type: ignore[arg-type]
