"""The `GroupStore` protocol: what the coordinator needs of a store, apart from its implementations (SQL in
cohort.assignment.store.sql, in memory in cohort.assignment.store.memory)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Protocol, TypeVar

from cohort.assignment.ledger.retention import Fold
from cohort.assignment.ledger.trail import TrailMark
from cohort.assignment.protocol.group_state import GroupEvent, GroupRecord
from cohort.assignment.protocol.messages import Decision, LedgerEntry
from cohort.common.types import TopicPartition

__all__ = ["GroupStore", "HeadReader"]

R = TypeVar("R")
HeadReader = Callable[[Sequence[TopicPartition]], dict[TopicPartition, int | None]]
"""Reads committed offsets (None = never committed) inside the step's transaction."""


class GroupStore(Protocol):
    """Where groups, ledgers and events live; `transact` runs one protocol step atomically per group."""

    def transact(
        self, group: str, step: Callable[[GroupRecord | None, HeadReader], Decision[R]]
    ) -> Decision[R]: ...  # pragma: no cover - protocol

    def load(self, group: str) -> GroupRecord | None: ...  # pragma: no cover - protocol

    def group_names(self) -> list[str]: ...  # pragma: no cover - protocol

    def committed(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int | None]: ...  # pragma: no cover - protocol

    def history(
        self, group: str, topic: str, partition: int, *, after_id: int = 0, limit: int | None = None
    ) -> list[LedgerEntry]: ...  # pragma: no cover - protocol

    def latest_of_kind(self, group: str, kind: str, limit: int) -> list[LedgerEntry]: ...  # pragma: no cover

    def trail_marks(
        self, group: str, trail: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, TrailMark]: ...  # pragma: no cover - protocol

    def advance_trail_marks(
        self, group: str, trail: str, marks: Sequence[TrailMark], at: float
    ) -> None: ...  # pragma: no cover - protocol

    def recorded_ranges(
        self, group: str, topic: str, partition: int, wanted: Collection[tuple[int, int]]
    ) -> set[tuple[int, int]]: ...  # pragma: no cover - protocol

    def apply_retention(
        self, group: str, folds: Sequence[Fold], *, events_before: float | None, keep_events: int
    ) -> int: ...  # pragma: no cover - protocol

    def settled_through(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int | None]: ...  # pragma: no cover - protocol

    def ledger_partitions(self, group: str) -> list[TopicPartition]: ...  # pragma: no cover - protocol

    def last_ranges(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, LedgerEntry | None]: ...  # pragma: no cover - protocol

    def run_history(self, group: str, run_id: str) -> list[LedgerEntry]: ...  # pragma: no cover - protocol

    def events(self, group: str, after: int = 0) -> list[tuple[int, GroupEvent]]: ...  # pragma: no cover

    def last_event_id(self, group: str) -> int: ...  # pragma: no cover - protocol

    def close(self) -> None: ...  # pragma: no cover - protocol
