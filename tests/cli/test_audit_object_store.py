"""`cohort audit` and `cohort gc` (the commands, as subprocesses) on a Parquet sink on an S3 API (harness.s3_server,
the AWS variables inherited): a batch that died between two copies of its publish leaves a committed range with no
object in the sink, which the audit names and `--repair` publishes from the dead run's staging; the staging areas
of killed batches are collected once nothing waits in them, and the one a committed range waits in is kept."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.sink.layout import run_tag
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tasks.writer import ArrowFs
from tests.fixtures.s3 import S3Bucket
from tests.support.audit_command import COHORT, cohort_audit, problems
from tests.support.object_store import arrow_offsets, spark_environ
from tests.support.orders import ORDER_SCHEMA, order


def _die_after_first_copy(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make the first copy of a publish into place the process's last act; the real copy, to put back."""
    copy = ArrowFs.copy_file

    def copy_then_die(self: ArrowFs, source: str, target: str) -> None:
        copy(self, source, target)
        raise SystemExit("killed after the first copy into place")

    monkeypatch.setattr(ArrowFs, "copy_file", copy_then_die)
    return copy


def _gc(group: str, sink: str, store_url: str, *extra: str) -> dict[str, Any]:
    done = subprocess.run(
        [COHORT, "gc", group, "--sink", sink, "--store-url", store_url, "--json", *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return dict(json.loads(done.stdout))


def test_the_audit_names_and_repairs_a_publish_killed_between_two_copies_and_gc_collects_staging(
    spark: Any,
    kafka_config: dict[str, Any],
    topic_factory: Any,
    produce_records: Any,
    ledger: Any,
    group: str,
    sqlite_url: str,
    s3_env: S3Bucket,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topic = topic_factory(2)
    produce_records(topic, [(i % 2, None, order(i)) for i in range(40)])
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    spec = PipelineSpec(sink_path=s3_env.root, value_schema=ORDER_SCHEMA)
    copy = _die_after_first_copy(monkeypatch)
    with spark_environ(spark), pytest.raises(SystemExit):
        run_batch(spark, spec, kafka_config, tps, ledger, run_id="died")
    monkeypatch.setattr(ArrowFs, "copy_file", copy)
    assert arrow_offsets(s3_env.root) == [(topic, 0, o) for o in range(20)]

    code, report, _ = cohort_audit(group, "--sink", s3_env.root, "--store-url", sqlite_url)
    assert code == 1
    found = problems(report)
    assert list(found) == [1] and found[1][0][1] is not None, found  # partition 1's range: unpublished, repairable
    # the staging it waits in is kept by the clean-up, whatever the grace period
    kept = _gc(group, s3_env.root, sqlite_url, "--grace", "PT0S", "--execute")
    assert not kept.get("deleted"), kept

    code, report, _ = cohort_audit(group, "--sink", s3_env.root, "--store-url", sqlite_url, "--repair")
    assert code == 0, report
    assert arrow_offsets(s3_env.root) == sorted((topic, i % 2, i // 2) for i in range(40))
    code, report, _ = cohort_audit(group, "--sink", s3_env.root, "--store-url", sqlite_url)
    assert (code, problems(report)) == (0, {})

    # nothing waits in the dead run's staging any more: it is collected (its run is no member)
    collected = _gc(group, s3_env.root, sqlite_url, "--grace", "PT0S", "--execute")
    assert collected.get("deleted"), collected
    left = [k for k in s3_env.object_keys("lake/_staging/") if not k.endswith("/")]
    assert not [k for k in left if run_tag("died") in k], left
