"""Cohort's Dagster layer: per-topic assets, the worker job, schedules, sensors, asset checks, CLI and demo.

Public API (imported lazily, so `cohort --help` does not load Dagster and Spark):

    >>> from assets import CohortConfig, build_cohort_definitions  # doctest: +SKIP
    >>> defs = build_cohort_definitions(  # doctest: +SKIP
    ...     [CohortConfig(group="orders-ingest", topics=("orders",), pipeline=spec)],
    ...     kafka=KafkaResource(bootstrap_servers="broker:9092"),
    ... )
"""

from importlib import import_module
from typing import Any

__all__ = [
    "CohortConfig",
    "CohortDefinitions",
    "DagsterCohortTranslator",
    "GroupCursor",
    "MembershipCursor",
    "PartitionAudit",
    "TopicCursor",
    "audit_partition",
    "build_cohort_definitions",
    "build_membership_sensor",
    "build_topic_checks",
    "build_topic_sensor",
    "build_worker_job",
    "build_worker_schedule",
    "cohort_assets",
    "worker_run_config",
]

_HOMES = {
    "CohortConfig": "assets.translator",
    "DagsterCohortTranslator": "assets.translator",
    "CohortDefinitions": "assets.factory",
    "build_cohort_definitions": "assets.factory",
    "build_worker_schedule": "assets.factory",
    "cohort_assets": "assets.factory",
    "GroupCursor": "assets.cursors",
    "MembershipCursor": "assets.cursors",
    "TopicCursor": "assets.cursors",
    "PartitionAudit": "assets.audit",
    "audit_partition": "assets.audit",
    "build_membership_sensor": "assets.sensors",
    "build_topic_sensor": "assets.sensors",
    "build_topic_checks": "assets.checks",
    "build_worker_job": "assets.worker",
    "worker_run_config": "assets.worker",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'assets' has no attribute {name!r}")
    return getattr(import_module(home), name)
