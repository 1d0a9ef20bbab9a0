"""The counts check reads its written and quarantined rows from the staged files themselves: counted in the replay
digest's read of them (no second read of their footers, which on an object store is round trips per file), or from
the footers where no digest is made. Either way a range whose staged files hold fewer rows than its records (a task
that wrote less than it said) is refused, on a local disk and on an S3 API."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.results import CountMismatchError
from cohort.pipelines.batch.stage import _staged_rows, _verify
from cohort.pipelines.planning.plan import BatchPlan, PartitionPlan
from cohort.pipelines.replay.check import check_outputs
from cohort.pipelines.sink.layout import SinkLayout
from cohort.pipelines.tasks.spans import OffsetSpan
from cohort.pipelines.tasks.writer import ArrowFs, arrow_filesystem
from tests.fixtures.s3 import S3Bucket

ATTEMPT = "a1"
TPS = (TopicPartition("orders", 0), TopicPartition("orders", 1))


def _plan(records: int) -> BatchPlan:
    return BatchPlan(
        tuple(PartitionPlan(tp, 0, records, "earliest", (OffsetSpan(*tp, 0, records),), must_commit=True) for tp in TPS)
    )


def _stage(layout: SinkLayout, tp: TopicPartition, offsets: range, name: str = "part-0.parquet") -> None:
    """Write one staged file of `tp` holding `offsets`."""
    resolved = arrow_filesystem(layout.staged_range_dir(ATTEMPT, *tp))
    assert resolved is not None
    fs, path = resolved
    fs.create_dir(path, recursive=True)
    rows = pa.table({"kafka": [{"offset": o} for o in offsets], "amount": [float(o) for o in offsets]})
    pq.write_table(rows, f"{path}/{name}", filesystem=fs)


class _Nothing:
    """What the sink holds for the replay check: nothing (no replay)."""

    def __init__(self, layout: SinkLayout) -> None:
        self.layout = layout

    def staged_range_dir(self, attempt: str, topic: str, partition: int) -> str:
        return self.layout.staged_range_dir(attempt, topic, partition)

    def overlapped(self, fs: object, attempt: str, tp: TopicPartition, lo: int, hi: int) -> list[tuple[int, int, str]]:
        return []


def _counted(root: str, *, digest: bool) -> dict[TopicPartition, tuple[int, int]]:
    """Stage 10 records per partition: partition 0 all written, partition 1 with 3 quarantined and only 6 written
    (a task that wrote one row fewer than it said); the counts `_verify` checks."""
    sink, quarantine = SinkLayout(root), SinkLayout(f"{root}/_quarantine")
    _stage(sink, TPS[0], range(10))
    _stage(sink, TPS[1], range(3), "part-0.parquet")
    _stage(sink, TPS[1], range(3, 6), "part-1.parquet")
    _stage(quarantine, TPS[1], range(7, 10))
    plan = _plan(10)
    fs = ArrowFs()
    checks = check_outputs(fs, _Nothing(sink), _Nothing(quarantine), ATTEMPT, plan) if digest else {}
    assert bool(checks) == digest
    written, quarantined = _staged_rows(fs, sink, quarantine, ATTEMPT, plan, checks)
    stats = {tp: (10, 0, 0.0) for tp in TPS}
    with pytest.raises(
        CountMismatchError, match=r"orders-1 \[0, 10\): consumed 10, written 6, quarantined 3"
    ) as raised:
        _verify(plan, stats, written, quarantined)
    assert "orders-0" not in str(raised.value)
    return {tp: (written[tp], quarantined[tp]) for tp in TPS}


@pytest.mark.parametrize("digest", [True, False], ids=["from-the-digest-read", "from-the-footers"])
def test_a_range_whose_staged_files_hold_fewer_rows_than_its_records_is_refused(tmp_path: Path, digest: bool) -> None:
    assert _counted(str(tmp_path / "lake"), digest=digest) == {TPS[0]: (10, 0), TPS[1]: (6, 3)}


def test_on_s3_the_counts_come_from_the_staged_objects(s3_env: S3Bucket) -> None:
    assert _counted(s3_env.root, digest=True) == {TPS[0]: (10, 0), TPS[1]: (6, 3)}
