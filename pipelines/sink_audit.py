"""The sink audit: one partition's ledger, Kafka's committed offset and the sink's own record, compared.

The ledger is the source of truth. The sink records what it holds in its range directories' names
(`<topic>-<p>-<from>-<until>.parquet`, docs/sink.md), so for each partition the audit replays the ledger's
commits in order (a later range that re-reads offsets, a replay, replaces them, cutting the ranges it overlaps
as publishing does) and expects, in the sink and in the quarantine:

- each committed range still whole to have its directory when it wrote rows there, holding as many rows as the
  ledger says;
- no directory that is not one of those pieces (output no commit accounts for), none beyond the ledger's head,
  and no two directories sharing an offset;
- Kafka's committed offset equal to the ledger's head (the mirror copies it there after each commit).

Decisions are plain values (`audit_sink_partition`); reading the sink and Kafka, and repairing, belong to the
caller. A finding says whether a repair is safe: re-mirroring Kafka when it is behind the ledger, and publishing
a committed range whose directory is missing from the output its run staged. Nothing else is repaired: deleting
or rewriting output, or moving Kafka back, could lose data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cohort.common.types import TopicPartition
from cohort.pipelines.sink import SinkFs, SinkLayout, default_quarantine_root

__all__ = [
    "MIRROR",
    "PUBLISH",
    "REPAIR_HINTS",
    "AuditedRange",
    "LedgerReader",
    "PartitionRecords",
    "Piece",
    "SinkFinding",
    "audit_sink_partition",
    "effective_pieces",
    "output_layouts",
    "read_records",
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
class AuditedRange:
    """One ledger commit of a partition, in ledger order (resets and gaps are left out by the caller or here)."""

    from_offset: int
    until_offset: int
    records: int
    quarantined: int
    run_id: str | None
    gap: bool = False


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


class LedgerReader(Protocol):
    """What the audit reads of the ledger (a `cohort.assignment.coordinator.Coordinator`)."""

    def ledger_history(self, group: str, topic: str, partition: int) -> Sequence[Any]: ...

    def fetch_offsets(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> Mapping[TopicPartition, int | None]: ...


@dataclass(frozen=True)
class PartitionRecords:
    """One partition's ledger commits, committed offset, and range directories (from, until, rows) per output."""

    tp: TopicPartition
    commits: tuple[AuditedRange, ...]
    head: int | None
    outputs: Mapping[str, Sequence[tuple[int, int, int]]]

    def audit(self, kafka_committed: int | None = None, *, compare_kafka: bool = False) -> list[SinkFinding]:
        return audit_sink_partition(
            self.tp, self.commits, self.head, self.outputs, kafka_committed, compare_kafka=compare_kafka
        )


def output_layouts(sink_path: str, quarantine_path: str | None = None) -> dict[str, SinkLayout]:
    """The layouts of the two outputs a batch writes, by the names findings use ("sink", "quarantine")."""
    quarantine = SinkLayout(quarantine_path or default_quarantine_root(sink_path))
    return {"sink": SinkLayout(sink_path), "quarantine": quarantine}


def read_records(
    ledger: LedgerReader,
    group: str,
    tp: TopicPartition,
    layouts: Mapping[str, SinkLayout],
    fs: SinkFs,
    *,
    count_rows: bool = True,
) -> PartitionRecords:
    """The ledger's and the outputs' records of one partition: directory names and, with `count_rows`, their rows
    from the Parquet footers (no data is read; without it rows are not compared: one listing per output)."""
    commits = tuple(
        AuditedRange(e.from_offset, e.until_offset, e.records, e.quarantined, e.run_id, gap=e.gap_reason is not None)
        for e in ledger.ledger_history(group, tp.topic, tp.partition)
        if not e.is_reset
    )
    head = ledger.fetch_offsets(group, [tp])[tp]
    outputs = {
        where: [
            (x, y, fs.parquet_record_count(path) if count_rows else -1)
            for x, y, path in layout.range_dirs(fs, tp.topic, tp.partition)
        ]
        for where, layout in layouts.items()
    }
    return PartitionRecords(tp, commits, head, outputs)


