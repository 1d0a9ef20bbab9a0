"""A partition's ledger as the audits read it: page by page, folded into its commits in order, its committed
offset, and the replay an offset reset left pending (docs/replay.md).

After a reset back, the sinks hold offsets beyond the ledger's committed offset until the replay batches pass
them again: `PendingReplay` says so ("reset to N at T by U; the next batch replays [N, M)"), from the ledger's
reset entry (`LedgerEntry.kind` "reset", its `note` "actor: reason", its run), whoever made it (`cohort
reset-offsets`, a Dagster replay).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cohort.common.types import TopicPartition

__all__ = ["LEDGER_PAGE", "AuditedRange", "LedgerFold", "PendingReplay", "fold_ledger", "ledger_entries"]

LEDGER_PAGE = 10_000
"""Ledger entries read per query when the ledger pages (`Coordinator.ledger_after`)."""


@dataclass(frozen=True)
class AuditedRange:
    """One ledger commit of a partition (a recorded gap too: `gap`), in ledger order; resets are not commits."""

    from_offset: int
    until_offset: int
    records: int
    quarantined: int
    run_id: str | None
    gap: bool = False
    folded: bool = False
    """Ledger retention folded several committed ranges into this one: their directories tile it."""


@dataclass(frozen=True)
class PendingReplay:
    """A partition reset back (`reset_to`, by the ledger's reset entry made at `at` with `note` and `run_id`) whose
    replay has not passed the furthest offset committed yet: the batches replay [head, reach)."""

    tp: TopicPartition
    reset_to: int
    at: float
    note: str | None
    run_id: str | None
    head: int
    reach: int

    def describe(self) -> str:
        """`reset to 698 at 2026-11-23T08:00:00+00:00 by ann@host (bad VAT rule); the next batch replays [698, 998)`."""
        when = datetime.fromtimestamp(self.at, UTC).isoformat(timespec="seconds")
        who = ""
        if self.note:
            actor, _, reason = self.note.partition(": ")
            who = f" by {actor}" + (f" ({reason})" if reason else "")
        elif self.run_id:
            who = f" by run {self.run_id}"
        done = f"; [{self.reset_to}, {self.head}) replayed since" if self.head > self.reset_to else ""
        return f"reset to {self.reset_to} at {when}{who}{done}; the next batch replays [{self.head}, {self.reach})"


@dataclass(frozen=True)
class LedgerFold:
    """One partition's ledger as the audit needs it: the commits in order (gaps included, resets left out), the
    committed offset (where the last entry ends; None: no entry), the replay a reset left pending, and whether
    the last entry is a reset."""

    commits: tuple[AuditedRange, ...]
    head: int | None
    pending: PendingReplay | None = None
    after_reset: bool = False


def ledger_entries(
    ledger: Any, group: str, tp: TopicPartition, page: int = LEDGER_PAGE, *, after_id: int = 0
) -> Iterator[Any]:
    """The partition's ledger entries in order (those made after entry `after_id`), read `page` at a time when
    the ledger pages (else in one read, filtered)."""
    after = getattr(ledger, "ledger_after", None)
    if after is None:
        history = ledger.ledger_history(group, tp.topic, tp.partition)
        yield from (e for e in history if after_id == 0 or (e.entry_id or 0) > after_id)
        return
    last = after_id
    while True:
        entries = after(group, tp.topic, tp.partition, last, limit=page)
        yield from entries
        if len(entries) < page or entries[-1].entry_id is None:
            return
        last = entries[-1].entry_id


def fold_ledger(tp: TopicPartition, entries: Iterable[Any]) -> LedgerFold:
    """Fold ledger entries (`LedgerEntry`: a commit or a reset, in order) into what the audit compares."""
    commits: list[AuditedRange] = []
    head: int | None = None
    reach: int | None = None
    last_reset: Any = None
    after_reset = False
    for e in entries:
        head, after_reset = e.until_offset, e.is_reset
        if e.is_reset:
            last_reset = e
            continue
        commits.append(
            AuditedRange(
                e.from_offset,
                e.until_offset,
                e.records,
                e.quarantined,
                e.run_id,
                gap=e.gap_reason is not None,
                folded=bool(getattr(e, "is_fold", False)),
            )
        )
        reach = e.until_offset if reach is None else max(reach, e.until_offset)
    pending = None
    if last_reset is not None and head is not None and reach is not None and head < reach:
        pending = PendingReplay(
            tp, last_reset.until_offset, last_reset.committed_at, last_reset.note, last_reset.run_id, head, reach
        )
    return LedgerFold(tuple(commits), head, pending, after_reset)
