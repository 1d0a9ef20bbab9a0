"""`plan_folds` and `combine_digests` with plain values: what folds, what never does."""

from __future__ import annotations

import hashlib

from cohort.assignment.ledger.retention import combine_digests, folded_count, plan_folds
from cohort.assignment.protocol.messages import FOLD, RESET, LedgerEntry


def _entry(
    i: int, start: int, until: int, *, at: float | None = None, kind: str = "commit", gap: str | None = None
) -> LedgerEntry:
    digest = hashlib.sha256(f"{start}-{until}".encode()).hexdigest()
    return LedgerEntry(
        "g",
        "t",
        0,
        start,
        until,
        until - start,
        1,
        gap,
        f"run-{i}",
        "m",
        "slot-0",
        1,
        float(i if at is None else at),
        kind=kind,
        content_hash=digest,
        entry_id=i,
    )


def test_old_contiguous_ranges_fold_into_one_with_counts_and_digests_combined() -> None:
    entries = [_entry(1, 0, 5), _entry(2, 5, 9), _entry(3, 9, 12), _entry(4, 12, 20)]
    [fold] = plan_folds(entries, before=10.0, settled_through=None)
    e = fold.entry
    assert (e.from_offset, e.until_offset, e.records, e.quarantined, e.kind) == (0, 12, 12, 3, FOLD)
    assert (e.entry_id, fold.removed_ids, fold.folded, e.run_id) == (3, (1, 2), 3, "run-3")
    assert e.content_hash == combine_digests([x.content_hash for x in entries[:3]])
    assert folded_count(e) == 3 and e.note is not None and e.note.startswith("fold 3 ranges committed from ")


def test_folding_a_fold_gives_what_folding_everything_at_once_gives() -> None:
    entries = [_entry(i, 10 * (i - 1), 10 * i) for i in range(1, 7)]
    [first] = plan_folds(entries[:4], before=100.0, settled_through=None)  # folds 1..3, keeps 4 (the newest then)
    [again] = plan_folds([first.entry, *entries[3:]], before=100.0, settled_through=None)
    [once] = plan_folds(entries, before=100.0, settled_through=None)
    assert again.entry.content_hash == once.entry.content_hash
    assert (again.entry.from_offset, again.entry.until_offset, again.folded) == (0, 50, 5)
    assert again.entry.records == once.entry.records == 50


def test_resets_gaps_the_newest_entry_unsettled_and_recent_entries_never_fold() -> None:
    entries = [
        _entry(1, 0, 5),
        _entry(2, 5, 9),
        _entry(3, 9, 0, kind=RESET),
        _entry(4, 0, 5),
        _entry(5, 5, 7, gap="deleted by retention"),
        _entry(6, 7, 9),
        _entry(7, 9, 11),
        _entry(8, 11, 13),
        _entry(9, 13, 15, at=50.0),
        _entry(10, 15, 17, at=60.0),
    ]
    folds = plan_folds(entries, before=40.0, settled_through=8)
    assert [(f.entry.from_offset, f.entry.until_offset, f.removed_ids) for f in folds] == [
        (0, 9, (1,)),
        (7, 13, (6, 7)),
    ]
    unsettled = plan_folds(entries, before=40.0, settled_through=7)
    assert [(f.entry.from_offset, f.entry.until_offset) for f in unsettled] == [(0, 9), (7, 11)]
    assert plan_folds(entries[:2], before=40.0, settled_through=None) == []  # the newest entry stays


def test_a_missing_digest_leaves_the_fold_without_one() -> None:
    assert combine_digests(["0" * 63 + "1", None]) is None
    assert combine_digests(["f" * 64, "0" * 63 + "1"]) == "0" * 64
