"""The sink audit's one interface (cohort.runtime.sink_audit): `open_auditor` gives the Parquet sink's auditor or
a table pair's, each driven the same way (audit, outside, notes, repair, settle), here on real files under a
temporary sink root and the real coordinator on SQLite (`coordinator`, `group`, `ledger` fixtures)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cohort.assignment.coordinator import Coordinator, StandaloneLedger
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.sink.layout import range_dir_name
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tasks.writer import ArrowFs
from cohort.runtime.parquet_audit import ParquetAuditor
from cohort.runtime.sink_audit import open_auditor, repair_hints
from cohort.runtime.sink_since import sink_trail
from cohort.runtime.table_audit import TableAuditor

TP = TopicPartition("orders", 0)


def _spec(lake: Path, table_format: str = "parquet") -> PipelineSpec:
    return PipelineSpec(sink_path=str(lake), value_format="bytes", table_format=table_format)


def _land(lake: Path, from_offset: int, until_offset: int, rows: int) -> Path:
    """A range directory as a batch publishes it: one Parquet file of `rows` rows."""
    folder = lake / "topic=orders" / "partition=0" / range_dir_name("orders", 0, from_offset, until_offset)
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"id": list(range(rows))}), folder / "part-0.parquet")
    return folder


def test_the_spec_chooses_the_auditor_and_the_reading_after_a_batch(lake: Path) -> None:
    fs = ArrowFs()
    full = open_auditor(_spec(lake), fs, now=0.0)
    after = open_auditor(_spec(lake), fs, now=0.0, after_batch=True, full=False)
    assert isinstance(full, ParquetAuditor) and (full.count_rows, full.since_marks) == (True, False)
    assert isinstance(after, ParquetAuditor) and (after.count_rows, after.since_marks) == (False, True)
    table = open_auditor(_spec(lake, "delta"), fs, now=0.0, after_batch=True)
    assert isinstance(table, TableAuditor) and not table.check_remote_files
    assert {"mirror", "publish", "adopt", "roll-back"} <= set(repair_hints())


def test_a_parquet_sink_is_audited_settled_and_read_again_only_since_its_mark(
    coordinator: Coordinator, group: str, ledger: StandaloneLedger, lake: Path
) -> None:
    ledger.commit([OffsetRange("orders", 0, 0, 3, records=3)], run_id="r1")
    auditor = open_auditor(_spec(lake), ArrowFs(), now=0.0, after_batch=True, full=False)

    (missing,) = auditor.audit(coordinator, group, [TP])
    assert missing.tp == TP and missing.findings, "a committed range without its directory is a finding"
    auditor.settle(coordinator, group, [])
    assert coordinator.trail_marks(group, sink_trail(str(lake)), [TP])[TP].head is None, "no mark yet"

    _land(lake, 0, 3, 3)
    (clean,) = auditor.audit(coordinator, group, [TP])
    assert clean.findings == () and clean.records.head == 3
    auditor.settle(coordinator, group, [clean])
    assert coordinator.trail_marks(group, sink_trail(str(lake)), [TP])[TP].head == 3

    ledger.commit([OffsetRange("orders", 0, 3, 5, records=2)], run_id="r2")
    _land(lake, 3, 5, 2)
    (since,) = auditor.audit(coordinator, group, [TP])
    assert since.findings == () and since.records.head == 5
    assert [(c.from_offset, c.until_offset) for c in since.records.commits] == [(3, 5)], "only what came after"


def test_the_full_parquet_audit_counts_rows_and_names_what_lies_outside(
    coordinator: Coordinator, group: str, ledger: StandaloneLedger, lake: Path
) -> None:
    ledger.commit([OffsetRange("orders", 0, 0, 3, records=3)], run_id="r1")
    _land(lake, 0, 3, 2)  # a row short of what the ledger says
    (lake / "copy.parquet").write_bytes(
        (lake / "topic=orders/partition=0/orders-0-0-3.parquet/part-0.parquet").read_bytes()
    )
    auditor = open_auditor(_spec(lake), ArrowFs(), now=0.0)

    (report,) = auditor.audit(coordinator, group, [TP], committed={TP: 3})
    assert any("2" in f.message and "3" in f.message for f in report.findings), report.findings
    assert [f.path for f in auditor.outside([TP])] == [f"{lake}/copy.parquet"]
    assert auditor.repair_outside([TP]) == [] and auditor.notes() == []
    assert auditor.repair(coordinator, group, report).done == ()  # nothing it may repair: no publish finding
