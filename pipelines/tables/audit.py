"""The audit of a table sink (Delta Lake, Iceberg): the ledger, and each table's own record of one partition.

A table records what it holds in two ways, both compared with the ledger:

- its data files, whose directories name their offset range (`data/topic=<t>/partition=<p>/<from>-<until>-<attempt>/`):
  they are audited like the Parquet sink's range directories (cohort.pipelines.sink.audit), with the row counts
  the table keeps for each file;
- its per-partition marks (head offset, generation): a sink head beyond the ledger's is a table commit the
  ledger never saw (repair: adopt it, as the next batch would), a quarantine head beyond the sink's is a
  quarantine commit whose sink commit never landed (repair: roll it back). Both are the decisions a batch makes
  when it starts (cohort.pipelines.tables.reconcile).

Data directories on disk that no table version references (a batch died between placing its files and its
table commit) are named too; deleting them is a repair (nothing reads them): those starting at or beyond the
partition's head at once (what a batch sweeps), any other data file no version of the table references once it is
older than a grace period (cohort.pipelines.tables.files: a commit that never landed, or was refused or rolled
back, during a replay or by a zombie).

The ledger is read page by page (cohort.pipelines.sink.audit_ledger), and a replay an offset reset left pending is said,
not counted as a divergence.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from cohort.common.types import TopicPartition
from cohort.pipelines.sink.audit import OutsideFinding, PartitionRecords, SinkFinding, effective_pieces
from cohort.pipelines.sink.audit_ledger import AuditedRange, LedgerFold, fold_ledger, ledger_entries
from cohort.pipelines.sink.layout import SinkFs
from cohort.pipelines.tables.audit_pieces import rows_by_piece
from cohort.pipelines.tables.batch import orphan_dirs
from cohort.pipelines.tables.files import (
    UNREFERENCED_GRACE_S,
    DiskFile,
    data_files_on_disk,
    references,
    unreferenced,
)
from cohort.pipelines.tables.reconcile import LedgerPosition, Reconcile, ahead_of_ledger, reconcile_partition
from cohort.pipelines.tables.store import (
    DataFile,
    Owner,
    PartitionMark,
    TableCommit,
    TableStore,
    parse_data_path,
)

__all__ = [
    "ADOPT",
    "DELETE_ORPHANS",
    "DELETE_UNREFERENCED",
    "ROLL_BACK",
    "TABLE_REPAIR_HINTS",
    "TableAudit",
    "TableFiles",
    "audit_table_partition",
    "delete_unreferenced",
    "repair_table_partition",
    "unreferenced_outside",
    "unreferenced_table_files",
]

ADOPT = "adopt"
"""Repair: commit to the ledger the ranges of a sink-table commit the ledger never saw (as a batch would)."""
ROLL_BACK = "roll-back"
"""Repair: remove a quarantine-table commit whose sink-table commit never landed."""
DELETE_ORPHANS = "delete-orphans"
"""Repair: delete data directories no table version references (nothing reads them)."""
DELETE_UNREFERENCED = "delete-unreferenced"
"""Repair: delete data files no version of the table references, older than the grace period."""
_MAX_MISSING_NAMED = 5
TABLE_REPAIR_HINTS = {
    ADOPT: "`cohort audit --repair` adopts it into the ledger",
    ROLL_BACK: "`cohort audit --repair` rolls it back",
    DELETE_ORPHANS: "`cohort audit --repair` deletes them",
    DELETE_UNREFERENCED: "`cohort audit --repair` deletes them",
}
_OUTPUTS = ("sink", "quarantine")


@dataclass(frozen=True)
class TableFiles:
    """Per output ("sink", "quarantine"): the table's root, its data files no version references that are old
    enough to judge, and how many younger ones there are (a commit may be in flight: left alone)."""

    roots: Mapping[str, str] = field(default_factory=dict)
    old: Mapping[str, tuple[DiskFile, ...]] = field(default_factory=dict)
    young: Mapping[str, int] = field(default_factory=dict)
    grace_s: float = UNREFERENCED_GRACE_S

    def of(self, where: str, tp: TopicPartition) -> list[DiskFile]:
        """The old unreferenced files in `tp`'s folder of one output."""
        return [f for f in self.old.get(where, ()) if _tp_of(f) == tp]

    def outside(self, where: str, partitions: Collection[TopicPartition]) -> list[DiskFile]:
        """The old unreferenced files of one output outside the folders of `partitions`."""
        wanted = set(partitions)
        return [f for f in self.old.get(where, ()) if _tp_of(f) not in wanted]

    def outside_paths(self, partitions: Collection[TopicPartition]) -> list[str]:
        """The absolute paths of the old unreferenced files of both outputs outside the folders of `partitions`."""
        return [f"{self.roots[w]}/{f.path}" for w in self.old for f in self.outside(w, partitions)]

    def without(self, paths: Collection[str]) -> TableFiles:
        """These files less the absolute `paths` (deleted by a repair)."""
        gone = set(paths)
        old = {w: tuple(f for f in fs if f"{self.roots[w]}/{f.path}" not in gone) for w, fs in self.old.items()}
        return replace(self, old=old)


