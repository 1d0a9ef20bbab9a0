"""Typed errors of the group coordinator and the offset ledger, named as Kafka's error codes.

Every error carries `code` (Kafka's name, e.g. "ILLEGAL_GENERATION") and a message naming the group, the
member and what was expected, so a caller can branch on the type and a human can read the message.
`retriable` says whether the same call may succeed after the member rejoins or simply retries.

Example:
    >>> try:
    ...     raise IllegalGenerationError("group 'orders': generation 3 is not the current generation 4")
    ... except CoordinatorError as error:
    ...     error.code
    'ILLEGAL_GENERATION'
"""

from __future__ import annotations

from typing import ClassVar

from cohort.common.types import TopicPartition

__all__ = [
    "CoordinatorError",
    "FencedInstanceIdError",
    "FoldConflictError",
    "GroupIdNotFoundError",
    "GroupMaxSizeReachedError",
    "IllegalGenerationError",
    "InconsistentGroupProtocolError",
    "InvalidOffsetRangeError",
    "InvalidRequestError",
    "InvalidSessionTimeoutError",
    "InvalidStoreUrlError",
    "LedgerError",
    "MemberIdRequiredError",
    "NonContiguousRangeError",
    "NonEmptyGroupError",
    "PartitionNotOwnedError",
    "RebalanceInProgressError",
    "StaleGroupVersionError",
    "StoreError",
    "StoreNotFoundError",
    "StoreUnavailableError",
    "UnknownMemberIdError",
    "error_for_code",
]


class CoordinatorError(Exception):
    """Base of every refusal by the coordinator or the ledger; `code` is Kafka's error name."""

    code: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __reduce__(self) -> tuple[object, ...]:
        # Keep errors picklable across multiprocessing even for subclasses with extra arguments.
        return (_rebuild, (type(self), self.message, dict(self.__dict__)))


def _rebuild(cls: type[CoordinatorError], message: str, state: dict[str, object]) -> CoordinatorError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


class MemberIdRequiredError(CoordinatorError):
    """A dynamic member's first join: rejoin with `member_id` (Kafka >= 2.2 behaviour, KIP-394)."""

    code = "MEMBER_ID_REQUIRED"
    retriable = True

    def __init__(self, message: str, member_id: str) -> None:
        super().__init__(message)
        self.member_id = member_id


class UnknownMemberIdError(CoordinatorError):
    """The member id is not (or no longer) in the group: expired, evicted, left, or never joined."""

    code = "UNKNOWN_MEMBER_ID"


class IllegalGenerationError(CoordinatorError):
    """The request names a generation other than the group's current one (a zombie or a missed round)."""

    code = "ILLEGAL_GENERATION"


class RebalanceInProgressError(CoordinatorError):
    """The group is rebalancing: rejoin (after a heartbeat or sync) or retry after the sync (commit)."""

    code = "REBALANCE_IN_PROGRESS"
    retriable = True


class FencedInstanceIdError(CoordinatorError):
    """A newer member with the same static instance id replaced this one; it must stop."""

    code = "FENCED_INSTANCE_ID"


class InconsistentGroupProtocolError(CoordinatorError):
    """The member supports none of the assignors every current member supports (or lists none)."""

    code = "INCONSISTENT_GROUP_PROTOCOL"


class InvalidSessionTimeoutError(CoordinatorError):
    """The session timeout is outside the coordinator's [min, max] bounds."""

    code = "INVALID_SESSION_TIMEOUT"


class GroupMaxSizeReachedError(CoordinatorError):
    """The group already holds `max_size` members."""

    code = "GROUP_MAX_SIZE_REACHED"


class NonEmptyGroupError(CoordinatorError):
    """A group with live members cannot be deleted."""

    code = "NON_EMPTY_GROUP"


class GroupIdNotFoundError(CoordinatorError):
    """The group does not exist."""

    code = "GROUP_ID_NOT_FOUND"


class InvalidRequestError(CoordinatorError):
    """A malformed request: an assignment naming unknown members or partitions twice, a bad pattern..."""

    code = "INVALID_REQUEST"


class PartitionNotOwnedError(CoordinatorError):
    """A commit for a partition the member does not own in the current generation."""

    code = "PARTITION_NOT_OWNED"

    def __init__(self, message: str, partitions: tuple[TopicPartition, ...] = ()) -> None:
        super().__init__(message)
        self.partitions = partitions


class StaleGroupVersionError(CoordinatorError):
    """The store found the group's version changed under a transaction (should not happen under the lock)."""

    code = "CONCURRENT_TRANSACTIONS"
    retriable = True


class LedgerError(CoordinatorError):
    """Base of the ledger's refusals of a range."""

    code = "LEDGER_ERROR"


class NonContiguousRangeError(LedgerError):
    """A range does not start where the partition's last committed range ended (gap or overlap)."""

    code = "NON_CONTIGUOUS_RANGE"

    def __init__(self, message: str, partition: TopicPartition, expected: int, given: int) -> None:
        super().__init__(message)
        self.partition = partition
        self.expected = expected
        self.given = given


class InvalidOffsetRangeError(LedgerError):
    """A range that cannot be recorded as given (e.g. a gap that claims records)."""

    code = "INVALID_OFFSET_RANGE"


class StoreError(CoordinatorError):
    """The coordinator's store cannot be used as given. Its message names the store (password hidden) and
    the problem, in one line, for operators: the CLI prints it as it is."""

    code = "COORDINATOR_NOT_AVAILABLE"


class InvalidStoreUrlError(StoreError):
    """The store URL is not a SQLAlchemy URL, names an unknown database, or needs a driver that is not
    installed."""

    code = "INVALID_CONFIG"


class StoreUnavailableError(StoreError):
    """The store could not be reached or opened: connection refused or timed out, authentication failed, a
    SQLite file that cannot be opened or is not a database."""

    code = "COORDINATOR_NOT_AVAILABLE"
    retriable = True


class StoreTransactionError(StoreError):
    """A transaction on the store failed (the connection dropped, the database refused a statement): nothing
    of it was applied, so the same call may be made again."""

    code = "COORDINATOR_NOT_AVAILABLE"
    retriable = True


class FoldConflictError(StoreTransactionError):
    """A retention step found the ledger changed since its plan (another retention run): nothing was applied."""


class StoreNotFoundError(StoreError):
    """A store opened without creating it (read-only tools) does not exist: no SQLite file, no Cohort tables."""

    code = "COORDINATOR_NOT_AVAILABLE"


_BY_CODE: dict[str, type[CoordinatorError]] = {
    cls.code: cls
    for cls in (
        MemberIdRequiredError,
        UnknownMemberIdError,
        IllegalGenerationError,
        RebalanceInProgressError,
        FencedInstanceIdError,
        InconsistentGroupProtocolError,
        InvalidSessionTimeoutError,
        GroupMaxSizeReachedError,
        NonEmptyGroupError,
        GroupIdNotFoundError,
        InvalidRequestError,
        PartitionNotOwnedError,
        StaleGroupVersionError,
        NonContiguousRangeError,
        InvalidOffsetRangeError,
    )
}


def error_for_code(code: str) -> type[CoordinatorError]:
    """The error class named `code` (e.g. "UNKNOWN_MEMBER_ID"); KeyError if there is none."""
    return _BY_CODE[code]
