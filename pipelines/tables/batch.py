"""A group's two tables as a batch finds them (Delta Lake or Apache Iceberg): opening the pair at a `TableTarget`
(`open_tables`, the seam tests and the fault harness replace), who commits to them (`owner_of`), the reconcile
before planning and the sweep of data directories no commit references.

**Reconcile** (`reconcile_tables`, the decisions in cohort.pipelines.tables.reconcile): before a batch plans, the
member fences its partitions in both tables with its generation, adopts into the ledger a sink commit the ledger
never saw (a batch that died between its table commit and its ledger commit), and rolls back a quarantine commit
whose sink commit never landed; then it sweeps the partitions' orphaned data directories (`sweep`). The batch's
own table commits are the table sink's (cohort.pipelines.batch.table_sink).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from cohort.common.ledger import OffsetLedger
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.planning.positions import RangeLedger
from cohort.pipelines.sink.layout import SinkFs
from cohort.pipelines.storage.parallel import in_parallel
from cohort.pipelines.tables.reconcile import LedgerPosition, Reconcile, ahead_of_ledger, problems, reconcile_partition
from cohort.pipelines.tables.store import (
    Owner,
    PartitionMark,
    TableCommit,
    TableConflictError,
    TableStore,
    data_dir,
    parse_data_path,
)
from cohort.pipelines.tables.target import TableTarget
from cohort.pipelines.tasks.writer import ArrowFs

__all__ = [
    "TablePair",
    "open_tables",
    "orphan_dirs",
    "owner_of",
    "reconcile_tables",
    "sweep",
]


@dataclass(frozen=True)
class TablePair:
    """A group's two tables: the sink's and the quarantine's."""

    sink: TableStore
    quarantine: TableStore

    def both(self) -> tuple[TableStore, TableStore]:
        return self.quarantine, self.sink


def open_tables(target: TableTarget) -> TablePair:
    """The sink and quarantine tables of `target` (a spec's is `PipelineSpec.table_target`): Delta tables at the
    roots, or Iceberg tables of the SQL catalog at its URL located at the roots."""
    retention = target.retention
    if target.table_format == "delta":
        from cohort.pipelines.tables.delta.store import DeltaTableStore

        return TablePair(
            DeltaTableStore(target.sink_root, retention=retention),
            DeltaTableStore(target.quarantine_root, retention=retention),
        )
    if target.table_format == "iceberg" and target.catalog_url is not None and target.identifiers is not None:
        from cohort.pipelines.tables.iceberg.store import IcebergTableStore

        url, (sink_id, quarantine_id) = target.catalog_url, target.identifiers
        return TablePair(
            IcebergTableStore(target.sink_root, catalog_url=url, identifier=sink_id, retention=retention),
            IcebergTableStore(target.quarantine_root, catalog_url=url, identifier=quarantine_id, retention=retention),
        )
    raise ValueError(f"{target.table_format!r} is not a table format (delta; iceberg with a catalog and identifiers)")


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
    data directories no commit references (after the fences: no zombie can commit them any more), the partitions of
    both tables side by side."""
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
    swept = [
        (table, tp, marks.get(tp, PartitionMark()))
        for table, marks in ((tables.quarantine, after), (tables.sink, sink_marks))
        for tp in sorted(decisions)
    ]
    in_parallel(lambda job: sweep(fs, *job), swept)  # side by side: on an object store, each is a few listings


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
