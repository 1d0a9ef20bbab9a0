"""Ledger retention: old committed ranges of a partition folded into one summary range that keeps the proof.

A group that commits every minute leaves half a million ledger entries a year per partition. A fold replaces a
run of old, contiguous committed ranges with one entry of kind "fold": the same first and last offsets, the
counts added, the content digests combined, the newest range's committer and time, and a note saying how many
ranges it folds and when they were committed. What the sink holds for the folded offsets stays as it was, so
an audit checks that the sink's pieces tile the fold and add up to its counts.

What is never folded: an offset reset or a skipped gap (each stays as its own entry, and a fold never spans
one), the newest entry of a partition (a batch recovers a lost publish from it), and anything an audit trail has
not settled yet (a range no run reported stays visible to the run that reports it).

Decisions are plain values (`plan_folds`); the store applies a plan in one transaction.

Example:
    >>> from cohort.assignment.protocol.messages import LedgerEntry
    >>> def entry(i, start, until):
    ...     return LedgerEntry("g", "t", 0, start, until, until - start, 0, None, f"r{i}", "m", "s", 1, float(i),
    ...                        entry_id=i)
    >>> [fold] = plan_folds([entry(1, 0, 5), entry(2, 5, 9), entry(3, 9, 12)], before=2.5, settled_through=3)
    >>> (fold.entry.from_offset, fold.entry.until_offset, fold.entry.records, fold.removed_ids)
    (0, 9, 9, (1,))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from cohort.assignment.protocol.messages import FOLD, LedgerEntry

__all__ = ["DEFAULT_KEEP_DAYS", "Fold", "combine_digests", "folded_count", "plan_folds"]

DEFAULT_KEEP_DAYS = 30.0
"""Ledger ranges committed in the last 30 days are kept one by one; older ones may be folded."""

_DIGEST_MODULUS = 2**256


@dataclass(frozen=True)
class Fold:
    """Replace the entries `removed_ids` and the one `entry.entry_id` by `entry` (stored under the latter's id)."""

    entry: LedgerEntry
    removed_ids: tuple[int, ...]
    folded: int
    """How many original committed ranges the fold stands for (earlier folds included)."""

    @property
    def entry_id(self) -> int:
        assert self.entry.entry_id is not None
        return self.entry.entry_id


def combine_digests(digests: Sequence[str | None]) -> str | None:
    """The content digest of consecutive ranges: their SHA-256 digests added modulo 2^256 (64 hex digits).

    Addition makes folding associative (folding a fold with newer ranges gives what folding all of them at
    once gives), so an audit recomputes each piece's digest and adds them up. None when a piece has none."""
    if not digests or any(d is None for d in digests):
        return None
    total = sum(int(d, 16) for d in digests if d is not None) % _DIGEST_MODULUS
    return f"{total:064x}"


def folded_count(entry: LedgerEntry) -> int:
    """How many committed ranges an entry stands for: 1, or what its fold note says."""
    if entry.kind != FOLD or not entry.note:
        return 1
    head = entry.note.split(" ", 2)
    return int(head[1]) if len(head) > 1 and head[1].isdigit() else 1


def _is_plain(entry: LedgerEntry) -> bool:
    return not entry.is_reset and entry.gap_reason is None


def plan_folds(entries: Sequence[LedgerEntry], *, before: float, settled_through: int | None) -> list[Fold]:
    """The folds of one partition's ledger (`entries`, in ledger order, each with its id): runs of two or more
    contiguous plain entries (commits or earlier folds) committed before `before`, settled in every audit trail
    (id up to `settled_through`; None: no trail follows the group), never the partition's newest entry."""
    if len(entries) < 3:
        return []
    candidates = entries[:-1]
    folds: list[Fold] = []
    run: list[LedgerEntry] = []

    def close() -> None:
        if len(run) >= 2:
            folds.append(_fold(run))
        run.clear()

    for entry in candidates:
        eligible = (
            _is_plain(entry)
            and entry.committed_at < before
            and entry.entry_id is not None
            and (settled_through is None or entry.entry_id <= settled_through)
        )
        if not eligible:
            close()
            if entry.committed_at >= before or (
                settled_through is not None and (entry.entry_id or 0) > settled_through
            ):
                break  # entries are in commit order: nothing later qualifies
            continue
        if run and run[-1].until_offset != entry.from_offset:
            close()
        run.append(entry)
    close()
    return folds


def _fold(run: Sequence[LedgerEntry]) -> Fold:
    first, last = run[0], run[-1]
    count = sum(folded_count(e) for e in run)
    since = min(e.committed_at for e in run)
    note = f"fold {count} ranges committed from {_when(since)} to {_when(last.committed_at)}"
    entry = replace(
        last,
        from_offset=first.from_offset,
        records=sum(e.records for e in run),
        quarantined=sum(e.quarantined for e in run),
        filtered=sum(e.filtered for e in run),
        expanded=sum(e.expanded for e in run),
        kind=FOLD,
        note=note,
        content_hash=combine_digests([e.content_hash for e in run]),
        gap_reason=None,
    )
    return Fold(entry=entry, removed_ids=tuple(e.entry_id for e in run[:-1] if e.entry_id is not None), folded=count)


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
