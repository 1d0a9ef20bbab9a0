"""The SIGKILL matrix of the Parquet sink (test_fault_matrix.py) with the sink on an S3 API (harness.s3_server; keys
and endpoint from the AWS variables the worker processes inherit): a worker run killed at each point of a batch,
and between two copies of its publish (`mid-publish`: one range visible, the others not), is recovered through
the sensors with nothing lost and nothing written twice, as pyarrow.dataset and DuckDB read the sink, and
`cohort audit` finds nothing. Before the object-store publish every scenario that commits failed here: the
publish of a range directory raised on S3, so no committed range ever became visible.

Runtime: 8 points on alternating assignors, 20 to 70 s each. CI runs one: the kill between two copies of the
publish (the object store's own point; the local matrix keeps the kill before the ledger commit); the other 7 are
marked slow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cohort.assets.worker import RERUN_TAG, SLOT_TAG
from cohort.assignment.types import COOPERATIVE, EAGER
from harness.reliability.fault_points import OBJECT_STORE_POINTS
from harness.reliability.faults import ASSIGNORS, MALFORMED, PARTITIONS, RECORDS, FaultReport, run_fault_scenario
from tests.assets.test_fault_matrix import _check_leftovers
from tests.fixtures.s3 import S3Bucket
from tests.support.object_store import spark_environ

PER_PARTITION = RECORDS // PARTITIONS
CI = {"mid-publish"}
MATRIX = [
    pytest.param(
        p.key,
        ASSIGNORS[i % 2],
        id=f"{p.key}-{ASSIGNORS[i % 2]}",
        marks=() if p.key in CI else (pytest.mark.slow,),
    )
    for i, p in enumerate(OBJECT_STORE_POINTS)
]


def _check_publish_leftovers(point: str, report: FaultReport) -> None:
    """Where the kill hit: at `mid-publish` both victim partitions are committed, and readers see exactly one of
    their ranges, whole (the first copied), and nothing of the other."""
    left = report.leftovers
    if point != "mid-publish":
        _check_leftovers(point, report)
        return
    assert len(left.committed) == 2 and set(left.committed.values()) == {PER_PARTITION}, left
    ((tp, rows),) = left.in_sink.items()
    assert tp in left.committed and rows == PER_PARTITION - sum(1 for i in MALFORMED if i % PARTITIONS == tp.partition)
    assert left.victim_materializations == 0


@pytest.mark.parametrize(("point", "assignor"), MATRIX)
def test_a_worker_killed_at_any_point_of_a_batch_on_s3_is_recovered(
    point: str, assignor: str, broker: Any, spark: Any, s3_env: S3Bucket, tmp_path: Path
) -> None:
    with spark_environ(spark):  # the survivor and the rerun run on this process's Spark session
        report = run_fault_scenario(
            point, assignor, bootstrap=broker.bootstrap_servers, spark=spark, workdir=tmp_path, sink_root=s3_env.root
        )
    assert report.leftovers.marker_point == point and report.leftovers.exit_code == -9
    assert report.leftovers.elected == (assignor, COOPERATIVE if assignor == "cooperative-sticky" else EAGER)
    _check_publish_leftovers(point, report)
    assert [(r[SLOT_TAG], r[RERUN_TAG]) for r in report.rerun_requests] == [("1", report.leftovers.victim_run_id)]
    assert report.survivor_ok and report.rerun_ok
    audit = report.audit
    assert audit.reader == "pyarrow"
    assert (audit.lost, audit.duplicated, audit.problems) == (0, 0, ()), audit
    assert (audit.duckdb_lost, audit.duckdb_duplicated) == (0, 0), audit
    assert (audit.produced, audit.in_sink, audit.quarantined) == (RECORDS, RECORDS - 2, 2)
    assert report.cohort_audit_ok, report.cohort_audit
    assert report.final_state == "Empty"
    # every range directory holds one data object
    data = [k for k in s3_env.object_keys("lake/topic=") if k.endswith(".parquet") and "/_" not in k]
    directories = {k.rsplit("/", 1)[0] for k in data}
    assert len(data) == len(directories) == PARTITIONS, data
