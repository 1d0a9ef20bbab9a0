"""Retention of a Delta and an Iceberg sink through the real data path (broker, Spark, `run_batch`): many small
batches leave a bounded number of versions, and a replay and
`cohort audit` (the command, in a subprocess) still pass once the clean-up has deleted what a replay replaced."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tables.files import data_files_on_disk
from cohort.pipelines.tables.retention import TableRetention
from harness.tables import table_offsets
from tests.support.audit_command import cohort_audit
from tests.support.table_batches import expected, records, spec_for

RETENTION = TableRetention(keep_s=0, min_versions=3, history_s=0, every_commits=2)
"""Every version past the newest 3 expires at once, the log too: a clean-up every other commit."""


def _versions(spec: PipelineSpec) -> int:
    """How many versions the sink table keeps: Iceberg snapshots, Delta commits in the log."""
    if spec.table_format == "iceberg":
        from pyiceberg.catalog.sql import SqlCatalog

        return len(
            SqlCatalog("cohort", uri=spec.iceberg_catalog_url).load_table(spec.iceberg_identifiers[0]).snapshots()
        )
    return sum(1 for f in (Path(spec.sink_path) / "_delta_log").iterdir() if f.name.endswith(".json"))


@pytest.mark.slow
@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_many_batches_keep_few_versions_and_replays_and_the_audit_still_pass(
    table_format: str,
    spark: Any,
    kafka_config: dict[str, Any],
    topic_factory: Any,
    produce_records: Any,
    coordinator: Any,
    sqlite_url: str,
    group: str,
    lake: Path,
) -> None:
    topic = topic_factory(2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    spec = spec_for(lake, table_format, table_retention=RETENTION, max_records_per_partition=2)
    ledger = coordinator.standalone_ledger(group)
    produce_records(topic, records(0, 24))
    for _ in range(6):  # 6 small batches of 2 offsets a partition, each one commit to the sink table
        run_batch(spark, spec, kafka_config, tps, ledger)
    assert table_offsets(spec) == expected(24)[0]
    kept = _versions(spec)
    assert kept <= RETENTION.min_versions + RETENTION.every_commits + 10, kept  # Delta: back to its last checkpoint

    coordinator.reset_offsets(group, {tps[0]: 3}, actor="test", reason="retention test")
    replay = run_batch(spark, spec, kafka_config, [tps[0]], ledger)  # [3, 5) cuts the file of [2, 4)
    assert (replay.committed[0].from_offset, replay.committed[0].until_offset) == (3, 5)
    for _ in range(4):  # more commits: the clean-up runs, the files the replay replaced go
        run_batch(spark, spec, kafka_config, tps, ledger)
    assert table_offsets(spec) == expected(24)[0]
    on_disk = {f.path for f in data_files_on_disk(spec.sink_path)}
    assert not any("/2-4-" in path for path in on_disk if "partition=0" in path), sorted(on_disk)
    assert _versions(spec) <= RETENTION.min_versions + RETENTION.every_commits + 10

    args = [group, "--store-url", sqlite_url, "--sink", spec.sink_path, "--table-format", table_format]
    code, report, _ = cohort_audit(*args)
    assert (code, report["ok"]) == (0, True), report
