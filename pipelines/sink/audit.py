"""The sink audit: one partition's ledger, Kafka's committed offset and the sink's own record, compared.

The ledger is the source of truth. The sink records what it holds in its range directories' names
(`<topic>-<p>-<from>-<until>.parquet`, docs/sink.md), so for each partition the audit replays the ledger's
commits in order (a later range that re-reads offsets, a replay, replaces them, cutting the ranges it overlaps
as publishing does) and expects, in the sink and in the quarantine:

- each committed range still whole to have its directory when it wrote rows there, holding as many rows as the
  ledger says;
- no directory that is not one of those pieces (output no commit accounts for), none beyond the furthest offset
  the ledger committed, and no two directories sharing an offset;
- nothing else that Parquet readers read under the root (cohort.pipelines.sink.tree: a copied range directory,
  one in another partition's folder, whatever its name);
- Kafka's committed offset equal to the ledger's head (the mirror copies it there after each commit).

An offset reset back (docs/replay.md) leaves the sink ahead of the ledger's committed offset until the replay
batches pass it again: that is pending work, said (`PendingReplay`), not a divergence.

Decisions are plain values (`audit_sink_partition`, `fold_ledger`); reading the sink and Kafka, and repairing,
belong to the caller. The ledger is read page by page (`ledger_entries`). A finding says whether a repair is
safe: re-mirroring the ledger's head to Kafka where Kafka's committed offset differs (the mirror failed, or the
offset was moved outside Cohort: cohort.pipelines.kafka.drift), and publishing a committed range whose directory is
missing from the output its run staged. Nothing else is repaired: deleting or rewriting output could lose data.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from cohort.common.types import TopicPartition
from cohort.pipelines.kafka.drift import OUTSIDE_CAUSES, audit_drift_message, drift
from cohort.pipelines.sink.audit_ledger import AuditedRange, LedgerFold, PendingReplay, fold_ledger, ledger_entries
from cohort.pipelines.sink.layout import SinkFs, SinkLayout, default_quarantine_root, parse_range_dir
from cohort.pipelines.sink.tree import Entry, OutputTree, Stray, strays

__all__ = [
    "MIRROR",
    "PUBLISH",
    "REPAIR_HINTS",
    "AuditedRange",
    "LedgerFold",
    "LedgerReader",
    "OutsideFinding",
    "PartitionRecords",
    "PendingReplay",
    "Piece",
    "SinkFinding",
    "audit_sink_partition",
    "effective_pieces",
    "fold_ledger",
    "ledger_entries",
    "output_layouts",
    "range_dirs_listed",
    "read_records",
    "stray_findings",
]

MIRROR = "mirror"
"""Repair: copy the ledger's head to Kafka's committed offsets (safe: the ledger is the truth)."""
PUBLISH = "publish"
"""Repair: publish a committed range from the output its run staged (safe when the staged rows match)."""
REPAIR_HINTS = {
    MIRROR: "`cohort audit --repair` re-mirrors it",
    PUBLISH: "`cohort audit --repair` publishes it if its run's staged output is still there",
}
"""What `--repair` does about a finding, for messages."""


@dataclass(frozen=True)
class Piece:
    """Offsets [from, until) whose output comes from one commit: the whole range, or what a replay left of it."""

    from_offset: int
    until_offset: int
    commit: AuditedRange

    @property
    def whole(self) -> bool:
        return (self.from_offset, self.until_offset) == (self.commit.from_offset, self.commit.until_offset)


@dataclass(frozen=True)
class SinkFinding:
    """One divergence of a partition; `repair` names the safe repair, None when none is (the message says why)."""

    tp: TopicPartition
    where: str  # "sink", "quarantine" or "kafka"
    message: str
    repair: str | None = None
    piece: Piece | None = None


@dataclass(frozen=True)
class OutsideFinding:
    """A divergence found outside every partition folder of the ledger (a file at a sink's root, a topic or
    partition the ledger does not hold, a table's unreferenced file outside Cohort's layout): found once per
    output, not per partition; `repair` as for `SinkFinding`."""

    where: str  # "sink" or "quarantine"
    path: str
    message: str
    repair: str | None = None


def _stray_message(stray: Stray, root: str) -> str:
    return f"{stray.describe(root)}; not repaired (nothing readers see is deleted: remove it if it is a copy)"


class LedgerReader(Protocol):
    """What the audit reads of the ledger (a `cohort.assignment.coordinator.Coordinator`); one that also has
    `ledger_after(group, topic, partition, after_id, limit=...)` is read page by page."""

    def ledger_history(self, group: str, topic: str, partition: int) -> Sequence[Any]: ...

    def fetch_offsets(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> Mapping[TopicPartition, int | None]: ...


@dataclass(frozen=True)
class PartitionRecords:
    """One partition's ledger commits, committed offset, and range directories (from, until, rows) per output;
    `strays` per output what readers read in the partition's folder that no range directory accounts for (under
    `roots`), `pending` a replay an offset reset left to do."""

    tp: TopicPartition
    commits: tuple[AuditedRange, ...]
    head: int | None
    outputs: Mapping[str, Sequence[tuple[int, int, int]]]
    strays: Mapping[str, Sequence[Stray]] = field(default_factory=dict)
    roots: Mapping[str, str] = field(default_factory=dict)
    pending: PendingReplay | None = None
    through_id: int | None = None
    """The id of the last ledger entry read (None: none, or a ledger without ids): how far a clean audit of
    this reading lets the sink check's mark advance."""

    def audit(self, kafka_committed: int | None = None, *, compare_kafka: bool = False) -> list[SinkFinding]:
        findings = audit_sink_partition(
            self.tp, self.commits, self.head, self.outputs, kafka_committed, compare_kafka=compare_kafka
        )
        for where, found in self.strays.items():
            findings += [SinkFinding(self.tp, where, _stray_message(s, self.roots.get(where, ""))) for s in found]
        return findings