def _tp_of(f: DiskFile) -> TopicPartition | None:
    parsed = parse_data_path(f.path, 0)
    return None if parsed is None else parsed.tp


def unreferenced_table_files(
    tables: tuple[TableStore, TableStore], *, now: float, grace_s: float = UNREFERENCED_GRACE_S
) -> TableFiles:
    """The data files of both tables that no version references (`now` from the caller's clock). Each data folder
    is listed before the table's versions are read: a file committed meanwhile is found referenced."""
    roots, old, young = {}, {}, {}
    for where, table in zip(_OUTPUTS, tables, strict=True):
        roots[where] = table.root
        on_disk = data_files_on_disk(table.root)
        known = references(table) if on_disk else None
        found = unreferenced(on_disk, *known, now=now, grace_s=grace_s) if known is not None else None
        old[where] = found.old if found is not None else ()
        young[where] = found.young if found is not None else 0
    return TableFiles(roots, old, young, grace_s)


def _grace(seconds: float) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds:g} s"


def _unreferenced_message(root: str, files: Sequence[DiskFile], grace_s: float) -> str:
    folders = sorted({f.path.rsplit("/", 1)[0] for f in files})
    named = ", ".join(f"{root}/{d}" for d in folders[:_MAX_MISSING_NAMED])
    more = f" and {len(folders) - _MAX_MISSING_NAMED} more" if len(folders) > _MAX_MISSING_NAMED else ""
    count = f"{len(files)} data file{'' if len(files) == 1 else 's'}"
    return (
        f"{count} in {named}{more}: no version of the table references them and they are older than "
        f"{_grace(grace_s)} (a commit that never landed, or was refused or rolled back); nothing reads them"
    )


def unreferenced_outside(files: TableFiles, partitions: Collection[TopicPartition]) -> list[OutsideFinding]:
    """The old unreferenced files outside the data folders of the ledger's `partitions`, one finding per output."""
    found = []
    for where in files.old:
        outside = files.outside(where, partitions)
        if outside:
            root = files.roots[where]
            message = _unreferenced_message(root, outside, files.grace_s)
            found.append(OutsideFinding(where, f"{root}/{outside[0].path}", message, DELETE_UNREFERENCED))
    return found


def delete_unreferenced(fs: SinkFs, paths: Sequence[str]) -> None:
    """Delete unreferenced data files, then each folder of theirs that holds no data file any more."""
    for path in paths:
        fs.delete(path)
    for folder in sorted({p.rsplit("/", 1)[0] for p in paths}):
        if not any(n.endswith(".parquet") and not n.startswith(("_", ".")) for n in fs.list_names(folder)):
            fs.delete(folder)


