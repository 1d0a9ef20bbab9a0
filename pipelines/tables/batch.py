"""One bounded batch into a table sink (Delta Lake or Apache Iceberg): reconcile -> plan -> read -> stage ->
quarantine table commit -> sink table commit -> ledger commit -> Kafka mirror.

The reading, decoding, validation and counting are those of the Parquet sink (cohort.pipelines.batch.run): the
tasks write both outputs into `<table>/_staging/<attempt>/`. What differs is how the output becomes visible:

1. **Reconcile** (cohort.pipelines.tables.reconcile), before planning: the member fences its partitions in both
   tables with its generation, adopts into the ledger a sink commit the ledger never saw, and rolls back a
   quarantine commit whose sink commit never landed.
2. After the counts check, the batch asks the ledger whether it still owns its partitions (an empty commit:
   fenced like a commit, it records nothing), so a member the coordinator already fenced never reaches a table.
3. Each partition's staged output moves to `<table>/data/topic=<t>/partition=<p>/<from>-<until>-<attempt>/`,
   invisible to readers until a commit references it. A replay removes the files holding the offsets it re-read
   (those it cuts are rewritten without them) in the same commit.
4. The quarantine table commits (when the batch quarantined or replaced something there), then the sink table:
   each one atomic commit that also moves the partitions' marks with a compare-and-set
   (cohort.pipelines.tables.store), so a zombie fenced in the table, or a second attempt of a commit that
   landed, changes nothing.
5. The ledger commit, then the Kafka mirror. A ledger commit that fails after the sink commit leaves a table
   commit the ledger never saw: the next batch of the partition adopts it (step 1).
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cohort.common.ledger import OffsetLedger, OffsetMirror
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.batch.commit import commit_ranges, commit_ranges_to, mirror_commits, partition_result
from cohort.pipelines.batch.results import AdoptedRange, BatchResult
from cohort.pipelines.batch.stage import stage_outputs, timed
from cohort.pipelines.formats.readers import resolve_readers
from cohort.pipelines.planning.batch_plan import plan_for
from cohort.pipelines.planning.plan import BatchPlan
from cohort.pipelines.planning.positions import RangeLedger
from cohort.pipelines.replay.check import refuse_changed
from cohort.pipelines.sink.layout import SinkError, SinkFs, SinkLayout, attempt_id
from cohort.pipelines.sink.staging_collect import staging_roots, tidy_staging
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tables.reconcile import LedgerPosition, Reconcile, ahead_of_ledger, problems, reconcile_partition
from cohort.pipelines.tables.retention import DEFAULT_RETENTION, TableRetention
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
    parse_data_path,
)
from cohort.pipelines.tasks.writer import ArrowFs, arrow_filesystem

__all__ = [
    "TablePair",
    "open_tables",
    "orphan_dirs",
    "owner_of",
    "reconcile_tables",
    "run_table_batch",
    "sweep",
    "table_pair",
]


@dataclass(frozen=True)
class TablePair:
    """A group's two tables: the sink's and the quarantine's."""

    sink: TableStore
    quarantine: TableStore

    def both(self) -> tuple[TableStore, TableStore]:
        return self.quarantine, self.sink


def open_tables(spec: PipelineSpec) -> TablePair:
    """The spec's sink and quarantine tables in its `table_format` (delta or iceberg)."""
    if spec.table_format == "iceberg":
        return table_pair(
            "iceberg",
            spec.sink_path,
            spec.quarantine_root,
            spec.iceberg_catalog_url,
            spec.iceberg_identifiers,
            retention=spec.table_retention,
        )
    return table_pair(spec.table_format, spec.sink_path, spec.quarantine_root, retention=spec.table_retention)


