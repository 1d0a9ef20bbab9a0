"""The table sinks behind a batch (Delta Lake and Apache Iceberg, through their `TableStore` pair): `TableSink`,
run_batch's `BatchSink` for a spec whose `table_format` is delta or iceberg (cohort.pipelines.batch.sink), over the
table stores of cohort.pipelines.tables, which know nothing of the batch.

The reading, decoding, validation and counting are those of the Parquet sink: the tasks write both outputs into
`<table>/_staging/<attempt>/`, except on an object store when the reading tasks write both outputs themselves (no
Spark transform): there each range's files are written straight into the data directory of step 3
(`DataDirLayout`), where no reader sees them before a commit references them, so nothing is copied into place.
The tasks report what they wrote (sizes, footers, digests: cohort.pipelines.tasks.written), so the batch reads
none of it back. What differs is how the output becomes visible:

1. **Reconcile** (cohort.pipelines.tables.batch.reconcile_tables), before planning: the member fences its
   partitions in both tables with its generation, adopts into the ledger a sink commit the ledger never saw, and
   rolls back a quarantine commit whose sink commit never landed.
2. After the counts check, the batch asks the ledger whether it still owns its partitions (an empty commit:
   fenced like a commit, it records nothing), so a member the coordinator already fenced never reaches a table.
3. Each partition's staged output moves to `<table>/data/topic=<t>/partition=<p>/<from>-<until>-<attempt>/`
   (on an object store: written there by the tasks, or each file copied there, the staged copies deleted with the
   staging area), invisible to readers until a commit references it; a batch that dies before its commit leaves
   them unreferenced, for the next batch's sweep (cohort.pipelines.tables.batch) or `cohort gc`. A replay removes
   the files holding the offsets it re-read (those it cuts are rewritten without them) in the same commit.
4. The quarantine table commits (when the batch quarantined or replaced something there), then the sink table:
   each one atomic commit that also moves the partitions' marks with a compare-and-set
   (cohort.pipelines.tables.store), so a zombie fenced in the table, or a second attempt of a commit that
   landed, changes nothing.
5. The ledger commit, then (run_batch) the Kafka mirror. A ledger commit that fails after the sink commit leaves a
   table commit the ledger never saw: the next batch of the partition adopts it (step 1).

A batch that fails keeps the data directories of each table whose commit landed (or may have: the next batch
adopts or rolls it back) and deletes those of the others; the staging areas always go.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cohort.common.ledger import OffsetLedger
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.batch.commit import commit_ranges_to
from cohort.pipelines.batch.results import AdoptedRange
from cohort.pipelines.batch.sink import OutputDirs, StagedRows
from cohort.pipelines.batch.stage import timed
from cohort.pipelines.planning.plan import BatchPlan
from cohort.pipelines.sink.counts import StagedCounts
from cohort.pipelines.sink.layout import DataDirLayout, SinkError, SinkFs, SinkLayout, StagedDirs
from cohort.pipelines.storage.moves import copy_files, is_object_store
from cohort.pipelines.storage.parallel import in_parallel
from cohort.pipelines.storage.preflight import probe_root
from cohort.pipelines.tables import batch as table_batch
from cohort.pipelines.tables.batch import TablePair, reconcile_tables
from cohort.pipelines.tables.store import (
    BatchRecord,
    DataFile,
    NewFile,
    Owner,
    PartitionMark,
    TableCommit,
    TableConflictError,
    TableStore,
    compare_and_set,
    data_dir,
)
from cohort.pipelines.tables.target import TableTarget
from cohort.pipelines.tasks.writer import ArrowFs, arrow_filesystem
from cohort.pipelines.tasks.written import StagedFile

__all__ = ["TableSink"]


def _confirm_ownership(ledger: OffsetLedger, plan: BatchPlan) -> None:
    """Ask the ledger whether this member still owns its partitions: an empty range at each committed
    partition's head is fenced like a commit and records nothing (a partition's first position at most)."""
    probes = [
        OffsetRange(p.tp.topic, p.tp.partition, start, start)
        for p in plan.partitions
        if p.must_commit
        for start in [p.gap.from_offset if p.gap is not None else p.from_offset]
    ]
    if probes:
        ledger.commit(probes)


@dataclass(frozen=True)
class _Output:
    """One table's side of the batch: its store, where the attempt staged it, and the rows it has per range."""

    table: TableStore
    layout: StagedDirs
    counts: Mapping[TopicPartition, int]


def _abs(table: TableStore, relative: str) -> str:
    return f"{table.root}/{relative}"


