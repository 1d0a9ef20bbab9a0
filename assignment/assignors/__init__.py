"""Partition assignors: range, roundrobin, sticky, cooperative-sticky, lag-sticky, and a registry.

Pure Python plus numpy; no Dagster, Spark or Kafka client imports. Every assignor is stateless: owned
partitions and generations arrive inside each member's `Subscription`.
"""

from cohort.assignment.assignors.cooperative import CooperativeStickyAssignor
from cohort.assignment.assignors.lag_sticky import LagStickyAssignor
from cohort.assignment.assignors.range import RangeAssignor
from cohort.assignment.assignors.registry import (
    UnknownAssignorError,
    available_assignors,
    get_assignor,
    register_assignor,
)
from cohort.assignment.assignors.roundrobin import RoundRobinAssignor
from cohort.assignment.assignors.sticky import StickyAssignor

__all__ = [
    "CooperativeStickyAssignor",
    "LagStickyAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "UnknownAssignorError",
    "available_assignors",
    "get_assignor",
    "register_assignor",
]