def effective_pieces(commits: Sequence[AuditedRange]) -> list[Piece]:
    """The partition's offsets by the commit whose output holds them: each commit replaces the offsets it re-reads
    (a replay), keeping what lies outside them of the ranges it overlaps. Gaps hold no output."""
    pieces: list[Piece] = []
    for commit in commits:
        lo, hi = commit.from_offset, commit.until_offset
        if lo == hi:
            continue
        kept: list[Piece] = []
        for piece in pieces:
            if piece.until_offset <= lo or hi <= piece.from_offset:
                kept.append(piece)
                continue
            if piece.from_offset < lo:
                kept.append(Piece(piece.from_offset, lo, piece.commit))
            if hi < piece.until_offset:
                kept.append(Piece(hi, piece.until_offset, piece.commit))
        if not commit.gap:
            kept.append(Piece(lo, hi, commit))
        pieces = sorted(kept, key=lambda p: p.from_offset)
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
    """The divergences of one partition.

    Args:
        commits: the ledger's commits of the partition, in ledger order.
        head: the ledger's committed offset (None: nothing committed).
        outputs: per output ("sink", "quarantine"), its range directories as (from, until, rows); rows -1: not
            counted (not compared).
        kafka_committed: Kafka's committed offset of the group (None: none), compared when `compare_kafka`.
    """
    findings: list[SinkFinding] = []
    pieces = effective_pieces(commits)
    for where, dirs in outputs.items():
        findings += _audit_output(tp, where, pieces, head, sorted(dirs))
    if compare_kafka and kafka_committed != head:
        if head is not None and (kafka_committed is None or kafka_committed < head):
            behind = f"Kafka's committed offset {kafka_committed} is behind the ledger's {head}"
            findings.append(SinkFinding(tp, "kafka", behind, MIRROR))
        else:
            findings.append(
                SinkFinding(
                    tp,
                    "kafka",
                    f"Kafka's committed offset {kafka_committed} is ahead of the ledger's {head}: something other than "
                    "Cohort committed for this group id; not repaired (moving Kafka back is an operator's decision: "
                    "cohort reset-offsets)",
                )
            )
    return findings


def _rows(piece: Piece, where: str) -> int:
    return piece.commit.records if where == "sink" else piece.commit.quarantined


def _audit_output(
    tp: TopicPartition, where: str, pieces: Sequence[Piece], head: int | None, dirs: Sequence[tuple[int, int, int]]
) -> list[SinkFinding]:
    findings: list[SinkFinding] = []
    by_offsets = {(p.from_offset, p.until_offset): p for p in pieces}
    reach: tuple[int, int] | None = None  # the directory reaching furthest so far
    for b_from, b_until, _ in dirs:
        if reach is not None and b_from < reach[1]:
            a_from, a_until = reach
            findings.append(
                SinkFinding(
                    tp,
                    where,
                    f"directories [{a_from}, {a_until}) and [{b_from}, {b_until}) share offsets "
                    f"[{b_from}, {min(a_until, b_until)}): readers see them twice; not repaired (say which to keep)",
                )
            )
        if reach is None or b_until > reach[1]:
            reach = (b_from, b_until)
    held: set[tuple[int, int]] = set()
    for from_offset, until_offset, rows in dirs:
        held.add((from_offset, until_offset))
        piece = by_offsets.get((from_offset, until_offset))
        if head is None or until_offset > head:
            findings.append(
                SinkFinding(
                    tp,
                    where,
                    f"directory [{from_offset}, {until_offset}) lies beyond the ledger's committed offset {head}: "
                    "output no commit accounts for; not repaired (it is not deleted: check where it came from)",
                )
            )
        elif piece is None:
            findings.append(
                SinkFinding(
                    tp,
                    where,
                    f"directory [{from_offset}, {until_offset}) matches no committed range: not repaired",
                )
            )
        elif piece.whole and rows >= 0 and rows != _rows(piece, where):
            findings.append(
                SinkFinding(
                    tp,
                    where,
                    f"directory [{from_offset}, {until_offset}) holds {rows} rows, the ledger says "
                    f"{_rows(piece, where)} (run {piece.commit.run_id}); not repaired (replay the offsets to "
                    "rewrite it)",
                )
            )
    for piece in pieces:
        if piece.whole and _rows(piece, where) and (piece.from_offset, piece.until_offset) not in held:
            findings.append(
                SinkFinding(
                    tp,
                    where,
                    f"committed range [{piece.from_offset}, {piece.until_offset}) of run {piece.commit.run_id} "
                    f"({_rows(piece, where)} rows) has no directory",
                    PUBLISH,
                    piece,
                )
            )
    return findings