def _new_files(fs: Any, table: TableStore, directory: str) -> list[NewFile]:
    """The Parquet files under a data directory (relative to the table), with their sizes, rows and schemas."""
    resolved = arrow_filesystem(_abs(table, directory))
    if resolved is None:
        raise SinkError(f"pyarrow cannot reach {table.root}: a table sink needs a root pyarrow reaches")
    filesystem, path = resolved
    files = []
    for name in fs.list_names(_abs(table, directory)):
        if name.startswith(("_", ".")) or not name.endswith(".parquet"):
            continue
        info = filesystem.get_file_info(f"{path}/{name}")
        with filesystem.open_input_file(f"{path}/{name}") as handle:
            meta = pq.ParquetFile(handle)
            files.append(NewFile(f"{directory}/{name}", int(info.size), meta.metadata.num_rows, meta.schema_arrow))
    return files


def _place(
    fs: SinkFs, output: _Output, attempt: str, plan: BatchPlan, reported: Mapping[str, tuple[StagedFile, ...]]
) -> list[NewFile]:
    """Move each partition's staged output into its data directory; the files there. Written there already (an
    object store's `DataDirLayout`): nothing moves. On a local disk, one rename per partition, the partitions side
    by side (`in_parallel`); on an object store, one copy per file, every file side by side (`_copy_into_place`).
    The files the reading tasks `reported` (by staged directory; empty when Spark wrote) are taken as reported,
    sizes and footers, not listed and read again."""
    placed = [p for p in plan.partitions if p.must_commit and output.counts.get(p.tp)]
    directories = {
        output.layout.staged_range_dir(attempt, *p.tp): data_dir(p.tp, p.from_offset, p.until_offset, attempt)
        for p in placed
    }
    resolved = arrow_filesystem(output.table.root)

    def place(staged: str) -> list[NewFile]:
        directory = directories[staged]
        if staged != _abs(output.table, directory) and not fs.exists(_abs(output.table, directory)):
            fs.rename(staged, _abs(output.table, directory))
        if reported:
            return [_reported_file(directory, f) for f in reported.get(staged, ())]
        return _new_files(fs, output.table, directory)

    moved = {staged: directory for staged, directory in directories.items() if staged != _abs(output.table, directory)}
    if resolved is not None and is_object_store(resolved[0]) and moved:
        return _copy_into_place(resolved[0], output.table, moved, reported)
    return [f for files in in_parallel(place, list(directories)) for f in files]


def _reported_file(directory: str, staged: StagedFile) -> NewFile:
    """The `NewFile` of a file a reading task reported, now in `directory` (relative to the table)."""
    return NewFile(f"{directory}/{staged.name}", staged.size, staged.rows, staged.schema, staged.footer)


def _copy_into_place(
    filesystem: Any, table: TableStore, directories: Mapping[str, str], reported: Mapping[str, tuple[StagedFile, ...]]
) -> list[NewFile]:
    """Copy the staged files into their data directories (staged URI -> directory relative to the table) on an
    object store, all side by side: the `reported` files one copy each; else one listing of the attempt's staging,
    then one copy per file, the rows and schema of each from its footer, read on the way
    (cohort.pipelines.storage.moves). The staged copies go with the batch's staging area, in bulk."""
    if reported:
        files = [(staged, directory, f) for staged, directory in directories.items() for f in reported.get(staged, ())]

        def copy(item: tuple[str, str, StagedFile]) -> NewFile:
            staged, directory, f = item
            filesystem.copy_file(f"{_path(staged)}/{f.name}", f"{_path(_abs(table, directory))}/{f.name}")
            return _reported_file(directory, f)

        return in_parallel(copy, files)
    paths = {_path(staged): _path(_abs(table, directory)) for staged, directory in directories.items()}
    relative = {_path(_abs(table, directory)): directory for directory in directories.values()}
    return [NewFile(f"{relative[f.target]}/{f.name}", f.size, f.rows, f.schema) for f in copy_files(filesystem, paths)]


def _path(uri: str) -> str:
    """The path of `uri` within its pyarrow file system."""
    resolved = arrow_filesystem(uri)
    assert resolved is not None
    return resolved[1]