@dataclass(frozen=True)
class TableAudit:
    """One partition's records and findings; `decision`, `orphans` and `unreferenced` (files) are what a repair
    applies."""

    records: PartitionRecords
    findings: tuple[SinkFinding, ...]
    decision: Reconcile
    sink_mark: PartitionMark
    quarantine_mark: PartitionMark
    orphans: tuple[str, ...]
    unreferenced: tuple[str, ...] = ()


def _foreign_message(root: str, paths: Sequence[str]) -> str:
    named = ", ".join(f"{root}/{p}" if "://" not in p and not p.startswith("/") else p for p in paths[:3])
    more = f" and {len(paths) - 3} more" if len(paths) > 3 else ""
    count = f"{len(paths)} data file{'' if len(paths) == 1 else 's'}"
    return (
        f"the table references {count} outside Cohort's layout ({named}{more}): a compaction or a writer Cohort did "
        "not make; their offsets are not counted here and a replay would not replace them (its offsets would be "
        "read twice); not repaired (restore the table's version before that compaction, or have its owner undo it)"
    )


def audit_table_partition(
    ledger: Any,
    group: str,
    tp: TopicPartition,
    tables: tuple[TableStore, TableStore],
    fs: SinkFs,
    kafka_committed: int | None = None,
    *,
    compare_kafka: bool = False,
    check_files: bool = True,
    on_disk: TableFiles | None = None,
) -> TableAudit:
    """Audit one partition of a table sink; `ledger` is a Coordinator (history, offsets, last ranges); `tables`
    are (sink, quarantine). With `check_files`, every data file the tables reference must exist (one file-system
    query per file). `on_disk`: the tables' unreferenced data files (`unreferenced_table_files`), named here for
    the partition's folders."""
    sink, quarantine = tables
    fold = fold_ledger(tp, ledger_entries(ledger, group, tp))
    exists = (sink.exists(), quarantine.exists())
    marks = _marks_of(tables, exists, group, tp)
    decision = _reconcile(group, tp, sink, fold, marks, exists)
    files = (sink.files([tp]) if exists[0] else [], quarantine.files([tp]) if exists[1] else [])
    audited = _as_adopted(tp, fold, decision)
    quarantine_files = _kept_quarantine_files(decision, files[1])
    findings = [*audited.findings, *_rollback_findings(tp, decision), *_problem_findings(tp, decision)]
    pieces = effective_pieces(audited.commits)
    outputs = {
        "sink": rows_by_piece(sink.root, files[0], pieces),
        "quarantine": rows_by_piece(quarantine.root, quarantine_files, pieces),
    }
    findings += _foreign_findings(tp, tables, exists)
    records = PartitionRecords(tp, audited.commits, audited.head, outputs, pending=fold.pending)
    findings += _records_findings(records, fold.head, kafka_committed, compare_kafka, adopted=bool(decision.adopt))
    if check_files:
        findings += _missing_file_findings(tp, tables, files, fs)
    orphans = [path for t, mark in zip(tables, marks, strict=True) for path in orphan_dirs(fs, t, tp, mark)]
    findings += _orphan_findings(tp, orphans)
    stale, deleted = _unreferenced_findings(tp, on_disk, orphans) if on_disk is not None else ([], [])
    findings += stale
    return TableAudit(
        PartitionRecords(tp, audited.commits, fold.head, outputs, pending=fold.pending),
        tuple(findings),
        decision,
        marks[0],
        marks[1],
        tuple(orphans),
        tuple(deleted),
    )


@dataclass(frozen=True)
class _Audited:
    """The ledger the tables' files are audited against: its commits plus those a repair would adopt, the head
    they reach, and the finding that names the commit to adopt (if any)."""

    commits: tuple[AuditedRange, ...]
    head: int | None
    findings: tuple[SinkFinding, ...]


def _marks_of(
    tables: tuple[TableStore, TableStore], exists: tuple[bool, bool], group: str, tp: TopicPartition
) -> tuple[PartitionMark, PartitionMark]:
    """The partition's marks in each table (empty marks for a table that does not exist)."""
    sink, quarantine = (
        t.marks(group, [tp]).get(tp, PartitionMark()) if e else PartitionMark()
        for t, e in zip(tables, exists, strict=True)
    )
    return sink, quarantine


