"""One batch on a Spark standalone cluster, in a process of its own: the driver of test_standalone_cluster.py.

A process holds one SparkContext, and the test session may already hold a local one (tests/fixtures/spark.py's
`spark`), so the cluster's driver runs here: `python -m tests.pipelines.batch.batch_on_cluster ARGS.json OUT.json`
from the repository root. ARGS holds the master URL, the librdkafka configuration, the topic and its
partition count, the sink path, the coordinator's store URL and group, the Python the executors run and a
directory for Spark's event log. The batch runs unchanged (`build_session`, `run_batch`); then, with
`probe`, a small job reports what the executors' Python workers have imported. OUT gets the batch result
or the error, which executor ran each task (from the event log) and the probe's rows.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

BATCH_GROUP = "cohort-batch"
PROBE_GROUP = "cohort-probe"
_PROBE_FIELDS: list[pa.Field[Any]] = [
    pa.field("cwd", pa.string()),
    pa.field("pid", pa.int64()),
    pa.field("modules", pa.string()),
]
PROBE_SCHEMA = pa.schema(_PROBE_FIELDS)


def probe_modules(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One row per task: the Python worker's working directory (the executor's directory, under its worker's
    work dir), its pid and the modules it has imported (worker reuse: it is the process that ran the batch's
    reading tasks on that executor, if `cohort.pipelines.tasks.reader` is among them)."""
    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist(
        [{"cwd": os.getcwd(), "pid": os.getpid(), "modules": json.dumps(sorted(sys.modules))}],
        schema=PROBE_SCHEMA,
    )


def tasks_by_group(event_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Every finished task of the application's event log, by job group: stage, executor, host, outcome."""
    stage_group: dict[int, str] = {}
    tasks: dict[str, list[dict[str, Any]]] = {}
    for log in sorted(event_dir.iterdir()):
        for line in log.read_text().splitlines():
            event = json.loads(line)
            kind = event.get("Event")
            if kind == "SparkListenerJobStart":
                group = (event.get("Properties") or {}).get("spark.jobGroup.id", "")
                for stage in event.get("Stage IDs", []):
                    stage_group[stage] = group
            elif kind == "SparkListenerTaskEnd":
                info = event["Task Info"]
                tasks.setdefault(stage_group.get(event["Stage ID"], ""), []).append(
                    {
                        "stage": event["Stage ID"],
                        "task": info["Task ID"],
                        "executor": info["Executor ID"],
                        "host": info["Host"],
                        "reason": event.get("Task End Reason", {}).get("Reason"),
                    }
                )
    return tasks


def run(args: dict[str, Any]) -> dict[str, Any]:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ.pop("PYSPARK_PYTHON", None)  # the executors' Python comes from the conf, as a user gives it

    from cohort.assignment.coordinator import Coordinator
    from cohort.common.types import TopicPartition
    from cohort.pipelines.batch.run import run_batch
    from cohort.pipelines.spark import build_session
    from cohort.pipelines.spec import PipelineSpec
    from tests.support.orders import ORDER_SCHEMA, Order

    event_dir = Path(args["event_log_dir"])
    event_dir.mkdir(parents=True, exist_ok=True)
    spark = build_session(
        master=args["master"],
        app_name="cohort-cluster-test",
        conf={
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": "512m",
            "spark.pyspark.python": args["executor_python"],
            # Schedule nothing before both executors (one per worker) have registered.
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": event_dir.as_uri(),
            "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false",
        },
    )
    spark.sparkContext.setLogLevel("WARN")
    out: dict[str, Any] = {
        "app_id": spark.sparkContext.applicationId,
        "default_parallelism": spark.sparkContext.defaultParallelism,
    }
    coordinator = Coordinator.from_url(args["store_url"])
    try:
        spec = PipelineSpec(
            sink_path=args["sink_path"],
            value_schema=ORDER_SCHEMA,
            model=Order,
            max_records_per_task=args["max_records_per_task"],
            min_task_records=1,
        )
        partitions = [TopicPartition(args["topic"], p) for p in range(args["partitions"])]
        ledger = coordinator.standalone_ledger(args["group"])
        spark.sparkContext.setJobGroup(BATCH_GROUP, "the batch")
        try:
            result = run_batch(spark, spec, args["kafka_config"], partitions, ledger)
        except Exception as exc:
            out["error"] = {
                "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
                "message": str(exc),
                "traceback": traceback.format_exc(),
            }
        else:
            out["result"] = {
                "records": result.records,
                "quarantined": result.quarantined,
                "partitions": [
                    [p.partition, p.from_offset, p.until_offset, p.records, p.quarantined] for p in result.partitions
                ],
                "committed": [[r.partition, r.from_offset, r.until_offset] for r in result.committed],
                "stage_seconds": result.stage_seconds,
            }
        out["committed_offsets"] = {str(tp.partition): at for tp, at in ledger.committed_offsets(partitions).items()}
        if args.get("probe") and "error" not in out:
            spark.sparkContext.setJobGroup(PROBE_GROUP, "what the executors imported")
            tasks = 2 * spark.sparkContext.defaultParallelism
            rows = spark.range(0, tasks, 1, numPartitions=tasks).mapInArrow(
                probe_modules, "cwd string, pid long, modules string"
            )
            out["probe"] = [{"cwd": r.cwd, "pid": r.pid, "modules": json.loads(r.modules)} for r in rows.collect()]
    finally:
        coordinator.close()
        spark.stop()
    out["tasks"] = tasks_by_group(event_dir)
    return out


def main() -> int:
    args_path, out_path = sys.argv[1:3]
    out = run(json.loads(Path(args_path).read_text()))
    Path(out_path).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
