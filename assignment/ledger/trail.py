"""The audit trail's watermark: how far one partition's ledger is known to be shown in an orchestrator's trail.

An audit trail (Dagster's materializations, Airflow's asset events) shows each committed range once. Checking
the whole ledger against the whole trail at every run costs what the history costs, so each partition keeps a
`TrailMark`: every ledger entry up to `ledger_id` is settled (shown by an event, or needing none), the entries
are contiguous up to offset `head`, and every trail event up to `event_cursor` was matched. A run then reads
only the ledger entries after the mark and the trail's events after the cursor, decides with `decide_trail`,
and stores the advanced mark: its cost follows what changed since the last run, not the history.

The mark advances only over a settled, contiguous prefix of the ledger and never past a trail event it could not
match, so a problem (a range nobody reported, a gap, an event the ledger does not account for) is seen again
at every run until someone fixes it. A full audit ignores the mark (`TrailMark.start`).

Example:
    >>> from cohort.assignment.protocol.messages import LedgerEntry
    >>> entry = LedgerEntry("g", "t", 0, 0, 10, 10, 0, None, "run-1", "m", "slot-0", 1, 0.0, entry_id=1)
    >>> reading = decide_trail(TrailMark.start("t", 0), [entry], [TrailEvent(7, 0, 10, "run-1")])
    >>> reading.mark.ledger_id, reading.mark.head, reading.mark.event_cursor, reading.unshown
    (1, 10, 7, ())
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace

from cohort.assignment.protocol.messages import LedgerEntry
from cohort.common.types import TopicPartition

__all__ = ["TrailEvent", "TrailMark", "TrailReading", "decide_trail", "needs_event"]


@dataclass(frozen=True)
class TrailMark:
    """Through which ledger entry (and which trail event) one partition's ledger is settled in a trail."""

    topic: str
    partition: int
    ledger_id: int = 0
    """Every ledger entry with an id up to this one is shown in the trail or needs no event."""
    event_cursor: int | None = None
    """Every trail event with an id up to this one was matched to a ledger entry (None: start of the trail)."""
    head: int | None = None
    """The ledger's position after its entry `ledger_id` (None: no entry yet)."""
    ranges: int = 0
    gaps: int = 0
    resets: int = 0
    last_commit_at: float | None = None

    @classmethod
    def start(cls, topic: str, partition: int) -> TrailMark:
        """The mark of a partition nothing was checked of yet (also what a full audit starts from)."""
        return cls(topic, partition)

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True)
class TrailEvent:
    """One event of the trail for a partition: its id in the trail (increasing), the range it shows (None when
    it records no offsets: made by hand or by foreign code), and who made it (a run id, for messages)."""

    event_id: int
    from_offset: int | None
    until_offset: int | None
    source: str

    @property
    def shows(self) -> tuple[int, int] | None:
        if self.from_offset is None or self.until_offset is None:
            return None
        return (self.from_offset, self.until_offset)


@dataclass(frozen=True)
class TrailReading:
    """What one look at a partition's new ledger entries and new trail events found."""

    mark: TrailMark
    """The mark advanced over what is settled now (store it)."""
    pending: tuple[LedgerEntry, ...]
    """The entries after the mark as it was, in ledger order."""
    unshown: tuple[LedgerEntry, ...]
    """Pending entries that need an event and have none: a run ended before reporting them (or is still going)."""
    problems: tuple[str, ...]
    """Contiguity breaks and events the ledger does not account for."""
    head: int | None
    """The ledger's position after every pending entry (the committed offset Kafka should hold)."""
    elsewhere: int = 0
    """Pending ranges shown in another trail (committed by another Dagster instance's runs)."""

    @property
    def ranges(self) -> int:
        """Committed ranges through the last pending entry (resets and gaps apart)."""
        return self.mark.ranges + sum(1 for e in self._after_mark if _counts_as_range(e))

    @property
    def gaps(self) -> int:
        return self.mark.gaps + sum(1 for e in self._after_mark if e.gap_reason is not None)

    @property
    def resets(self) -> int:
        return self.mark.resets + sum(1 for e in self._after_mark if e.is_reset)

    @property
    def last_commit_at(self) -> float | None:
        times = [e.committed_at for e in self._after_mark]
        if self.mark.last_commit_at is not None:
            times.append(self.mark.last_commit_at)
        return max(times, default=None)

    @property
    def _after_mark(self) -> tuple[LedgerEntry, ...]:
        return tuple(e for e in self.pending if (e.entry_id or 0) > self.mark.ledger_id)


