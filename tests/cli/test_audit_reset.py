"""`cohort audit` (the command in a subprocess) between an executed offset reset and its replay batch, on each sink
(Parquet, Delta Lake, Iceberg) written by real batches (broker, Spark, the SQLite ledger): the audit says what is
pending, from the ledger's reset entry, and passes; after the replay it is clean. On the tables, data files a
commit that never landed left behind are named and removed by `--repair` once older than the grace period, while
the files the replay removed (an older version still lists them) and younger files are kept."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.pipelines import KafkaOffsetMirror
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.tables.files import UNREFERENCED_GRACE_S
from harness.tables import table_offsets
from tests.support.audit_command import COHORT, cohort_audit
from tests.support.table_batches import expected, records, spec_for


def _age(directory: Path, seconds: float) -> None:
    """Date the files of `directory` `seconds` back (what waiting that long would do)."""
    then = time.time() - seconds
    for path in directory.rglob("*"):
        os.utime(path, (then, then))


@pytest.mark.parametrize("table_format", ["parquet", "delta", "iceberg"])
@pytest.mark.slow
def test_a_pending_replay_is_said_and_passes_then_the_replay_leaves_a_clean_audit(
    table_format: str,
    spark: Any,
    kafka_config: dict[str, Any],
    topic_factory: Any,
    produce_records: Any,
    coordinator: Coordinator,
    sqlite_url: str,
    group: str,
    lake: Path,
) -> None:
    topic = topic_factory(2, suffix="reset")
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    spec = spec_for(lake, table_format)
    ledger = coordinator.standalone_ledger(group)
    bootstrap = kafka_config["bootstrap.servers"]
    produce_records(topic, records(0, 40))
    run_batch(spark, spec, kafka_config, tps, ledger, group=group, mirror=KafkaOffsetMirror(kafka_config))
    args = [group, "--store-url", sqlite_url, "--sink", spec.sink_path, "--bootstrap-servers", bootstrap]

    reset = subprocess.run(
        [COHORT, "reset-offsets", group, "--store-url", sqlite_url, "--bootstrap-servers", bootstrap,
         "--topic", f"{topic}:0", "--to-offset", "6", "--execute", "--reason", "bad VAT rule"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert reset.returncode == 0, reset.stderr

    code, report, _ = cohort_audit(*args)
    assert (code, report["ok"]) == (0, True), report
    pending = {p["partition"]: p["pending"] for p in report["partitions"]}
    assert pending[1] is None
    assert re.fullmatch(
        r"reset to 6 at \S+ by \S+@\S+ \(.*bad VAT rule\); the next batch replays \[6, 20\)", pending[0]
    )
    assert [(p["ledger"], p["kafka"], p["problems"]) for p in report["partitions"]] == [(6, 6, []), (20, 20, [])]
    if table_format == "parquet":  # the table as a person reads it (the same for every format)
        text = subprocess.run([COHORT, "audit", *args], capture_output=True, text=True, timeout=120)
        assert text.returncode == 0 and "replay pending" in text.stdout, text.stdout + text.stderr
        assert f"{topic}-0: pending: reset to 6 at " in text.stdout

    run_batch(spark, spec, kafka_config, tps, ledger, group=group, mirror=KafkaOffsetMirror(kafka_config))
    code, report, _ = cohort_audit(*args)
    assert (code, report["ok"]) == (0, True), report
    assert [(p["ledger"], p["pending"]) for p in report["partitions"]] == [(20, None), (20, None)]
    if table_format == "parquet":
        return

    # the files the replay removed are dated beyond the grace period: an older version still lists them, so they
    # stay; a killed replay attempt's copy of the live files, as old, is named and removed; a young one is left
    assert table_offsets(spec) == expected(40)[0]
    folder = Path(spec.sink_path) / "data" / f"topic={topic}" / "partition=0"
    replaced, live = (next(d for d in folder.iterdir() if d.name.startswith(f"{a}-20-")) for a in (0, 6))
    _age(replaced, 2 * UNREFERENCED_GRACE_S)
    dead, young = folder / "6-20-0dead", folder / "6-20-0young"
    shutil.copytree(live, dead)
    shutil.copytree(live, young)
    _age(dead, 2 * UNREFERENCED_GRACE_S)

    code, report, _ = cohort_audit(*args)
    assert (code, report["ok"]) == (1, False), report
    [problem] = [x for p in report["partitions"] for x in p["problems"]]
    assert (report["partitions"][0]["partition"], problem["where"], problem["repair"]) == (
        0,
        "sink",
        "delete-unreferenced",
    )
    assert f"in {dead}: no version of the table references them" in problem["problem"], problem
    assert report["notes"] and "left alone (a commit may be in flight)" in report["notes"][0]

    code, report, _ = cohort_audit(*args, "--repair")
    assert (code, report["ok"]) == (0, True), report
    assert not dead.exists() and young.is_dir() and replaced.is_dir() and live.is_dir()
    assert table_offsets(spec) == expected(40)[0]
