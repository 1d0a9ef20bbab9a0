"""Cohort's compaction of a Delta and an Iceberg sink through the real data path (broker, Spark, `run_batch`, the
tables' own libraries): the table maintenance merges small files into files whose directories name the union of
their ranges, a replay from an offset inside a merged file keeps every offset exactly once, `cohort audit` (the
command, in a subprocess) counts the merged files by their rows' offsets and is ok, a replay that read the small
files before the compaction is refused, and a compaction Cohort did not make (the table's own) is named by the
audit rather than miscounted."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tables.batch import open_tables
from cohort.pipelines.tables.compaction import COMPACT_ATTEMPT, plan_merges
from cohort.pipelines.tables.retention import TableRetention
from cohort.pipelines.tables.store import BatchRecord, DataFile, Owner, PartitionMark, TableCommit, TableConflictError
from harness.tables import table_offsets
from tests.support.audit_command import cohort_audit, problems
from tests.support.orders import order
from tests.support.table_batches import expected, records, spec_for

RETENTION = TableRetention(keep_s=0, min_versions=3, history_s=0, every_commits=2, compact_files=3)
"""A clean-up every other commit, merging runs of 3 or more small files as soon as they are committed."""


def _merged(spec: PipelineSpec, tp: TopicPartition) -> list[DataFile]:
    return [f for f in open_tables(spec.table_target).sink.files([tp]) if f.attempt.startswith(COMPACT_ATTEMPT)]


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
@pytest.mark.slow
def test_compaction_keeps_replays_and_the_audit_exact(
    table_format: str,
    spark: Any,
    kafka_config: dict[str, Any],
    topic_factory: Any,
    produce_records: Any,
    coordinator: Any,
    sqlite_url: str,
    group: str,
    lake: Path,
) -> None:
    topic = topic_factory(2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    spec = spec_for(lake, table_format, table_retention=RETENTION, max_records_per_partition=2)
    ledger = coordinator.standalone_ledger(group)
    produce_records(topic, records(0, 28))
    for _ in range(5):  # 5 small batches of 2 offsets a partition: the maintenance merges runs of them
        run_batch(spark, spec, kafka_config, tps, ledger)
    merged = _merged(spec, tps[0])
    assert merged, open_tables(spec.table_target).sink.files([tps[0]])
    big = max(merged, key=lambda f: f.until_offset - f.from_offset)
    assert big.until_offset - big.from_offset >= 6 and re.fullmatch(r"\d+-\d+-compact[0-9a-z]+", big.path.split("/")[3])
    assert len(open_tables(spec.table_target).sink.files([tps[0]])) < 5
    assert table_offsets(spec) == expected(20)[0]
    args = [group, "--store-url", sqlite_url, "--sink", spec.sink_path, "--table-format", table_format]
    code, report, _ = cohort_audit(*args)
    assert (code, report["ok"]) == (0, True), report

    # a replay that read the small files before the compaction landed is refused
    sink = open_tables(spec.table_target).sink
    small = DataFile(topic, 0, big.from_offset, big.from_offset + 2, "0abc", big.path.replace("compact", "x"), 1)
    marks = sink.marks(group, [tps[0]])
    stale = TableCommit(
        Owner(group, None),
        marks,
        {tps[0]: big.from_offset + 2},
        removes=(small,),
        batch=BatchRecord("stale", (OffsetRange(topic, 0, big.from_offset, big.from_offset + 2),)),
    )
    with pytest.raises(TableConflictError, match="no longer in the table"):
        sink.commit(stale)

    cut = big.from_offset + 3  # a replay from inside the merged file
    coordinator.reset_offsets(group, {tps[0]: cut}, actor="test", reason="compaction test")
    replay = run_batch(spark, spec, kafka_config, [tps[0]], ledger)
    assert (replay.committed[0].from_offset, replay.committed[0].until_offset) == (cut, cut + 2)
    kept = [f for f in open_tables(spec.table_target).sink.files([tps[0]]) if f.from_offset == big.from_offset]
    assert [(f.from_offset, f.until_offset) for f in kept] == [(big.from_offset, cut)]  # the rows below the offset
    assert table_offsets(spec) == expected(20)[0]
    for _ in range(8):  # catch up, more clean-ups and compactions after the replay
        if ledger.committed_offsets(tps) == {tps[0]: 14, tps[1]: 14}:
            break
        run_batch(spark, spec, kafka_config, tps, ledger)
    assert table_offsets(spec) == expected(28)[0]
    assert table_offsets(spec, quarantine=True) == expected(28)[1]
    code, report, _ = cohort_audit(*args)
    assert (code, report["ok"]) == (0, True), report


@pytest.mark.parametrize(
    "table_format",
    ["delta", pytest.param("iceberg", marks=pytest.mark.slow)],  # the audit's code path is shared: CI runs one
)
def test_a_compaction_cohort_did_not_make_is_named_by_the_audit(
    table_format: str,
    spark: Any,
    kafka_config: dict[str, Any],
    topic_factory: Any,
    produce_records: Any,
    coordinator: Any,
    sqlite_url: str,
    group: str,
    lake: Path,
) -> None:
    topic = topic_factory(1)
    tp = TopicPartition(topic, 0)
    spec = spec_for(lake, table_format, max_records_per_partition=3, table_retention=None)
    ledger = coordinator.standalone_ledger(group)
    produce_records(topic, [(0, None, order(i)) for i in range(9)])
    for _ in range(3):
        run_batch(spark, spec, kafka_config, [tp], ledger)
    args = [group, "--store-url", sqlite_url, "--sink", spec.sink_path, "--table-format", table_format]
    assert cohort_audit(*args)[0] == 0

    if table_format == "delta":  # the table's own compaction: files named by delta-rs, not by their offsets
        from deltalake import DeltaTable

        DeltaTable(spec.sink_path).optimize.compact()
    else:
        from pyiceberg.catalog.sql import SqlCatalog

        table = SqlCatalog("cohort", uri=spec.iceberg_catalog_url).load_table(spec.iceberg_identifiers[0])
        table.overwrite(table.scan().to_arrow())  # a rewrite by pyiceberg: its own file names
    assert table_offsets(spec) == [(0, i) for i in range(9)]  # readers still see every row once

    code, report, _ = cohort_audit(*args)
    assert code == 1 and not report["ok"]
    messages = [x["problem"] for p in report["partitions"] for x in p["problems"]]
    assert any("outside Cohort's layout" in m and "not repaired" in m for m in messages), messages
    assert problems(report)[0][0] == ("sink", None)


def _small(low: int, high: int, *, size: int = 100, added_ms: int | None = 0) -> DataFile:
    return DataFile(
        "t", 0, low, high, "0abc", f"data/topic=t/partition=0/{low}-{high}-0abc/p.parquet", 1, size, added_ms
    )


def test_the_merges_keep_the_newest_range_young_files_and_a_replay_alone() -> None:
    tp = TopicPartition("t", 0)
    rules = TableRetention(keep_s=60, compact_files=3, compact_bytes=1000)
    files = [_small(i, i + 1) for i in range(6)]  # [0, 6) in six files, the head at 6
    plan = plan_merges(tp, files, PartitionMark(6, 1, 6), now_ms=60_000, retention=rules)
    assert [(m.from_offset, m.until_offset, len(m.sources)) for m in plan] == [(0, 5, 5)]  # [5, 6) is the newest
    assert plan_merges(tp, files, PartitionMark(6, 1, 9), now_ms=60_000, retention=rules) == []  # a replay
    young = [*files[:2], _small(2, 3, added_ms=30_000), *files[3:]]
    plan = plan_merges(tp, young, PartitionMark(6, 1, 6), now_ms=60_000, retention=rules)
    assert [(m.from_offset, m.until_offset) for m in plan] == []  # runs of 2 either side of a young file
    big = [_small(i, i + 1, size=300) for i in range(6)]  # 3 fit in 1000 bytes, files of 500 or more stay
    plan = plan_merges(tp, big, PartitionMark(6, 1, 6), now_ms=60_000, retention=rules)
    assert [(m.from_offset, m.until_offset) for m in plan] == [(0, 3)]
    shared = [*files, _small(4, 6)]
    assert plan_merges(tp, shared, PartitionMark(6, 1, 6), now_ms=60_000, retention=rules) == []
    off = TableRetention(compact_files=0)
    assert plan_merges(tp, files, PartitionMark(6, 1, 6), now_ms=10**13, retention=off) == []
