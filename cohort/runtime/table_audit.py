"""The `SinkAuditor` of a table sink (Delta Lake, Iceberg): each table's files and marks against the ledger
(cohort.pipelines.tables.audit), its safe repairs (adopt, roll back, delete what no version references), and
the data files on disk no table version references, read once per audit.

Imported only when a sink is a table (cohort.runtime.sink_audit.open_auditor): the tables' libraries stay out
of a Parquet audit.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from pyarrow.fs import LocalFileSystem

from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.pipelines.sink.audit import OutsideFinding
from cohort.pipelines.tables.audit import (
    TableFiles,
    audit_table_partition,
    delete_unreferenced,
    repair_table_partition,
    unreferenced_outside,
    unreferenced_table_files,
)
from cohort.pipelines.tables.store import TableStore
from cohort.pipelines.tasks.writer import ArrowFs, arrow_filesystem
from cohort.runtime.audit_protocol import KafkaCommitted, PartitionReport, Repaired

__all__ = ["TableAuditor"]


@dataclass
class TableAuditor:
    """One audit of a (sink, quarantine) table pair. `check_remote_files`: check that every referenced data file
    exists even where that is a request per file (off after a batch: a local stat only); `now` judges the age
    of unreferenced files. It keeps the unreferenced files it found, less those its repairs deleted."""

    tables: tuple[TableStore, TableStore]
    fs: ArrowFs
    now: float
    check_remote_files: bool = True
    _on_disk: TableFiles | None = field(default=None, init=False, repr=False)

    @property
    def on_disk(self) -> TableFiles:
        """The tables' data files on disk that no version references, read at the first use."""
        if self._on_disk is None:
            self._on_disk = unreferenced_table_files(self.tables, now=self.now)
        return self._on_disk

    @cached_property
    def _check_files(self) -> bool:
        """Whether each referenced data file is checked: everywhere, or only where that is a local stat."""
        return self.check_remote_files or all(
            isinstance((arrow_filesystem(t.root) or (None,))[0], LocalFileSystem) for t in self.tables
        )

    def audit(
        self, ledger: Coordinator, group: str, tps: Sequence[TopicPartition], committed: KafkaCommitted | None = None
    ) -> list[PartitionReport]:
        reports = []
        for tp in tps:
            found = audit_table_partition(
                ledger,
                group,
                tp,
                self.tables,
                self.fs,
                committed.get(tp) if committed is not None else None,
                compare_kafka=committed is not None,
                check_files=self._check_files,
                on_disk=self.on_disk,
            )
            reports.append(PartitionReport(found.records, found.findings, found))
        return reports

    def outside(self, partitions: Collection[TopicPartition], *, topic: str | None = None) -> list[OutsideFinding]:
        return unreferenced_outside(self.on_disk, partitions)  # named per table, whatever their topic

    def notes(self) -> list[str]:
        young = sum(self.on_disk.young.values())
        if not young:
            return []
        return [
            f"{young} data file{'' if young == 1 else 's'} no table version references yet, newer than the grace "
            "period: left alone (a commit may be in flight)"
        ]

    def repair(self, ledger: Coordinator, group: str, report: PartitionReport) -> Repaired:
        """Adopt, roll back, delete orphans and old unreferenced files; any of them asks Kafka to be mirrored."""
        assert report.table is not None  # reports of this auditor carry their table audit
        done = repair_table_partition(report.table, group, ledger.standalone_ledger(group), self.tables, self.fs)
        self._on_disk = self.on_disk.without(report.table.unreferenced)
        return Repaired(tuple(done), remirror=bool(done))

    def repair_outside(self, partitions: Collection[TopicPartition]) -> list[str]:
        paths = self.on_disk.outside_paths(partitions)
        if not paths:
            return []
        delete_unreferenced(self.fs, paths)
        self._on_disk = self.on_disk.without(paths)
        return [f"deleted {len(paths)} data files outside the ledger's partitions that no version references"]

    def settle(self, ledger: Coordinator, group: str, clean: Sequence[PartitionReport]) -> None:
        """Nothing: a table audit reads the tables' own marks, not a mark of its own."""
