"""The replay determinism guard: before a batch commits, each range's output gets a digest (recorded in the
ledger), and a range that re-reads offsets the sink holds (a replay) compares its output for those offsets
with what the sink holds. A changed output is allowed and said (the ledger's note, the materialization);
with `PipelineSpec.strict_replay` the batch stops before its commit, so nothing is committed or published.

Digests are computed where pyarrow reaches the sink (cohort.pipelines.tasks.writer.ArrowFs); a sink only Hadoop
reaches records none and compares nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import pyarrow.fs as pafs

from cohort.common.types import TopicPartition
from cohort.pipelines.planning.plan import BatchPlan, PartitionPlan
from cohort.pipelines.sink.counts import OutputShape
from cohort.pipelines.sink.digest import digest
from cohort.pipelines.sink.layout import SinkFs
from cohort.pipelines.tasks.writer import ArrowFs, arrow_filesystem
from cohort.pipelines.tasks.written import WrittenSpan

__all__ = ["HeldOutput", "OutputCheck", "ReplayChangedError", "check_outputs", "read_dirs", "refuse_changed"]


class ReplayChangedError(RuntimeError):
    """A replay would write other output than the sink holds for the same offsets, and `strict_replay` is set."""


@dataclass(frozen=True)
class OutputCheck:
    """One partition's staged output: its digest and its sink rows' shape, and for a replay the offsets compared
    and whether the output for them changed (None: not a replay)."""

    content_hash: str
    compared: tuple[int, int] | None = None
    changed: bool | None = None
    shape: OutputShape | None = None
    """The staged sink rows by their offsets (read with the digest's rows, so a transform's rows are counted
    without reading the files again)."""
    staged_rows: tuple[int, int] | None = None
    """The rows of the staged sink and quarantine files, counted in the digest's read of them (so the counts check
    need not read their footers again: on an object store, round trips per file)."""

    @property
    def note(self) -> str | None:
        """What the ledger keeps with the range."""
        if self.compared is None:
            return None
        lo, hi = self.compared
        return f"replay of [{lo}, {hi}): output {'changed' if self.changed else 'unchanged'}"


def read_dirs(filesystem: pafs.FileSystem, directories: Iterable[str]) -> list[pa.Table]:
    """The rows of the Parquet files directly under each directory (names starting with `_` or `.` skipped). Driver
    side: pyarrow.dataset (which loads pandas) stays out of the reading tasks, which import `side`."""
    import pyarrow.dataset as ds

    tables = []
    for directory in directories:
        infos = filesystem.get_file_info(pafs.FileSelector(directory, allow_not_found=True))
        files = sorted(
            i.path for i in infos if i.is_file and i.base_name.endswith(".parquet") and i.base_name[0] not in "_."
        )
        if files:
            tables.append(ds.dataset(files, filesystem=filesystem, format="parquet").to_table())
    return tables


def _tables(directories: Sequence[str]) -> list[pa.Table]:
    """The rows of range directories given as sink URIs (one file system: the sink's)."""
    if not directories:
        return []
    resolved = arrow_filesystem(directories[0])
    assert resolved is not None
    filesystem: pafs.FileSystem = resolved[0]
    return read_dirs(filesystem, [arrow_filesystem(d)[1] for d in directories])  # type: ignore[index]


class HeldOutput(Protocol):
    """Where a batch's staged output is, and what the sink holds already (a `SinkLayout`, or a table's view)."""

    def staged_range_dir(self, attempt: str, topic: str, partition: int) -> str: ...

    def overlapped(
        self, fs: SinkFs, attempt: str, tp: TopicPartition, from_offset: int, until_offset: int
    ) -> list[tuple[int, int, str]]: ...


def check_outputs(
    fs: SinkFs,
    sink: HeldOutput,
    quarantine: HeldOutput,
    attempt: str,
    plan: BatchPlan,
    written: Mapping[TopicPartition, WrittenSpan] | None = None,
) -> dict[TopicPartition, OutputCheck]:
    """Digest each planned range's staged output; compare a replay's with the sink's for the same offsets. A range
    its reading task reported whole (`written`, with both digest sides) is checked from the report, its files
    not read back, unless the sink holds offsets of it (a replay compares the rows).

    The partitions are checked in parallel threads (reading Parquet and hashing release the GIL)."""
    if not isinstance(fs, ArrowFs):
        return {}
    reports = written or {}
    ranges = [p for p in plan.partitions if p.must_commit and p.until_offset > p.from_offset]

    def check(p: PartitionPlan) -> OutputCheck:
        return _check(fs, sink, quarantine, attempt, p.tp, p.from_offset, p.until_offset, reports.get(p.tp))

    if len(ranges) < 2:
        return {p.tp: check(p) for p in ranges}
    with ThreadPoolExecutor(max_workers=min(len(ranges), os.cpu_count() or 1)) as pool:
        futures = {p.tp: pool.submit(check, p) for p in ranges}
        return {tp: future.result() for tp, future in futures.items()}


def _check(
    fs: SinkFs,
    sink: HeldOutput,
    quarantine: HeldOutput,
    attempt: str,
    tp: TopicPartition,
    lo: int,
    hi: int,
    report: WrittenSpan | None = None,
) -> OutputCheck:
    """One range's check (see `check_outputs`)."""
    held = [layout.overlapped(fs, attempt, tp, lo, hi) for layout in (sink, quarantine)]
    if report is not None and not (held[0] or held[1]):
        reported = report.digest()
        if reported is not None and report.shape is not None:
            return OutputCheck(reported, shape=report.shape, staged_rows=report.staged_rows)
    staged = [_tables([layout.staged_range_dir(attempt, tp.topic, tp.partition)]) for layout in (sink, quarantine)]
    new = digest(staged[0], staged[1], lo, hi)
    shape = OutputShape.of_rows(staged[0])
    rows = (sum(t.num_rows for t in staged[0]), sum(t.num_rows for t in staged[1]))
    if not (held[0] or held[1]):
        return OutputCheck(new, shape=shape, staged_rows=rows)
    window = (lo, min(hi, max(y for dirs in held for _x, y, _path in dirs)))
    old = [_tables([path for _x, _y, path in dirs]) for dirs in held]
    changed = digest(staged[0], staged[1], *window) != digest(old[0], old[1], *window)
    return OutputCheck(new, window, changed, shape, rows)


def refuse_changed(checks: Mapping[TopicPartition, OutputCheck]) -> None:
    """Raise `ReplayChangedError` naming every replayed partition whose output changed."""
    changed = [
        f"{tp} [{c.compared[0]}, {c.compared[1]})" for tp, c in sorted(checks.items()) if c.changed and c.compared
    ]
    if changed:
        raise ReplayChangedError(
            f"the replay writes other output than the sink holds for {', '.join(changed)} (a transform, a model or "
            "a schema changed since); strict_replay refuses it: nothing was committed or published"
        )