def needs_event(entry: LedgerEntry) -> bool:
    """Whether the trail must show `entry`: a range that consumed offsets. Resets, skipped gaps and empty
    ranges (a position pinned without reading) read nothing and are never materialized; a fold (ledger
    retention) stands for ranges the trail had settled before they were folded, whose events may be purged."""
    return (
        not entry.is_reset and not entry.is_fold and entry.gap_reason is None and entry.until_offset > entry.from_offset
    )


def _inside(shows: tuple[int, int], spans: Sequence[tuple[int, int]]) -> bool:
    return any(lo <= shows[0] and shows[1] <= hi for lo, hi in spans)


def _counts_as_range(entry: LedgerEntry) -> bool:
    return not entry.is_reset


def decide_trail(
    mark: TrailMark,
    pending: Sequence[LedgerEntry],
    events: Sequence[TrailEvent],
    *,
    elsewhere: Callable[[LedgerEntry], bool] = lambda _entry: False,
    recorded_earlier: Collection[tuple[int, int]] = (),
) -> TrailReading:
    """Settle the ledger entries after `mark` (`pending`, in ledger order) against the trail's events after its
    cursor (`events`, in trail order).

    `elsewhere(entry)` says an entry is shown in another trail (a range committed by another Dagster
    instance's run): it needs no event here. `recorded_earlier` holds the ranges of events that match no
    pending entry but an entry before the mark (a range reported late): they are not problems.
    """
    unmatched = _unmatched_events(mark.topic_partition, pending, events, recorded_earlier)
    walk = _walk_ledger(mark, pending, _shown_ranges(events), elsewhere)
    blocked_at = _min_opt(unmatched.blocked_at, walk.blocked_at)
    settled = replace(walk.settled, event_cursor=_event_cursor(mark, events, blocked_at))
    return TrailReading(
        mark=settled,
        pending=tuple(pending),
        unshown=walk.unshown,
        problems=unmatched.problems + walk.problems,
        head=walk.head,
        elsewhere=walk.shown_elsewhere,
    )


@dataclass(frozen=True)
class _Unmatched:
    """The trail events the ledger does not account for: one problem each, and the first of them (the event
    cursor must stay before it, so that it is seen again)."""

    problems: tuple[str, ...]
    blocked_at: int | None


@dataclass(frozen=True)
class _LedgerWalk:
    """The pending entries walked in ledger order: the mark advanced over their settled, contiguous prefix, the
    entries that need an event and have none, the problems found, and where the ledger ends."""

    settled: TrailMark
    unshown: tuple[LedgerEntry, ...]
    problems: tuple[str, ...]
    blocked_at: int | None
    """The first event of an entry shown after the settled prefix (the cursor must stay before it)."""
    head: int | None
    shown_elsewhere: int


def _shown_ranges(events: Sequence[TrailEvent]) -> dict[tuple[int, int], int]:
    """The ranges the events show, each with the id of the first event showing it."""
    shown: dict[tuple[int, int], int] = {}
    for event in events:
        if event.shows is not None:
            shown.setdefault(event.shows, event.event_id)
    return shown


