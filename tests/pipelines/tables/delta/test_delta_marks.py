"""Reading the marks of a Delta table in one pass (cohort.pipelines.tables.delta.txns): the same answers as
delta-rs's own lookups across checkpoints, one read of the log per table version however many partitions and
steps a batch has, and a table re-created at the same root read afresh."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.tables.delta import store as delta_store
from cohort.pipelines.tables.delta.log import generation_key, reach_key
from cohort.pipelines.tables.delta.store import DeltaTableStore
from cohort.pipelines.tables.store import Owner, PartitionMark, TableCommit, TableConflictError, mark_key
from tests.support.orders import order
from tests.support.table_batches import spec_for

SCHEMA = pa.schema([pa.field("id", pa.int64())])
TPS = [TopicPartition("orders", p) for p in range(4)]


def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of the store's one-pass log reads and of delta-rs's per-app-id lookups, from now on."""
    calls = {"log_reads": 0, "lookups": 0}
    read, lookup = delta_store.read_transactions, DeltaTable.transaction_version

    def counted_read(*args, **kwargs):
        calls["log_reads"] += 1
        return read(*args, **kwargs)

    def counted_lookup(*args, **kwargs):
        calls["lookups"] += 1
        return lookup(*args, **kwargs)

    monkeypatch.setattr(delta_store, "read_transactions", counted_read)
    monkeypatch.setattr(DeltaTable, "transaction_version", counted_lookup)
    return calls


def delta_rs_marks(root: str, group: str) -> dict[TopicPartition, PartitionMark]:
    """The marks as delta-rs answers them, app id by app id."""
    table = DeltaTable(root)
    return {
        tp: PartitionMark(
            table.transaction_version(mark_key(group, tp)),
            table.transaction_version(generation_key(group, tp)),
            table.transaction_version(reach_key(group, tp)),
        )
        for tp in TPS
    }


def test_one_pass_marks_are_delta_rs_marks_across_checkpoints(tmp_path: Path) -> None:
    root = str(tmp_path / "t")
    store, rng = DeltaTableStore(root), random.Random(7)
    for step in range(27):  # checkpoints at 10 and 20; heads move back and forth, two groups interleave
        group = ("g1", "g2")[step % 2]
        some = rng.sample(TPS, rng.randint(1, len(TPS)))
        expected = store.marks(group, some)
        heads = {tp: rng.randint(0, 1000) for tp in some}
        store.commit(TableCommit(Owner(group, step), expected, heads, schema=SCHEMA))
        fresh = DeltaTableStore(root)
        for g in ("g1", "g2"):
            assert fresh.marks(g, TPS) == store.marks(g, TPS) == delta_rs_marks(root, g), (step, g)
    assert (tmp_path / "t" / "_delta_log" / "_last_checkpoint").exists()


def test_marks_are_read_once_per_table_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = str(tmp_path / "t")
    DeltaTableStore(root).commit(
        TableCommit(Owner("g", 1), {tp: PartitionMark() for tp in TPS}, {TPS[0]: 1}, schema=SCHEMA)
    )
    calls = counted(monkeypatch)
    store = DeltaTableStore(root)
    for _ in range(3):
        expected = store.marks("g", TPS)
    assert calls == {"log_reads": 1, "lookups": 0}
    store.commit(TableCommit(Owner("g", 1), expected, {tp: 5 for tp in TPS}))
    assert calls == {"log_reads": 1, "lookups": 0}  # the compare-and-set read the same version's marks
    assert store.marks("g", TPS) == {tp: PartitionMark(5, 1, 5) for tp in TPS}
    assert calls == {"log_reads": 2, "lookups": 0}  # the new version read once


def test_a_concurrent_writer_is_still_refused(tmp_path: Path) -> None:
    root = str(tmp_path / "t")
    DeltaTableStore(root).commit(TableCommit(Owner("g", 1), {TPS[0]: PartitionMark()}, {TPS[0]: 1}, schema=SCHEMA))
    mine, theirs = DeltaTableStore(root), DeltaTableStore(root)
    read = mine.marks("g", TPS[:1])
    theirs.commit(TableCommit(Owner("g", 2), theirs.marks("g", TPS[:1]), {TPS[0]: 9}))
    with pytest.raises(TableConflictError):
        mine.commit(TableCommit(Owner("g", 1), read, {TPS[0]: 4}))
    assert DeltaTableStore(root).marks("g", TPS[:1]) == {TPS[0]: PartitionMark(9, 2, 9)}


def test_a_table_re_created_at_the_same_root_is_read_afresh(tmp_path: Path) -> None:
    root = str(tmp_path / "t")
    store = DeltaTableStore(root)
    for head in (1, 2, 3):
        store.commit(TableCommit(Owner("g", 1), store.marks("g", TPS[:1]), {TPS[0]: head}, schema=SCHEMA))
    assert store.marks("g", TPS[:1]) == {TPS[0]: PartitionMark(3, 1, 3)}
    shutil.rmtree(root)
    other = DeltaTableStore(root)
    for head in (7, 8, 9):
        other.commit(TableCommit(Owner("g", 4), other.marks("g", TPS[:1]), {TPS[0]: head}, schema=SCHEMA))
    assert store.marks("g", TPS[:1]) == {TPS[0]: PartitionMark(9, 4, 9)}


def test_a_batch_reads_the_marks_once_per_table_version_whatever_its_partitions(
    spark, kafka_config, topic_factory, produce_records, ledger, lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch reads every mark it needs (reconcile, planning, each commit's compare-and-set) from one read of the
    log per table version, for 1 partition as for 4: the reads do not grow with partitions x steps."""
    topic = topic_factory(4)
    produce_records(topic, [(i % 4, None, order(i)) for i in range(40)])
    reads = []
    for count in (1, 4):
        tps = [TopicPartition(topic, p) for p in range(count)]
        spec = spec_for(lake / f"p{count}", "delta")
        run_batch(spark, spec, kafka_config, tps, ledger)  # creates the tables
        calls = counted(monkeypatch)
        run_batch(spark, spec, kafka_config, tps, ledger)  # nothing new: reconcile and plan
        produce_records(topic, [(i % 4, None, order(i)) for i in range(40, 48)])
        run_batch(spark, spec, kafka_config, tps, ledger)  # lands and commits
        reads.append(dict(calls))
        monkeypatch.undo()
    assert reads[0] == reads[1], reads
    assert reads[0]["lookups"] == 0 and 0 < reads[0]["log_reads"] <= 6, reads
