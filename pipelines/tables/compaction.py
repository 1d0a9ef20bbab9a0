"""Cohort's own compaction of a table sink's small files (Delta Lake, Iceberg), keeping what replays and the audit
read from a file's path.

Every batch adds one small file per partition; a table committing every minute for years would reference millions
of them, and every commit, read and checkpoint pays for the list. The tables' own compactions (Delta's OPTIMIZE,
Iceberg's rewrite) write files whose names say nothing of the offsets they hold, so replays (which replace the files
holding the offsets they re-read) and the audit (which counts a range's rows by its directory) could no longer
find them. This one merges a partition's consecutive small files into one file under
`data/topic=<t>/partition=<p>/<from>-<until>-compact<id>/`, the union of their ranges:

- only files whose whole range lies below the partition's head and is not its newest (a quarantine-table commit
  whose sink commit has not landed yet is rolled back by removing the files of its range), while no replay is
  under way (the reach is the head), added more than `TableRetention.keep_s` ago (the retention window), smaller
  than half of `compact_bytes`, in runs of at least `compact_files` files and at most `compact_bytes`;
- the merged file holds exactly the rows of the files it replaces (checked by count and by their `kafka.offset`
  lying in each file's range; the ranges and their rows are recorded in its footer, `RANGES_KEY`, which the audit
  counts it by), and lands as one table commit that removes them: the same compare-and-set on the
  partitions' marks as every commit, which the commit leaves as they are (a zombie is still refused, a batch of the
  partition racing it is retried by the store), and refused when a file it removes is gone (a replay got there
  first); a replay that read the small files before the compaction landed is refused the same way and re-runs;
- a later replay from an offset inside a merged file replaces it like any other file, rewriting the rows below
  its offset (by their `kafka.offset`) into a file of their own.

The replaced files stay readable for time travel and go with the table's clean-up (`keep_s` later). Decisions are
plain (`plan_merges`); `compact_table` writes and commits them.
"""

from __future__ import annotations

import itertools
import json
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cohort.common.types import TopicPartition
from cohort.pipelines.tables.retention import TableRetention
from cohort.pipelines.tables.store import (
    DataFile,
    NewFile,
    Owner,
    PartitionMark,
    TableCommit,
    TableStore,
    data_dir,
)
from cohort.pipelines.tasks.writer import arrow_filesystem

__all__ = [
    "COMPACT_ATTEMPT",
    "RANGES_KEY",
    "Compaction",
    "Merge",
    "compact_table",
    "compaction_attempt",
    "plan_merges",
    "source_ranges",
]

_log = logging.getLogger(__name__)

RANGES_KEY = b"cohort.ranges"
"""The footer key of a merged file: the JSON list of the [from, until, rows] of the ranges it holds."""
COMPACT_ATTEMPT = "compact"
"""How the attempt part of a merged file's directory starts (batch attempts are hexadecimal: never this)."""


def compaction_attempt() -> str:
    """A fresh attempt id for the directories of one compaction."""
    return COMPACT_ATTEMPT + uuid.uuid4().hex[:16]


@dataclass(frozen=True)
class Merge:
    """Consecutive files of one partition merged into one file whose directory names the union of their ranges."""

    tp: TopicPartition
    sources: tuple[DataFile, ...]

    @property
    def from_offset(self) -> int:
        return self.sources[0].from_offset

    @property
    def until_offset(self) -> int:
        return self.sources[-1].until_offset

    @property
    def records(self) -> int:
        return sum(f.records for f in self.sources)


@dataclass(frozen=True)
class Compaction:
    """What one compaction did: the merged files it committed, and per partition skipped, why."""

    merged: tuple[Merge, ...] = ()
    skipped: dict[TopicPartition, str] = field(default_factory=dict)

    @property
    def files_removed(self) -> int:
        return sum(len(m.sources) for m in self.merged)


def plan_merges(
    tp: TopicPartition, files: Sequence[DataFile], mark: PartitionMark, *, now_ms: int, retention: TableRetention
) -> list[Merge]:
    """The merges of one partition's `files` (see the module doc for the rules); none while a replay is under way
    (the reach beyond the head), or when two files share offsets (the audit names that; nothing is merged)."""
    if retention.compact_files < 2 or mark.head is None or (mark.reach is not None and mark.reach > mark.head):
        return []
    ordered = sorted(f for f in files if f.tp == tp)
    if any(b.from_offset < a.until_offset for a, b in itertools.pairwise(ordered)):
        return []
    settled_before = now_ms - int(retention.keep_s * 1000)
    small = retention.compact_bytes // 2
    merges: list[Merge] = []
    run: list[DataFile] = []
    size = 0

    def flush() -> None:
        if len(run) >= retention.compact_files:
            merges.append(Merge(tp, tuple(run)))
        run.clear()

    for f in ordered:
        eligible = (
            f.until_offset < mark.head  # the newest range stays: a quarantine commit may still be rolled back
            and f.size < small
            and f.records > 0
            and (f.added_ms is None or f.added_ms <= settled_before)
        )
        if not eligible:
            flush()
            size = 0
            continue
        if run and size + f.size > retention.compact_bytes:
            flush()
            size = 0
        run.append(f)
        size += f.size
    flush()
    return merges


