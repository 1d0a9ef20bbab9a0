"""The quarantine limit through run_batch on the real broker, Spark and SQLite ledger: a batch that quarantines
most of a partition fails before its commit, with nothing committed, published or left staged (Parquet range
directories, both ways the outputs are written, and the Delta Lake / Iceberg tables), and an error naming the
partition, its share and the commonest reasons; relaxed, the same records land. A few bad records never trip it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.sink.quarantine_limit import QuarantineLimitError
from cohort.pipelines.spec import PipelineSpec
from harness.tables import table_offsets
from tests.support.orders import ORDER_SCHEMA, Order, order


def files_under(root: Path) -> list[str]:
    """Every file under a root (published or staged), relative to it."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) if root.exists() else []


def identity(frame: Any) -> Any:
    """A transform that changes nothing: the outputs are then written by Spark, not by the reading tasks."""
    return frame


@pytest.mark.parametrize("writer", ["tasks", "spark"])
def test_a_partition_whose_every_record_is_quarantined_fails_the_batch_before_its_commit(
    writer, spark, kafka_config, topic_factory, produce_records, ledger, lake
) -> None:
    topic = topic_factory(2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    produce_records(topic, [(0, None, order(i)) for i in range(20)] + [(1, None, b"not json") for _ in range(20)])
    transform = identity if writer == "spark" else None
    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA, model=Order, transform=transform)

    with pytest.raises(QuarantineLimitError) as tripped:
        run_batch(spark, spec, kafka_config, tps, ledger)

    message = str(tripped.value)
    assert "\n" not in message
    assert message.startswith(
        f"quarantine limit exceeded, nothing was committed: quarantined {topic}-1 20 of 20 records (100%); "
        "past quarantine_limit=0.5"
    ), message
    assert "Commonest reasons: 20 x 'value is not valid JSON" in message
    assert f"{topic}-0" not in message
    assert ledger.committed_offsets(tps) == dict.fromkeys(tps)
    assert files_under(lake) == []  # nothing published, nothing left in staging

    relaxed = PipelineSpec(
        sink_path=str(lake), value_schema=ORDER_SCHEMA, model=Order, transform=transform, quarantine_limit=None
    )
    result = run_batch(spark, relaxed, kafka_config, tps, ledger)
    assert (result.records, result.quarantined) == (20, 20)
    assert ledger.committed_offsets(tps) == {tps[0]: 20, tps[1]: 20}


def test_the_commonest_reasons_are_counted_over_the_partitions_past_the_limit(
    spark, kafka_config, topic_factory, produce_records, ledger, lake
) -> None:
    topic = topic_factory(3)
    tps = [TopicPartition(topic, p) for p in range(3)]
    negative = json.dumps({"id": -1, "user": "u", "amount": 1.0}).encode()
    records = [(0, None, order(i)) for i in range(30)]
    records += [(1, None, b"{" if i % 3 else negative) for i in range(24)]  # 16 not JSON, 8 refused by the model
    records += [(2, None, b"[1]" if i < 12 else order(i)) for i in range(20)]  # 12 of 20: 60%
    produce_records(topic, records)
    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA, model=Order)

    with pytest.raises(QuarantineLimitError) as tripped:
        run_batch(spark, spec, kafka_config, tps, ledger)

    message = str(tripped.value)
    assert f"quarantined {topic}-1 24 of 24 records (100%), {topic}-2 12 of 20 records (60%);" in message
    assert "Commonest reasons: 16 x 'value is not valid JSON" in message
    assert "; 12 x 'value is not a JSON object" in message and "; 8 x 'id: greater_than(0)'" in message
    assert ledger.committed_offsets(tps) == dict.fromkeys(tps) and files_under(lake) == []


def test_a_few_bad_records_and_small_batches_never_trip_the_default(
    spark, kafka_config, topic_factory, produce_records, ledger, lake
) -> None:
    topic = topic_factory(3)
    tps = [TopicPartition(topic, p) for p in range(3)]
    # partition 0: 9 of 12 quarantined (fewer than the 10 the limit starts at); partition 1: 10 of 20 (not past
    # half); partition 2: none of 20. The batch: 19 of 52.
    produce_records(topic, [(0, None, b"x" if i < 9 else order(i)) for i in range(12)])
    produce_records(topic, [(1, None, b"x" if i < 10 else order(i)) for i in range(20)])
    produce_records(topic, [(2, None, order(i)) for i in range(20)])
    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA)

    result = run_batch(spark, spec, kafka_config, tps, ledger)

    assert (result.records, result.quarantined) == (33, 19)
    assert ledger.committed_offsets(tps) == {tps[0]: 12, tps[1]: 20, tps[2]: 20}


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_a_table_sink_past_the_limit_commits_nothing_to_either_table(
    table_format, spark, kafka_config, topic_factory, produce_records, ledger, lake
) -> None:
    topic = topic_factory(1)
    tp = TopicPartition(topic, 0)
    spec = PipelineSpec(sink_path=str(lake / "orders"), table_format=table_format, value_schema=ORDER_SCHEMA)
    produce_records(topic, [(0, None, order(i) if i != 3 else b"x") for i in range(10)])
    run_batch(spark, spec, kafka_config, [tp], ledger)  # the tables exist, each with one commit
    produce_records(topic, [(0, None, b'{"id": "seven"}') for _ in range(15)])
    before = {root: files_under(Path(root)) for root in (spec.sink_path, spec.quarantine_root)}

    with pytest.raises(QuarantineLimitError, match=rf"quarantined {topic}-0 15 of 15 records \(100%\)"):
        run_batch(spark, spec, kafka_config, [tp], ledger)

    assert ledger.committed_offsets([tp]) == {tp: 10}
    assert table_offsets(spec) == [(0, i) for i in range(10) if i != 3]
    assert table_offsets(spec, quarantine=True) == [(0, 3)]
    # no data file, log entry or metadata was added to either table, nothing is left staged
    assert {root: files_under(Path(root)) for root in before} == before

    relaxed = PipelineSpec(
        sink_path=str(lake / "orders"), table_format=table_format, value_schema=ORDER_SCHEMA, quarantine_limit=1.0
    )
    assert run_batch(spark, relaxed, kafka_config, [tp], ledger).quarantined == 15
    assert table_offsets(spec, quarantine=True) == [(0, 3), *((0, i) for i in range(10, 25))]
