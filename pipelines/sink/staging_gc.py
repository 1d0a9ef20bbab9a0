"""Which staging areas of batch attempts to delete: a pure decision over what the shell found on disk, in the
group record and in the ledger (cohort.pipelines.sink.staging_collect lists, reads and deletes).

A batch attempt stages its output under `<root>/_staging/<attempt>/` (cohort.pipelines.sink.layout; a table sink the
same under its table roots) and deletes it when it ends. A process killed before that leaves it behind, and a
group that runs every minute for years would pile such areas up. An attempt's area is deleted only when all
of these hold:

- **its run is not a live member**: the attempt id starts with a digest of its run id (`run_tag`), and no member
  of the group record has that run id as its client id. Keyed on the run, not the member id, so a run that
  rejoined under a new member id keeps its attempts. A run outside the group can no longer commit (its commits
  are refused), so its attempts will never be committed by it. A live member without a client id could be any
  run: while one is in the group, nothing is deleted;
- **nothing under it changed for the grace period** (`STAGING_GRACE_S`, the newest modification time of the
  area's files and directories): a run that has not joined yet, or one committing through a standalone ledger
  (no member: scripts, tools), may still be writing it or about to commit it;
- **none of its staged ranges waits to be published**: a range the attempt prepared (its markers name the
  attempt and the offsets) that is its partition's last committed range, committed by the attempt's run and
  not in place with the rows the ledger records (the next batch of the partition publishes it); or a range the
  ledger records as committed (or, when the ledger cannot say, may have) whose offsets no range directory of
  the output holds (`cohort audit --repair` publishes it). A table sink never publishes from staging: its areas
  only need the first two checks.

Anything under `_staging` whose name `attempt_id` cannot have made is left alone.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from cohort.common.types import TopicPartition
from cohort.pipelines.sink.layout import attempt_run_tag, run_tag

if TYPE_CHECKING:
    from cohort.pipelines.planning.positions import CommittedRange

__all__ = [
    "STAGING_GRACE_S",
    "FoundAttempt",
    "GroupFacts",
    "Output",
    "RangeDir",
    "StagedRange",
    "StagingVerdict",
    "decide_staging_gc",
]

STAGING_GRACE_S = 3600.0
"""How long an attempt's staging area must have been left unchanged before it may be deleted: far longer than
any batch takes between two writes to its staging area (its tasks write as they read; the count, the markers,
the commit and the publish follow within seconds)."""

Output = Literal["sink", "quarantine", "table"]
"""What a staging root belongs to: the Parquet sink, its quarantine, or a table sink (which never publishes
from staging)."""

Reason = Literal["live", "members-unknown", "age-unknown", "young", "to-publish", "committed", "dead"]


@dataclass(frozen=True, order=True)
class StagedRange:
    """One partition directory of an attempt's staging area, and its markers: the offsets it was staged for (None
    without a range marker) and whether it carries the attempt's own marker (both are written before the ledger
    commit: only a range carrying both can have been committed)."""

    topic: str
    partition: int
    from_offset: int | None = None
    until_offset: int | None = None
    attempt_marked: bool = False

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def prepared(self) -> bool:
        return self.attempt_marked and self.from_offset is not None and self.until_offset is not None


@dataclass(frozen=True, order=True)
class FoundAttempt:
    """An attempt's staging area as found: its output root, what the root belongs to, the attempt id, when anything
    under it last changed (None: not read, or unknown) and its staged ranges."""

    root: str
    output: Output
    attempt: str
    modified: float | None = None
    ranges: tuple[StagedRange, ...] = ()


@dataclass(frozen=True, order=True)
class RangeDir:
    """A range directory in place under an output root: its offsets, and (read only where a decision needs them)
    the attempts its markers name and its rows (None: not read)."""

    from_offset: int
    until_offset: int
    attempts: frozenset[str] = frozenset()
    rows: int | None = None


@dataclass(frozen=True)
class GroupFacts:
    """What the decision knows beyond the attempts.

    `live_runs`: the client ids (run ids) of the group's live members; `anonymous_members`: how many live members
    have none. `last_committed`: per partition of a prepared range, the ledger's last committed range (None:
    nothing committed). `recorded`: per such partition, which of the attempts' prepared ranges the ledger holds as
    committed ranges; None when the ledger cannot say (then any may be). `in_place`: per (output root, partition),
    the range directories in place."""

    live_runs: Collection[str] = ()
    anonymous_members: int = 0
    last_committed: Mapping[TopicPartition, CommittedRange | None] = field(default_factory=dict)
    recorded: Mapping[TopicPartition, Collection[tuple[int, int]]] | None = None
    in_place: Mapping[tuple[str, TopicPartition], Sequence[RangeDir]] = field(default_factory=dict)


@dataclass(frozen=True, order=True)
class StagingVerdict:
    """What to do with one attempt's staging area, and why (`reason`: a code; `detail`: a sentence)."""

    root: str
    attempt: str
    delete: bool
    reason: Reason
    detail: str

    @property
    def path(self) -> str:
        """The staging area's path."""
        return f"{self.root}/_staging/{self.attempt}"