def table_pair(
    table_format: str,
    sink_root: str,
    quarantine_root: str,
    catalog_url: str | None = None,
    identifiers: tuple[str, str] | None = None,
    *,
    retention: TableRetention | None = DEFAULT_RETENTION,
) -> TablePair:
    """The two tables of a sink: Delta tables at the roots, or Iceberg tables `identifiers` of the SQL catalog at
    `catalog_url` located at the roots; `retention`: how long they keep old versions (None: forever)."""
    if table_format == "delta":
        from cohort.pipelines.tables.delta import DeltaTableStore

        return TablePair(
            DeltaTableStore(sink_root, retention=retention), DeltaTableStore(quarantine_root, retention=retention)
        )
    if table_format == "iceberg" and catalog_url is not None and identifiers is not None:
        from cohort.pipelines.tables.iceberg import IcebergTableStore

        sink_id, quarantine_id = identifiers
        return TablePair(
            IcebergTableStore(sink_root, catalog_url=catalog_url, identifier=sink_id, retention=retention),
            IcebergTableStore(quarantine_root, catalog_url=catalog_url, identifier=quarantine_id, retention=retention),
        )
    raise ValueError(f"{table_format!r} is not a table format (delta; iceberg with a catalog and identifiers)")


def owner_of(ledger: OffsetLedger, group: str | None) -> Owner:
    """Who commits to the tables: the ledger's group (or `group`) and its member's generation, if it has one."""
    name = group or getattr(ledger, "group", None)
    if not isinstance(name, str):
        raise ValueError("a table sink needs the group's name: pass `group`, or a ledger of a group (GroupMember)")
    generation = getattr(ledger, "generation", None)
    return Owner(name, generation if isinstance(generation, int) and generation >= 0 else None)


def _range_ledger(ledger: OffsetLedger) -> RangeLedger:
    if not isinstance(ledger, RangeLedger):
        raise ValueError(
            "a table sink needs a ledger that reports committed ranges (GroupMember, StandaloneLedger): it adopts "
            "table commits the ledger never saw"
        )
    return ledger


def reconcile_tables(
    ledger: OffsetLedger, tables: TablePair, owner: Owner, partitions: Sequence[TopicPartition]
) -> dict[TopicPartition, Reconcile]:
    """Decide and apply, per partition (cohort.pipelines.tables.reconcile); TableConflictError naming every
    partition that cannot go on (fenced, or a divergence Cohort cannot have made)."""
    tps = sorted(set(partitions))
    if not tps:
        return {}
    entries = _range_ledger(ledger).last_committed(tps)
    heads = ledger.committed_offsets(tps)
    exists = {table.root: table.exists() for table in tables.both()}
    sink_marks = tables.sink.marks(owner.group, tps) if exists[tables.sink.root] else {}
    quarantine_marks = tables.quarantine.marks(owner.group, tps) if exists[tables.quarantine.root] else {}
    decisions: dict[TopicPartition, Reconcile] = {}
    for tp in tps:
        entry = entries.get(tp)
        position = LedgerPosition(heads.get(tp), bool(entry is not None and getattr(entry, "is_reset", False)))
        sink = sink_marks.get(tp, PartitionMark())
        ahead = ahead_of_ledger(position, sink)
        decisions[tp] = reconcile_partition(
            tp,
            owner,
            position,
            sink,
            quarantine_marks.get(tp, PartitionMark()),
            sink_exists=exists[tables.sink.root],
            quarantine_exists=exists[tables.quarantine.root],
            sink_batch=None if ahead is None else tables.sink.last_batch(owner.group, tp, ahead),
        )
    stopped = problems(decisions)
    if stopped:
        raise TableConflictError("; ".join(stopped))
    _apply(ledger, tables, owner, decisions, sink_marks, quarantine_marks)
    return decisions