def output_layouts(sink_path: str, quarantine_path: str | None = None) -> dict[str, SinkLayout]:
    """The layouts of the two outputs a batch writes, by the names findings use ("sink", "quarantine")."""
    quarantine = SinkLayout(quarantine_path or default_quarantine_root(sink_path))
    return {"sink": SinkLayout(sink_path), "quarantine": quarantine}


def range_dirs_listed(tp: TopicPartition, entries: Sequence[Entry]) -> list[tuple[int, int, str]]:
    """(from, until, name) of the range directories of `tp` among its folder's entries."""
    found = []
    for entry in entries:
        if entry.is_dir and len(entry.parts) == 3:
            parsed = parse_range_dir(entry.parts[2])
            if parsed is not None and parsed[:2] == (tp.topic, tp.partition):
                found.append((parsed[2], parsed[3], entry.parts[2]))
    return sorted(found)


def read_records(
    ledger: LedgerReader,
    group: str,
    tp: TopicPartition,
    layouts: Mapping[str, SinkLayout],
    fs: SinkFs,
    *,
    count_rows: bool = True,
) -> PartitionRecords:
    """The ledger's and the outputs' records of one partition: one recursive listing of the partition's folder per
    output (range directories and what else readers read there) and, with `count_rows`, the directories' rows from
    their Parquet footers (no data is read; without it rows are not compared). The folders are listed before the
    ledger is read: a range published meanwhile is committed before it is listed."""
    listed = {where: OutputTree(layout.root).partition(tp) for where, layout in layouts.items()}
    entries = list(ledger_entries(ledger, group, tp))
    fold = fold_ledger(tp, entries)
    outputs = {}
    for where, layout in layouts.items():
        folder = layout.partition_dir(tp.topic, tp.partition)
        outputs[where] = [
            (x, y, fs.parquet_record_count(f"{folder}/{name}") if count_rows else -1)
            for x, y, name in range_dirs_listed(tp, listed[where])
        ]
    found = {where: strays(entries, [tp]) for where, entries in listed.items()}
    roots = {where: layout.root for where, layout in layouts.items()}
    through = getattr(entries[-1], "entry_id", None) if entries else None
    return PartitionRecords(tp, fold.commits, fold.head, outputs, found, roots, fold.pending, through)


def stray_findings(
    layouts: Mapping[str, SinkLayout], partitions: Collection[TopicPartition], *, topic: str | None = None
) -> list[OutsideFinding]:
    """What readers read in each output outside the folders of the ledger's `partitions`; with `topic`, leaving
    out the folders of the ledger's other topics (their own audit names those)."""
    others = {f"topic={tp.topic}" for tp in partitions if topic is not None and tp.topic != topic}
    found = []
    for where, layout in layouts.items():
        entries = OutputTree(layout.root).outside(partitions)
        found += [
            OutsideFinding(where, f"{layout.root}/{'/'.join(s.parts)}", _stray_message(s, layout.root))
            for s in strays(entries, partitions)
            if s.parts[0] not in others
        ]
    return found


