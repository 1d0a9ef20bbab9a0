"""`decide_trail` with plain values: what settles, what is reported, where the mark and the cursor stop."""

from __future__ import annotations

from cohort.assignment.ledger.trail import TrailEvent, TrailMark, decide_trail
from cohort.assignment.protocol.messages import FOLD, RESET, LedgerEntry

START = TrailMark.start("t", 0)


def _entry(entry_id: int, start: int, until: int, *, kind: str = "commit", gap: str | None = None) -> LedgerEntry:
    return LedgerEntry(
        "g",
        "t",
        0,
        start,
        until,
        until - start,
        0,
        gap,
        "run",
        "m",
        "slot-0",
        1,
        float(entry_id),
        kind=kind,
        entry_id=entry_id,
    )


def _event(event_id: int, start: int | None, until: int | None) -> TrailEvent:
    return TrailEvent(event_id, start, until, f"run-{event_id}")


def test_shown_entries_settle_and_the_cursor_passes_their_events() -> None:
    reading = decide_trail(START, [_entry(1, 0, 5), _entry(2, 5, 9)], [_event(10, 0, 5), _event(11, 5, 9)])
    assert reading.problems == () and reading.unshown == ()
    assert (reading.mark.ledger_id, reading.mark.head, reading.mark.event_cursor, reading.mark.ranges) == (2, 9, 11, 2)


def test_an_unshown_entry_blocks_the_mark_and_an_event_after_it_is_read_again() -> None:
    reading = decide_trail(
        START, [_entry(1, 0, 5), _entry(2, 5, 9), _entry(3, 9, 12)], [_event(10, 0, 5), _event(11, 9, 12)]
    )
    assert [e.entry_id for e in reading.unshown] == [2]
    assert reading.problems == ("t-0: ledger range [5, 9) has no materialization",)
    assert (reading.mark.ledger_id, reading.mark.head, reading.mark.event_cursor) == (1, 5, 10)
    assert reading.head == 12 and reading.ranges == 3


def test_resets_gaps_and_entries_shown_elsewhere_need_no_event() -> None:
    entries = [
        _entry(1, 0, 5),
        _entry(2, 5, 0, kind=RESET),
        _entry(3, 0, 5),
        _entry(4, 5, 8, gap="deleted by retention"),
        _entry(5, 8, 9),
    ]
    reading = decide_trail(START, entries, [_event(1, 0, 5)], elsewhere=lambda e: e.entry_id == 5)
    assert reading.problems == () and reading.mark.ledger_id == 5
    assert (reading.mark.ranges, reading.mark.resets, reading.mark.gaps) == (4, 1, 1)


def test_a_gap_in_the_ledger_stops_the_mark_and_stays_a_problem() -> None:
    mark = TrailMark("t", 0, ledger_id=4, event_cursor=3, head=10, ranges=4)
    reading = decide_trail(mark, [_entry(5, 12, 15)], [_event(4, 12, 15)])
    assert reading.problems == ("t-0: ledger gap between offset 10 and range [12, 15)",)
    assert reading.mark.ledger_id == 4 and reading.mark.event_cursor == 3


def test_events_the_ledger_does_not_account_for_hold_the_cursor() -> None:
    reading = decide_trail(
        START, [_entry(1, 0, 5)], [_event(7, 0, 5), _event(8, None, None), _event(9, 3, 4)], recorded_earlier=set()
    )
    assert reading.problems == (
        "t-0: materialization by run run-8 records no offsets: the ledger does not account for it",
        "t-0: materialization [3, 4) is not in the ledger",
    )
    assert reading.mark.ledger_id == 1 and reading.mark.event_cursor == 7
    late = decide_trail(START, [], [_event(7, 0, 5)], recorded_earlier={(0, 5)})
    assert late.problems == () and late.mark.event_cursor == 7


def test_a_fold_needs_no_event_of_its_own_and_accounts_for_its_ranges_events() -> None:
    entries = [_entry(3, 0, 9, kind=FOLD), _entry(4, 9, 12)]
    # a full read: the folded ranges' events are still in the log (or purged: none), the newest range's too
    for kept in ([_event(1, 0, 5), _event(2, 5, 9)], []):
        reading = decide_trail(START, entries, [*kept, _event(3, 9, 12)])
        assert reading.problems == () and reading.unshown == (), reading.problems
        assert (reading.mark.ledger_id, reading.mark.head) == (4, 12)
    stray = decide_trail(START, entries, [_event(1, 0, 10), _event(3, 9, 12)])
    assert stray.problems == ("t-0: materialization [0, 10) is not in the ledger",)