def _apply(
    ledger: OffsetLedger,
    tables: TablePair,
    owner: Owner,
    decisions: Mapping[TopicPartition, Reconcile],
    sink_marks: Mapping[TopicPartition, PartitionMark],
    quarantine_marks: Mapping[TopicPartition, PartitionMark],
) -> None:
    """Quarantine roll-backs and fences, sink fences, the ledger adoptions (each one atomic step), then the sweep of
    data directories no commit references (after the fences: no zombie can commit them any more)."""
    rolled = {tp: d.roll_back_from for tp, d in decisions.items() if d.roll_back_from is not None}
    touched = sorted({tp for tp, d in decisions.items() if d.fence_quarantine} | set(rolled))
    after = dict(quarantine_marks)
    if touched:
        removes = tuple(f for f in tables.quarantine.files(sorted(rolled)) if f.until_offset > rolled[f.tp])
        reaches = {tp: max(at, sink_marks.get(tp, PartitionMark()).reach or 0) for tp, at in rolled.items()}
        change = TableCommit(
            owner,
            {tp: quarantine_marks.get(tp, PartitionMark()) for tp in touched},
            heads=dict(rolled),
            removes=removes,
            reaches=reaches,
        )
        tables.quarantine.commit(change)
        after.update(change.marks())
    fenced = sorted(tp for tp, d in decisions.items() if d.fence_sink)
    if fenced:
        tables.sink.commit(TableCommit(owner, {tp: sink_marks.get(tp, PartitionMark()) for tp in fenced}))
    by_run: dict[str | None, list[OffsetRange]] = {}
    for _tp, d in sorted(decisions.items()):
        by_run.setdefault(d.adopt_run, []).extend(replace(r, note="adopted from the sink table") for r in d.adopt)
    for run, ranges in by_run.items():
        if ranges:
            ledger.commit(ranges, run_id=run)
    fs = ArrowFs()
    for table, marks in ((tables.quarantine, after), (tables.sink, sink_marks)):
        for tp in sorted(decisions):
            sweep(fs, table, tp, marks.get(tp, PartitionMark()))


def orphan_dirs(fs: SinkFs, table: TableStore, tp: TopicPartition, mark: PartitionMark) -> list[str]:
    """`tp`'s data directories that no version of the table references: those starting at or beyond its head while
    nothing lies beyond it (no replay under way): files of a batch that died before its table commit, or of a
    quarantine commit rolled back. (During a replay, files a replay removed stay below the head for time travel.)"""
    if mark.head is not None and mark.reach is not None and mark.reach > mark.head:
        return []
    floor = mark.head or 0
    relative = data_dir(tp, 0, 0, "x").rsplit("/", 1)[0]
    found = []
    for name in fs.list_names(f"{table.root}/{relative}"):
        parsed = parse_data_path(f"{relative}/{name}/f", 0)
        if parsed is not None and parsed.from_offset >= floor:
            found.append(f"{table.root}/{relative}/{name}")
    return found


def sweep(fs: SinkFs, table: TableStore, tp: TopicPartition, mark: PartitionMark) -> list[str]:
    """Delete `orphan_dirs` (run only where no batch can still commit them: after the partition's fence)."""
    gone = orphan_dirs(fs, table, tp, mark)
    for path in gone:
        fs.delete(path)
    return gone


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
    layout: SinkLayout
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


def _place(fs: SinkFs, output: _Output, attempt: str, plan: BatchPlan) -> list[NewFile]:
    """Move each partition's staged output into its data directory; the files there."""
    added = []
    for p in plan.partitions:
        if not p.must_commit or not output.counts.get(p.tp):
            continue
        staged = output.layout.staged_range_dir(attempt, p.tp.topic, p.tp.partition)
        directory = data_dir(p.tp, p.from_offset, p.until_offset, attempt)
        if not fs.exists(_abs(output.table, directory)):
            fs.rename(staged, _abs(output.table, directory))
        added.extend(_new_files(fs, output.table, directory))
    return added


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
    staging: SinkLayout
    marks: Mapping[TopicPartition, PartitionMark]
    files: Mapping[TopicPartition, tuple[DataFile, ...]]

    @classmethod
    def read(cls, table: TableStore, staging: SinkLayout, owner: Owner, plan: BatchPlan) -> _Held:
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
) -> TableCommit:
    """One table's commit of the batch: its data directories placed, a replay's files replaced."""
    heads = {p.tp: p.until_offset for p in plan.partitions if p.must_commit}
    adds = _place(fs, output, attempt, plan)
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