def effective_pieces(commits: Sequence[AuditedRange]) -> list[Piece]:
    """The partition's offsets by the commit whose output holds them: each commit replaces the offsets it re-reads
    (a replay), keeping what lies outside them of the ranges it overlaps. Gaps hold no output. The pieces stay
    sorted and disjoint, so each commit touches only those it overlaps (found by bisection)."""
    pieces: list[Piece] = []
    froms: list[int] = []
    untils: list[int] = []
    for commit in commits:
        lo, hi = commit.from_offset, commit.until_offset
        if lo == hi:
            continue
        first = bisect_right(untils, lo)  # the first piece ending after lo
        last = bisect_left(froms, hi)  # the first piece starting at or after hi
        kept: list[Piece] = []
        for piece in pieces[first:last]:
            if piece.from_offset < lo:
                kept.append(Piece(piece.from_offset, lo, piece.commit))
            if hi < piece.until_offset:
                kept.append(Piece(hi, piece.until_offset, piece.commit))
        if not commit.gap:
            kept.append(Piece(lo, hi, commit))
        kept.sort(key=lambda p: p.from_offset)
        pieces[first:last] = kept
        froms[first:last] = [p.from_offset for p in kept]
        untils[first:last] = [p.until_offset for p in kept]
    return pieces


def audit_sink_partition(
    tp: TopicPartition,
    commits: Sequence[AuditedRange],
    head: int | None,
    outputs: Mapping[str, Sequence[tuple[int, int, int]]],
    kafka_committed: int | None = None,
    *,
    compare_kafka: bool = False,
) -> list[SinkFinding]:
    """The divergences of one partition. Output up to the furthest offset the ledger committed is compared with
    the commits, even where a reset moved the committed offset back (the replay has not rewritten it yet).

    Args:
        commits: the ledger's commits of the partition, in ledger order (resets left out).
        head: the ledger's committed offset (None: nothing committed).
        outputs: per output ("sink", "quarantine"), its range directories as (from, until, rows); rows -1: not
            counted (not compared).
        kafka_committed: Kafka's committed offset of the group (None: none), compared when `compare_kafka`.
    """
    findings: list[SinkFinding] = []
    pieces = effective_pieces(commits)
    reached = [x for x in (head, *(c.until_offset for c in commits)) if x is not None]
    reach = max(reached) if reached else None
    for where, dirs in outputs.items():
        findings += _audit_output(tp, where, pieces, (head, reach), sorted(dirs))
    if compare_kafka and kafka_committed != head:
        if head is not None:  # behind or ahead: the ledger is the truth and the next batch mirrors it over Kafka's
            findings.append(SinkFinding(tp, "kafka", audit_drift_message(kafka_committed, head), MIRROR))
        else:
            findings.append(SinkFinding(tp, "kafka", f"{drift(kafka_committed, head)}: {OUTSIDE_CAUSES}"))
    return findings


def _fold_dirs(
    pieces: Sequence[Piece], dirs: Sequence[tuple[int, int, int]]
) -> dict[Piece, list[tuple[int, int, int]]]:
    """The directories inside each piece of a folded range (ledger retention: the ranges it stands for)."""
    found: dict[Piece, list[tuple[int, int, int]]] = {}
    for piece in pieces:
        if piece.commit.folded:
            found[piece] = [d for d in dirs if piece.from_offset <= d[0] and d[1] <= piece.until_offset]
    return found


def _rows(piece: Piece, where: str) -> int:
    """The rows the ledger says `piece`'s commit wrote to output `where`."""
    return piece.commit.records if where == "sink" else piece.commit.quarantined


def _audit_output(
    tp: TopicPartition,
    where: str,
    pieces: Sequence[Piece],
    ledger: tuple[int | None, int | None],
    dirs: Sequence[tuple[int, int, int]],
) -> list[SinkFinding]:
    """`ledger`: the committed offset and the furthest offset any commit reached (beyond it, no commit accounts
    for a directory)."""
    head, furthest = ledger
    view = _OutputView(tp, where, tuple(pieces), tuple(dirs), head, furthest, _fold_dirs(pieces, dirs))
    return [*_overlap_findings(view), *_directory_findings(view), *_fold_findings(view), *_unpublished_findings(view)]


@dataclass(frozen=True)
class _OutputView:
    """One output of a partition as the audit compares it: its range directories (from, until, rows; sorted)
    against the ledger's pieces, committed offset and furthest offset, and the directories inside each folded
    piece."""

    tp: TopicPartition
    where: str
    pieces: tuple[Piece, ...]
    dirs: tuple[tuple[int, int, int], ...]
    head: int | None
    furthest: int | None
    folds: Mapping[Piece, list[tuple[int, int, int]]]

    @property
    def held(self) -> set[tuple[int, int]]:
        """The (from, until) of every range directory the output holds."""
        return {(a, b) for a, b, _ in self.dirs}

    def rows(self, piece: Piece) -> int:
        """The rows the ledger says `piece`'s commit wrote to this output."""
        return _rows(piece, self.where)

    def finding(self, message: str, repair: str | None = None, piece: Piece | None = None) -> SinkFinding:
        """A divergence of this output."""
        return SinkFinding(self.tp, self.where, message, repair, piece)