def _reconcile(
    group: str,
    tp: TopicPartition,
    sink: TableStore,
    fold: LedgerFold,
    marks: tuple[PartitionMark, PartitionMark],
    exists: tuple[bool, bool],
) -> Reconcile:
    """The decision a batch starting now would make about the tables' marks against the ledger (what to adopt,
    what to roll back, what refuses), with the sink's batch record of a commit ahead of the ledger."""
    position = LedgerPosition(fold.head, fold.after_reset)
    ahead = ahead_of_ledger(position, marks[0])
    batch = None if ahead is None else sink.last_batch(group, tp, ahead)
    return reconcile_partition(
        tp, Owner(group, None), position, marks[0], marks[1], sink_exists=exists[0], quarantine_exists=exists[1],
        sink_batch=batch,
    )  # fmt: skip


def _as_adopted(tp: TopicPartition, fold: LedgerFold, decision: Reconcile) -> _Audited:
    """The ledger's commits, plus the sink-table commit the ledger never saw as if adopted (the files are
    audited so, and a finding names the commit)."""
    if not decision.adopt:
        return _Audited(tuple(fold.commits), fold.head, ())
    adopted = tuple(
        AuditedRange(
            r.from_offset, r.until_offset, r.records, r.quarantined, decision.adopt_run, gap=r.gap_reason is not None
        )
        for r in decision.adopt
    )
    head = decision.adopt[-1].until_offset
    span = f"[{decision.adopt[0].from_offset}, {head})"
    message = f"the sink table holds commit {span} of run {decision.adopt_run} that the ledger never saw"
    return _Audited((*fold.commits, *adopted), head, (SinkFinding(tp, "sink", message, ADOPT),))


def _kept_quarantine_files(decision: Reconcile, files: Sequence[DataFile]) -> list[DataFile]:
    """The quarantine table's files the audit compares: those a roll-back would keep."""
    cut = decision.roll_back_from
    return list(files) if cut is None else [f for f in files if f.until_offset <= cut]


def _rollback_findings(tp: TopicPartition, decision: Reconcile) -> list[SinkFinding]:
    """A quarantine-table commit whose sink-table commit never landed (a roll-back repairs it)."""
    if decision.roll_back_from is None:
        return []
    message = (
        f"the quarantine table holds offsets from {decision.roll_back_from} whose sink-table commit never landed "
        "(a batch died between its two table commits)"
    )
    return [SinkFinding(tp, "quarantine", message, ROLL_BACK)]


def _problem_findings(tp: TopicPartition, decision: Reconcile) -> list[SinkFinding]:
    """What the reconciliation refuses (no repair)."""
    return [SinkFinding(tp, "sink", decision.problem)] if decision.problem else []


def _foreign_findings(
    tp: TopicPartition, tables: tuple[TableStore, TableStore], exists: tuple[bool, bool]
) -> list[SinkFinding]:
    """The data files each table references outside Cohort's layout."""
    findings = []
    for where, table, there in zip(_OUTPUTS, tables, exists, strict=True):
        foreign = table.foreign_files() if there else []
        if foreign:
            findings.append(SinkFinding(tp, where, _foreign_message(table.root, foreign)))
    return findings


def _records_findings(
    records: PartitionRecords, head: int | None, kafka_committed: int | None, compare_kafka: bool, *, adopted: bool
) -> list[SinkFinding]:
    """The files' records against the (adopted) ledger; Kafka is compared with the ledger as it is (`head`), not
    as adopted."""
    findings = records.audit(kafka_committed, compare_kafka=compare_kafka)
    if compare_kafka and adopted:
        findings = [f for f in findings if f.where != "kafka"]
        findings += PartitionRecords(records.tp, (), head, {}).audit(kafka_committed, compare_kafka=True)
    return findings


