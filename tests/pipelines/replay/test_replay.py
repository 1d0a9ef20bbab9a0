"""A replay end to end (real broker, real Spark): records landed by several batches, the group's offsets reset
backward through the ledger, and the next batch reads them again. The sink and the quarantine then hold each
offset once, the replayed ones from the replay; a reader polling the sink throughout never sees an offset
twice or misses one; the ledger keeps the original ranges, the reset and the replayed range."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow.dataset as ds
import pyspark.sql.types as T
import pytest

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.replay.check import ReplayChangedError
from cohort.pipelines.spec import PipelineSpec
from tests.support.orders import ORDER_SCHEMA, order


def _offsets(root: Path, partition: int) -> list[int] | None:
    """The offsets a pyarrow reader of the sink sees for one partition; None when the read raced a swap (a file
    listed before it was gone: a reader retries)."""
    try:
        table = ds.dataset(str(root), format="parquet", partitioning="hive").to_table(columns=["kafka"])
    except (FileNotFoundError, OSError):
        return None
    return sorted(k["offset"] for k in table.column("kafka").to_pylist() if k["partition"] == partition)


def test_a_reset_backward_replays_the_records_into_the_sink_once(
    spark, kafka_config, topic, produce_records, coordinator, ledger, group, lake
):
    tp = TopicPartition(topic, 0)
    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA, max_records_per_partition=40)
    values = [order(i) for i in range(100)]
    values[55] = b"{not json"  # one record for the quarantine, inside the range replayed below
    produce_records(topic, [(0, None, v) for v in values])
    for run in ("first", "second", "third"):  # [0, 40), [40, 80), [80, 100)
        run_batch(spark, spec, kafka_config, [tp], ledger, run_id=run)
    assert ledger.committed_offsets([tp]) == {tp: 100}

    coordinator.reset_offsets(group, {tp: 30}, actor="test", reason="replay a bad transform's output")
    looks: list[list[int] | None] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            looks.append(_offsets(lake, 0))

    reader = threading.Thread(target=poll, daemon=True)
    reader.start()
    try:
        replay_spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA)  # one batch reads [30, 100)
        result = run_batch(spark, replay_spec, kafka_config, [tp], ledger, run_id="replay")
    finally:
        stop.set()
        reader.join()

    (part,) = result.partitions
    assert (part.from_offset, part.until_offset, part.records, part.quarantined) == (30, 100, 69, 1)
    expected = [o for o in range(100) if o != 55]
    seen = [look for look in looks if look is not None]
    assert len(seen) >= 3, f"the reader got {len(seen)} reads in"
    assert all(look == expected for look in seen), "a reader saw an offset twice or missed one"
    assert _offsets(lake, 0) == expected
    quarantined = ds.dataset(spec.quarantine_root, format="parquet", partitioning="hive").to_table()
    assert [k["offset"] for k in quarantined.column("kafka").to_pylist()] == [55]

    dirs = sorted(p.name for p in (lake / f"topic={topic}" / "partition=0").iterdir())
    assert dirs == [f"{topic}-0-0-30.parquet", f"{topic}-0-30-100.parquet"]
    history = [(e.kind, e.from_offset, e.until_offset, e.run_id) for e in coordinator.ledger_history(group, topic, 0)]
    assert history == [
        ("commit", 0, 40, "first"),
        ("commit", 40, 80, "second"),
        ("commit", 80, 100, "third"),
        ("reset", 100, 30, None),
        ("commit", 30, 100, "replay"),
    ]


def _history(coordinator, group, topic):
    return [(e.kind, e.from_offset, e.until_offset, e.note) for e in coordinator.ledger_history(group, topic, 0)]


def test_the_replay_guard_tells_an_unchanged_replay_from_a_changed_one_and_strict_refuses_it(
    spark, kafka_config, topic, produce_records, coordinator, ledger, group, lake
):
    tp = TopicPartition(topic, 0)
    produce_records(topic, [(0, None, order(i)) for i in range(20)])
    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA)
    first = run_batch(spark, spec, kafka_config, [tp], ledger, run_id="first")
    (original,) = first.partitions
    assert original.content_hash is not None and len(original.content_hash) == 64
    assert original.replay_changed is None  # not a replay

    coordinator.reset_offsets(group, {tp: 5}, actor="test", reason="same code")
    same = run_batch(spark, spec, kafka_config, [tp], ledger, run_id="same")
    (part,) = same.partitions
    assert part.replay_changed is False
    assert _history(coordinator, group, topic)[-1] == ("commit", 5, 20, "replay of [5, 20): output unchanged")
    [entry] = [e for e in coordinator.ledger_history(group, topic, 0) if e.run_id == "same"]
    assert entry.content_hash == part.content_hash

    narrower = T.StructType([f for f in ORDER_SCHEMA.fields if f.name != "user"])  # the schema changed
    coordinator.reset_offsets(group, {tp: 10}, actor="test", reason="new schema")
    strict = PipelineSpec(sink_path=str(lake), value_schema=narrower, strict_replay=True)
    before = sorted(p.name for p in (lake / f"topic={topic}" / "partition=0").iterdir())
    with pytest.raises(ReplayChangedError, match=rf"{topic}-0 \[10, 20\).*strict_replay refuses it"):
        run_batch(spark, strict, kafka_config, [tp], ledger, run_id="strict")
    assert ledger.committed_offsets([tp]) == {tp: 10}  # nothing committed
    assert sorted(p.name for p in (lake / f"topic={topic}" / "partition=0").iterdir()) == before
    assert not any((lake / "_staging").glob("*/topic=*"))  # its staging is gone

    allowed = PipelineSpec(sink_path=str(lake), value_schema=narrower)
    changed = run_batch(spark, allowed, kafka_config, [tp], ledger, run_id="changed")
    (part,) = changed.partitions
    assert part.replay_changed is True and part.content_hash != original.content_hash
    assert _history(coordinator, group, topic)[-1] == ("commit", 10, 20, "replay of [10, 20): output changed")
