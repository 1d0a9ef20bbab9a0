"""Warm runs through Dagster: the group's worker job with `SparkResource(remote=...)` on a long-lived Spark Connect
server (the `connect_server` fixture, tests/fixtures/spark.py), the embedded broker, a SQLite store and a Dagster
instance in a temporary DAGSTER_HOME.

Each run executes in a fresh process, as Dagster's run launcher starts one (and because the test process may hold a
classic session, next to which PySpark refuses a remote one): `python -m tests.resources.test_spark_connect_worker
SETUP_JSON REMOTE REPORT` executes the worker job for slot 1 and writes what the run saw to REPORT: its result, its
materializations and, at the moment the batch started, what Spark the resource gave it (a Connect session, no py4j
gateway, no JVM among the run's own processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from cohort.assets.translator import DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from harness.dagster_group import Setup, config_for, instance_for, json_records
from harness.spark_connect import REPOSITORY, SparkConnectServer, clean_env

T = DagsterCohortTranslator()
RUN_TIMEOUT_S = 240.0


def _descendant_commands(pid: int) -> list[str]:
    """The command names (/proc comm) of every live descendant of `pid`."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                head, tail = f.read().rsplit(")", 1)
        except OSError:
            continue
        children.setdefault(int(tail.split()[1]), []).append(int(entry))
        names[int(entry)] = head.split("(", 1)[1]
    found, stack = [], list(children.get(pid, []))
    while stack:
        current = stack.pop()
        found.append(names.get(current, "?"))
        stack.extend(children.get(current, []))
    return found


def _run(setup_json: str, remote: str, report_path: str) -> int:
    """The run process: the worker job of slot 1 with a Spark Connect resource; the report goes to `report_path`."""
    from pyspark import SparkContext

    from cohort.assets.factory import build_cohort_definitions
    from cohort.common.ledger import OffsetLedger, OffsetMirror
    from cohort.pipelines.batch.results import BatchResult
    from cohort.pipelines.batch.run import run_batch
    from cohort.pipelines.spark import is_connect
    from cohort.pipelines.spec import PipelineSpec
    from cohort.resources import KafkaResource, SparkResource

    setup = Setup.from_json(setup_json)
    config = config_for(setup)
    seen: dict[str, Any] = {}

    def runner(
        spark: Any,
        spec: PipelineSpec,
        kafka_config: Mapping[str, Any],
        partitions: Sequence[TopicPartition],
        ledger: OffsetLedger,
        *,
        group: str | None = None,
        mirror: OffsetMirror | None = None,
        run_id: str | None = None,
        new_partitions: Collection[TopicPartition] = (),
    ) -> BatchResult:
        """run_batch, noting what Spark the run was given (`spark` is `SparkResource.get_session()`'s)."""
        seen["connect"] = is_connect(spark)
        seen["session_type"] = f"{type(spark).__module__}.{type(spark).__qualname__}"
        seen["py4j_gateway"] = SparkContext._gateway is not None
        seen["run_processes"] = _descendant_commands(os.getpid())
        result = run_batch(
            spark, spec, kafka_config, partitions, ledger,
            group=group, mirror=mirror, run_id=run_id, new_partitions=new_partitions,
        )  # fmt: skip
        seen["stage_seconds"] = dict(result.stage_seconds)
        return result

    defs = build_cohort_definitions(
        [config],
        kafka=KafkaResource(bootstrap_servers=setup.bootstrap),
        spark=SparkResource(master=None, remote=remote),
        runner=runner,
    )
    job = defs.resolve_job_def(T.get_job_name(config.group))
    with instance_for(setup) as instance:
        result = job.execute_in_process(
            run_config=worker_run_config(config, 1), instance=instance, raise_on_error=False
        )
        materializations = [
            {
                "asset": event.materialization.asset_key.to_user_string(),
                "partition": event.materialization.partition,
                "metadata": {
                    key: value.value
                    for key, value in event.materialization.metadata.items()
                    if isinstance(value.value, str | int | float)  # text, numbers, run ids, paths
                },
            }
            for event in result.get_asset_materialization_events()
        ]
        failures = [str(e.event_specific_data) for e in result.all_events if e.is_failure]
    report = {"success": result.success, "run_id": result.run_id, "materializations": materializations}
    Path(report_path).write_text(json.dumps({**report, **seen, "failures": failures}))
    return 0 if result.success else 1


