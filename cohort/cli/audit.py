"""`cohort audit`: per partition, the ledger, Kafka's committed offsets and the sink's own record, side by side.

Gathering reads the coordinator's ledger, the sink's and the quarantine's range directories (through pyarrow:
names and Parquet footers, no data) and, with `--bootstrap-servers`, Kafka's committed offsets; the comparison
is `cohort.pipelines.sink_audit`. `--repair` applies the safe repairs (re-mirror Kafka behind the ledger,
publish a committed range from its run's staged output) and only while the group has no members, so no batch
moves the ledger meanwhile; the rest is named and left alone. Without `--repair` nothing is written anywhere.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import click

from cohort.assignment.coordinator import Coordinator
from cohort.cli.kafka import kafka_errors, kafka_for
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.arrow_sink import ArrowFs, arrow_filesystem
from cohort.pipelines.sink import SinkLayout
from cohort.pipelines.sink_audit import MIRROR, PUBLISH, REPAIR_HINTS, SinkFinding, output_layouts, read_records

if TYPE_CHECKING:
    from cohort.pipelines.table_store import TableStore
    from cohort.resources.kafka import KafkaResource

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
        from cohort.pipelines.table_batch import open_tables

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
        }


def audit_group(
    coordinator: Coordinator,
    group: str,
    target: SinkTarget,
    bootstrap_servers: str | None,
    *,
    repair: bool,
    as_json: bool,
) -> bool:
    """Audit (and with `repair`, repair) GROUP's partitions and print the result; True when nothing is left."""
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
            audits = [_audit_table(coordinator, group, tp, tables, fs, committed, kafka, repair) for tp in tps]
        else:
            audits = [_audit(coordinator, group, tp, layouts, fs, committed) for tp in tps]
            if repair:
                audits = [_repair(coordinator, group, audit, layouts, fs, kafka) for audit in audits]
    finally:
        if kafka is not None:
            kafka.close()
    _print(group, audits, as_json, compared_kafka=kafka is not None)
    return not any(a.findings for a in audits)


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
    return PartitionAudit(tp, records.head, in_kafka, sink_dirs, quarantine_dirs, tuple(findings))


def _audit_table(
    coordinator: Coordinator,
    group: str,
    tp: TopicPartition,
    tables: tuple[TableStore, TableStore],
    fs: ArrowFs,
    committed: Mapping[TopicPartition, int | None] | None,
    kafka: KafkaResource | None,
    repair: bool,
) -> PartitionAudit:
    """One partition of a table sink: audited, and with `repair` repaired and audited again."""
    from cohort.pipelines.table_audit import audit_table_partition, repair_table_partition

    def audited(kafka_offsets: Mapping[TopicPartition, int | None] | None) -> tuple[Any, PartitionAudit]:
        found = audit_table_partition(
            coordinator, group, tp, tables, fs, (kafka_offsets or {}).get(tp), compare_kafka=kafka_offsets is not None
        )
        outputs = found.records.outputs
        in_kafka = (kafka_offsets or {}).get(tp)
        summary = PartitionAudit(
            tp, found.records.head, in_kafka, len(outputs["sink"]), len(outputs["quarantine"]), found.findings
        )
        return found, summary

    found, summary = audited(committed)
    if not repair or not summary.findings:
        return summary
    done = repair_table_partition(found, group, coordinator.standalone_ledger(group), tables, fs)
    if kafka is not None and (done or any(f.repair == MIRROR for f in summary.findings)):
        head = coordinator.fetch_offsets(group, [tp])[tp]
        if head is not None:
            kafka.get_mirror().mirror(group, [OffsetRange(tp.topic, tp.partition, head, head)], run_id=None)
            done.append(f"mirrored offset {head} to Kafka")
    if not done:
        return summary
    _, again = audited(_kafka_committed(kafka, group, [tp]))
    return replace(again, repaired=tuple(done))


def _kafka_committed(
    kafka: KafkaResource | None, group: str, tps: Sequence[TopicPartition]
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
    kafka: KafkaResource | None,
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
        kafka.get_mirror().mirror(group, [OffsetRange(tp.topic, tp.partition, audit.head, audit.head)], run_id=None)
        done.append(f"mirrored offset {audit.head} to Kafka")
    if not done:
        return audit
    again = _audit(coordinator, group, tp, layouts, fs, _kafka_committed(kafka, group, [tp]))
    return PartitionAudit(
        tp, again.head, again.kafka_committed, again.sink_dirs, again.quarantine_dirs, again.findings, tuple(done)
    )


def _print(group: str, audits: list[PartitionAudit], as_json: bool, *, compared_kafka: bool) -> None:
    if as_json:
        ok = not any(a.findings for a in audits)
        click.echo(json.dumps({"group": group, "ok": ok, "partitions": [a.as_dict() for a in audits]}))
        return
    from cohort.cli.tables import print_table
    from cohort.pipelines.table_audit import TABLE_REPAIR_HINTS

    columns = ["TOPIC", "PARTITION", "LEDGER", "KAFKA", "SINK-DIRS", "QUARANTINE-DIRS", "STATUS"]
    rows = [
        [
            a.tp.topic,
            a.tp.partition,
            a.head,
            a.kafka_committed if compared_kafka else "(not read)",
            a.sink_dirs,
            a.quarantine_dirs,
            "ok" if not a.findings else f"{len(a.findings)} problem(s)",
        ]
        for a in audits
    ]
    print_table(f"Audit of group {group}", columns, rows)
    for audit in audits:
        for line in audit.repaired:
            click.echo(f"{audit.tp}: repaired: {line}")
        for finding in audit.findings:
            hints = {**REPAIR_HINTS, **TABLE_REPAIR_HINTS}
            hint = f" ({hints[finding.repair]})" if finding.repair and not audit.repaired else ""
            click.echo(f"{audit.tp} {finding.where}: {finding.message}{hint}")
    if not audits:
        click.echo(f"group {group!r} has committed nothing yet: nothing to audit")
