"""Cohort's group protocol: assignors, coordinator, offset ledger and store. Pure Python (no Dagster, no Spark)."""

from assignment.names import InvalidNameError, validate_group_name, validate_instance_id, validate_topic_name
from assignment.types import (
    COOPERATIVE,
    EAGER,
    Assignment,
    Assignor,
    OffsetRange,
    Subscription,
    TopicPartition,
)

__all__ = [
    "COOPERATIVE",
    "EAGER",
    "Assignment",
    "Assignor",
    "InvalidNameError",
    "OffsetRange",
    "Subscription",
    "TopicPartition",
    "validate_group_name",
    "validate_instance_id",
    "validate_topic_name",
]
