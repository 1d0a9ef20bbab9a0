"""Publishing after the commit: the markers a staged range gets before the commit, and a later batch publishing
a committed range whose run died before publishing it (pyarrow's local file system, no Spark)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cohort.common.types import TopicPartition
from cohort.pipelines.sink.layout import SinkLayout, attempt_id, run_tag
from cohort.pipelines.tasks.writer import ArrowFs

TP = TopicPartition("t", 0)


def _stage(layout: SinkLayout, attempt: str, rows: int, first: int = 0) -> str:
    staged = Path(layout.staged_range_dir(attempt, TP.topic, TP.partition))
    staged.mkdir(parents=True)
    offsets = range(first, first + rows)
    table = pa.table({"kafka": [{"offset": o} for o in offsets], "by": [attempt] * rows})
    pq.write_table(table, staged / f"part-{first}-{first + rows}.parquet")
    return str(staged)


def test_attempt_ids_name_their_run() -> None:
    first, second = attempt_id("run-1"), attempt_id("run-1")
    assert first != second and first.isalnum() and first.startswith(run_tag("run-1"))
    assert not attempt_id("run-2").startswith(run_tag("run-1"))


def test_a_committed_range_is_published_from_its_runs_staging_once(tmp_path: Path) -> None:
    fs, layout = ArrowFs(), SinkLayout(str(tmp_path / "lake"))
    died, other = attempt_id("died"), attempt_id("other")
    _stage(layout, other, 5)  # another run staged the same offsets: never published for this commit
    _stage(layout, died, 5)
    layout.prepare(fs, other, {TP: (0, 5)})
    layout.prepare(fs, died, {TP: (0, 5)})
    target = layout.range_dir("t", 0, 0, 5)

    assert not layout.complete(fs, "died", TP, 0, 5, rows=4)  # not what the ledger says was written
    assert layout.complete(fs, "died", TP, 0, 5, rows=5)
    assert sorted(p.name for p in Path(target).iterdir()) == [
        f"_cohort_attempt={died}",
        "_cohort_range=0-5",
        "part-0-5.parquet",
    ]
    assert Path(layout.staged_range_dir(other, "t", 0)).exists()
    assert layout.complete(fs, "died", TP, 0, 5, rows=5)  # in place: nothing to do
    assert not layout.complete(fs, "never-staged", TP, 5, 9, rows=1)


def test_publishing_keeps_what_carries_the_attempt_and_replaces_other_overlapping_directories(tmp_path: Path) -> None:
    fs, layout = ArrowFs(), SinkLayout(str(tmp_path / "lake"))
    old, mine = attempt_id("old"), attempt_id("mine")
    _stage(layout, old, 7)
    assert list(layout.publish(fs, old, {TP: (0, 7)})) == [layout.range_dir("t", 0, 0, 7)]
    _stage(layout, mine, 5)
    layout.prepare(fs, mine, {TP: (0, 5)})
    assert list(layout.publish(fs, mine, {TP: (0, 5)})) == [layout.range_dir("t", 0, 0, 5)]
    # a second publisher of the same commit (a batch completing it) finds it in place and keeps it
    assert list(layout.publish(fs, mine, {TP: (0, 5)})) == [layout.range_dir("t", 0, 0, 5)]
    # the replayed offsets 0..4 are mine; 5 and 6 stay as the old attempt wrote them
    assert [(f, u) for f, u, _ in layout.range_dirs(fs, "t", 0)] == [(0, 5), (5, 7)]
    assert fs.parquet_record_count(layout.range_dir("t", 0, 0, 5)) == 5
    assert pq.read_table(layout.range_dir("t", 0, 5, 7)).column("by").to_pylist() == [old, old]
