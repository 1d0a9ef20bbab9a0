"""The audit of a table sink (Delta Lake, Iceberg): the ledger, and each table's own record of one partition.

A table records what it holds in two ways, both compared with the ledger:

- its data files, whose directories name their offset range (`data/topic=<t>/partition=<p>/<from>-<until>-<attempt>/`):
  they are audited like the Parquet sink's range directories (cohort.pipelines.sink_audit), with the row counts
  the table keeps for each file;
- its per-partition marks (head offset, generation): a sink head beyond the ledger's is a table commit the
  ledger never saw (repair: adopt it, as the next batch would), a quarantine head beyond the sink's is a
  quarantine commit whose sink commit never landed (repair: roll it back). Both are the decisions a batch makes
  when it starts (cohort.pipelines.table_reconcile).

Data directories on disk that no table version references (a batch died between placing its files and its
table commit) are named too; deleting them is a repair (nothing reads them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from cohort.common.types import TopicPartition
from cohort.pipelines.sink import SinkFs
from cohort.pipelines.sink_audit import AuditedRange, PartitionRecords, SinkFinding
from cohort.pipelines.table_batch import orphan_dirs
from cohort.pipelines.table_reconcile import LedgerPosition, Reconcile, ahead_of_ledger, reconcile_partition
from cohort.pipelines.table_store import (
    DataFile,
    Owner,
    PartitionMark,
    TableCommit,
    TableStore,
)

__all__ = [
    "ADOPT",
    "DELETE_ORPHANS",
    "ROLL_BACK",
    "TABLE_REPAIR_HINTS",
    "TableAudit",
    "audit_table_partition",
    "repair_table_partition",
]

ADOPT = "adopt"
"""Repair: commit to the ledger the ranges of a sink-table commit the ledger never saw (as a batch would)."""
ROLL_BACK = "roll-back"
"""Repair: remove a quarantine-table commit whose sink-table commit never landed."""
DELETE_ORPHANS = "delete-orphans"
"""Repair: delete data directories no table version references (nothing reads them)."""
_MAX_MISSING_NAMED = 5
TABLE_REPAIR_HINTS = {
    ADOPT: "`cohort audit --repair` adopts it into the ledger",
    ROLL_BACK: "`cohort audit --repair` rolls it back",
    DELETE_ORPHANS: "`cohort audit --repair` deletes them",
}


@dataclass(frozen=True)
class TableAudit:
    """One partition's records and findings; `decision` and `orphans` are what a repair applies."""

    records: PartitionRecords
    findings: tuple[SinkFinding, ...]
    decision: Reconcile
    sink_mark: PartitionMark
    quarantine_mark: PartitionMark
    orphans: tuple[str, ...]


def _dirs(files: Sequence[DataFile]) -> list[tuple[int, int, int]]:
    """(from, until, rows) per data directory."""
    rows: dict[tuple[int, int, str], int] = {}
    for f in files:
        key = (f.from_offset, f.until_offset, f.attempt)
        rows[key] = rows.get(key, 0) + f.records
    return sorted((a, b, n) for (a, b, _), n in rows.items())


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
) -> TableAudit:
    """Audit one partition of a table sink; `ledger` is a Coordinator (history, offsets, last ranges); `tables`
    are (sink, quarantine). With `check_files`, every data file the tables reference must exist (one file-system
    query per file)."""
    sink, quarantine = tables
    entries = ledger.ledger_history(group, tp.topic, tp.partition)
    commits = [
        AuditedRange(e.from_offset, e.until_offset, e.records, e.quarantined, e.run_id, gap=e.gap_reason is not None)
        for e in entries
        if not e.is_reset
    ]
    head = ledger.fetch_offsets(group, [tp])[tp]
    position = LedgerPosition(head, bool(entries and entries[-1].is_reset))
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
    outputs = {"sink": _dirs(files[0]), "quarantine": _dirs(quarantine_files)}
    records = PartitionRecords(tp, tuple(commits), audited_head, outputs)
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
    return TableAudit(
        PartitionRecords(tp, tuple(commits), head, outputs),
        tuple(findings),
        decision,
        marks[0],
        marks[1],
        tuple(orphans),
    )


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
    return done
