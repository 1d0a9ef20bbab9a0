"""The Definitions one host of the multi-host test loads: one group, this host's share of its worker slots.

Every host loads this same module as its code location (`workspace.yaml`); what differs between hosts is the
environment of its `dagster-daemon` (and so of its code server and its runs):

- `COHORT_MULTIHOST_BOOTSTRAP`: Kafka bootstrap servers;
- `COHORT_MULTIHOST_STORE_URL`: the coordinator's store, shared by the hosts (PostgreSQL);
- `COHORT_MULTIHOST_SINK`: the Parquet sink root, shared by the hosts;
- `COHORT_MULTIHOST_GROUP`, `COHORT_MULTIHOST_TOPIC`: the group and the one topic it subscribes to;
- `COHORT_MULTIHOST_SLOTS`: the group's worker slots (default 2);
- `COHORT_MULTIHOST_HOST_SLOTS`: this host's share, comma-separated (`1`, `2`; empty: every slot);
- `COHORT_MULTIHOST_SESSION_S`: the session timeout (default 8 s);
- `COHORT_MULTIHOST_SENSOR_INTERVAL_S`: the sensors' minimum interval (default 2 s; the daemon's sensor loop
  runs every 5 s at most, so that is how often they tick);
- `COHORT_MULTIHOST_SCHEDULE`: cron of the worker schedule, running (empty: no schedule);
- `COHORT_MULTIHOST_STALL_FILE`: while this file exists, every batch task of this host's runs sleeps (bounded),
  so the test holds a run mid-batch (its Spark tasks running) and kills it there.

The Definitions are `build_cohort_definitions`'s, with the schedule running when there is one and both
sensors' intervals short.

Loading needs no broker and no store: they are contacted by runs and sensor ticks only.
"""

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
import pyspark.sql.types as T

from cohort.assets.factory import build_cohort_definitions
from cohort.assets.translator import CohortConfig
from cohort.pipelines.spec import PipelineSpec, Transform
from cohort.resources import KafkaResource, SparkResource
from cohort.resources.group import CohortGroupResource

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = ["ENV_PREFIX", "VALUE_SCHEMA", "defs", "host_config", "host_definitions"]

ENV_PREFIX = "COHORT_MULTIHOST_"
VALUE_SCHEMA = T.StructType([T.StructField("id", T.LongType(), nullable=False), T.StructField("host", T.StringType())])
STALL_BOUND_S = 600.0
"""A stalled task gives up sleeping after this long (the test kills its run long before)."""


def _setting(name: str, default: str = "") -> str:
    return os.environ.get(ENV_PREFIX + name, default)


def _stall_while(path: str) -> Transform:
    """A transform whose tasks sleep while `path` exists (at most `STALL_BOUND_S`), then pass their rows on."""

    def batches(iterator: "Iterator[pa.RecordBatch]") -> "Iterator[pa.RecordBatch]":
        deadline = time.monotonic() + STALL_BOUND_S
        while os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.2)
        yield from iterator

    def transform(frame: "DataFrame") -> "DataFrame":
        return frame.mapInArrow(batches, frame.schema)

    return transform


def host_config() -> CohortConfig:
    """This host's `CohortConfig`, from the environment."""
    stall_file = _setting("STALL_FILE")
    sink = _setting("SINK", ".cohort/multihost/lake")
    spec = PipelineSpec(
        sink_path=str(Path(sink).absolute()),
        value_format="json",
        value_schema=VALUE_SCHEMA,
        transform=_stall_while(stall_file) if stall_file else None,
    )
    topic = _setting("TOPIC", "multihost-events")
    host_slots = tuple(int(s) for s in _setting("HOST_SLOTS").split(",") if s.strip())
    group = CohortGroupResource(
        group=_setting("GROUP", "multihost"),
        topics=[topic],
        worker_slots=int(_setting("SLOTS", "2")),
        store_url=_setting("STORE_URL", "sqlite:///.cohort/multihost/cohort.db"),
        session_timeout_s=float(_setting("SESSION_S", "8")),
        initial_rebalance_delay_s=float(_setting("INITIAL_DELAY_S", "6")),
        rebalance_timeout_s=60.0,
        progress_timeout_s=300.0,  # a stalled batch keeps its member until its run dies
        join_timeout_s=120.0,
    )
    return CohortConfig(
        group,
        pipeline=spec,
        known_topics=[topic],
        schedule=_setting("SCHEDULE") or None,
        host_slots=host_slots or None,
    )


def host_definitions(config: CohortConfig, bootstrap: str, *, sensor_interval_s: int = 2) -> dg.Definitions:
    """The group's Definitions, with both sensors every `sensor_interval_s` (at most: the daemon's tick)."""
    return build_cohort_definitions(
        [config],
        kafka=KafkaResource(bootstrap_servers=bootstrap),
        spark=SparkResource(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}),
        schedule_status=dg.DefaultScheduleStatus.RUNNING,
        membership_interval_s=sensor_interval_s,
        topic_interval_s=sensor_interval_s,
    )


defs = host_definitions(
    host_config(),
    _setting("BOOTSTRAP", "127.0.0.1:9092"),
    sensor_interval_s=int(_setting("SENSOR_INTERVAL_S", "2")),
)
