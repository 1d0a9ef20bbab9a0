"""A batch on a real Spark standalone cluster: one master and two workers, each its own JVM (the `spark_cluster`
fixture, tests/fixtures/spark.py).

The batch runs unchanged (`build_session(master="spark://...")`, `run_batch`) in a driver process of its own
(tests/pipelines/batch/batch_on_cluster.py: a process holds one SparkContext, and this session may hold a local
one). Which executor ran each task comes from the driver's Spark event log; which worker ran each executor
from the workers' work dirs (`<work dir>/<app id>/<executor id>/`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from cohort.pipelines.tasks import EXECUTOR_MODULES
from harness.spark_cluster import SparkStandaloneCluster
from tests.pipelines.batch.batch_on_cluster import BATCH_GROUP, PROBE_GROUP
from tests.support.orders import order

ROOT = Path(__file__).resolve().parents[3]
PARTITIONS = 4
PER_PARTITION = 500
PER_TASK = 100  # 20 spans, dealt to one reading task per core of the two one-core executors

DRIVER_ONLY = ("dagster", "pandera", "sqlalchemy", "cohort.assets", "cohort.resources", "cohort.assignment")


def run_driver(cluster: SparkStandaloneCluster, tmp_path: Path, **args: Any) -> dict[str, Any]:
    """Run tests/pipelines/batch/batch_on_cluster.py against the cluster; its JSON result."""
    cluster.wait_idle()  # the previous test's executors are gone: this application gets one per worker
    args = {
        "master": cluster.master_url,
        "executor_python": cluster.python,
        "event_log_dir": str(tmp_path / "events"),
        "max_records_per_task": PER_TASK,
        **args,
    }
    (tmp_path / "args.json").write_text(json.dumps(args))
    out = tmp_path / "out.json"
    command = [sys.executable, "-m", "tests.pipelines.batch.batch_on_cluster", str(tmp_path / "args.json"), str(out)]
    with (tmp_path / "driver.log").open("wb") as log:
        process = subprocess.Popen(
            command, cwd=ROOT, env=cluster.driver_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(200)
        finally:
            if process.poll() is None:  # timed out or interrupted: end the driver and the JVM it launched
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    if process.returncode != 0 or not out.exists():
        tail = "\n".join((tmp_path / "driver.log").read_text(errors="replace").splitlines()[-60:])
        pytest.fail(f"the driver exited with {process.returncode}:\n{tail}\n{cluster.log_tails()}")
    return dict(json.loads(out.read_text()))


def produce_orders(topic_factory: Any, produce_records: Any) -> tuple[str, list[tuple[int, bytes, bytes]]]:
    """2000 records over 4 partitions; every 50th is not JSON, every 70th (of the others) has an amount the
    model refuses: both are quarantined."""
    topic = topic_factory(PARTITIONS)
    records = []
    for i in range(PARTITIONS * PER_PARTITION):
        value = b"not json" if i % 50 == 0 else order(i, amount=5000.0) if i % 70 == 0 else order(i)
        records.append((i % PARTITIONS, f"k{i}".encode(), value))
    produce_records(topic, records)
    return topic, records


def driver_only(modules: list[str]) -> list[str]:
    """The modules of `modules` a reading task must not need: Dagster's, pandera's, SQLAlchemy's, Cohort's
    Dagster layers and its coordinator."""
    return [m for m in modules if m.split(".")[0].startswith("dagster") or m.startswith(DRIVER_ONLY)]


@pytest.mark.slow
def test_batch_on_two_workers_lands_every_record_once(
    spark_cluster: SparkStandaloneCluster, kafka_config, topic_factory, produce_records, sqlite_url, tmp_path
):
    assert len(spark_cluster.alive_workers()) == 2
    topic, records = produce_orders(topic_factory, produce_records)
    lake = tmp_path / "lake"  # one machine: a local directory both workers and the driver reach

    out = run_driver(
        spark_cluster,
        tmp_path,
        kafka_config=kafka_config,
        topic=topic,
        partitions=PARTITIONS,
        sink_path=str(lake),
        store_url=sqlite_url,
        group="cluster",
        probe=True,
    )

    assert "error" not in out, out.get("error", {}).get("traceback")
    # record i went to partition i % 4, at offset i // 4
    where = {key: (p, i // PARTITIONS) for i, (p, key, _) in enumerate(records)}
    bad = {key for _, key, value in records if value == b"not json" or b'"amount": 5000.0' in value}
    bad_per_partition = Counter(where[key][0] for key in bad)
    assert out["result"]["partitions"] == [
        [p, 0, PER_PARTITION, PER_PARTITION - bad_per_partition[p], bad_per_partition[p]] for p in range(PARTITIONS)
    ]
    assert out["committed_offsets"] == {str(p): PER_PARTITION for p in range(PARTITIONS)}

    # the sink holds every valid record once, at its offset; the quarantine every refused one, with a reason
    sink = ds.dataset(lake, format="parquet", partitioning="hive").to_table().to_pylist()
    landed = Counter((r["kafka"]["partition"], r["kafka"]["offset"], r["kafka"]["key"]) for r in sink)
    assert landed == Counter((*where[key], key) for key in where if key not in bad)
    assert all(r["id"] == int(r["kafka"]["key"][1:]) + 1 and r["topic"] == topic for r in sink)
    quarantine = ds.dataset(lake / "_quarantine", format="parquet", partitioning="hive").to_table().to_pylist()
    assert Counter((r["kafka"]["partition"], r["kafka"]["offset"], r["kafka"]["key"]) for r in quarantine) == Counter(
        (*where[key], key) for key in bad
    )
    assert all(r["reason"] for r in quarantine)

    # the reading tasks ran on both workers (one executor each)
    app = out["app_id"]
    worker_of = spark_cluster.executor_workers(app)
    assert sorted(worker_of.values()) == [0, 1], worker_of
    tasks = out["tasks"][BATCH_GROUP]
    assert len(tasks) == 2  # the spans dealt to one task per core (cohort.pipelines.tasks.reader.span_groups)
    assert {t["reason"] for t in tasks} == {"Success"}
    per_worker = Counter(worker_of[t["executor"]] for t in tasks)
    assert set(per_worker) == {0, 1}, per_worker

    # the Python workers that ran them imported the reading path only: no Dagster, no coordinator, no pandera
    assert {t["executor"] for t in out["tasks"][PROBE_GROUP]} == set(worker_of)
    for row in out["probe"]:
        executor_dir = Path(row["cwd"])  # <worker work dir>/<app id>/<executor id>
        assert executor_dir.parent.name == app and executor_dir.name in worker_of
        modules = row["modules"]
        assert "cohort.pipelines.tasks.reader" in modules, "the probe ran in a Python worker that read nothing"
        allowed = set(EXECUTOR_MODULES) | {m.rpartition(".")[0] for m in EXECUTOR_MODULES}  # and their packages
        assert {m for m in modules if m.startswith("cohort.pipelines.")} <= allowed
        assert driver_only(modules) == []


def executor_python_without(tmp_path: Path, module: str, python: str) -> str:
    """A `python` for the executors that cannot import `module`: a wrapper putting first on PYTHONPATH a package
    of that name that raises ModuleNotFoundError, as a missing one does."""
    shadow = tmp_path / "shadow" / module
    shadow.mkdir(parents=True)
    message = f"No module named {module!r}"
    (shadow / "__init__.py").write_text(f"raise ModuleNotFoundError({message!r}, name={module!r})\n")
    wrapper = tmp_path / f"python-without-{module}"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{shadow.parent}${{PYTHONPATH:+:$PYTHONPATH}}" exec {python} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.mark.slow
def test_missing_executor_dependency_fails_the_batch_naming_it(
    spark_cluster: SparkStandaloneCluster, kafka_config, topic_factory, produce_records, sqlite_url, tmp_path
):
    topic, _ = produce_orders(topic_factory, produce_records)
    lake = tmp_path / "lake"

    out = run_driver(
        spark_cluster,
        tmp_path,
        executor_python=executor_python_without(tmp_path, "confluent_kafka", spark_cluster.python),
        kafka_config=kafka_config,
        topic=topic,
        partitions=PARTITIONS,
        sink_path=str(lake),
        store_url=sqlite_url,
        group="cluster",
    )

    error = out["error"]  # one sentence: the module, the executors' interpreter (from spark.pyspark.python)
    assert error["type"] == "cohort.pipelines.batch.executor_errors.ExecutorDependencyError", error
    assert error["message"].startswith("Spark executors cannot import 'confluent_kafka'"), error["message"]
    assert "python-without-confluent_kafka" in error["message"] and "\n" not in error["message"]
    # nothing committed, nothing published, the staging deleted
    assert out["committed_offsets"] == {str(p): None for p in range(PARTITIONS)}
    assert not [p for p in lake.rglob("*") if p.is_file()]
