"""`cohort audit` (the command in a subprocess) on an Iceberg sink whose quarantine commit was rolled back (a real
batch died between its two table commits; broker, Spark, SQLite ledger and catalog): once the snapshots are
expired, no snapshot references the rolled-back files; old enough, the audit names them and `--repair` removes
them, and nothing else (the files the current snapshot holds are as old)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.tables.files import UNREFERENCED_GRACE_S
from harness.tables import table_offsets
from tests.cli.test_audit_reset import _age
from tests.support.audit_command import cohort_audit, problems
from tests.support.table_batches import Died, die, expected, forget_history, hook, records, spec_for


def test_files_of_a_rolled_back_iceberg_commit_no_snapshot_references_are_named_and_removed(
    monkeypatch: pytest.MonkeyPatch,
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
    spec = spec_for(lake, "iceberg")
    ledger = coordinator.standalone_ledger(group)
    produce_records(topic, records(0, 20))
    run_batch(spark, spec, kafka_config, tps, ledger)
    produce_records(topic, records(20, 20))  # dies between its quarantine commit and its sink commit
    hook(monkeypatch, sink={"before": die})
    with pytest.raises(Died):
        run_batch(spark, spec, kafka_config, tps, ledger)
    monkeypatch.undo()
    args = [group, "--store-url", sqlite_url, "--sink", spec.sink_path]
    code, report, _ = cohort_audit(*args, "--repair")
    assert (code, report["ok"]) == (0, True), report  # the quarantine commit rolled back

    quarantine_data = Path(spec.quarantine_root) / "data"
    rolled_back = sorted(d for d in quarantine_data.glob("topic=*/partition=*/10-20-*"))
    assert len(rolled_back) == 2  # its files stay: the snapshot before the roll-back still references them
    for folder in quarantine_data.glob("topic=*/partition=*/*"):
        _age(folder, 2 * UNREFERENCED_GRACE_S)

    forget_history(spec)  # snapshots expired: no snapshot references the rolled-back files any more
    assert all(d.is_dir() for d in rolled_back)
    code, report, _ = cohort_audit(*args)
    assert code == 1 and problems(report) == {
        0: [("quarantine", "delete-unreferenced")],
        1: [("quarantine", "delete-unreferenced")],
    }
    named = " ".join(x["problem"] for p in report["partitions"] for x in p["problems"])
    assert all(str(d) in named for d in rolled_back), named

    code, report, _ = cohort_audit(*args, "--repair")
    assert (code, report["ok"]) == (0, True), report
    assert not any(d.exists() for d in rolled_back)
    assert table_offsets(spec, quarantine=True) == expected(20)[1]  # nothing the table holds was removed
