"""Cohort's group protocol: assignors, coordinator, offset ledger and store. Pure Python (no Dagster, no Spark)."""

from assignment.assignors import (
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    UnknownAssignorError,
    available_assignors,
    get_assignor,
    register_assignor,
)
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
    "CooperativeStickyAssignor",
    "InvalidNameError",
    "OffsetRange",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "TopicPartition",
    "UnknownAssignorError",
    "available_assignors",
    "get_assignor",
    "register_assignor",
    "validate_group_name",
    "validate_instance_id",
    "validate_topic_name",
]
