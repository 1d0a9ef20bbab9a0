"""The example of docs/airflow.md as the tests run it: land a JSON topic with two worker slots.

A DAG file as a user writes one. Where things live comes from the environment (set by the tests):
COHORT_AIRFLOW_GROUP, COHORT_AIRFLOW_TOPIC (or COHORT_AIRFLOW_PATTERN), COHORT_AIRFLOW_SINK, COHORT_STORE_URL
(the store, read where the tasks and the trigger run), COHORT_AIRFLOW_SLOTS; Kafka is the Airflow connection
`kafka_default` (AIRFLOW_CONN_KAFKA_DEFAULT); COHORT_AIRFLOW_STALL_FILE makes every slot's batch wait while that
file exists (to kill a slot mid-batch), before it writes (COHORT_AIRFLOW_STALL_AT=write, the default) or after its
ledger commit (=commit), and touch `<stall file>.<pid>` as it starts waiting (the pid is the task runner's: the
transform and the batch run in Spark's driver). COHORT_AIRFLOW_SESSION_S, COHORT_AIRFLOW_DELAY_S,
COHORT_AIRFLOW_POLL_S, COHORT_AIRFLOW_RETRIES and COHORT_AIRFLOW_RETRY_DELAY_S set the timeouts.
"""

import os
import time
from datetime import timedelta
from pathlib import Path

import pyspark.sql.types as T

from cohort.airflow import AirflowGroup, cohort_dag
from cohort.assignment.worker_group import WorkerGroup
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.spec import PipelineSpec

EVENT = T.StructType([T.StructField("id", T.LongType(), nullable=False), T.StructField("kind", T.StringType())])


STALL = os.environ.get("COHORT_AIRFLOW_STALL_FILE")
STALL_AT = os.environ.get("COHORT_AIRFLOW_STALL_AT", "write")


def _hold():  # wait while the stall file exists (a batch in flight, to be killed)
    if STALL and Path(STALL).exists():
        Path(f"{STALL}.{os.getpid()}").touch()
    while STALL and Path(STALL).exists():
        time.sleep(0.2)


def _stall(frame):  # the transform: the batch waits before it writes
    _hold()
    return frame


def _commit_then_stall(*args, **kwargs):  # the batch runner: the batch waits after its commit
    result = run_batch(*args, **kwargs)
    _hold()
    return result


group = WorkerGroup(
    os.environ.get("COHORT_AIRFLOW_GROUP", "orders-airflow"),
    topics=tuple(t for t in [os.environ.get("COHORT_AIRFLOW_TOPIC", "orders")] if t),
    topic_pattern=os.environ.get("COHORT_AIRFLOW_PATTERN") or None,
    worker_slots=int(os.environ.get("COHORT_AIRFLOW_SLOTS", "2")),
    session_timeout_s=float(os.environ.get("COHORT_AIRFLOW_SESSION_S", "10")),
    initial_rebalance_delay_s=float(os.environ.get("COHORT_AIRFLOW_DELAY_S", "0")),
)
pipeline = PipelineSpec(
    sink_path=os.environ.get("COHORT_AIRFLOW_SINK", "/tmp/cohort-airflow-lake"),
    value_format="json",
    value_schema=EVENT,
    transform=_stall if STALL and STALL_AT == "write" else None,
)
dag = cohort_dag(
    AirflowGroup(group, pipeline, store_url_env="COHORT_STORE_URL"),
    schedule=None,
    poll_interval_s=float(os.environ.get("COHORT_AIRFLOW_POLL_S", "10")),
    retries=int(os.environ.get("COHORT_AIRFLOW_RETRIES", "2")),
    retry_delay=timedelta(seconds=float(os.environ.get("COHORT_AIRFLOW_RETRY_DELAY_S", "30"))),
    runner=_commit_then_stall if STALL and STALL_AT == "commit" else None,
)
