"""Partition assignors (SPEC section 4): range, roundrobin, sticky, cooperative-sticky, and a registry.

Pure Python plus numpy; no Dagster, Spark or Kafka client imports. Every assignor is stateless: owned
partitions and generations arrive inside each member's `Subscription`.
"""

from assignment.assignors.cooperative import CooperativeStickyAssignor
from assignment.assignors.range import RangeAssignor
from assignment.assignors.registry import (
    UnknownAssignorError,
    available_assignors,
    get_assignor,
    register_assignor,
)
from assignment.assignors.roundrobin import RoundRobinAssignor
from assignment.assignors.sticky import StickyAssignor

__all__ = [
    "CooperativeStickyAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "UnknownAssignorError",
    "available_assignors",
    "get_assignor",
    "register_assignor",
]