def run_worker_process(setup: Setup, remote: str, report: Path, log: Path) -> dict[str, Any]:
    """One run of the worker job in a process of its own; its report (the process's log on failure)."""
    env = clean_env(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env["DAGSTER_HOME"] = setup.dagster_home
    with log.open("ab") as out:
        done = subprocess.run(
            [sys.executable, "-m", "tests.resources.test_spark_connect_worker", setup.to_json(), remote, str(report)],
            cwd=REPOSITORY,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
    assert done.returncode == 0 and report.exists(), f"the run process exited {done.returncode}; {log}:\n{tail}"
    return json.loads(report.read_text())


def sink_offsets(root: str) -> list[tuple[int, int]]:
    """(partition, offset) of every row the Parquet sink serves, sorted (duplicates kept)."""
    if not Path(root).exists():
        return []
    table = ds.dataset(root, format="parquet", partitioning="hive").to_table(columns=["kafka"])
    kafka = table.column("kafka").combine_chunks()
    return sorted(zip(kafka.field("partition").to_pylist(), kafka.field("offset").to_pylist(), strict=True))


def ranges_of(report: Mapping[str, Any], group: str, topic: str) -> dict[str, tuple[str, str, int, int]]:
    """The run's materializations of the topic asset by partition: (from, until, records, quarantined)."""
    key = T.get_asset_key(group, topic).to_user_string()
    return {
        m["partition"]: (
            m["metadata"]["cohort/from_offset"],
            m["metadata"]["cohort/until_offset"],
            m["metadata"]["cohort/records"],
            m["metadata"]["cohort/quarantined"],
        )
        for m in report["materializations"]
        if m["asset"] == key
    }


@pytest.mark.slow
def test_two_warm_runs_of_the_worker_job_on_one_connect_server(
    connect_server: SparkConnectServer,
    kafka_config: dict[str, Any],
    topic_factory: Callable[..., str],
    produce_records: Callable[..., int],
    tmp_path: Path,
) -> None:
    server = connect_server._process
    assert server is not None and server.poll() is None
    home = tmp_path / "dagster"
    home.mkdir()
    topic = topic_factory(3, suffix="warm")
    setup = Setup(
        bootstrap=kafka_config["bootstrap.servers"],
        group="g-connect-warm-runs",
        topics=(topic,),
        sink=str(tmp_path / "lake"),
        store_url=f"sqlite:///{tmp_path / 'cohort.db'}",
        dagster_home=str(home),
        slots=1,
        settings={"initial_rebalance_delay_s": 0.0},
    )
    tps = [TopicPartition(topic, p) for p in range(3)]
    log = tmp_path / "runs.log"

    produce_records(topic, json_records(30, 3, malformed={4, 7}))  # both in partition 1
    started = time.perf_counter()
    first = run_worker_process(setup, connect_server.url, tmp_path / "run1.json", log)
    first_s = time.perf_counter() - started
    produce_records(
        topic, [(p, f"n{p}-{i}".encode(), json.dumps({"id": 100 + i}).encode()) for p in (0, 2) for i in (0, 1)]
    )
    started = time.perf_counter()
    second = run_worker_process(setup, connect_server.url, tmp_path / "run2.json", log)
    second_s = time.perf_counter() - started
    print(
        f"run processes: {first_s:.1f} s, {second_s:.1f} s; stages {first['stage_seconds']}, {second['stage_seconds']}"
    )

    # warm: both batches ran on a Spark Connect session of the one server; no run started a JVM of its own
    for report in (first, second):
        assert report["success"], report["failures"]
        assert report["connect"] and report["session_type"].startswith("pyspark.sql.connect.session.")
        assert not report["py4j_gateway"]
        assert "java" not in report["run_processes"], report["run_processes"]
        assert "read_and_write" in report["stage_seconds"]  # the reading tasks wrote the sink (on the server)
    assert connect_server._process is server and server.poll() is None
    # the resource sends a Connect session no setting the server refuses (a classic session's UI defaults)
    assert "CANNOT_MODIFY_CONFIG" not in log.read_text(errors="replace")

    # one materialization per consumed partition and run, with the committed ranges
    assert ranges_of(first, setup.group, topic) == {
        "0": ("0", "10", 10, 0),
        "1": ("0", "10", 8, 2),
        "2": ("0", "10", 10, 0),
    }
    assert ranges_of(second, setup.group, topic) == {
        "0": ("10", "12", 2, 0),
        "2": ("10", "12", 2, 0),
    }  # from the commits
    landed = T.get_landed_asset_key(setup.group, topic).to_user_string()
    assert sorted(
        (m["partition"], m["metadata"]["dagster/row_count"]) for m in first["materializations"] if m["asset"] == landed
    ) == [("0", 10), ("1", 8), ("2", 10)]
    for report in (first, second):
        assert {m["metadata"]["cohort/run_id"] for m in report["materializations"]} == {report["run_id"]}
    with instance_for(setup) as instance:
        assert instance.get_materialized_partitions(T.get_asset_key(setup.group, topic)) == {"0", "1", "2"}
        assert [r.status.value for r in instance.get_runs()] == ["SUCCESS", "SUCCESS"]

    # the sink holds every valid record once; the ledger's ranges are the runs' and continue each other
    expected = sorted(
        {(p, o) for p in range(3) for o in range(10)} - {(1, 1), (1, 2)} | {(p, o) for p in (0, 2) for o in (10, 11)}
    )
    assert sink_offsets(setup.sink) == expected
    coordinator = Coordinator.from_url(setup.store_url)
    try:
        history = [
            (e.partition, e.from_offset, e.until_offset, e.run_id)
            for tp in tps
            for e in coordinator.ledger_history(setup.group, topic, tp.partition)
        ]
        assert history == [
            (0, 0, 10, first["run_id"]),
            (0, 10, 12, second["run_id"]),
            (1, 0, 10, first["run_id"]),
            (2, 0, 10, first["run_id"]),
            (2, 10, 12, second["run_id"]),
        ]
        assert coordinator.standalone_ledger(setup.group).committed_offsets(tps) == {tps[0]: 12, tps[1]: 10, tps[2]: 12}
    finally:
        coordinator.close()


if __name__ == "__main__":  # the run process (see the module doc)
    raise SystemExit(_run(*sys.argv[1:4]))
