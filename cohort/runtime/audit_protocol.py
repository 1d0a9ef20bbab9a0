"""What every sink's audit implements, `SinkAuditor`, and the records it gives: a partition's report and what
its repairs did. The implementations are cohort.runtime.parquet_audit and cohort.runtime.table_audit;
cohort.runtime.sink_audit opens the one of a sink."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.pipelines.sink.audit import OutsideFinding, PartitionRecords, SinkFinding

if TYPE_CHECKING:
    from cohort.pipelines.tables.audit import TableAudit

__all__ = ["KafkaCommitted", "PartitionReport", "Repaired", "SinkAuditor"]

KafkaCommitted = Mapping[TopicPartition, int | None]
"""Kafka's committed offsets of the group, by partition."""


@dataclass(frozen=True)
class PartitionReport:
    """One partition audited: the ledger's and the outputs' records, what disagrees, and (for a table sink) the
    audit a repair applies."""

    records: PartitionRecords
    findings: tuple[SinkFinding, ...]
    table: TableAudit | None = None

    @property
    def tp(self) -> TopicPartition:
        return self.records.tp


@dataclass(frozen=True)
class Repaired:
    """What a sink's repairs did, and whether Kafka must be mirrored again (the ledger moved)."""

    done: tuple[str, ...] = ()
    remirror: bool = False


class SinkAuditor(Protocol):
    """One audit of one sink: its steps in the order the command and the check call them."""

    def audit(
        self, ledger: Coordinator, group: str, tps: Sequence[TopicPartition], committed: KafkaCommitted | None = None
    ) -> list[PartitionReport]:
        """Each partition of `tps` against the ledger (and Kafka's `committed` offsets, when given)."""
        ...

    def outside(self, partitions: Collection[TopicPartition], *, topic: str | None = None) -> list[OutsideFinding]:
        """What the sink holds outside the ledger's `partitions` (with `topic`, leaving the other topics' folders
        to their own audits)."""
        ...

    def notes(self) -> list[str]:
        """What the audit saw that is no divergence."""
        ...

    def repair(self, ledger: Coordinator, group: str, report: PartitionReport) -> Repaired:
        """Apply the sink's safe repairs of one partition; the group has no members (the caller made sure)."""
        ...

    def repair_outside(self, partitions: Collection[TopicPartition]) -> list[str]:
        """Apply the safe repairs outside the ledger's partitions; what was done."""
        ...

    def settle(self, ledger: Coordinator, group: str, clean: Sequence[PartitionReport]) -> None:
        """Record how far each of the `clean` partitions was found to match, where the sink keeps that."""
        ...
