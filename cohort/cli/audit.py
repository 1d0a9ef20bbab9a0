"""`cohort audit`: per partition, the ledger, Kafka's committed offsets and the sink's own record, side by side.

Gathering reads the coordinator's ledger (page by page), the sink's and the quarantine's trees (through pyarrow:
names and Parquet footers, no data) and, with `--bootstrap-servers`, Kafka's committed offsets; the comparison
is `cohort.pipelines.sink.audit` (and `table_audit` for Delta and Iceberg). Besides the partitions, it names
what readers read outside the ledger's partition folders (and, for a table, old data files no version
references). A replay an offset reset left pending is said, and is no divergence. `--repair` applies the safe
repairs (re-mirror Kafka behind the ledger, publish a committed range from its run's staged output; for tables,
adopt, roll back, delete unreferenced files) and only while the group has no members, so no batch moves the
ledger meanwhile; the rest is named and left alone. Without `--repair` nothing is written anywhere.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import click

from cohort.assignment.coordinator import Coordinator
from cohort.cli.kafka import kafka_errors, kafka_for
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.sink.audit import (
    MIRROR,
    PUBLISH,
    REPAIR_HINTS,
    OutsideFinding,
    SinkFinding,
    output_layouts,
    read_records,
    stray_findings,
)
from cohort.pipelines.sink.layout import SinkLayout
from cohort.pipelines.tasks.writer import ArrowFs, arrow_filesystem

if TYPE_CHECKING:
    from cohort.pipelines.tables.audit import TableFiles
    from cohort.pipelines.tables.store import TableStore
    from cohort.runtime.kafka_access import KafkaAccess

__all__ = ["PartitionAudit", "SinkTarget", "audit_group"]

_KAFKA_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class SinkTarget:
    """The sink the audit reads, as the command line names it."""

    sink: str
    quarantine: str | None = None
    table_format: str = "auto"
    iceberg_catalog: str | None = None
    iceberg_table: str | None = None

    def resolved_format(self, fs: ArrowFs) -> str:
        """The format: as given, or what lies under the sink root (a Delta log, Iceberg metadata, else Parquet)."""
        if self.table_format != "auto":
            return self.table_format
        if fs.exists(f"{self.sink.rstrip('/')}/_delta_log"):
            return "delta"
        if fs.exists(f"{self.sink.rstrip('/')}/metadata") or self.iceberg_table is not None:
            return "iceberg"
        return "parquet"

    def tables(self, table_format: str) -> tuple[TableStore, TableStore]:
        """(sink, quarantine) tables; click's BadParameter for settings the spec refuses."""
        from cohort.pipelines.spec import PipelineSpec
        from cohort.pipelines.tables.batch import open_tables

        try:
            spec = PipelineSpec(
                sink_path=self.sink,
                quarantine_path=self.quarantine,
                value_format="bytes",
                table_format=table_format,
                iceberg_catalog=self.iceberg_catalog,
                iceberg_table=self.iceberg_table,
            )
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--iceberg-table' / '--iceberg-catalog'") from None
        pair = open_tables(spec)
        return pair.sink, pair.quarantine


@dataclass(frozen=True)
class PartitionAudit:
    """One partition's three records and what disagrees among them."""

    tp: TopicPartition
    head: int | None
    kafka_committed: int | None
    sink_dirs: int
    quarantine_dirs: int
    findings: tuple[SinkFinding, ...]
    repaired: tuple[str, ...] = ()
    pending: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.tp.topic,
            "partition": self.tp.partition,
            "ledger": self.head,
            "kafka": self.kafka_committed,
            "sink_dirs": self.sink_dirs,
            "quarantine_dirs": self.quarantine_dirs,
            "problems": [{"where": f.where, "problem": f.message, "repair": f.repair} for f in self.findings],
            "repaired": list(self.repaired),
            "pending": self.pending,
        }


@dataclass(frozen=True)
class GroupAudit:
    """Every partition's audit, what was found outside the ledger's partition folders (and repaired there), and
    notes that are no divergence."""

    audits: tuple[PartitionAudit, ...]
    outside: tuple[OutsideFinding, ...] = ()
    repaired: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.outside and not any(a.findings for a in self.audits)


