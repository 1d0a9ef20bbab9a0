"""An in-process `GroupStore` over dictionaries: for simulations, notebooks and fast property tests.

Same contract as `SqlGroupStore` (one step at a time per store, decisions applied atomically, refused
steps on a missing group create nothing) without durability or cross-process safety.

Example:
    >>> from cohort.assignment.coordinator import Coordinator
    >>> coordinator = Coordinator(MemoryGroupStore())
    >>> coordinator.list_groups()
    []
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from typing import TypeVar

from cohort.assignment.errors import FoldConflictError
from cohort.assignment.ledger.retention import Fold
from cohort.assignment.ledger.trail import TrailMark
from cohort.assignment.protocol.group_state import GroupEvent, GroupRecord
from cohort.assignment.protocol.messages import Decision, LedgerEntry
from cohort.assignment.store.protocol import HeadReader
from cohort.common.types import TopicPartition

__all__ = ["MemoryGroupStore"]

R = TypeVar("R")


class MemoryGroupStore:
    """`GroupStore` kept in memory, serialised by one lock."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._groups: dict[str, GroupRecord] = {}
        self._heads: dict[tuple[str, TopicPartition], int] = {}
        self._ranges: dict[tuple[str, TopicPartition], list[LedgerEntry]] = {}
        self._events: list[tuple[int, str, GroupEvent]] = []
        self._entry_ids = 0
        self._event_ids = 0
        self._marks: dict[tuple[str, str, TopicPartition], TrailMark] = {}

    def transact(self, group: str, step: Callable[[GroupRecord | None, HeadReader], Decision[R]]) -> Decision[R]:
        """Run `step` under the store's lock and apply its decision."""
        with self._lock:
            current = self._groups.get(group)

            def read_heads(partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
                return {tp: self._heads.get((group, tp)) for tp in partitions}

            decision = step(current, read_heads)
            new = decision.group
            if decision.deleted:
                self._groups.pop(group, None)
                self._heads = {k: v for k, v in self._heads.items() if k[0] != group}
                self._ranges = {k: v for k, v in self._ranges.items() if k[0] != group}
                self._events = [e for e in self._events if e[1] != group]
                self._marks = {k: v for k, v in self._marks.items() if k[0] != group}
                return decision
            pristine = current is None and new == GroupRecord(name=new.name, created_at=new.created_at)
            if not pristine or decision.entries:
                self._groups[group] = new
            for tp, until in decision.heads.items():
                self._heads[(group, tp)] = until
            for entry in decision.entries:
                self._entry_ids += 1
                stored = replace(entry, entry_id=self._entry_ids)
                self._ranges.setdefault((group, entry.topic_partition), []).append(stored)
            for e in decision.events:
                self._event_ids += 1
                self._events.append((self._event_ids, group, e))
            return decision

    def load(self, group: str) -> GroupRecord | None:
        """The group, or None."""
        with self._lock:
            return self._groups.get(group)

    def group_names(self) -> list[str]:
        """All groups, sorted."""
        with self._lock:
            return sorted(self._groups)

    def ledger_partitions(self, group: str) -> list[TopicPartition]:
        with self._lock:
            return sorted(tp for g, tp in self._heads if g == group)

    def committed(self, group: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """Next offset to read per partition (None if never committed)."""
        with self._lock:
            return {tp: self._heads.get((group, tp)) for tp in partitions}

    def history(
        self, group: str, topic: str, partition: int, *, after_id: int = 0, limit: int | None = None
    ) -> list[LedgerEntry]:
        """The partition's entries made after entry `after_id`, oldest first (the first `limit` of them)."""
        with self._lock:
            kept = self._ranges.get((group, TopicPartition(topic, partition)), [])
            after = [e for e in kept if (e.entry_id or 0) > after_id]
            return after if limit is None else after[:limit]

    def latest_of_kind(self, group: str, kind: str, limit: int) -> list[LedgerEntry]:
        """The group's newest `limit` entries of `kind`, oldest first."""
        with self._lock:
            found = [e for (g, _tp), kept in self._ranges.items() if g == group for e in kept if e.kind == kind]
        return sorted(found, key=lambda e: e.entry_id or 0)[-limit:]

    def trail_marks(
        self, group: str, trail: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, TrailMark]:
        """How far each partition's ledger is settled in `trail`."""
        with self._lock:
            return {
                tp: self._marks.get((group, trail, tp), TrailMark.start(tp.topic, tp.partition)) for tp in partitions
            }

    def advance_trail_marks(self, group: str, trail: str, marks: Sequence[TrailMark], at: float) -> None:
        """Keep the marks that moved forward."""
        with self._lock:
            for mark in marks:
                key = (group, trail, mark.topic_partition)
                old = self._marks.get(key)
                if old is None or (mark.ledger_id, mark.event_cursor or 0) > (old.ledger_id, old.event_cursor or 0):
                    self._marks[key] = mark

    def recorded_ranges(
        self, group: str, topic: str, partition: int, wanted: Collection[tuple[int, int]]
    ) -> set[tuple[int, int]]:
        """Which of `wanted` the partition's ledger holds as committed ranges."""
        with self._lock:
            kept = self._ranges.get((group, TopicPartition(topic, partition)), [])
            held = {(e.from_offset, e.until_offset) for e in kept if not e.is_reset}
        return held & set(wanted)

    def last_ranges(self, group: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, LedgerEntry | None]:
        """The last committed range of each partition, None if none."""
        with self._lock:
            kept = {tp: self._ranges.get((group, tp)) for tp in partitions}
            return {tp: entries[-1] if entries else None for tp, entries in kept.items()}

    def run_history(self, group: str, run_id: str) -> list[LedgerEntry]:
        """Every range the run `run_id` committed, in commit order."""
        with self._lock:
            entries = [e for (g, _tp), kept in self._ranges.items() if g == group for e in kept if e.run_id == run_id]
        return sorted(entries, key=lambda e: e.committed_at)

    def last_event_id(self, group: str) -> int:
        """The id of the group's newest event (0: none)."""
        with self._lock:
            return max((i for i, g, _e in self._events if g == group), default=0)

    def events(self, group: str, after: int = 0) -> list[tuple[int, GroupEvent]]:
        """The group's events with ids > `after`, oldest first."""
        with self._lock:
            return [(i, e) for i, g, e in self._events if g == group and i > after]

    def settled_through(self, group: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The lowest mark of the group's trails per partition (None when no trail follows the group)."""
        with self._lock:
            trails = {t for g, t, _tp in self._marks if g == group}
            if not trails:
                return dict.fromkeys(partitions)
            return {
                tp: min(self._marks[(group, t, tp)].ledger_id if (group, t, tp) in self._marks else 0 for t in trails)
                for tp in partitions
            }

    def apply_retention(
        self, group: str, folds: Sequence[Fold], *, events_before: float | None, keep_events: int
    ) -> int:
        """Fold ranges and drop old events, all or nothing."""
        with self._lock:
            updated = {k: list(v) for k, v in self._ranges.items() if k[0] == group}
            for fold in folds:
                key = (group, fold.entry.topic_partition)
                kept = updated.get(key, [])
                ids = {e.entry_id for e in kept}
                if fold.entry_id not in ids or not set(fold.removed_ids) <= ids:
                    raise FoldConflictError(f"the ledger of {fold.entry.topic_partition} changed while it was folded")
                gone = set(fold.removed_ids)
                updated[key] = [
                    fold.entry if e.entry_id == fold.entry_id else e for e in kept if e.entry_id not in gone
                ]
            self._ranges.update(updated)
            if events_before is None:
                return 0
            mine = [e for e in self._events if e[1] == group]
            keep = {e[0] for e in mine[-keep_events:]} if keep_events else set()
            drop = {e[0] for e in mine if e[2].at < events_before and e[0] not in keep}
            self._events = [e for e in self._events if e[0] not in drop]
            return len(drop)

    def close(self) -> None:
        """Nothing to release."""
