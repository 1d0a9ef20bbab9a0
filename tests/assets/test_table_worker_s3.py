"""The worker job into Delta Lake and Iceberg tables on an S3 API (harness.s3_server), the path users take:
Dagster's worker job with the AWS variables in the environment. The landed asset's check and `cohort audit` (a
subprocess) read the tables on S3; a data file deleted there is named by the audit. Bad object-store
configuration (a wrong endpoint, unknown keys, a wrong secret, a missing bucket, a bucket the keys may not write)
fails the worker step within seconds with one line naming the cause, never the secret, before anything commits."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cohort.assets.translator import CHECK_CONTIGUOUS, CHECK_SINK, DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.common.types import TopicPartition
from harness.dagster_group import config_for, definitions_for, json_records
from harness.tables import table_offsets
from tests.assets.test_batch_refusals import assert_nothing_committed, failed_step
from tests.assets.test_worker import _checks
from tests.fixtures.s3 import S3Bucket

T = DagsterCohortTranslator()
COHORT = str(Path(sys.executable).with_name("cohort"))


def _setup(make_setup: Any, topic: str, table_format: str, root: str, tmp_path: Path) -> Any:
    setup = make_setup((topic,), slots=1, settings={"initial_rebalance_delay_s": 0.0}, table_format=table_format)
    catalog = f"sqlite:///{tmp_path / 'catalog.sqlite'}" if table_format == "iceberg" else None
    return dataclasses.replace(setup, sink=f"{root}/orders", iceberg_catalog=catalog)


def _audit(setup: Any, *extra: str) -> subprocess.CompletedProcess[str]:
    """`cohort audit GROUP --sink s3://... --json` as the user runs it, the AWS variables in its environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
    args = [COHORT, "audit", setup.group, "--sink", setup.sink, "--store-url", setup.store_url, "--json", *extra]
    if setup.iceberg_catalog:
        args += ["--iceberg-catalog", setup.iceberg_catalog]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_worker_lands_into_tables_on_s3_and_the_check_and_audit_read_them(
    table_format, make_setup, topic_factory, produce_records, instance, s3_env: S3Bucket, spark, tmp_path
) -> None:
    topic = topic_factory(2, suffix="orders")
    produce_records(topic, json_records(20, 2, malformed={3}))
    setup = _setup(make_setup, topic, table_format, s3_env.root, tmp_path)
    config = config_for(setup)
    defs = definitions_for(setup)
    job = defs.resolve_job_def(T.get_job_name(config.group))
    assert job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance).success
    produce_records(topic, [(0, None, b'{"id": 100, "kind": "late"}')])
    assert job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance).success

    spec = config.pipeline
    assert spec is not None
    assert len(table_offsets(spec)) == 20 and table_offsets(spec, quarantine=True) == [(1, 1)]
    checks = _checks(defs, config, instance)
    assert checks[CHECK_CONTIGUOUS].passed and checks[CHECK_SINK].passed, checks[CHECK_SINK].metadata
    clean = _audit(setup)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert {(p["partition"], p["ledger"]) for p in json.loads(clean.stdout)["partitions"]} == {(0, 11), (1, 10)}

    data = [k for k in s3_env.object_keys("lake/orders/data/") if k.endswith(".parquet") and "/partition=0/" in k]
    s3_env.server.client().delete_object(Bucket=s3_env.name, Key=data[0])
    found = _audit(setup)
    assert found.returncode != 0
    assert "is referenced by the table but missing" in found.stdout, found.stdout


def _black_hole() -> socket.socket:
    """A loopback port that accepts connections and never answers (an endpoint behind a dead proxy)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    return listener


BAD = ["wrong-endpoint", "silent-endpoint", "unknown-key", "wrong-secret", "missing-bucket", "read-only-bucket"]


# Every cause on Delta in CI, and one on Iceberg (the probe is the same code for both); the rest marked slow.
BAD_CASES = [
    pytest.param(
        bad, table_format, marks=() if table_format == "delta" or bad == "missing-bucket" else pytest.mark.slow
    )
    for bad in BAD
    for table_format in ("delta", "iceberg")
]


@pytest.mark.parametrize(("bad", "table_format"), BAD_CASES)
def test_bad_object_store_configuration_fails_the_batch_before_any_commit_in_one_line(
    bad, table_format, make_setup, topic_factory, produce_records, instance, s3_env: S3Bucket, spark, tmp_path,
    monkeypatch,
) -> None:  # fmt: skip
    topic = topic_factory(2, suffix="bad")
    produce_records(topic, json_records(10, 2))
    root, expected = s3_env.root, ""
    silent = _black_hole()
    if bad == "wrong-endpoint":
        monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
        expected = "cannot reach the S3 endpoint http://127.0.0.1:9 (Could not connect to server)"
    elif bad == "silent-endpoint":
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
        expected = "(Timeout was reached): check AWS_ENDPOINT_URL"
    elif bad == "unknown-key":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAUNKNOWNUNKNOWN00")
        expected = "does not know the access key: check AWS_ACCESS_KEY_ID"
    elif bad == "wrong-secret":
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        expected = "refused the signature: check AWS_SECRET_ACCESS_KEY"
    elif bad == "missing-bucket":
        root, expected = f"s3://{s3_env.name}-gone/lake", f"bucket '{s3_env.name}-gone' does not exist"
    else:
        bucket = s3_env.server.create_bucket(s3_env.name[:50], writable=False)
        root, expected = f"s3://{bucket}/lake", f"access denied: the keys may not write under s3://{bucket}/lake"
    setup = _setup(make_setup, topic, table_format, root, tmp_path)
    config = config_for(setup)
    job = definitions_for(setup).resolve_job_def(T.get_job_name(config.group))

    started = time.monotonic()
    result = job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance, raise_on_error=False)
    took = time.monotonic() - started
    silent.close()

    error = failed_step(result)
    assert error.cls_name == "ObjectStoreError", error.to_string()
    assert len(error.message.strip().splitlines()) == 1 and expected in error.message, error.message
    assert s3_env.server.credentials.secret_access_key not in error.to_string()
    assert_nothing_committed(config, result, [TopicPartition(topic, p) for p in range(2)])
    assert took < 60, took
    assert not [k for k in s3_env.object_keys() if k.endswith(".parquet") or "_delta_log" in k]