def _unmatched_events(
    tp: TopicPartition,
    pending: Sequence[LedgerEntry],
    events: Sequence[TrailEvent],
    recorded_earlier: Collection[tuple[int, int]],
) -> _Unmatched:
    """The events that record no offsets, or a range that is neither pending, nor recorded before the mark, nor
    inside a pending fold (whose ranges' events match it)."""
    pending_ranges = {(e.from_offset, e.until_offset) for e in pending}
    folds = [(e.from_offset, e.until_offset) for e in pending if e.is_fold]
    problems: list[str] = []
    blocked_at: int | None = None
    for event in events:
        if event.shows is None:
            problems.append(
                f"{tp}: materialization by run {event.source} records no offsets: the ledger does not account for it"
            )
        elif (
            event.shows not in pending_ranges
            and event.shows not in recorded_earlier
            and not _inside(event.shows, folds)
        ):
            s, u = event.shows
            problems.append(f"{tp}: materialization [{s}, {u}) is not in the ledger")
        else:
            continue
        blocked_at = _min_opt(blocked_at, event.event_id)
    return _Unmatched(tuple(problems), blocked_at)


def _walk_ledger(
    mark: TrailMark,
    pending: Sequence[LedgerEntry],
    shown: Mapping[tuple[int, int], int],
    elsewhere: Callable[[LedgerEntry], bool],
) -> _LedgerWalk:
    """Walk the pending entries from the mark's head: name each contiguity break and each entry that needs an
    event and has none, and advance the mark while the entries stay settled and contiguous."""
    tp = mark.topic_partition
    settled = mark
    previous = mark.head
    advancing = True
    unshown: list[LedgerEntry] = []
    problems: list[str] = []
    blocked_at: int | None = None
    shown_elsewhere = 0
    for entry in pending:
        start, until = entry.from_offset, entry.until_offset
        contiguous = previous is None or start == previous
        if not contiguous:
            kind = "gap" if start > previous else "overlap"  # type: ignore[operator]
            problems.append(f"{tp}: ledger {kind} between offset {previous} and range [{start}, {until})")
        other = needs_event(entry) and elsewhere(entry)
        shown_elsewhere += 1 if other else 0
        wanted = needs_event(entry) and not other
        missing = wanted and (start, until) not in shown
        if missing:
            unshown.append(entry)
            problems.append(f"{tp}: ledger range [{start}, {until}) has no materialization")
        if advancing and contiguous and not missing:
            settled = _settle(settled, entry)
        else:
            advancing = False
            if wanted and not missing:
                # an entry shown after the settled prefix: the cursor stays before its event, to see it again
                blocked_at = _min_opt(blocked_at, shown[(start, until)])
        previous = until
    return _LedgerWalk(settled, tuple(unshown), tuple(problems), blocked_at, previous, shown_elsewhere)


def _settle(mark: TrailMark, entry: LedgerEntry) -> TrailMark:
    """`mark` advanced over one more settled entry, its counts with it."""
    return replace(
        mark,
        ledger_id=max(mark.ledger_id, entry.entry_id or 0),
        head=entry.until_offset,
        ranges=mark.ranges + (1 if _counts_as_range(entry) else 0),
        gaps=mark.gaps + (1 if entry.gap_reason is not None else 0),
        resets=mark.resets + (1 if entry.is_reset else 0),
        last_commit_at=max(entry.committed_at, mark.last_commit_at or entry.committed_at),
    )


def _event_cursor(mark: TrailMark, events: Sequence[TrailEvent], blocked_at: int | None) -> int | None:
    """The new event cursor: just before the first event that must be seen again, else after every event read;
    never back from where the mark had it."""
    if blocked_at is not None:
        return _max_opt(mark.event_cursor, blocked_at - 1)
    return _max_opt(mark.event_cursor, max((e.event_id for e in events), default=None))


def _min_opt(a: int | None, b: int | None) -> int | None:
    """The smaller of two optional ids (None: not set)."""
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _max_opt(a: int | None, b: int | None) -> int | None:
    """The larger of two optional ids (None: not set)."""
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)
