"""Rows per ledger piece of a table's data directories, for the table audit (cohort.pipelines.tables.audit).

A table's data directory normally holds one committed range; one that holds several (a compaction merged them, or a
replay left part of one) is compared with the ledger piece by piece, its rows counted from the ranges a merged
file's footer records, else from its rows' `kafka.offset`.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cohort.pipelines.sink.audit import Piece
from cohort.pipelines.tables.compaction import source_ranges
from cohort.pipelines.tables.store import DataFile
from cohort.pipelines.tasks.writer import arrow_filesystem

__all__ = ["rows_by_piece"]


def rows_by_piece(root: str, files: Sequence[DataFile], pieces: Sequence[Piece]) -> list[tuple[int, int, int]]:
    """(from, until, rows) per data directory, as the audit compares them with the ledger's pieces: a directory
    holding several committed ranges (a compaction's, or what a replay left of one) stands for one entry per piece
    it holds, with the rows counted from the ranges a merged file's footer records, else by their `kafka.offset`
    (its files' offsets column is read); one holding rows no piece accounts for is left whole (the audit names
    it)."""
    by_dir: dict[tuple[int, int, str], list[DataFile]] = {}
    for f in files:
        by_dir.setdefault((f.from_offset, f.until_offset, f.attempt), []).append(f)
    found: list[tuple[int, int, int]] = []
    for (a, b, _), held in by_dir.items():
        inside = [p for p in pieces if p.from_offset < b and a < p.until_offset]
        if len(inside) < 2:
            found.append((a, b, sum(f.records for f in held)))
            continue
        counts = _count_by_piece(root, held, inside)
        if counts is None:
            found.append((a, b, sum(f.records for f in held)))
        else:
            found += [(max(a, p.from_offset), min(b, p.until_offset), n) for p, n in zip(inside, counts, strict=True)]
    return sorted(found)


def _count_by_piece(root: str, files: Sequence[DataFile], pieces: Sequence[Piece]) -> list[int] | None:
    """Rows of `files` per piece (sorted, disjoint) by their `kafka.offset`; None when some row lies in no piece or
    the files cannot be read (the directory is then audited whole)."""
    resolved = arrow_filesystem(root)
    if resolved is None:
        return None
    filesystem, base = resolved
    starts = [p.from_offset for p in pieces]
    counts = [0] * len(pieces)
    for f in files:
        footer = _footer_counts(filesystem, f"{base}/{f.path}", f.records, pieces, starts)
        if footer is not None:
            counts = [n + m for n, m in zip(counts, footer, strict=True)]
            continue
        try:
            kafka = pq.read_table(f"{base}/{f.path}", columns=["kafka"], filesystem=filesystem).column("kafka")
        except (OSError, KeyError, pa.ArrowException):
            return None
        for offset in pc.struct_field(kafka, "offset").to_pylist():
            at = bisect_right(starts, offset) - 1 if offset is not None else -1
            if at < 0 or offset >= pieces[at].until_offset:
                return None
            counts[at] += 1
    return counts


def _footer_counts(
    filesystem: Any, path: str, records: int, pieces: Sequence[Piece], starts: Sequence[int]
) -> list[int] | None:
    """Rows per piece from a merged file's footer (the ranges compaction recorded there), when they add up to the
    rows the table records and each lies inside one piece; else None (the rows' offsets are read)."""
    try:
        ranges = source_ranges(pq.read_metadata(path, filesystem=filesystem).metadata)
    except (OSError, pa.ArrowException):
        return None
    if ranges is None or sum(n for _, _, n in ranges) != records:
        return None
    counts = [0] * len(pieces)
    for a, b, n in ranges:
        at = bisect_right(starts, a) - 1
        if at < 0 or b > pieces[at].until_offset:
            return None
        counts[at] += n
    return counts