def audit_group(
    coordinator: Coordinator,
    group: str,
    target: SinkTarget,
    bootstrap_servers: str | None,
    *,
    repair: bool,
    as_json: bool,
    now: float | None = None,
) -> bool:
    """Audit (and with `repair`, repair) GROUP's partitions and print the result; True when nothing is left.
    `now` (epoch seconds, default the system clock's) judges the age of unreferenced table files."""
    sink, quarantine = target.sink, target.quarantine
    for root, option in ((sink, "--sink"), (quarantine, "--quarantine")):
        if root is not None and arrow_filesystem(root) is None:
            message = f"pyarrow cannot read {root!r} (give a local path or a pyarrow URI)"
            raise click.BadParameter(message, param_hint=f"'{option}'")
    layouts = output_layouts(sink, quarantine)
    kafka = kafka_for(bootstrap_servers, _KAFKA_TIMEOUT_S) if bootstrap_servers else None
    if repair:
        described = coordinator.describe_group(group)
        if described.members:
            raise click.ClickException(
                f"group {group!r} has {len(described.members)} live member(s): --repair needs it without members "
                "(stop its runs or wait for them to end); the audit itself runs at any time"
            )
    fs = ArrowFs()
    table_format = target.resolved_format(fs)
    tables = target.tables(table_format) if table_format != "parquet" else None
    tps = coordinator.ledger_partitions(group)
    try:
        committed = _kafka_committed(kafka, group, tps)
        if tables is not None:
            found = _audit_tables(coordinator, group, tps, tables, fs, committed, kafka, repair, now)
        else:
            audits = [_audit(coordinator, group, tp, layouts, fs, committed) for tp in tps]
            if repair:
                audits = [_repair(coordinator, group, audit, layouts, fs, kafka) for audit in audits]
            found = GroupAudit(tuple(audits), tuple(stray_findings(layouts, tps)))
    finally:
        if kafka is not None:
            kafka.close()
    _print(group, found, as_json, compared_kafka=kafka is not None)
    return found.ok


def _audit_tables(
    coordinator: Coordinator,
    group: str,
    tps: Sequence[TopicPartition],
    tables: tuple[TableStore, TableStore],
    fs: ArrowFs,
    committed: Mapping[TopicPartition, int | None] | None,
    kafka: KafkaAccess | None,
    repair: bool,
    now: float | None,
) -> GroupAudit:
    """Every partition of a table sink, and the unreferenced data files outside the ledger's partitions."""
    from cohort.pipelines.tables.audit import delete_unreferenced, unreferenced_outside, unreferenced_table_files

    on_disk = unreferenced_table_files(tables, now=time.time() if now is None else now)
    audits = [_audit_table(coordinator, group, tp, tables, fs, committed, kafka, repair, on_disk) for tp in tps]
    outside = unreferenced_outside(on_disk, tps)
    repaired: list[str] = []
    if repair and outside:
        paths = on_disk.outside_paths(tps)
        delete_unreferenced(fs, paths)
        repaired.append(f"deleted {len(paths)} data files outside the ledger's partitions that no version references")
        outside = unreferenced_outside(on_disk.without(paths), tps)
    notes = []
    young = sum(on_disk.young.values())
    if young:
        notes.append(
            f"{young} data file{'' if young == 1 else 's'} no table version references yet, newer than the grace "
            "period: left alone (a commit may be in flight)"
        )
    return GroupAudit(tuple(audits), tuple(outside), tuple(repaired), tuple(notes))


def _audit(
    coordinator: Coordinator,
    group: str,
    tp: TopicPartition,
    layouts: dict[str, SinkLayout],
    fs: ArrowFs,
    committed: Mapping[TopicPartition, int | None] | None,
) -> PartitionAudit:
    """One partition's audit; `committed`: Kafka's committed offsets (None: Kafka not compared)."""
    records = read_records(coordinator, group, tp, layouts, fs)
    in_kafka = committed.get(tp) if committed is not None else None
    findings = records.audit(in_kafka, compare_kafka=committed is not None)
    sink_dirs, quarantine_dirs = len(records.outputs["sink"]), len(records.outputs["quarantine"])
    pending = records.pending.describe() if records.pending is not None else None
    return PartitionAudit(tp, records.head, in_kafka, sink_dirs, quarantine_dirs, tuple(findings), pending=pending)


def _audit_table(
    coordinator: Coordinator,
    group: str,
    tp: TopicPartition,
    tables: tuple[TableStore, TableStore],
    fs: ArrowFs,
    committed: Mapping[TopicPartition, int | None] | None,
    kafka: KafkaAccess | None,
    repair: bool,
    on_disk: TableFiles,
) -> PartitionAudit:
    """One partition of a table sink: audited, and with `repair` repaired and audited again."""
    from cohort.pipelines.tables.audit import audit_table_partition, repair_table_partition

    def audited(
        kafka_offsets: Mapping[TopicPartition, int | None] | None, files: TableFiles
    ) -> tuple[Any, PartitionAudit]:
        found = audit_table_partition(
            coordinator,
            group,
            tp,
            tables,
            fs,
            (kafka_offsets or {}).get(tp),
            compare_kafka=kafka_offsets is not None,
            on_disk=files,
        )
        outputs = found.records.outputs
        in_kafka = (kafka_offsets or {}).get(tp)
        pending = found.records.pending.describe() if found.records.pending is not None else None
        summary = PartitionAudit(
            tp,
            found.records.head,
            in_kafka,
            len(outputs["sink"]),
            len(outputs["quarantine"]),
            found.findings,
            pending=pending,
        )
        return found, summary

    found, summary = audited(committed, on_disk)
    if not repair or not summary.findings:
        return summary
    done = repair_table_partition(found, group, coordinator.standalone_ledger(group), tables, fs)
    if kafka is not None and (done or any(f.repair == MIRROR for f in summary.findings)):
        head = coordinator.fetch_offsets(group, [tp])[tp]
        if head is not None:
            kafka.mirror().mirror(group, [OffsetRange(tp.topic, tp.partition, head, head)], run_id=None)
            done.append(f"mirrored offset {head} to Kafka")
    if not done:
        return summary
    _, again = audited(_kafka_committed(kafka, group, [tp]), on_disk.without(found.unreferenced))
    return replace(again, repaired=tuple(done))


