"""Cohort's group protocol: assignors, coordinator, offset ledger and store. Pure Python (no Dagster, no Spark).

The coordinator, the member client and the stores are imported on first use, so importing the protocol's
values (or a single assignor) does not load SQLAlchemy.
"""

from typing import TYPE_CHECKING

from cohort.assignment.assignors import (
    CooperativeStickyAssignor,
    LagStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    UnknownAssignorError,
    available_assignors,
    get_assignor,
    register_assignor,
)
from cohort.assignment.clock import Clock, ManualClock, SystemClock
from cohort.assignment.errors import (
    CoordinatorError,
    FencedInstanceIdError,
    GroupIdNotFoundError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidOffsetRangeError,
    InvalidRequestError,
    InvalidSessionTimeoutError,
    LedgerError,
    MemberIdRequiredError,
    NonContiguousRangeError,
    NonEmptyGroupError,
    PartitionNotOwnedError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from cohort.assignment.protocol.group_state import GroupConfig, GroupEvent, GroupState
from cohort.assignment.protocol.messages import (
    HeartbeatResult,
    JoinComplete,
    JoinPending,
    JoinRequest,
    LedgerEntry,
    SyncComplete,
    SyncPending,
)
from cohort.assignment.types import COOPERATIVE, EAGER, Assignment, Assignor, Subscription
from cohort.assignment.views import GroupDescription, GroupListing, MemberDescription
from cohort.common.lazy import lazy_exports
from cohort.common.ledger import OffsetLedger, OffsetMirror
from cohort.common.names import InvalidNameError, validate_group_name, validate_instance_id, validate_topic_name
from cohort.common.types import OffsetRange, TopicPartition

__all__ = [
    "COOPERATIVE",
    "EAGER",
    "Assignment",
    "Assignor",
    "Clock",
    "CooperativeStickyAssignor",
    "Coordinator",
    "CoordinatorError",
    "FencedInstanceIdError",
    "GroupConfig",
    "GroupDescription",
    "GroupEvent",
    "GroupIdNotFoundError",
    "GroupListing",
    "GroupMaxSizeReachedError",
    "GroupMember",
    "GroupState",
    "HeartbeatResult",
    "IllegalGenerationError",
    "InconsistentGroupProtocolError",
    "InvalidNameError",
    "InvalidOffsetRangeError",
    "InvalidRequestError",
    "InvalidSessionTimeoutError",
    "JoinComplete",
    "JoinPending",
    "JoinRequest",
    "JoinTimeoutError",
    "LagStickyAssignor",
    "LedgerEntry",
    "LedgerError",
    "ManualClock",
    "MemberDescription",
    "MemberIdRequiredError",
    "MemoryGroupStore",
    "NonContiguousRangeError",
    "NonEmptyGroupError",
    "OffsetLedger",
    "OffsetMirror",
    "OffsetRange",
    "PartitionNotOwnedError",
    "PartitionReset",
    "RangeAssignor",
    "RebalanceInProgressError",
    "RebalanceListener",
    "ResetTarget",
    "RoundRobinAssignor",
    "SqlGroupStore",
    "StandaloneLedger",
    "StickyAssignor",
    "Subscription",
    "SyncComplete",
    "SyncPending",
    "SystemClock",
    "TopicPartition",
    "UnknownAssignorError",
    "UnknownMemberIdError",
    "WorkerGroup",
    "available_assignors",
    "get_assignor",
    "register_assignor",
    "validate_group_name",
    "validate_instance_id",
    "validate_topic_name",
]

if TYPE_CHECKING:
    from cohort.assignment.coordinator import Coordinator, StandaloneLedger
    from cohort.assignment.ledger.resets import PartitionReset, ResetTarget
    from cohort.assignment.member import GroupMember, JoinTimeoutError, RebalanceListener
    from cohort.assignment.store.memory import MemoryGroupStore
    from cohort.assignment.store.sql import SqlGroupStore
    from cohort.assignment.worker_group import WorkerGroup

__getattr__ = lazy_exports(
    __name__,
    {
        "Coordinator": "cohort.assignment.coordinator",
        "StandaloneLedger": "cohort.assignment.coordinator",
        "GroupMember": "cohort.assignment.member",
        "JoinTimeoutError": "cohort.assignment.member",
        "RebalanceListener": "cohort.assignment.member",
        "MemoryGroupStore": "cohort.assignment.store.memory",
        "SqlGroupStore": "cohort.assignment.store.sql",
        "PartitionReset": "cohort.assignment.ledger.resets",
        "ResetTarget": "cohort.assignment.ledger.resets",
        "WorkerGroup": "cohort.assignment.worker_group",
    },
)
