"""A sink's audit against the ledger behind one interface, `SinkAuditor` (cohort.runtime.audit_protocol), for the
Parquet sink's range directories (cohort.runtime.parquet_audit) and a Delta Lake or Iceberg table pair
(cohort.runtime.table_audit).

`cohort audit` and the landed asset's sink check both open one with `open_auditor` and drive it the same way:
audit the ledger's partitions, name what lies outside them, say notes that are no divergence, and (the command,
with `--repair`) apply the sink's own safe repairs. The comparisons are the sinks' decisions
(cohort.pipelines.sink.audit, cohort.pipelines.tables.audit); Kafka stays the caller's: it passes Kafka's
committed offsets in, and re-mirrors the ledger's head when a finding or a repair asks for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cohort.pipelines.sink.audit import REPAIR_HINTS, output_layouts
from cohort.pipelines.tasks.writer import ArrowFs
from cohort.runtime.audit_protocol import PartitionReport, Repaired, SinkAuditor
from cohort.runtime.parquet_audit import ParquetAuditor

if TYPE_CHECKING:
    from cohort.pipelines.spec import PipelineSpec

__all__ = ["PartitionReport", "Repaired", "SinkAuditor", "open_auditor", "repair_hints"]


def repair_hints() -> dict[str, str]:
    """What `--repair` does about each kind of finding, for messages (every sink's)."""
    from cohort.pipelines.tables.audit import TABLE_REPAIR_HINTS

    return {**REPAIR_HINTS, **TABLE_REPAIR_HINTS}


def open_auditor(
    spec: PipelineSpec, fs: ArrowFs, *, now: float, after_batch: bool = False, full: bool = True
) -> SinkAuditor:
    """The auditor of `spec`'s sink. `after_batch`: the reading the check after every batch makes (no row counts
    for Parquet, only since each partition's mark unless `full`; a table's referenced files checked only where
    that is a local stat); `now` judges the age of a table's unreferenced files."""
    if spec.table_format == "parquet":
        layouts = output_layouts(spec.sink_path, spec.quarantine_root)
        return ParquetAuditor(layouts, fs, count_rows=not after_batch, since_marks=after_batch and not full)
    from cohort.pipelines.tables.batch import open_tables
    from cohort.runtime.table_audit import TableAuditor

    pair = open_tables(spec.table_target)
    return TableAuditor((pair.sink, pair.quarantine), fs, now, check_remote_files=not after_batch)
