"""What a table-sink batch does before it reads: compare each partition's ledger position with the two tables'
marks and decide, with plain values, how to bring them together (cohort.pipelines.tables.batch.reconcile_tables
applies it).

The commit order of a table batch is quarantine table, sink table, ledger, Kafka. A batch that died (or was
fenced) between two of these steps leaves the tables ahead of the ledger, never behind:

- the sink table's head beyond the ledger's: the sink commit landed and the ledger never saw it. Its commit
  metadata holds the ledger ranges it landed (gaps included, with their counts and run): they are **adopted**
  into the ledger, as the run would have committed them; nothing is read or written twice;
- the quarantine table's head beyond the furthest offset the sink table ever reached: the quarantine commit
  landed and the sink commit did not. Its files beyond that offset are **rolled back** (removed in one commit):
  the next batch reads those offsets again. (A batch whose quarantine output is empty makes no quarantine
  commit, so the quarantine's head may lag the sink's; it never passes it but this way);
- a table's generation older than the member's: the member **fences** the partition (its generation in the
  table), so a zombie of an older generation that still holds staged files is refused by the table.

A sink head behind the ledger's, or a commit whose ranges do not start at the ledger's head, cannot be made
by Cohort: the batch stops and names it (`cohort audit` shows the partition). After a reset (the ledger's last
entry), the tables are ahead by design: the next batch replays and overwrites.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.tables.store import BatchRecord, Owner, PartitionMark

__all__ = ["LedgerPosition", "Reconcile", "ahead_of_ledger", "reconcile_partition"]


@dataclass(frozen=True)
class LedgerPosition:
    """A partition's ledger position: its committed offset (None: nothing committed) and whether its last entry
    is a reset (a replay or a skip is pending)."""

    head: int | None
    after_reset: bool = False


@dataclass(frozen=True)
class Reconcile:
    """What to do for one partition before the batch reads it.

    `adopt`: ledger ranges to commit (the sink table's commit the ledger never saw), by run `adopt_run`;
    `fence_sink` / `fence_quarantine`: write the member's generation into that table; `roll_back_from`: remove
    the quarantine files of the partition starting at or after this offset, and set its head there;
    `problem`: the batch must stop (the message names the partition and what diverged).
    """

    tp: TopicPartition
    adopt: tuple[OffsetRange, ...] = ()
    adopt_run: str | None = None
    fence_sink: bool = False
    fence_quarantine: bool = False
    roll_back_from: int | None = None
    problem: str | None = None


def _fence(owner: Owner, mark: PartitionMark, exists: bool) -> tuple[bool, str | None]:
    """(fence needed, problem): a table holding a newer generation than the member's means the member is a zombie."""
    if owner.generation is None or not exists:
        return False, None
    if mark.generation is not None and mark.generation > owner.generation:
        return False, (
            f"generation {mark.generation} holds the partition in the table, this member has generation "
            f"{owner.generation}: it was fenced (a newer member owns the partition)"
        )
    return mark.generation != owner.generation, None


def _adoption(
    tp: TopicPartition, ledger: LedgerPosition, head: int, batch: BatchRecord | None
) -> tuple[OffsetRange, ...]:
    """The ledger ranges of the sink commit that moved the head to `head`, if they start at the ledger's head."""
    ranges = batch.for_partition(tp) if batch is not None else ()
    if not ranges or ranges[-1].until_offset != head:
        return ()
    if ledger.head is not None and ranges[0].from_offset != ledger.head:
        return ()
    return ranges


def ahead_of_ledger(ledger: LedgerPosition, sink: PartitionMark) -> int | None:
    """The sink table's head when it is beyond the ledger's (a commit the ledger may adopt: its record is what
    `reconcile_partition` needs as `sink_batch`), else None."""
    if sink.head is None or ledger.after_reset or (ledger.head is not None and sink.head <= ledger.head):
        return None
    return sink.head


def reconcile_partition(
    tp: TopicPartition,
    owner: Owner,
    ledger: LedgerPosition,
    sink: PartitionMark,
    quarantine: PartitionMark,
    *,
    sink_exists: bool,
    quarantine_exists: bool,
    sink_batch: BatchRecord | None = None,
) -> Reconcile:
    """Decide for one partition (see the module doc). `sink_batch` is the sink table's record of the commit that
    moved the partition's head to its current value (needed only when that head is beyond the ledger's)."""
    problems = []
    fence_sink, problem = _fence(owner, sink, sink_exists)
    problems += [f"{tp}: sink table: {problem}"] if problem else []
    fence_quarantine, problem = _fence(owner, quarantine, quarantine_exists)
    problems += [f"{tp}: quarantine table: {problem}"] if problem else []
    if problems:
        return Reconcile(tp, problem="; ".join(problems))
    adopt: tuple[OffsetRange, ...] = ()
    run = None
    head = sink.head
    if head is not None and not ledger.after_reset:
        if ledger.head is None or head > ledger.head:
            adopt = _adoption(tp, ledger, head, sink_batch)
            if not adopt:
                where = "has nothing" if ledger.head is None else f"ends at {ledger.head}"
                return Reconcile(
                    tp,
                    problem=(
                        f"{tp}: the sink table records offsets up to {head} but the ledger {where}, and the "
                        "table's commit cannot be matched to the ledger's head (the table holds commits of another "
                        "group history); `cohort audit` shows the partition"
                    ),
                )
            run = sink_batch.run_id if sink_batch is not None else None
        elif head < ledger.head:
            return Reconcile(
                tp,
                problem=(
                    f"{tp}: the ledger has committed offsets up to {ledger.head} but the sink table records only up to "
                    f"{head}: the table lost commits (restored from an older copy?); `cohort audit` shows the partition"
                ),
            )
    roll_back = None
    if quarantine.head is not None and not ledger.after_reset:
        reached = [x for x in (head, sink.reach) if x is not None]
        floor = max(reached) if reached else ledger.head
        if floor is None or quarantine.head > floor:
            roll_back = floor if floor is not None else 0
    return Reconcile(tp, adopt, run, fence_sink, fence_quarantine, roll_back)


def problems(decisions: Mapping[TopicPartition, Reconcile]) -> list[str]:
    """The problems among `decisions`, in partition order."""
    return [d.problem for _, d in sorted(decisions.items()) if d.problem]
