"""The `SinkAuditor` of the Parquet sink: its range directories and the quarantine's against the ledger
(cohort.pipelines.sink.audit), incrementally since each partition's sink mark after a batch
(cohort.runtime.sink_since), and its one safe repair: publishing a committed range from its run's staged output."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.pipelines.sink.audit import PUBLISH, OutsideFinding, read_records, stray_findings
from cohort.pipelines.sink.layout import SinkLayout
from cohort.pipelines.tasks.writer import ArrowFs
from cohort.runtime.audit_protocol import KafkaCommitted, PartitionReport, Repaired
from cohort.runtime.sink_since import mark_after, read_records_since, sink_trail

__all__ = ["ParquetAuditor"]


@dataclass(frozen=True)
class ParquetAuditor:
    """The Parquet sink's range directories and the quarantine's, against the ledger.

    `count_rows`: compare each directory's rows (its Parquet footers) with the ledger's; `since_marks`: read each
    partition only since its sink mark (cohort.runtime.sink_since), as the check after a batch does."""

    layouts: Mapping[str, SinkLayout]
    fs: ArrowFs
    count_rows: bool = True
    since_marks: bool = False

    def audit(
        self, ledger: Coordinator, group: str, tps: Sequence[TopicPartition], committed: KafkaCommitted | None = None
    ) -> list[PartitionReport]:
        marks = ledger.trail_marks(group, self._trail, list(tps)) if self.since_marks else {}
        reports = []
        for tp in tps:
            mark = marks.get(tp)
            since = None if mark is None else read_records_since(ledger, group, tp, self.layouts, mark)
            records = since or read_records(ledger, group, tp, self.layouts, self.fs, count_rows=self.count_rows)
            in_kafka = committed.get(tp) if committed is not None else None
            findings = records.audit(in_kafka, compare_kafka=committed is not None)
            reports.append(PartitionReport(records, tuple(findings)))
        return reports

    def outside(self, partitions: Collection[TopicPartition], *, topic: str | None = None) -> list[OutsideFinding]:
        return stray_findings(self.layouts, partitions, topic=topic)

    def notes(self) -> list[str]:
        return []

    def repair(self, ledger: Coordinator, group: str, report: PartitionReport) -> Repaired:
        """Publish each committed range missing from the sink from the output its run staged, when it is whole."""
        done = []
        tp = report.tp
        for finding in report.findings:
            if finding.repair == PUBLISH and finding.piece is not None:
                piece, layout = finding.piece, self.layouts[finding.where]
                rows = piece.commit.records if finding.where == "sink" else piece.commit.quarantined
                run_id = piece.commit.run_id
                span = (piece.from_offset, piece.until_offset)
                if run_id is not None and layout.complete(self.fs, run_id, tp, *span, rows):
                    done.append(f"published [{span[0]}, {span[1]}) in the {finding.where}")
                else:
                    done.append(
                        f"not repaired: no staged output of run {run_id} holds [{span[0]}, {span[1]}) with {rows} "
                        "rows; replay the offsets to rebuild it (docs/replay.md)"
                    )
        return Repaired(tuple(done))

    def repair_outside(self, partitions: Collection[TopicPartition]) -> list[str]:
        return []  # what readers read outside the partitions is named, never deleted: it may be a user's data

    def settle(self, ledger: Coordinator, group: str, clean: Sequence[PartitionReport]) -> None:
        """Advance the sink marks over the clean readings (marks never move back)."""
        marks = [m for m in (mark_after(r.records) for r in clean) if m is not None]
        ledger.advance_trail_marks(group, self._trail, marks)

    @property
    def _trail(self) -> str:
        return sink_trail(self.layouts["sink"].root)
