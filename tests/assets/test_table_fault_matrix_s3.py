"""The SIGKILL matrix of the table sinks (test_table_fault_matrix.py) with both tables on an S3 API
(harness.s3_server; the keys and endpoint from the AWS variables the worker processes inherit; Iceberg's catalog a
SQLite file on the local disk): a worker run killed at each boundary of a table batch is recovered through the
sensors with nothing lost and nothing written twice, and `cohort audit` finds nothing.

Runtime: 2 formats x 5 points on one assignor, 20 to 45 s each. CI runs one, Delta killed after its table commit
(Iceberg on S3 runs in CI through tests/assets/test_table_worker_s3.py; the local matrix keeps both formats); the
other 9 are marked slow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cohort.assignment.types import COOPERATIVE
from harness.reliability.faults import PARTITIONS, RECORDS, TABLE_FORMATS, TABLE_POINTS, run_fault_scenario
from tests.assets.test_table_fault_matrix import PER_PARTITION, _check_table_leftovers
from tests.fixtures.s3 import S3Bucket

ASSIGNOR = "cooperative-sticky"
CI = {("delta", "after-table-commit")}
MATRIX = [
    pytest.param(
        table_format,
        point.key,
        id=f"{table_format}-{point.key}",
        marks=() if (table_format, point.key) in CI else (pytest.mark.slow,),
    )
    for table_format in TABLE_FORMATS
    for point in TABLE_POINTS
]


@pytest.mark.parametrize(("table_format", "point"), MATRIX)
def test_a_worker_killed_at_any_point_of_a_table_batch_on_s3_is_recovered(
    table_format: str, point: str, broker: Any, spark: Any, s3_env: S3Bucket, tmp_path: Path
) -> None:
    report = run_fault_scenario(
        point,
        ASSIGNOR,
        bootstrap=broker.bootstrap_servers,
        spark=spark,
        workdir=tmp_path,
        table_format=table_format,
        sink_root=s3_env.root,
    )
    assert report.leftovers.marker_point == point and report.leftovers.exit_code == -9
    assert report.leftovers.elected == (ASSIGNOR, COOPERATIVE)
    _check_table_leftovers(point, report)
    assert report.survivor_ok and report.rerun_ok
    audit = report.audit
    assert (audit.lost, audit.duplicated, audit.problems) == (0, 0, ()), audit
    assert (audit.duckdb_lost, audit.duckdb_duplicated) == (0, 0), audit
    assert (audit.produced, audit.in_sink, audit.quarantined) == (RECORDS, RECORDS - 2, 2)
    assert report.cohort_audit_ok, report.cohort_audit
    ledger = {(p["topic"], p["partition"]): (p["ledger"], p["kafka"]) for p in report.cohort_audit["partitions"]}
    topic = report.leftovers.victim_assigned[0].topic
    assert ledger == {(topic, p): (PER_PARTITION, PER_PARTITION) for p in range(PARTITIONS)}
    assert report.final_state == "Empty"
    staged = [k for k in s3_env.object_keys() if "/_staging/" in k and k.endswith(".parquet")]
    assert not staged or report.outcome.point  # a killed batch's staging waits for the grace period of the clean-up
