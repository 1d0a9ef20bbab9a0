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

from bisect import bisect_right
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cohort.common.types import TopicPartition
from cohort.pipelines.sink.audit import OutsideFinding, PartitionRecords, Piece, SinkFinding, effective_pieces
from cohort.pipelines.sink.audit_ledger import AuditedRange, fold_ledger, ledger_entries
from cohort.pipelines.sink.layout import SinkFs
from cohort.pipelines.tables.batch import orphan_dirs
from cohort.pipelines.tables.compaction import source_ranges
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
from cohort.pipelines.tasks.writer import arrow_filesystem

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


def _by_piece(root: str, files: Sequence[DataFile], pieces: Sequence[Piece]) -> list[tuple[int, int, int]]:
    """(from, until, rows) per data directory, as the audit compares them with the ledger's pieces: a directory
    holding several committed ranges (a compaction's, or what a replay left of one) stands for one entry per piece
    it holds, with the rows counted from the ranges a merged file's footer records, else by their `kafka.offset`
    (its files' offsets column is read); one holding rows no piece accounts for is left whole (the audit names
    it)."""
    by_dir: dict[tuple[int, int, str], list[DataFile]] = {}
    for f in files:
        by_dir.setdefault((f.from_offset, f.until_offset, f.attempt), []).append(f)
    found: list[tuple[int, int, int]] = []
    for (a, b, _), held in by_dir.items():
        inside = [p for p in pieces if p.from_offset < b and a < p.until_offset]
        if len(inside) < 2:
            found.append((a, b, sum(f.records for f in held)))
            continue
        counts = _count_by_piece(root, held, inside)
        if counts is None:
            found.append((a, b, sum(f.records for f in held)))
        else:
            found += [(max(a, p.from_offset), min(b, p.until_offset), n) for p, n in zip(inside, counts, strict=True)]
    return sorted(found)


def _count_by_piece(root: str, files: Sequence[DataFile], pieces: Sequence[Piece]) -> list[int] | None:
    """Rows of `files` per piece (sorted, disjoint) by their `kafka.offset`; None when some row lies in no piece or
    the files cannot be read (the directory is then audited whole)."""
    resolved = arrow_filesystem(root)
    if resolved is None:
        return None
    filesystem, base = resolved
    starts = [p.from_offset for p in pieces]
    counts = [0] * len(pieces)
    for f in files:
        footer = _footer_counts(filesystem, f"{base}/{f.path}", f.records, pieces, starts)
        if footer is not None:
            counts = [n + m for n, m in zip(counts, footer, strict=True)]
            continue
        try:
            kafka = pq.read_table(f"{base}/{f.path}", columns=["kafka"], filesystem=filesystem).column("kafka")
        except (OSError, KeyError, pa.ArrowException):
            return None
        for offset in pc.struct_field(kafka, "offset").to_pylist():
            at = bisect_right(starts, offset) - 1 if offset is not None else -1
            if at < 0 or offset >= pieces[at].until_offset:
                return None
            counts[at] += 1
    return counts


def _footer_counts(
    filesystem: Any, path: str, records: int, pieces: Sequence[Piece], starts: Sequence[int]
) -> list[int] | None:
    """Rows per piece from a merged file's footer (the ranges compaction recorded there), when they add up to the
    rows the table records and each lies inside one piece; else None (the rows' offsets are read)."""
    try:
        ranges = source_ranges(pq.read_metadata(path, filesystem=filesystem).metadata)
    except (OSError, pa.ArrowException):
        return None
    if ranges is None or sum(n for _, _, n in ranges) != records:
        return None
    counts = [0] * len(pieces)
    for a, b, n in ranges:
        at = bisect_right(starts, a) - 1
        if at < 0 or b > pieces[at].until_offset:
            return None
        counts[at] += n
    return counts


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
    commits = list(fold.commits)
    head = fold.head
    position = LedgerPosition(head, fold.after_reset)
    exists = (sink.exists(), quarantine.exists())
    marks = [
        t.marks(group, [tp]).get(tp, PartitionMark()) if e else PartitionMark()
        for t, e in zip(tables, exists, strict=True)
    ]
    ahead = ahead_of_ledger(position, marks[0])
    batch = None if ahead is None else sink.last_batch(group, tp, ahead)
    decision = reconcile_partition(
        tp, Owner(group, None), position, marks[0], marks[1], sink_exists=exists[0], quarantine_exists=exists[1],
        sink_batch=batch,
    )  # fmt: skip
    files = [t.files([tp]) if e else [] for t, e in zip(tables, exists, strict=True)]
    findings: list[SinkFinding] = []
    audited_head = head
    if decision.adopt:  # audit the files as if adopted: the finding below names the commit
        commits += [
            AuditedRange(
                r.from_offset,
                r.until_offset,
                r.records,
                r.quarantined,
                decision.adopt_run,
                gap=r.gap_reason is not None,
            )
            for r in decision.adopt
        ]
        audited_head = decision.adopt[-1].until_offset
        span = f"[{decision.adopt[0].from_offset}, {audited_head})"
        findings.append(
            SinkFinding(
                tp,
                "sink",
                f"the sink table holds commit {span} of run {decision.adopt_run} that the ledger never saw",
                ADOPT,
            )
        )
    quarantine_files = files[1]
    if decision.roll_back_from is not None:
        cut = decision.roll_back_from
        quarantine_files = [f for f in files[1] if f.until_offset <= cut]
        findings.append(
            SinkFinding(
                tp,
                "quarantine",
                f"the quarantine table holds offsets from {cut} whose sink-table commit never landed (a batch died "
                "between its two table commits)",
                ROLL_BACK,
            )
        )
    if decision.problem:
        findings.append(SinkFinding(tp, "sink", decision.problem))
    pieces = effective_pieces(commits)
    outputs = {
        "sink": _by_piece(sink.root, files[0], pieces),
        "quarantine": _by_piece(quarantine.root, quarantine_files, pieces),
    }
    for where, table, there in (("sink", sink, exists[0]), ("quarantine", quarantine, exists[1])):
        foreign = table.foreign_files() if there else []
        if foreign:
            findings.append(SinkFinding(tp, where, _foreign_message(table.root, foreign)))
    records = PartitionRecords(tp, tuple(commits), audited_head, outputs, pending=fold.pending)
    findings += records.audit(kafka_committed, compare_kafka=compare_kafka)
    if compare_kafka and decision.adopt:  # Kafka is compared with the ledger as it is, not as adopted
        findings = [f for f in findings if f.where != "kafka"]
        findings += PartitionRecords(tp, (), head, {}).audit(kafka_committed, compare_kafka=True)
    if check_files:
        for where, table, held in (("sink", sink, files[0]), ("quarantine", quarantine, files[1])):
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
                findings.append(
                    SinkFinding(tp, where, f"{len(missing) - _MAX_MISSING_NAMED} more data files are missing")
                )
    orphans = [path for t, mark in zip(tables, marks, strict=True) for path in orphan_dirs(fs, t, tp, mark)]
    if orphans:
        findings.append(
            SinkFinding(
                tp,
                "sink",
                f"{len(orphans)} data director{'y' if len(orphans) == 1 else 'ies'} no table commit references "
                "(a batch died before its table commit)",
                DELETE_ORPHANS,
            )
        )
    stale, deleted = _unreferenced_findings(tp, on_disk, orphans) if on_disk is not None else ([], [])
    findings += stale
    return TableAudit(
        PartitionRecords(tp, tuple(commits), head, outputs, pending=fold.pending),
        tuple(findings),
        decision,
        marks[0],
        marks[1],
        tuple(orphans),
        tuple(deleted),
    )


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
