"""One group run through Dagster, for the Dagster tests and the fault scenarios: its Definitions built the same
way in the calling process and in worker subprocesses (`harness.dagster_worker`, which the tests kill with SIGKILL
to simulate a lost member), and the small helpers around them (polling, killing a process group, JSON events)."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyspark.sql.types as T

from cohort.assets.factory import build_cohort_definitions
from cohort.assets.translator import CohortConfig
from cohort.pipelines.spec import PipelineSpec
from cohort.resources import KafkaResource, SparkResource
from cohort.resources.group import CohortGroupResource

ROOT = Path(__file__).resolve().parents[1]
VALUE_SCHEMA = T.StructType([T.StructField("id", T.LongType(), nullable=False), T.StructField("kind", T.StringType())])


@dataclass(frozen=True)
class Setup:
    """Everything a test group needs, serializable to hand to a worker subprocess."""

    bootstrap: str
    group: str
    topics: tuple[str, ...]
    sink: str
    store_url: str
    dagster_home: str
    topic_pattern: str | None = None
    slots: int = 2
    slow_s: float = 0.0
    lag_threshold: int = 0
    freshness_s: float = 3600.0
    settings: dict[str, Any] = field(default_factory=dict)
    table_format: str = "parquet"
    iceberg_catalog: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Setup":
        raw = json.loads(text)
        raw["topics"] = tuple(raw["topics"])
        return cls(**raw)


def _slow_batches(seconds: float) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def slow(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        time.sleep(seconds)
        yield from batches

    return slow


def config_for(setup: Setup) -> CohortConfig:
    transform = None
    if setup.slow_s:
        slow = _slow_batches(setup.slow_s)

        def transform(frame):
            return frame.mapInArrow(slow, frame.schema)

    spec = PipelineSpec(
        sink_path=setup.sink,
        value_format="json",
        value_schema=VALUE_SCHEMA,
        transform=transform,
        table_format=setup.table_format,
        iceberg_catalog=setup.iceberg_catalog if setup.table_format == "iceberg" else None,
    )
    settings = {
        "initial_rebalance_delay_s": 4.0,
        "session_timeout_s": 6.0,
        "heartbeat_interval_s": 1.0,
        "rebalance_timeout_s": 30.0,
        "progress_timeout_s": 120.0,
        "join_timeout_s": 90.0,
        **setup.settings,
    }
    return CohortConfig(
        CohortGroupResource(
            group=setup.group,
            topics=setup.topics,
            topic_pattern=setup.topic_pattern,
            worker_slots=setup.slots,
            store_url=setup.store_url,
            **settings,
        ),
        known_topics=setup.topics,
        pipeline=spec,
        lag_threshold=setup.lag_threshold,
        freshness_s=setup.freshness_s,
        schedule="*/5 * * * *",
    )


def definitions_for(setup: Setup, **kwargs: Any) -> dg.Definitions:
    return build_cohort_definitions(
        [config_for(setup)],
        kafka=KafkaResource(bootstrap_servers=setup.bootstrap),
        spark=SparkResource(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}),
        **kwargs,
    )


def instance_for(setup: Setup) -> dg.DagsterInstance:
    return dg.DagsterInstance.local_temp(tempdir=setup.dagster_home)


def start_worker_process(setup: Setup, slot: int, log_path: Path) -> subprocess.Popen[bytes]:
    """Run worker slot `slot` in its own process group (so SIGKILL takes its Spark JVM too)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "harness.dagster_worker", setup.to_json(), str(slot)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def kill_process_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker and everything it started; wait for it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def wait_for(predicate: Callable[[], Any], *, timeout_s: float, what: str, interval_s: float = 0.2) -> Any:
    """Poll `predicate` until it returns a truthy value (bounded)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def json_records(count: int, partitions: int, *, malformed: set[int] = frozenset()) -> list[tuple[int, bytes, bytes]]:
    """`count` JSON events spread over partitions; the indices in `malformed` are not JSON."""
    records = []
    for i in range(count):
        value = b"{not json" if i in malformed else json.dumps({"id": i, "kind": "view"}).encode()
        records.append((i % partitions, f"k{i}".encode(), value))
    return records
