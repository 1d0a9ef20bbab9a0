"""Running ledger retention on one group: read each partition's old entries, plan the folds, apply them.

`plan_retention` only reads (what `cohort compact` shows without `--execute`); `apply_retention_plan` applies a
plan in one store transaction (a ledger that changed in between refuses it, nothing applied).
"""

from __future__ import annotations

from dataclasses import dataclass

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.ledger.retention import Fold, plan_folds
from cohort.assignment.protocol.messages import LedgerEntry
from cohort.common.types import TopicPartition

__all__ = ["DEFAULT_KEEP_EVENTS", "PartitionRetention", "RetentionPlan", "apply_retention_plan", "plan_retention"]

DEFAULT_KEEP_EVENTS = 1_000
"""The newest group events kept whatever their age (what `cohort describe` and the sensors look back on)."""

_PAGE = 10_000


@dataclass(frozen=True)
class PartitionRetention:
    """What retention does to one partition's ledger."""

    tp: TopicPartition
    entries: int
    """Entries read (those committed before the cut-off, and the first one after it)."""
    folds: tuple[Fold, ...]

    @property
    def removed(self) -> int:
        return sum(len(f.removed_ids) for f in self.folds)


@dataclass(frozen=True)
class RetentionPlan:
    """The folds of a group's partitions and the cut-off for its events."""

    group: str
    before: float
    partitions: tuple[PartitionRetention, ...]
    keep_events: int = DEFAULT_KEEP_EVENTS

    @property
    def folds(self) -> tuple[Fold, ...]:
        return tuple(f for p in self.partitions for f in p.folds)

    @property
    def removed(self) -> int:
        """Ledger rows the plan removes."""
        return sum(p.removed for p in self.partitions)


def plan_retention(
    coordinator: Coordinator, group: str, before: float, *, keep_events: int = DEFAULT_KEEP_EVENTS
) -> RetentionPlan:
    """Plan folding the ledger ranges of `group` committed before `before` (seconds since the epoch)."""
    partitions = coordinator.ledger_partitions(group)
    settled = coordinator.settled_through(group, partitions)
    planned = []
    for tp in partitions:
        entries = _old_entries(coordinator, group, tp, before)
        folds = plan_folds(entries, before=before, settled_through=settled[tp])
        planned.append(PartitionRetention(tp, len(entries), tuple(folds)))
    return RetentionPlan(group, before, tuple(planned), keep_events)


def apply_retention_plan(coordinator: Coordinator, plan: RetentionPlan) -> int:
    """Apply `plan`; the number of group events dropped."""
    return coordinator.apply_retention(plan.group, plan.folds, events_before=plan.before, keep_events=plan.keep_events)


def _old_entries(coordinator: Coordinator, group: str, tp: TopicPartition, before: float) -> list[LedgerEntry]:
    """The partition's entries committed before `before`, plus the first later one (so the newest old entry is
    known not to be the partition's last), read page by page."""
    entries: list[LedgerEntry] = []
    after = 0
    while True:
        page = coordinator.ledger_after(group, tp.topic, tp.partition, after, limit=_PAGE)
        for entry in page:
            entries.append(entry)
            if entry.committed_at >= before:
                return entries
        if len(page) < _PAGE:
            return entries
        after = page[-1].entry_id or after