def decide_staging_gc(
    attempts: Sequence[FoundAttempt], facts: GroupFacts, *, now: float, grace_s: float = STAGING_GRACE_S
) -> tuple[StagingVerdict, ...]:
    """One verdict per attempt (see the module doc), in the order of `attempts`; `now` in epoch seconds from the
    caller's clock (the one the file system's modification times follow)."""
    if grace_s < 0:
        raise ValueError(f"the grace period must be >= 0 seconds, got {grace_s}")
    live = {run_tag(run): run for run in sorted(facts.live_runs)}
    return tuple(_judge(a, facts, live, now, grace_s) for a in attempts)


def _judge(a: FoundAttempt, facts: GroupFacts, live: Mapping[str, str], now: float, grace_s: float) -> StagingVerdict:
    def keep(reason: Reason, detail: str) -> StagingVerdict:
        return StagingVerdict(a.root, a.attempt, False, reason, detail)

    tag = attempt_run_tag(a.attempt)
    if tag is None:
        raise ValueError(f"{a.attempt!r} is not an attempt id")
    if tag in live:
        return keep("live", f"its run {live[tag]} is a live member of the group (it may still commit)")
    if facts.anonymous_members:
        return keep(
            "members-unknown",
            f"{facts.anonymous_members} live member(s) joined without a client id: any attempt may be theirs",
        )
    if a.modified is None:
        return keep("age-unknown", "when it last changed could not be read")
    age = now - a.modified
    if age < grace_s:
        return keep("young", f"changed {age:.0f} s ago, within the grace period of {grace_s:.0f} s")
    if a.output != "table":
        for staged in sorted(a.ranges):
            why = _waits(a, tag, staged, facts)
            if why is not None:
                return keep(*why)
    return StagingVerdict(
        a.root,
        a.attempt,
        True,
        "dead",
        f"its run is not in the group, nothing changed for {age:.0f} s and no committed range waits in it",
    )


def _waits(a: FoundAttempt, tag: str, staged: StagedRange, facts: GroupFacts) -> tuple[Reason, str] | None:
    """Why a prepared staged range must stay (a committed range waiting to be published), None if it need not."""
    if not staged.prepared:
        return None
    low, high = staged.from_offset, staged.until_offset
    assert low is not None and high is not None
    tp = staged.tp
    dirs = facts.in_place.get((a.root, tp), ())
    last = facts.last_committed.get(tp)
    if last is not None and (last.from_offset, last.until_offset) == (low, high) and last.run_id is not None:
        rows = last.quarantined if a.output == "quarantine" else last.records
        if run_tag(last.run_id) == tag and rows > 0 and not _published(dirs, tag, low, high, rows):
            return (
                "to-publish",
                f"holds [{low}, {high}) of {tp}, the partition's last committed range (run {last.run_id}), not in "
                "place yet: the next batch of the partition publishes it",
            )
    recorded = facts.recorded
    maybe_committed = recorded is None or (low, high) in recorded.get(tp, ())
    if low < high and maybe_committed and not _covered(dirs, low, high):
        said = "the ledger records as committed" if recorded is not None else "the ledger may hold as committed"
        return (
            "committed",
            f"holds [{low}, {high}) of {tp}, which {said}, and no range directory holds those offsets: "
            "`cohort audit --repair` publishes it",
        )
    return None


def _published(dirs: Sequence[RangeDir], tag: str, low: int, high: int, rows: int) -> bool:
    """Whether [low, high) is in place with a marker of the run and the committed rows (all of them: a move that
    copies files one by one has not finished before)."""
    return any(
        (d.from_offset, d.until_offset) == (low, high)
        and any(attempt_run_tag(x) == tag for x in d.attempts)
        and d.rows == rows
        for d in dirs
    )


def _covered(dirs: Sequence[RangeDir], low: int, high: int) -> bool:
    """Whether the range directories in place hold every offset of [low, high)."""
    reached = low
    for d in sorted(dirs, key=lambda d: (d.from_offset, d.until_offset)):
        if d.from_offset > reached:
            break
        reached = max(reached, d.until_offset)
        if reached >= high:
            return True
    return reached >= high
