"""Table maintenance on an S3 API (harness.s3_server): the store's clean-up after its commits merges small files
(Cohort's compaction), expires old versions and deletes the files a replay replaced from the bucket; a replay from
an offset inside a merged file keeps every offset once; `cohort audit` and `cohort gc` (the commands, in
subprocesses, the AWS variables in their environment) read the tables on S3, and gc deletes a killed batch's
staging area there."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.sink.layout import attempt_id
from cohort.pipelines.tables.batch import open_tables
from cohort.pipelines.tables.compaction import COMPACT_ATTEMPT
from cohort.pipelines.tables.files import data_files_on_disk
from cohort.pipelines.tables.retention import TableRetention
from harness.tables import table_offsets
from tests.fixtures.s3 import S3Bucket
from tests.pipelines.tables.test_object_store import s3_spec
from tests.support.audit_command import COHORT, cohort_audit
from tests.support.table_batches import expected, records

RETENTION = TableRetention(keep_s=0, min_versions=3, history_s=0, every_commits=2, compact_files=3)
"""A clean-up every other commit, merging runs of 3 or more small files as soon as they are committed."""


@pytest.mark.parametrize(
    "table_format", ["delta", pytest.param("iceberg", marks=pytest.mark.slow)]
)  # fmt: skip
def test_compaction_retention_replay_audit_and_gc_on_s3(
    table_format: str,
    s3_env: S3Bucket,
    tmp_path: Any,
    spark: Any,
    kafka_config: dict[str, Any],
    topic_factory: Any,
    produce_records: Any,
    coordinator: Any,
    sqlite_url: str,
    group: str,
) -> None:
    topic = topic_factory(2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    spec = s3_spec(s3_env, table_format, tmp_path, table_retention=RETENTION, max_records_per_partition=2)
    ledger = coordinator.standalone_ledger(group)
    produce_records(topic, records(0, 28))
    for _ in range(5):  # 5 small batches of 2 offsets a partition: the clean-up merges runs of them
        run_batch(spark, spec, kafka_config, tps, ledger)
    sink = open_tables(spec.table_target).sink
    merged = [f for f in sink.files([tps[0]]) if f.attempt.startswith(COMPACT_ATTEMPT)]
    assert merged and len(sink.files([tps[0]])) < 5, sink.files([tps[0]])
    assert table_offsets(spec) == expected(20)[0]
    args = [group, "--store-url", sqlite_url, "--sink", spec.sink_path, "--table-format", table_format]
    if table_format == "iceberg":
        args += ["--iceberg-catalog", str(spec.iceberg_catalog)]
    code, report, _ = cohort_audit(*args)
    assert (code, report["ok"]) == (0, True), report

    big = max(merged, key=lambda f: f.until_offset - f.from_offset)
    cut = big.from_offset + 3  # a replay from inside the merged file
    coordinator.reset_offsets(group, {tps[0]: cut}, actor="test", reason="object store test")
    replay = run_batch(spark, spec, kafka_config, [tps[0]], ledger)
    assert (replay.committed[0].from_offset, replay.committed[0].until_offset) == (cut, cut + 2)
    for _ in range(8):  # catch up: more clean-ups, the files the replay replaced go from the bucket
        if ledger.committed_offsets(tps) == {tps[0]: 14, tps[1]: 14}:
            break
        run_batch(spark, spec, kafka_config, tps, ledger)
    assert table_offsets(spec) == expected(28)[0] and table_offsets(spec, quarantine=True) == expected(28)[1]
    on_s3 = {f.path for f in data_files_on_disk(spec.sink_path)}
    assert big.path not in on_s3, sorted(on_s3)  # replaced by the replay, then deleted by the clean-up
    code, report, _ = cohort_audit(*args)
    assert (code, report["ok"]) == (0, True), report

    killed = f"lake/orders/_staging/{attempt_id('killed-run')}/topic={topic}/partition=0/part-0-2.parquet"
    s3_env.server.client().put_object(Bucket=s3_env.name, Key=killed, Body=b"staged by a killed batch")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
    gc = [COHORT, "gc", *args, "--grace", "PT0S", "--execute", "--json"]
    done = subprocess.run(gc, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert json.loads(done.stdout) and killed not in s3_env.object_keys("lake/orders/_staging/"), done.stdout
    assert table_offsets(spec) == expected(28)[0]
