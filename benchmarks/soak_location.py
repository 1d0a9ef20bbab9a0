"""The soak's code location (`dagster dev -f benchmarks/soak_location.py`): one group over the soak topic, a
batch every minute from a schedule that starts running, the membership and topic sensors running.

Where things live comes from the environment `benchmarks/soak.py` sets: `COHORT_BOOTSTRAP_SERVERS` (the
fault proxy in front of the embedded broker), `COHORT_STORE_URL` (PostgreSQL), `COHORT_SINK`,
`COHORT_SOAK_SLOTS`. Events are the demo's JSON events; malformed values are quarantined.
"""

import os

import dagster as dg

from cohort.assets.factory import build_cohort_definitions
from cohort.assets.translator import CohortConfig
from cohort.demo.definitions import EVENT_SCHEMA
from cohort.pipelines.spec import PipelineSpec
from cohort.resources.group import CohortGroupResource
from cohort.resources.kafka import KafkaResource
from cohort.resources.spark import SparkResource

__all__ = ["SOAK_GROUP", "SOAK_TOPIC", "defs", "soak_config"]

SOAK_GROUP = "soak"
SOAK_TOPIC = "soak-events"


def soak_config(store_url: str, sink: str, slots: int) -> CohortConfig:
    """The soak group: a batch a minute, one run per slot; short sessions so a killed run is noticed soon."""
    group = CohortGroupResource(
        group=SOAK_GROUP,
        topics=[SOAK_TOPIC],
        worker_slots=slots,
        store_url=store_url,
        initial_rebalance_delay_s=5.0,
        session_timeout_s=10.0,
        rebalance_timeout_s=60.0,
        progress_timeout_s=300.0,
    )
    spec = PipelineSpec(sink_path=sink, value_format="json", value_schema=EVENT_SCHEMA)
    return CohortConfig(group, pipeline=spec, lag_threshold=0, schedule="* * * * *")


@dg.definitions
def defs() -> dg.Definitions:
    """Built when Dagster loads the location (importing this module reads no environment)."""
    config = soak_config(
        os.environ["COHORT_STORE_URL"], os.environ["COHORT_SINK"], int(os.environ.get("COHORT_SOAK_SLOTS", "2"))
    )
    return build_cohort_definitions(
        [config],
        kafka=KafkaResource(bootstrap_servers=os.environ["COHORT_BOOTSTRAP_SERVERS"]),
        spark=SparkResource(master="local[1]", conf={"spark.ui.enabled": "false"}),
        schedule_status=dg.DefaultScheduleStatus.RUNNING,
    )
