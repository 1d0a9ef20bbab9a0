"""`cohort audit` on a Delta and an Iceberg sink, run as the user runs it (the `cohort` command in a subprocess),
after real batches that died between their commits: the audit names what the tables hold that the ledger does
not, changes nothing, and `--repair` adopts, rolls back and deletes only what is safe."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from harness.tables import table_offsets
from tests.support.audit_command import cohort_audit, problems, tree
from tests.support.table_batches import Died, die, expected, hook, records, spec_for


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
@pytest.mark.slow
def test_audit_of_a_table_sink_names_and_repairs_what_a_dead_batch_left(
    table_format: str,
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
    spec = spec_for(lake, table_format)
    ledger = coordinator.standalone_ledger(group)
    produce_records(topic, records(0, 20))
    run_batch(spark, spec, kafka_config, tps, ledger)
    args = [group, "--store-url", sqlite_url, "--sink", spec.sink_path]

    code, report, _ = cohort_audit(*args)
    assert (code, report["ok"]) == (0, True), report
    assert [(p["ledger"], p["sink_dirs"], p["quarantine_dirs"]) for p in report["partitions"]] == [(10, 1, 1)] * 2

    produce_records(topic, records(20, 20))  # this batch lands in the sink table and dies before the ledger
    hook(monkeypatch, sink={"after": die})
    with pytest.raises(Died):
        run_batch(spark, spec, kafka_config, tps, ledger, run_id="died")
    monkeypatch.undo()
    stray = Path(spec.sink_path) / "data" / f"topic={topic}" / "partition=1" / "900-910-0abc"
    stray.mkdir(parents=True)  # files of a batch killed before its table commit
    (stray / "part-900-910.parquet").write_bytes(b"not read")

    before = tree(lake)
    code, report, _ = cohort_audit(*args)
    assert code == 1 and not report["ok"]
    assert problems(report) == {0: [("sink", "adopt")], 1: [("sink", "adopt"), ("sink", "delete-orphans")]}
    assert tree(lake) == before  # read-only

    code, report, _ = cohort_audit(*args, "--repair")
    assert (code, report["ok"]) == (0, True), [p["problems"] + p["repaired"] for p in report["partitions"]]
    assert any("adopted [10, 20)" in line for p in report["partitions"] for line in p["repaired"])
    assert not stray.exists()
    assert ledger.committed_offsets(tps) == {tps[0]: 20, tps[1]: 20}
    assert table_offsets(spec) == expected(40)[0]

    produce_records(topic, records(40, 20))  # dies between its quarantine commit and its sink commit
    hook(monkeypatch, sink={"before": die})
    with pytest.raises(Died):
        run_batch(spark, spec, kafka_config, tps, ledger)
    monkeypatch.undo()
    code, report, _ = cohort_audit(*args)
    assert code == 1 and problems(report) == {0: [("quarantine", "roll-back")], 1: [("quarantine", "roll-back")]}
    code, report, _ = cohort_audit(*args, "--repair")
    assert (code, report["ok"]) == (0, True), [p["problems"] + p["repaired"] for p in report["partitions"]]
    assert table_offsets(spec, quarantine=True) == expected(40)[1]
    run_batch(spark, spec, kafka_config, tps, ledger)
    assert table_offsets(spec) == expected(60)[0] and table_offsets(spec, quarantine=True) == expected(60)[1]
    assert cohort_audit(*args)[0] == 0


def test_audit_refuses_unreadable_iceberg_settings_without_a_traceback(
    sqlite_url: str, coordinator: Any, group: str, tmp_path: Path
) -> None:
    from cohort.common.types import OffsetRange

    coordinator.standalone_ledger(group).commit([OffsetRange("t", 0, 0, 0)])  # the group exists
    code, _, err = cohort_audit(
        group,
        "--store-url",
        sqlite_url,
        "--sink",
        str(tmp_path),
        "--table-format",
        "iceberg",
        "--iceberg-table",
        "a.b.c",
    )
    assert code == 2 and "namespace.table" in err