def _overlap_findings(view: _OutputView) -> list[SinkFinding]:
    """Directories sharing offsets with the one reaching furthest before them: readers see those offsets twice."""
    findings = []
    reach: tuple[int, int] | None = None  # the directory reaching furthest so far
    for b_from, b_until, _ in view.dirs:
        if reach is not None and b_from < reach[1]:
            a_from, a_until = reach
            findings.append(
                view.finding(
                    f"directories [{a_from}, {a_until}) and [{b_from}, {b_until}) share offsets "
                    f"[{b_from}, {min(a_until, b_until)}): readers see them twice; not repaired (say which to keep)",
                )
            )
        if reach is None or b_until > reach[1]:
            reach = (b_from, b_until)
    return findings


def _directory_findings(view: _OutputView) -> list[SinkFinding]:
    """Each directory against the ledger: beyond what it committed, matching no committed range (and none of the
    ranges a fold stands for, counted with the fold), or holding other rows than a whole piece says."""
    beyond = (
        f"the ledger's committed offset {view.head}"
        if view.furthest == view.head
        else f"offset {view.furthest}, the furthest the ledger committed"
    )
    by_offsets = {(p.from_offset, p.until_offset): p for p in view.pieces}
    in_folds = {(d[0], d[1]) for inside in view.folds.values() for d in inside}
    findings = []
    for from_offset, until_offset, rows in view.dirs:
        piece = by_offsets.get((from_offset, until_offset))
        if view.furthest is None or until_offset > view.furthest:
            findings.append(
                view.finding(
                    f"directory [{from_offset}, {until_offset}) lies beyond {beyond}: "
                    "output no commit accounts for; not repaired (it is not deleted: check where it came from)",
                )
            )
        elif piece is None and (from_offset, until_offset) in in_folds:
            continue  # one of the ranges a fold stands for: counted with the fold
        elif piece is None:
            findings.append(
                view.finding(f"directory [{from_offset}, {until_offset}) matches no committed range: not repaired")
            )
        elif piece.whole and rows >= 0 and rows != view.rows(piece):
            findings.append(
                view.finding(
                    f"directory [{from_offset}, {until_offset}) holds {rows} rows, the ledger says "
                    f"{view.rows(piece)} (run {piece.commit.run_id}); not repaired (replay the offsets to "
                    "rewrite it)",
                )
            )
    return findings


def _fold_findings(view: _OutputView) -> list[SinkFinding]:
    """Each folded range held as several directories: none at all where it wrote rows, or rows that do not add
    up to the fold's (a fold of one directory is compared like any range)."""
    findings = []
    held = view.held
    for piece, inside in view.folds.items():
        if (piece.from_offset, piece.until_offset) in held:
            continue  # a fold of one directory: compared with the directories
        counted = [n for _a, _b, n in inside]
        expected = view.rows(piece)
        if piece.whole and expected and not inside:
            findings.append(
                view.finding(
                    f"folded range [{piece.from_offset}, {piece.until_offset}) ({expected} rows) has no directory"
                )
            )
        elif piece.whole and counted and min(counted) >= 0 and sum(counted) != expected:
            findings.append(
                view.finding(
                    f"the {len(counted)} directories of folded range [{piece.from_offset}, {piece.until_offset}) "
                    f"hold {sum(counted)} rows, the ledger says {expected}; not repaired (replay the offsets to "
                    "rewrite them)",
                )
            )
    return findings


def _unpublished_findings(view: _OutputView) -> list[SinkFinding]:
    """Whole committed ranges that wrote rows here and have no directory (folds are judged by `_fold_findings`):
    publishing them from their run's staged output is the safe repair."""
    findings = []
    held = view.held
    for piece in view.pieces:
        if piece.commit.folded and piece in view.folds and (piece.from_offset, piece.until_offset) not in held:
            continue
        if piece.whole and view.rows(piece) and (piece.from_offset, piece.until_offset) not in held:
            findings.append(
                view.finding(
                    f"committed range [{piece.from_offset}, {piece.until_offset}) of run {piece.commit.run_id} "
                    f"({view.rows(piece)} rows) has no directory",
                    PUBLISH,
                    piece,
                )
            )
    return findings
