"""The Definitions that `workspace.yaml` loads: `dagster dev -w workspace.yaml` shows everything here.

One demo group, `demo-ingest`, consuming the JSON topic `demo-events` with three worker slots. Where things
live comes from the environment so the same definitions serve `make ui`, the demo and a real cluster:

- `COHORT_BOOTSTRAP_SERVERS` (default 127.0.0.1:9092): Kafka;
- `COHORT_STORE_URL` (default sqlite:///.cohort/cohort.db): the coordinator's store;
- `COHORT_SINK` (default .cohort/lake): the Parquet sink root;
- `COHORT_SPARK_MASTER` / `COHORT_SPARK_REMOTE`: Spark (default local[2]).

Loading needs no running broker: Kafka is contacted only by runs, sensors and checks.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
import pyspark.sql.types as T

from cohort.assets.factory import build_cohort_definitions
from cohort.assets.translator import CohortConfig
from cohort.pipelines.spec import PipelineSpec, Transform
from cohort.resources.group import DEFAULT_STORE_URL, CohortGroupResource
from cohort.resources.kafka import KafkaResource
from cohort.resources.spark import SparkResource

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = ["DEMO_GROUP", "DEMO_TOPIC", "EVENT_SCHEMA", "defs", "demo_config", "demo_definitions"]

DEMO_GROUP = "demo-ingest"
DEMO_TOPIC = "demo-events"
EVENT_SCHEMA = T.StructType(
    [
        T.StructField("event_id", T.LongType(), nullable=False),
        T.StructField("user", T.StringType()),
        T.StructField("kind", T.StringType()),
        T.StructField("amount", T.DoubleType()),
    ]
)
"""The JSON value schema of demo events; values that do not parse into it are quarantined."""


def _stall(seconds: float) -> Transform:
    """A transform whose tasks sleep first: the demo uses it to make one worker slot stall mid-batch."""

    def batches(iterator: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import time

        time.sleep(seconds)
        yield from iterator

    def transform(frame: DataFrame) -> DataFrame:
        return frame.mapInArrow(batches, frame.schema)

    return transform


def demo_config(
    *,
    store_url: str = DEFAULT_STORE_URL,
    sink: str = ".cohort/lake",
    slots: int = 3,
    stall_s: float = 0.0,
    group_settings: dict | None = None,
) -> CohortConfig:
    """The demo group's configuration (`stall_s` > 0 makes this process's batches stall mid-way)."""
    spec = PipelineSpec(
        sink_path=str(Path(sink).absolute()) if "://" not in sink else sink,
        value_format="json",
        value_schema=EVENT_SCHEMA,
        transform=_stall(stall_s) if stall_s else None,
    )
    settings = {
        "initial_rebalance_delay_s": 8.0,
        "session_timeout_s": 10.0,
        "rebalance_timeout_s": 60.0,
        "progress_timeout_s": 300.0,
        **(group_settings or {}),
    }
    return CohortConfig(
        CohortGroupResource(group=DEMO_GROUP, topics=[DEMO_TOPIC], worker_slots=slots, store_url=store_url, **settings),
        pipeline=spec,
        lag_threshold=0,
        schedule="*/10 * * * *",
    )


def demo_definitions(
    bootstrap_servers: str,
    *,
    store_url: str = DEFAULT_STORE_URL,
    sink: str = ".cohort/lake",
    stall_s: float = 0.0,
    spark_master: str | None = "local[2]",
    spark_remote: str | None = None,
    **kwargs: object,
) -> dg.Definitions:
    """The demo Definitions against a given broker, store and sink."""
    return build_cohort_definitions(
        [demo_config(store_url=store_url, sink=sink, stall_s=stall_s)],
        kafka=KafkaResource(bootstrap_servers=bootstrap_servers),
        spark=SparkResource(master=None if spark_remote else spark_master, remote=spark_remote),
        **kwargs,  # type: ignore[arg-type]
    )


defs = demo_definitions(
    os.environ.get("COHORT_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
    store_url=os.environ.get("COHORT_STORE_URL", DEFAULT_STORE_URL),
    sink=os.environ.get("COHORT_SINK", ".cohort/lake"),
    spark_master=os.environ.get("COHORT_SPARK_MASTER", "local[2]"),
    spark_remote=os.environ.get("COHORT_SPARK_REMOTE") or None,
)