def _merged_rows(root: str, merge: Merge) -> tuple[pa.Table, list[tuple[int, int, int]]]:
    """The rows of the merge's files in offset order, and the committed ranges they hold ((from, until, rows), a
    merged source's own ranges kept); ValueError when the rows are not what the table says (a count that differs,
    an offset outside a file's range)."""
    resolved = arrow_filesystem(root)
    if resolved is None:
        raise ValueError(f"pyarrow cannot reach {root}")
    filesystem, base = resolved
    parts = []
    ranges: list[tuple[int, int, int]] = []
    for f in merge.sources:
        rows = pq.read_table(f"{base}/{f.path}", filesystem=filesystem)
        offsets = pc.struct_field(rows.column("kafka"), "offset")
        low, high = pc.min(offsets).as_py(), pc.max(offsets).as_py()
        if rows.num_rows != f.records or low is None or low < f.from_offset or high >= f.until_offset:
            raise ValueError(f"{f.path} holds rows the table does not say it holds: not merged")
        held = source_ranges(rows.schema.metadata)
        if held is None or sum(n for _, _, n in held) != f.records:
            held = [(f.from_offset, f.until_offset, f.records)]
        ranges += held
        parts.append(rows.replace_schema_metadata(None))
    return pa.concat_tables(parts, promote_options="default"), ranges


def source_ranges(metadata: dict[bytes, bytes] | None) -> list[tuple[int, int, int]] | None:
    """The (from, until, rows) of the committed ranges a merged file holds, from its footer (`RANGES_KEY`); None
    for a file compaction did not write."""
    raw = (metadata or {}).get(RANGES_KEY)
    if raw is None:
        return None
    try:
        return [(int(a), int(b), int(n)) for a, b, n in json.loads(raw)]
    except (ValueError, TypeError):
        return None


def _write(root: str, merge: Merge, attempt: str) -> NewFile:
    """Write the merge's file under a directory of `attempt` (invisible until the commit references it), the
    ranges it holds in its footer (what the audit counts it by, without reading its rows)."""
    rows, ranges = _merged_rows(root, merge)
    rows = rows.replace_schema_metadata({**(rows.schema.metadata or {}), RANGES_KEY: json.dumps(ranges).encode()})
    directory = data_dir(merge.tp, merge.from_offset, merge.until_offset, attempt)
    path = f"{directory}/part-{merge.from_offset}-{merge.until_offset}.parquet"
    resolved = arrow_filesystem(root)
    assert resolved is not None  # _merged_rows checked it
    filesystem, base = resolved
    filesystem.create_dir(f"{base}/{directory}", recursive=True)
    pq.write_table(rows, f"{base}/{path}", filesystem=filesystem)
    size = filesystem.get_file_info(f"{base}/{path}").size
    return NewFile(path, int(size or 0), rows.num_rows, rows.schema)


def _delete_dirs(root: str, directories: Sequence[str]) -> None:
    resolved = arrow_filesystem(root)
    if resolved is None:
        return
    filesystem, base = resolved
    for directory in directories:
        try:
            filesystem.delete_dir(f"{base}/{directory}")
        except (FileNotFoundError, OSError) as error:  # left: the audit names it once old, a repair deletes it
            _log.warning("could not delete %s/%s after a compaction that did not land: %s", root, directory, error)


def compact_table(
    table: TableStore,
    owner: Owner,
    retention: TableRetention,
    *,
    now_ms: int,
    partitions: Sequence[TopicPartition] | None = None,
) -> Compaction:
    """Merge the small files of `partitions` (default: every partition with files in Cohort's layout) whose marks
    `owner.group` holds, in one table commit by `owner` (generation None: the marks' own, as a command runs it).
    TableConflictError when a batch, a zombie or a replay moved the table meanwhile: nothing of it is visible."""
    if not table.exists():
        return Compaction()
    files = table.files(partitions) if partitions is not None else table.all_files()
    tps = sorted({f.tp for f in files})
    if not tps:
        return Compaction()
    marks = table.marks(owner.group, tps)
    merges: list[Merge] = []
    skipped: dict[TopicPartition, str] = {}
    for tp in tps:
        mark = marks.get(tp, PartitionMark())
        if mark.head is None:
            skipped[tp] = f"group {owner.group} has no head in the table"
        elif mark.reach is not None and mark.reach > mark.head:
            skipped[tp] = f"a replay is under way (head {mark.head}, reach {mark.reach})"
        merges += plan_merges(tp, files, mark, now_ms=now_ms, retention=retention)
    if not merges:
        return Compaction((), skipped)
    attempt = compaction_attempt()
    written: list[str] = []
    adds: list[NewFile] = []
    try:
        for merge in merges:
            adds.append(_write(table.root, merge, attempt))
            written.append(adds[-1].path.rsplit("/", 1)[0])
        merged = {m.tp for m in merges}
        expected = {tp: marks[tp] for tp in sorted(merged)}
        reaches = {tp: m.reach for tp, m in expected.items() if m.reach is not None}
        change = TableCommit(
            owner,
            expected,
            adds=tuple(adds),
            removes=tuple(f for m in merges for f in m.sources),
            reaches=reaches,
        )
        table.commit(change)
    except BaseException:
        if not _landed(table, adds):
            _delete_dirs(table.root, written)
        raise
    return Compaction(tuple(merges), skipped)


def _landed(table: TableStore, adds: Sequence[NewFile]) -> bool:
    """Whether the merged files are in the table although the commit raised (its answer was lost); when the
    table cannot say, True (an unreferenced file costs space, a deleted referenced one costs rows)."""
    if not adds:
        return False
    try:
        live = {f.path for f in table.all_files()}
    except Exception:  # the table cannot say: keep the files
        return True
    return all(a.path in live for a in adds)
