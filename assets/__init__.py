"""Cohort's Dagster layer: per-topic assets, the worker job, schedules, sensors, asset checks, Definitions, and
the dg component declaring a group in YAML (`CohortGroupComponent`).

Example:
    >>> from cohort.assets import CohortConfig, build_cohort_definitions
    >>> from cohort.pipelines import PipelineSpec
    >>> from cohort.resources import KafkaResource
    >>> defs = build_cohort_definitions(
    ...     [CohortConfig(group="orders-ingest", topics=("orders",), pipeline=PipelineSpec(sink_path="/tmp/lake"))],
    ...     kafka=KafkaResource(bootstrap_servers="broker:9092"),
    ... )  # doctest: +SKIP
"""

from typing import TYPE_CHECKING

from cohort.assets.audit import PartitionAudit, audit_partition
from cohort.assets.cursors import GroupCursor, MembershipCursor, TopicCursor
from cohort.assets.factory import (
    CohortDefinitions,
    build_cohort_definitions,
    build_group_definitions,
    build_worker_schedule,
    cohort_assets,
)
from cohort.assets.group_batch import build_group_assets
from cohort.assets.replay import REPLAY_TAG, Replay
from cohort.assets.sensors import build_membership_sensor, build_topic_sensor
from cohort.assets.translator import CohortConfig, DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.common.lazy import lazy_exports

__all__ = [
    "REPLAY_TAG",
    "CohortConfig",
    "CohortDefinitions",
    "CohortGroupComponent",
    "DagsterCohortTranslator",
    "GroupCursor",
    "MembershipCursor",
    "PartitionAudit",
    "Replay",
    "TopicCursor",
    "audit_partition",
    "build_cohort_definitions",
    "build_group_assets",
    "build_group_definitions",
    "build_membership_sensor",
    "build_topic_sensor",
    "build_worker_schedule",
    "cohort_assets",
    "worker_run_config",
]

if TYPE_CHECKING:
    from cohort.assets.component import CohortGroupComponent

# imported on first use: a batch run, which imports this package, does not build the dg component's schema
__getattr__ = lazy_exports(__name__, {"CohortGroupComponent": "cohort.assets.component"})
