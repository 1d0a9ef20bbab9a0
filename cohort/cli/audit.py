"""`cohort audit`: per partition, the ledger, Kafka's committed offsets and the sink's own record, side by side.

Gathering reads the coordinator's ledger (page by page), the sink's and the quarantine's trees (through pyarrow:
names and Parquet footers, no data) and, with `--bootstrap-servers`, Kafka's committed offsets; the sink's auditor
(cohort.runtime.sink_audit, the one the landed asset's check drives too) compares them. Besides the partitions, it
names what readers read outside the ledger's partition folders (and, for a table, old data files no version
references). A replay an offset reset left pending is said, and is no divergence. `--repair` applies the safe
repairs (re-mirror the ledger's offsets where Kafka's differ, behind or ahead: cohort.pipelines.kafka.drift; publish
a committed range from its run's staged output; for tables, adopt, roll back, delete unreferenced files) and only
while the group has no members, so no batch moves the ledger meanwhile; the rest is named and left alone. Without
`--repair` nothing is written anywhere.
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
from cohort.pipelines.sink.audit import MIRROR, OutsideFinding, SinkFinding
from cohort.pipelines.tasks.writer import ArrowFs, arrow_filesystem
from cohort.runtime.sink_audit import PartitionReport, SinkAuditor, open_auditor, repair_hints

if TYPE_CHECKING:
    from cohort.cli.command_config import CommandConfig
    from cohort.pipelines.spec import PipelineSpec
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

    def spec(self, table_format: str) -> PipelineSpec:
        """The sink's settings as a batch's spec holds them; click's BadParameter for settings the spec refuses."""
        from cohort.pipelines.spec import PipelineSpec

        try:
            return PipelineSpec(
                sink_path=self.sink,
                quarantine_path=self.quarantine,
                value_format="bytes",
                table_format=table_format,
                iceberg_catalog=self.iceberg_catalog,
                iceberg_table=self.iceberg_table,
            )
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--iceberg-table' / '--iceberg-catalog'") from None

    def tables(self, table_format: str) -> tuple[TableStore, TableStore]:
        """(sink, quarantine) tables; click's BadParameter for settings the spec refuses."""
        from cohort.pipelines.tables.batch import open_tables

        pair = open_tables(self.spec(table_format).table_target)
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
    command_config: CommandConfig | None = None,
) -> bool:
    """Audit (and with `repair`, repair) GROUP's partitions and print the result; True when nothing is left.
    `now` (epoch seconds, default the system clock's) judges the age of unreferenced table files."""
    for root, option in ((target.sink, "--sink"), (target.quarantine, "--quarantine")):
        if root is not None and arrow_filesystem(root) is None:
            message = f"pyarrow cannot read {root!r} (give a local path or a pyarrow URI)"
            raise click.BadParameter(message, param_hint=f"'{option}'")
    kafka = kafka_for(bootstrap_servers, _KAFKA_TIMEOUT_S, command_config) if bootstrap_servers else None
    if repair:
        described = coordinator.describe_group(group)
        if described.members:
            raise click.ClickException(
                f"group {group!r} has {len(described.members)} live member(s): --repair needs it without members "
                "(stop its runs or wait for them to end); the audit itself runs at any time"
            )
    fs = ArrowFs()
    auditor = open_auditor(target.spec(target.resolved_format(fs)), fs, now=time.time() if now is None else now)
    tps = coordinator.ledger_partitions(group)
    try:
        committed = _kafka_committed(kafka, group, tps)
        reports = auditor.audit(coordinator, group, tps, committed)
        if repair:
            audits = [_repaired(coordinator, group, auditor, report, committed, kafka) for report in reports]
        else:
            audits = [_summary(report, committed) for report in reports]
        outside = auditor.outside(tps)
        repaired = auditor.repair_outside(tps) if repair and outside else []
        if repaired:
            outside = auditor.outside(tps)
        found = GroupAudit(tuple(audits), tuple(outside), tuple(repaired), tuple(auditor.notes()))
    finally:
        if kafka is not None:
            kafka.close()
    _print(group, found, as_json, compared_kafka=kafka is not None)
    return found.ok


def _summary(report: PartitionReport, committed: Mapping[TopicPartition, int | None] | None) -> PartitionAudit:
    """What the command shows of one partition's report; `committed`: Kafka's offsets (None: not compared)."""
    records = report.records
    in_kafka = committed.get(report.tp) if committed is not None else None
    pending = records.pending.describe() if records.pending is not None else None
    outputs = records.outputs
    return PartitionAudit(
        report.tp,
        records.head,
        in_kafka,
        len(outputs["sink"]),
        len(outputs["quarantine"]),
        report.findings,
        pending=pending,
    )


def _repaired(
    coordinator: Coordinator,
    group: str,
    auditor: SinkAuditor,
    report: PartitionReport,
    committed: Mapping[TopicPartition, int | None] | None,
    kafka: KafkaAccess | None,
) -> PartitionAudit:
    """Apply the sink's safe repairs of one partition, and re-mirror Kafka when a finding or a repair asks for it;
    then audit the partition again: what is left is reported."""
    summary = _summary(report, committed)
    if not report.findings:
        return summary
    tp = report.tp
    outcome = auditor.repair(coordinator, group, report)
    done = list(outcome.done)
    if kafka is not None and (outcome.remirror or any(f.repair == MIRROR for f in report.findings)):
        head = coordinator.fetch_offsets(group, [tp])[tp]
        if head is not None:
            kafka.mirror().mirror(group, [OffsetRange(tp.topic, tp.partition, head, head)], run_id=None)
            done.append(f"mirrored offset {head} to Kafka")
    if not done:
        return summary
    committed_now = _kafka_committed(kafka, group, [tp])
    (again,) = auditor.audit(coordinator, group, [tp], committed_now)
    return replace(_summary(again, committed_now), repaired=tuple(done))


def _kafka_committed(
    kafka: KafkaAccess | None, group: str, tps: Sequence[TopicPartition]
) -> Mapping[TopicPartition, int | None] | None:
    """Kafka's committed offsets of `tps` in one request (None without Kafka)."""
    if kafka is None:
        return None
    with kafka_errors(_KAFKA_TIMEOUT_S):
        kafka.partition_counts()  # one metadata request: fails fast when no broker answers
        return kafka.committed_offsets(group, tps)


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

    hints = repair_hints()
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