def run_table_batch(
    spark: Any,
    spec: PipelineSpec,
    kafka_config: Mapping[str, Any],
    partitions: Sequence[TopicPartition],
    ledger: OffsetLedger,
    *,
    group: str | None = None,
    mirror: OffsetMirror | None = None,
    run_id: str | None = None,
    new_partitions: Collection[TopicPartition] = (),
) -> BatchResult:
    """`run_batch` (cohort.pipelines.batch.run) for a spec whose `table_format` is delta or iceberg (see the module
    doc)."""
    if (mirror is None) != (group is None):
        raise ValueError("give both `group` and `mirror` to mirror commits to Kafka, or neither")
    run_id = run_id or uuid.uuid4().hex
    attempt = attempt_id(run_id)
    owner = owner_of(ledger, group)
    tables = open_tables(spec)
    for table in tables.both():
        if arrow_filesystem(table.root) is None:
            raise SinkError(
                f"a {spec.table_format} sink needs a root pyarrow reaches (a local path or URI): {table.root}"
            )
    fs = ArrowFs()
    if spec.table_format == "iceberg" and spec.iceberg_catalog is None and spec.iceberg_catalog_env is None:
        fs.make_dirs(spec.sink_path)  # the default catalog is a SQLite file there
    stages: dict[str, float] = {}
    spec = resolve_readers(spec, {tp.topic for tp in partitions})
    with timed(stages, "reconcile"):
        decisions = reconcile_tables(ledger, tables, owner, partitions)
    adopted = tuple(AdoptedRange(r, d.adopt_run) for _, d in sorted(decisions.items()) for r in d.adopt)
    with timed(stages, "plan"):
        plan = plan_for(spark, spec, kafka_config, partitions, ledger, new_partitions=new_partitions)
    sink, quarantine = SinkLayout(spec.sink_path), SinkLayout(spec.quarantine_root)
    directories: dict[str, list[str]] = {}
    pending: dict[str, TableCommit] = {}
    try:
        with timed(stages, "verify"):
            pairs = ((tables.quarantine, quarantine), (tables.sink, sink))
            held = {t.root: _Held.read(t, layout, owner, plan) for t, layout in pairs}
        outputs = (held[tables.sink.root], held[tables.quarantine.root])
        stats, counts, checks = stage_outputs(spark, spec, kafka_config, plan, fs, attempt, stages, outputs)
        written = {tp: c.written for tp, c in counts.items()}
        quarantined = {tp: c.quarantined for tp, c in counts.items()}
        if spec.strict_replay:
            refuse_changed(checks)
        ranges = commit_ranges(plan, counts, checks)
        if ranges:
            with timed(stages, "commit"):
                _confirm_ownership(ledger, plan)
                record = BatchRecord(run_id, tuple(ranges))
                for output, schema in (
                    (_Output(tables.quarantine, quarantine, quarantined), spec.checker.quarantine_schema),
                    (_Output(tables.sink, sink, written), spec.checker.sink_schema if not spec.reshapes else None),
                ):
                    change = _change(fs, output, held[output.table.root], owner, plan, attempt, record, schema)
                    if output.table is tables.quarantine and not (change.adds or change.removes):
                        directories[output.table.root] = []  # nothing quarantined, nothing replaced: no commit
                        continue
                    pending[output.table.root] = change
                    _commit_change(output.table, change)
                    directories[output.table.root] = sorted(
                        {_abs(output.table, f.path.rsplit("/", 1)[0]) for f in change.adds}
                    )
                commit_ranges_to(ledger, ranges, run_id)
    except BaseException:
        kept = [
            t for t in tables.both() if t.root in directories or (t.root in pending and _landed(t, pending[t.root]))
        ]
        _discard(fs, [t for t in tables.both() if t not in kept], attempt, plan)
        raise
    finally:
        sink.discard_staging(fs, attempt)
        quarantine.discard_staging(fs, attempt)
    tidy_staging(fs, staging_roots(spec.sink_path, spec.quarantine_root, spec.table_format), ledger)
    mirror_error = None
    if mirror is not None:
        with timed(stages, "mirror"):
            mirror_error = mirror_commits(plan, ranges, ledger, mirror, group, run_id)
    return BatchResult(
        run_id=run_id,
        partitions=tuple(partition_result(p, stats, counts, None, checks.get(p.tp)) for p in plan.partitions),
        committed=tuple(ranges),
        sink_dirs=tuple(directories.get(tables.sink.root, ())),
        quarantine_dirs=tuple(directories.get(tables.quarantine.root, ())),
        stage_seconds=stages,
        mirror_error=mirror_error,
        adopted=adopted,
    )
