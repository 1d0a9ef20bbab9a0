"""What a reading task reports of the files it wrote (cohort.pipelines.tasks.written) is what reading them back finds:
the same size, footer, digest and shape, on a local disk and on an S3 API; so the batch may trust the report instead
of reading every staged file again (on an object store, round trips and every byte through the store)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cohort.common.types import TopicPartition
from cohort.pipelines.planning.plan import BatchPlan, PartitionPlan
from cohort.pipelines.replay.check import check_outputs, read_dirs
from cohort.pipelines.sink.counts import OutputShape
from cohort.pipelines.sink.digest import side
from cohort.pipelines.sink.layout import SinkLayout
from cohort.pipelines.tasks import writer
from cohort.pipelines.tasks.spans import OffsetSpan
from cohort.pipelines.tasks.writer import ArrowFs, SpanFile, arrow_filesystem
from cohort.pipelines.tasks.written import StagedFile, WrittenSpan
from tests.fixtures.s3 import S3Bucket

ATTEMPT = "a1"
TP = TopicPartition("orders", 0)


def _rows(offsets: range) -> pa.Table:
    return pa.table(
        {
            "kafka": [{"offset": o, "partition": 0} for o in offsets],
            "amount": [float(o) / 3 for o in offsets],
            "note": [None if o % 7 == 0 else f"n{o % 5}" for o in offsets],
        }
    )


def _write(directory: str, batches: list[range]) -> tuple[StagedFile | None, list[pa.Table] | None]:
    """One task's file of `batches` in `directory`, committed with its rows read back for the digest."""
    file = SpanFile(directory, "part-0-100", "snappy")
    try:
        for offsets in batches:
            rows = _rows(offsets)
            file.write(rows, rows.schema)
        return file.commit(digest=True)
    finally:
        file.abandon()


def _read_back(directory: str) -> list[pa.Table]:
    resolved = arrow_filesystem(directory)
    assert resolved is not None
    return read_dirs(resolved[0], [resolved[1]])


@pytest.fixture(params=["local", "s3"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return str(tmp_path / "lake")
    bucket: S3Bucket = request.getfixturevalue("s3_env")
    return bucket.root


def test_a_written_file_is_reported_as_reading_it_back_finds_it(root: str) -> None:
    directory = SinkLayout(root).staged_range_dir(ATTEMPT, *TP)
    staged, rows = _write(directory, [range(0, 40), range(40, 100)])
    assert staged is not None and rows is not None
    resolved = arrow_filesystem(f"{directory}/part-0-100.parquet")
    assert resolved is not None
    fs, path = resolved
    assert staged.size == fs.get_file_info(path).size
    with fs.open_input_file(path) as handle:
        assert staged.footer.equals(pq.ParquetFile(handle).metadata)
    assert staged.rows == 100
    back = _read_back(directory)
    assert side(rows, 0, 100) == side(back, 0, 100)
    assert side(rows, 0, 100) != side([_rows(range(0, 99))], 0, 100)


def test_a_span_without_rows_writes_and_reports_nothing(root: str) -> None:
    directory = SinkLayout(root).staged_range_dir(ATTEMPT, *TP)
    staged, rows = _write(directory, [])
    assert staged is None and rows == []
    assert _read_back(directory) == []


def test_a_file_past_the_spool_is_uploaded_whole_and_left_to_the_read_back(
    s3_env: S3Bucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "SPOOL_BYTES", 64)  # every file outgrows it: streamed to a temporary object
    directory = SinkLayout(s3_env.root).staged_range_dir(ATTEMPT, *TP)
    staged, rows = _write(directory, [range(0, 100)])
    assert rows is None  # no copy at hand: the driver reads the file back
    assert staged is not None and staged.rows == 100
    keys = s3_env.object_keys()
    assert [k for k in keys if k.endswith(".parquet")] == [f"{directory.split('/', 3)[3]}/part-0-100.parquet"]
    assert not [k for k in keys if ".tmp" in k]  # the temporary object is gone


def test_a_report_survives_its_trip_to_the_driver(tmp_path: Path) -> None:
    staged, rows = _write(str(tmp_path / "d"), [range(0, 100)])
    assert rows is not None
    report = WrittenSpan(
        "orders", 0, 0, 100, staged, None, side(rows, 0, 100), side([], 0, 100), OutputShape(100, 100, 0, 99)
    )
    back = WrittenSpan.from_bytes(bytearray(report.to_bytes()))  # Spark hands binary columns back as bytearray
    assert back.digest() == report.digest() and back.staged_rows == (100, 0)
    assert back.sink is not None and back.sink.footer.equals(staged.footer)
    with pytest.raises(TypeError, match="not a span report"):
        WrittenSpan.from_bytes(pickle.dumps({"a": 1}))


class _Held:
    """What the sink holds for the replay check: `overlapped` directories (a replay), else nothing."""

    def __init__(self, layout: SinkLayout, overlapped: list[tuple[int, int, str]] | None = None) -> None:
        self.layout = layout
        self.held = overlapped or []

    def staged_range_dir(self, attempt: str, topic: str, partition: int) -> str:
        return self.layout.staged_range_dir(attempt, topic, partition)

    def overlapped(self, fs: object, attempt: str, tp: TopicPartition, lo: int, hi: int) -> list[tuple[int, int, str]]:
        return self.held


def test_the_check_from_a_report_is_the_check_from_the_files(root: str) -> None:
    sink, quarantine = SinkLayout(root), SinkLayout(f"{root}/_quarantine")
    sink_file, sink_rows = _write(sink.staged_range_dir(ATTEMPT, *TP), [range(0, 60), range(70, 100)])
    quarantine_file, quarantine_rows = _write(quarantine.staged_range_dir(ATTEMPT, *TP), [range(60, 70)])
    assert sink_rows is not None and quarantine_rows is not None
    shape = OutputShape.of(pa.chunked_array([t.column("kafka").combine_chunks().field("offset") for t in sink_rows]))
    report = WrittenSpan(
        *TP, 0, 100, sink_file, quarantine_file, side(sink_rows, 0, 100), side(quarantine_rows, 0, 100), shape
    )
    plan = BatchPlan((PartitionPlan(TP, 0, 100, "earliest", (OffsetSpan(*TP, 0, 100),), must_commit=True),))
    fs = ArrowFs()
    reported = check_outputs(fs, _Held(sink), _Held(quarantine), ATTEMPT, plan, {TP: report})[TP]
    read = check_outputs(fs, _Held(sink), _Held(quarantine), ATTEMPT, plan)[TP]
    assert (reported.content_hash, reported.shape, reported.staged_rows) == (read.content_hash, read.shape, (90, 10))
    assert read.staged_rows == (90, 10) and reported.compared is None

    # a replay compares rows with what the sink holds: the report alone cannot, the files are read
    old = f"{root}/old"
    _write(old, [range(0, 100)])
    replayed = check_outputs(fs, _Held(sink, [(0, 100, old)]), _Held(quarantine), ATTEMPT, plan, {TP: report})[TP]
    assert replayed.compared == (0, 100) and replayed.changed is True
    assert replayed.content_hash == read.content_hash