def _replaced(
    fs: SinkFs, table: TableStore, plan: BatchPlan, attempt: str, held: Sequence[DataFile]
) -> tuple[list[DataFile], list[NewFile]]:
    """What a replay replaces: every file holding offsets the batch re-read, and the pieces of them outside its
    ranges, rewritten into data directories of this attempt."""
    ranges = {p.tp: (p.from_offset, p.until_offset) for p in plan.partitions if p.must_commit}
    removes: list[DataFile] = []
    kept: list[NewFile] = []
    cut: dict[str, DataFile] = {}
    for f in held:
        lo, hi = ranges.get(f.tp, (0, 0))
        if f.attempt != attempt and f.from_offset < hi and lo < f.until_offset:
            removes.append(f)
            cut.setdefault(f.directory, f)
    for directory, f in sorted(cut.items()):
        lo, hi = ranges[f.tp]
        for a, b in ((f.from_offset, min(f.until_offset, lo)), (max(f.from_offset, hi), f.until_offset)):
            if a < b:
                piece = data_dir(f.tp, a, b, attempt)
                written = fs.write_offset_slice(
                    _abs(table, directory), _abs(table, piece), a, b, name=f"part-{a}-{b}.parquet"
                )
                if written:
                    kept.extend(_new_files(fs, table, piece))
    return removes, kept


@dataclass(frozen=True)
class _Held:
    """One table as the batch found it before its commit: the marks of the partitions it commits (the
    compare-and-set) and the files of those it replays; a view for the replay check (`HeldOutput`)."""

    table: TableStore
    staging: StagedDirs
    marks: Mapping[TopicPartition, PartitionMark]
    files: Mapping[TopicPartition, tuple[DataFile, ...]]

    @classmethod
    def read(cls, table: TableStore, staging: StagedDirs, owner: Owner, plan: BatchPlan) -> _Held:
        starts = {p.tp: p.from_offset for p in plan.partitions if p.must_commit}
        tps = sorted(starts)
        exists = table.exists()
        marks = table.marks(owner.group, tps) if exists else {tp: PartitionMark() for tp in tps}
        replayed = [tp for tp in tps if (reach := marks[tp].reach) is not None and reach > starts[tp]]
        files: dict[TopicPartition, list[DataFile]] = {}
        for f in table.files(replayed) if replayed else []:
            files.setdefault(f.tp, []).append(f)
        return cls(table, staging, marks, {tp: tuple(held) for tp, held in files.items()})

    def staged_range_dir(self, attempt: str, topic: str, partition: int) -> str:
        return self.staging.staged_range_dir(attempt, topic, partition)

    def overlapped(
        self, fs: SinkFs, attempt: str, tp: TopicPartition, from_offset: int, until_offset: int
    ) -> list[tuple[int, int, str]]:
        """The table's data directories holding offsets of [from, until) (a replay's old output)."""
        return sorted(
            {
                (f.from_offset, f.until_offset, _abs(self.table, f.directory))
                for f in self.files.get(tp, ())
                if f.from_offset < until_offset and from_offset < f.until_offset
            }
        )


def _change(
    fs: SinkFs,
    output: _Output,
    held: _Held,
    owner: Owner,
    plan: BatchPlan,
    attempt: str,
    record: BatchRecord,
    schema: pa.Schema | None,
    reported: Mapping[str, tuple[StagedFile, ...]],
) -> TableCommit:
    """One table's commit of the batch: its data directories placed (`reported`: the files the reading tasks
    reported, by staged directory), a replay's files replaced."""
    heads = {p.tp: p.until_offset for p in plan.partitions if p.must_commit}
    adds = _place(fs, output, attempt, plan, reported)
    old = [f for files in held.files.values() for f in files]
    removes, kept = _replaced(fs, output.table, plan, attempt, old) if old else ([], [])
    return TableCommit(owner, held.marks, heads, tuple(adds + kept), tuple(removes), record, schema=schema)


def _commit_change(table: TableStore, change: TableCommit) -> None:
    """Commit `change`; a file gone missing because a newer member fenced the partitions and swept this batch's
    files is said as the conflict it is."""
    try:
        table.commit(change)
    except FileNotFoundError:
        found = table.marks(change.owner.group, sorted(change.expected)) if table.exists() else {}
        moved = sorted(tp for tp, mark in change.expected.items() if found.get(tp, mark) != mark)
        if moved:
            raise TableConflictError(
                f"{', '.join(map(str, moved))}: the table at {table.root} no longer holds the marks this batch read "
                "(a member of a newer generation fenced the partitions and removed this batch's files): nothing was "
                "committed"
            ) from None
        raise