def _missing_file_findings(
    tp: TopicPartition,
    tables: tuple[TableStore, TableStore],
    files: tuple[Sequence[DataFile], Sequence[DataFile]],
    fs: SinkFs,
) -> list[SinkFinding]:
    """The data files the tables reference that are not on disk (the first few named, the rest counted)."""
    findings = []
    for where, table, held in zip(_OUTPUTS, tables, files, strict=True):
        missing = [f for f in held if not fs.exists(f"{table.root}/{f.path}")]
        findings += [
            SinkFinding(
                tp,
                where,
                f"data file {f.path} of range [{f.from_offset}, {f.until_offset}) is referenced by the table but "
                "missing: readers of the table fail; not repaired (restore the file, or replay the offsets)",
            )
            for f in missing[:_MAX_MISSING_NAMED]
        ]
        if len(missing) > _MAX_MISSING_NAMED:
            findings.append(SinkFinding(tp, where, f"{len(missing) - _MAX_MISSING_NAMED} more data files are missing"))
    return findings


def _orphan_findings(tp: TopicPartition, orphans: Sequence[str]) -> list[SinkFinding]:
    """The data directories no table commit references (deleting them is a repair)."""
    if not orphans:
        return []
    message = (
        f"{len(orphans)} data director{'y' if len(orphans) == 1 else 'ies'} no table commit references "
        "(a batch died before its table commit)"
    )
    return [SinkFinding(tp, "sink", message, DELETE_ORPHANS)]


def _unreferenced_findings(
    tp: TopicPartition, on_disk: TableFiles, orphans: Sequence[str]
) -> tuple[list[SinkFinding], list[str]]:
    """The findings on `tp`'s old unreferenced files (those in its orphan directories are named already), and the
    files' absolute paths."""
    findings, paths = [], []
    for where in _OUTPUTS:
        root = on_disk.roots[where]
        stale = [f for f in on_disk.of(where, tp) if not any(f"{root}/{f.path}".startswith(f"{o}/") for o in orphans)]
        if stale:
            message = _unreferenced_message(root, stale, on_disk.grace_s)
            findings.append(SinkFinding(tp, where, message, DELETE_UNREFERENCED))
            paths += [f"{root}/{f.path}" for f in stale]
    return findings, paths


def repair_table_partition(
    audit: TableAudit, group: str, ledger: Any, tables: tuple[TableStore, TableStore], fs: SinkFs
) -> list[str]:
    """Apply the safe repairs of one partition (the caller made sure the group has no members); what was done.
    `ledger` is the group's standalone ledger (cohort.assignment.coordinator.StandaloneLedger)."""
    done: list[str] = []
    tp, decision = audit.records.tp, audit.decision
    repairs = {f.repair for f in audit.findings}
    if ADOPT in repairs and decision.adopt:
        ledger.commit(
            [replace(r, note="adopted from the sink table") for r in decision.adopt], run_id=decision.adopt_run
        )
        done.append(f"adopted [{decision.adopt[0].from_offset}, {decision.adopt[-1].until_offset}) into the ledger")
    if ROLL_BACK in repairs and decision.roll_back_from is not None:
        cut = decision.roll_back_from
        quarantine = tables[1]
        removes = tuple(f for f in quarantine.files([tp]) if f.until_offset > cut)
        quarantine.commit(
            TableCommit(Owner(group, None), {tp: audit.quarantine_mark}, heads={tp: cut}, removes=removes)
        )
        done.append(f"rolled back the quarantine table's offsets from {cut}")
    if DELETE_ORPHANS in repairs:
        for path in audit.orphans:
            fs.delete(path)
        done.append(f"deleted {len(audit.orphans)} unreferenced data directories")
    if DELETE_UNREFERENCED in repairs and audit.unreferenced:
        delete_unreferenced(fs, audit.unreferenced)
        done.append(f"deleted {len(audit.unreferenced)} data files no version of the table references")
    return done
