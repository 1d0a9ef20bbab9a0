"""The SIGKILL fault-injection matrix for the table sinks (Delta Lake, Iceberg).

The scenario is the Parquet matrix's (harness/reliability/faults.py: a worker run's process group killed with
SIGKILL, recovery through the membership sensor and the requested rerun) with `PipelineSpec(table_format=...)`
(Iceberg: the default SQLite catalog under the sink path). A table batch commits the quarantine table, the sink
table, the ledger, then mirrors to Kafka, so its points are (harness/reliability/fault_points.py, TABLE_POINTS):

- after-stage: both outputs staged, the victim dies on entry to the quarantine table's commit: nothing is in
  any table or the ledger; the next batch of those partitions reads them again;
- after-quarantine-commit: the quarantine table holds the victim's partitions, the sink table does not: the
  next batch rolls the quarantine commit back before it reads;
- after-table-commit: both tables hold them, the ledger does not: the next batch adopts the sink commit into
  the ledger (nothing is read or written twice);
- after-commit, after-mirror: as for Parquet (the ledger holds them; Kafka, then the materializations, behind).

Every scenario must end with nothing lost and nothing written twice, counted from the sink and quarantine
tables as the format's own reader returns them (deltalake, pyiceberg) and again with DuckDB over the sink
table's Arrow data; every partition's ledger contiguous to the produced count; Kafka's committed offsets = the
ledger = the materializations; and `cohort audit` (Kafka compared) finding nothing.

Runtime budget: 2 formats x 5 points x 2 assignors = 20 scenarios, each with a victim process and its own Spark
JVM (20 to 45 s each on the 2-core machine, 6 minutes for all 20). CI runs two (about 1.5 minutes), one per
format and assignor, at the two table commits where a table batch differs most from a Parquet one (the quarantine's
commit before the sink's, the sink's before the ledger's); the other 18 are marked slow (`make test-all`), and
`python -m benchmarks.reliability --sinks delta,iceberg --sigkill-only` runs all 20 (benchmarks/RELIABILITY.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cohort.assets.worker import RERUN_TAG, SLOT_TAG
from cohort.assignment.types import COOPERATIVE, EAGER
from harness.reliability.faults import (
    ASSIGNORS,
    MALFORMED,
    PARTITIONS,
    RECORDS,
    TABLE_FORMATS,
    TABLE_POINTS,
    FaultReport,
    run_fault_scenario,
)

PER_PARTITION = RECORDS // PARTITIONS
QUARANTINED = {i % PARTITIONS: 1 for i in MALFORMED}
"""Malformed records per partition number (json_records spreads record i over partition i % PARTITIONS)."""
CI = {
    ("iceberg", "after-quarantine-commit", "sticky"),
    ("delta", "after-table-commit", "cooperative-sticky"),
}
"""The scenarios CI runs; the rest are slow."""
MATRIX = [
    pytest.param(
        table_format,
        point.key,
        assignor,
        id=f"{table_format}-{point.key}-{assignor}",
        marks=() if (table_format, point.key, assignor) in CI else (pytest.mark.slow,),
    )
    for table_format in TABLE_FORMATS
    for point in TABLE_POINTS
    for assignor in ASSIGNORS
]


def _check_table_leftovers(point: str, report: FaultReport) -> None:
    """What the victim left in the tables, the ledger and Kafka proves the kill hit where it was meant to."""
    left = report.leftovers
    victim = set(left.victim_assigned)
    assert len(victim) == 2 and left.victim_in_group, left  # the 2 + 2 split; its session expires later
    full = dict.fromkeys(victim, PER_PARTITION)
    sink_rows = {tp: PER_PARTITION - QUARANTINED.get(tp.partition, 0) for tp in sorted(victim)}
    quarantine_rows = {tp: n for tp in sorted(victim) if (n := QUARANTINED.get(tp.partition, 0))}
    assert left.victim_materializations == 0
    # the ownership check before the table commits records each partition's first position (0) in the ledger
    moved = {tp: offset for tp, offset in left.committed.items() if offset > 0}
    if point in {"after-stage", "after-quarantine-commit", "after-table-commit"}:
        assert set(left.committed) <= victim and moved == {}, left
    if point == "after-stage":  # staged (the quarantine's files placed, unreferenced): nothing in any table
        assert (left.in_table(), left.in_table(quarantine=True)) == ({}, {}), left
        assert (left.in_sink, left.in_quarantine) == ({}, {}), left
    if point == "after-quarantine-commit":  # only the quarantine table has the victim's partitions
        assert (left.in_table(), left.in_sink) == ({}, {}), left
        assert left.in_table(quarantine=True) == full and left.in_quarantine == quarantine_rows, left
    if point in {"after-table-commit", "after-commit", "after-mirror"}:  # both tables have them
        assert left.in_table() == full and left.in_table(quarantine=True) == full, left
        assert left.in_sink == sink_rows and left.in_quarantine == quarantine_rows, left
    if point in {"after-commit", "after-mirror"}:
        assert left.committed == full, left
    if point == "after-mirror":
        assert {tp: left.kafka[tp] for tp in victim} == full, left.kafka
    else:
        assert all(offset is None for offset in left.kafka.values()), left.kafka


@pytest.mark.parametrize(("table_format", "point", "assignor"), MATRIX)
def test_a_worker_killed_at_any_point_of_a_table_batch_is_recovered_through_the_sensors(
    table_format: str, point: str, assignor: str, broker: Any, spark: Any, tmp_path: Path
) -> None:
    report = run_fault_scenario(
        point, assignor, bootstrap=broker.bootstrap_servers, spark=spark, workdir=tmp_path, table_format=table_format
    )
    assert report.leftovers.marker_point == point and report.leftovers.exit_code == -9
    assert report.leftovers.elected == (assignor, COOPERATIVE if assignor == "cooperative-sticky" else EAGER)
    _check_table_leftovers(point, report)
    # one rerun of the victim's slot, keyed to its run, requested by the session expiry alone
    assert [(r[SLOT_TAG], r[RERUN_TAG]) for r in report.rerun_requests] == [("1", report.leftovers.victim_run_id)]
    assert report.reruns_before_run_marked_failed == 1
    assert report.survivor_ok and report.rerun_ok
    audit = report.audit
    assert audit.reader == ("deltalake" if table_format == "delta" else "pyiceberg")
    assert (audit.lost, audit.duplicated, audit.problems) == (0, 0, ()), audit
    assert (audit.duckdb_lost, audit.duckdb_duplicated) == (0, 0), audit
    assert (audit.produced, audit.in_sink, audit.quarantined) == (RECORDS, RECORDS - 2, 2)
    assert report.cohort_audit_ok, report.cohort_audit
    ledger = {(p["topic"], p["partition"]): (p["ledger"], p["kafka"]) for p in report.cohort_audit["partitions"]}
    topic = report.leftovers.victim_assigned[0].topic
    assert ledger == {(topic, p): (PER_PARTITION, PER_PARTITION) for p in range(PARTITIONS)}
    assert report.final_state == "Empty"
    assert 0 < report.outcome.recovered_s < 300


def test_the_table_matrix_covers_every_format_and_assignor_in_ci() -> None:
    """The CI subset keeps both formats, both assignors and the two table commits."""
    assert {f for f, _, _ in CI} == set(TABLE_FORMATS) and {a for _, _, a in CI} == set(ASSIGNORS)
    assert {p for _, p, _ in CI} == {"after-quarantine-commit", "after-table-commit"}
    assert len(MATRIX) == 20 and len({p.id for p in MATRIX}) == 20