def _landed(table: TableStore, change: TableCommit) -> bool:
    """Whether `change` is in the table although its commit raised (its answer was lost): the stores' own
    compare-and-set, asked again."""
    try:
        if not change.heads or change.batch is None or not table.exists():
            return False
        current = table.marks(change.owner.group, sorted(change.expected))
        return compare_and_set(change, current, lambda tp, head: table.last_batch(change.owner.group, tp, head))
    except TableConflictError:
        return False  # another commit moved the marks: this one did not land
    except Exception:  # the table cannot say: keep the files (an orphan costs space, a lost file costs rows)
        return True


def _discard(fs: SinkFs, tables: Iterable[TableStore], attempt: str, plan: BatchPlan) -> None:
    """After a failure before a table's commit: delete the attempt's data directories in that table (a table's
    committed files stay: the next batch adopts or rolls back its commit)."""
    for table in tables:
        for p in plan.partitions:
            parent = _abs(table, data_dir(p.tp, 0, 0, attempt)).rsplit("/", 1)[0]
            for name in fs.list_names(parent):
                if name.endswith(f"-{attempt}"):
                    fs.delete(f"{parent}/{name}")


@dataclass
class _Progress:
    """How far the attempt's table commits got, for `TableSink.clean_up`: each table's view read before staging
    (`held`, by root), the commit tried per table (`pending`) and the data directories of each table whose commit
    landed or needed none (`directories`)."""

    held: dict[str, _Held] = field(default_factory=dict)
    pending: dict[str, TableCommit] = field(default_factory=dict)
    directories: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class TableSink:
    """One batch attempt's table pair (a `BatchSink`): the tables, who commits to them, the staging layouts at their
    roots, and the seconds of its steps (`stages`, the batch's). Made by `open`, for one attempt only."""

    tables: TablePair
    owner: Owner
    sink: SinkLayout
    quarantine: SinkLayout
    fs: ArrowFs
    attempt: str
    stages: dict[str, float]
    progress: _Progress = field(default_factory=_Progress)

    @classmethod
    def open(cls, target: TableTarget, owner: Owner, attempt: str, stages: dict[str, float]) -> TableSink:
        """The target's tables for `attempt`, committed to by `owner`; SinkError for a root pyarrow cannot reach,
        ObjectStoreError for an object-store root the batch cannot list, write or delete under (probed before
        anything commits: cohort.pipelines.storage.preflight). Creates the default Iceberg catalog's directory (a
        SQLite file at the sink's root)."""
        tables = table_batch.open_tables(target)  # through its module: the tests and the fault harness replace it
        for table in tables.both():
            if arrow_filesystem(table.root) is None:
                raise SinkError(
                    f"a {target.table_format} sink needs a root pyarrow reaches (a local path or URI): {table.root}"
                )
        with timed(stages, "probe"):
            for root in sorted({target.sink_root, target.quarantine_root}):
                probe_root(root, write=True)
        fs = ArrowFs()
        if target.default_catalog:
            fs.make_dirs(target.sink_root)  # the default catalog is a SQLite file there
        sink, quarantine = SinkLayout(target.sink_root), SinkLayout(target.quarantine_root)
        return cls(tables, owner, sink, quarantine, fs, attempt, stages)

    def reconcile(self, ledger: OffsetLedger, partitions: Sequence[TopicPartition]) -> tuple[AdoptedRange, ...]:
        """Fence the partitions in both tables, adopt sink commits the ledger never saw, roll back orphaned
        quarantine commits (cohort.pipelines.tables.batch.reconcile_tables); the ranges adopted."""
        with timed(self.stages, "reconcile"):
            decisions = reconcile_tables(ledger, self.tables, self.owner, partitions)
        return tuple(AdoptedRange(r, d.adopt_run) for _, d in sorted(decisions.items()) for r in d.adopt)

    def complete(self, ledger: OffsetLedger, plan: BatchPlan) -> dict[TopicPartition, str]:
        """Nothing: a table commit is visible when it lands (one the ledger never saw is adopted by `reconcile`)."""
        return {}

    def staging(self, plan: BatchPlan, *, tasks_write: bool) -> tuple[StagedDirs, StagedDirs]:
        """Where the attempt writes (sink, quarantine): on an object store, when the reading tasks write both outputs,
        each table's own data directories (`DataDirLayout`: readers see nothing until the commit references the
        files, so nothing is copied into place); else the staging areas at the tables' roots."""
        if not (tasks_write and self._object_store()):
            return self.sink, self.quarantine
        directories = tuple(
            (*p.tp, data_dir(p.tp, p.from_offset, p.until_offset, self.attempt))
            for p in plan.partitions
            if p.must_commit
        )
        sink, quarantine = self.tables.sink.root, self.tables.quarantine.root
        return DataDirLayout(sink, self.attempt, directories), DataDirLayout(quarantine, self.attempt, directories)

    def _object_store(self) -> bool:
        """Whether both tables are on an object store (no rename: placing a staged file is a copy)."""
        for table in self.tables.both():
            resolved = arrow_filesystem(table.root)
            if resolved is None or not is_object_store(resolved[0]):
                return False
        return True

    def held(self, plan: BatchPlan, staging: tuple[StagedDirs, StagedDirs]) -> tuple[_Held, _Held]:
        """Each table's marks and replayed files before staging (the commit's compare-and-set expects those marks),
        and where the attempt writes it (`staging`: sink, quarantine); (sink, quarantine)."""
        with timed(self.stages, "verify"):
            pairs = ((self.tables.quarantine, staging[1]), (self.tables.sink, staging[0]))
            self.progress.held = {t.root: _Held.read(t, layout, self.owner, plan) for t, layout in pairs}
        return self.progress.held[self.tables.sink.root], self.progress.held[self.tables.quarantine.root]

    def commit(
        self,
        ledger: OffsetLedger,
        plan: BatchPlan,
        ranges: Sequence[OffsetRange],
        counts: Mapping[TopicPartition, StagedCounts],
        rows: StagedRows,
        run_id: str,
    ) -> OutputDirs:
        """Confirm the ledger still owns the partitions, commit the quarantine table (when it has something to
        commit), the sink table, then the ledger; each table's new data directories. Each table records the
        schema of its rows (`rows`), which creates it when the batch adds no file."""
        if ranges:
            quarantined = {tp: c.quarantined for tp, c in counts.items()}
            written = {tp: c.written for tp, c in counts.items()}
            with timed(self.stages, "commit"):
                _confirm_ownership(ledger, plan)
                record = BatchRecord(run_id, tuple(ranges))
                sink_schema, quarantine_schema = rows.schemas()  # a transform's sink rows have their own
                held = self.progress.held
                for output, schema in (
                    (
                        _Output(self.tables.quarantine, held[self.tables.quarantine.root].staging, quarantined),
                        quarantine_schema,
                    ),
                    (_Output(self.tables.sink, held[self.tables.sink.root].staging, written), sink_schema),
                ):
                    self._commit_table(output, plan, record, schema, rows.files)
                commit_ranges_to(ledger, ranges, run_id)
        done = self.progress.directories
        return tuple(done.get(self.tables.sink.root, ())), tuple(done.get(self.tables.quarantine.root, ()))

    def _commit_table(
        self,
        output: _Output,
        plan: BatchPlan,
        record: BatchRecord,
        schema: pa.Schema | None,
        reported: Mapping[str, tuple[StagedFile, ...]],
    ) -> None:
        """One table's commit of the batch, recorded in `progress` (tried, then landed) for `clean_up`."""
        table, held = output.table, self.progress.held[output.table.root]
        change = _change(self.fs, output, held, self.owner, plan, self.attempt, record, schema, reported)
        if table is self.tables.quarantine and not (change.adds or change.removes):
            self.progress.directories[table.root] = []  # nothing quarantined, nothing replaced: no commit
            return
        self.progress.pending[table.root] = change
        _commit_change(table, change)
        self.progress.directories[table.root] = sorted({_abs(table, f.path.rsplit("/", 1)[0]) for f in change.adds})

    def _keeps(self, table: TableStore) -> bool:
        """Whether a failed batch keeps its data directories in `table`: its commit there needed none, returned,
        or raised and landed all the same (`_landed`)."""
        done, tried = self.progress.directories, self.progress.pending
        return table.root in done or (table.root in tried and _landed(table, tried[table.root]))

    def clean_up(self, plan: BatchPlan, *, failed: bool) -> None:
        """Delete the staging areas; after a failure, also the attempt's data directories in each table whose
        commit did not land (its committed files stay: the next batch adopts or rolls back its commit)."""
        try:
            if failed:
                kept = [t for t in self.tables.both() if self._keeps(t)]
                _discard(self.fs, [t for t in self.tables.both() if t not in kept], self.attempt, plan)
        finally:  # where the attempt wrote (before staging began: the staging areas, in case)
            written = [held.staging for held in self.progress.held.values()] or [self.sink, self.quarantine]
            for layout in written:
                if isinstance(layout, SinkLayout):  # a DataDirLayout staged nothing: no listing to delete nothing
                    layout.discard_staging(self.fs, self.attempt)