def _kafka_committed(
    kafka: KafkaAccess | None, group: str, tps: Sequence[TopicPartition]
) -> Mapping[TopicPartition, int | None] | None:
    """Kafka's committed offsets of `tps` in one request (None without Kafka)."""
    if kafka is None:
        return None
    with kafka_errors(_KAFKA_TIMEOUT_S):
        kafka.partition_counts()  # one metadata request: fails fast when no broker answers
        return kafka.committed_offsets(group, tps)


def _repair(
    coordinator: Coordinator,
    group: str,
    audit: PartitionAudit,
    layouts: dict[str, SinkLayout],
    fs: ArrowFs,
    kafka: KafkaAccess | None,
) -> PartitionAudit:
    """Apply the audit's safe repairs, then audit the partition again: what is left is reported."""
    done: list[str] = []
    tp = audit.tp
    for finding in audit.findings:
        if finding.repair == PUBLISH and finding.piece is not None:
            piece, layout = finding.piece, layouts[finding.where]
            rows = piece.commit.records if finding.where == "sink" else piece.commit.quarantined
            run_id = piece.commit.run_id
            if run_id is not None and layout.complete(fs, run_id, tp, piece.from_offset, piece.until_offset, rows):
                done.append(f"published [{piece.from_offset}, {piece.until_offset}) in the {finding.where}")
            else:
                done.append(
                    f"not repaired: no staged output of run {run_id} holds [{piece.from_offset}, "
                    f"{piece.until_offset}) with {rows} rows; replay the offsets to rebuild it (docs/replay.md)"
                )
    if kafka is not None and any(f.repair == MIRROR for f in audit.findings) and audit.head is not None:
        kafka.mirror().mirror(group, [OffsetRange(tp.topic, tp.partition, audit.head, audit.head)], run_id=None)
        done.append(f"mirrored offset {audit.head} to Kafka")
    if not done:
        return audit
    again = _audit(coordinator, group, tp, layouts, fs, _kafka_committed(kafka, group, [tp]))
    return replace(again, repaired=tuple(done))


def _print(group: str, found: GroupAudit, as_json: bool, *, compared_kafka: bool) -> None:
    audits = found.audits
    if as_json:
        payload = {
            "group": group,
            "ok": found.ok,
            "partitions": [a.as_dict() for a in audits],
            "elsewhere": [
                {"where": f.where, "path": f.path, "problem": f.message, "repair": f.repair} for f in found.outside
            ],
            "repaired": list(found.repaired),
            "notes": list(found.notes),
        }
        click.echo(json.dumps(payload))
        return
    from cohort.cli.tables import print_table
    from cohort.pipelines.tables.audit import TABLE_REPAIR_HINTS

    hints = {**REPAIR_HINTS, **TABLE_REPAIR_HINTS}
    columns = ["TOPIC", "PARTITION", "LEDGER", "KAFKA", "SINK-DIRS", "QUARANTINE-DIRS", "STATUS"]
    rows = [
        [
            a.tp.topic,
            a.tp.partition,
            a.head,
            a.kafka_committed if compared_kafka else "(not read)",
            a.sink_dirs,
            a.quarantine_dirs,
            f"{len(a.findings)} problem(s)" if a.findings else "replay pending" if a.pending else "ok",
        ]
        for a in audits
    ]
    print_table(f"Audit of group {group}", columns, rows)
    for audit in audits:
        if audit.pending:
            click.echo(f"{audit.tp}: pending: {audit.pending}")
        for line in audit.repaired:
            click.echo(f"{audit.tp}: repaired: {line}")
        for finding in audit.findings:
            hint = f" ({hints[finding.repair]})" if finding.repair and not audit.repaired else ""
            click.echo(f"{audit.tp} {finding.where}: {finding.message}{hint}")
    for line in found.repaired:
        click.echo(f"repaired: {line}")
    for outside in found.outside:
        hint = f" ({hints[outside.repair]})" if outside.repair and not found.repaired else ""
        click.echo(f"{outside.where}: {outside.message}{hint}")
    for note in found.notes:
        click.echo(f"note: {note}")
    if not audits:
        click.echo(f"group {group!r} has committed nothing yet: nothing to audit")
