"""The sink check after a batch: only what the ledger committed since the partition's mark.

Comparing a partition's whole ledger with its whole folder after every batch costs what the history costs (a
listing and a ledger read of every range ever committed). The check after a batch instead keeps, per
partition and sink root, a mark (a `TrailMark` whose trail is the sink: every ledger entry up to `ledger_id` was
found in the sink, which ends at offset `head`), reads the ledger entries after it and lists only the range
directories they name.
The mark advances only over a reading with no finding, so a problem is seen again at every check until fixed.

What such a reading cannot see is anything that happened to older ranges (a directory copied, removed or
edited after its check): the full comparison (`cohort audit`, a check run tagged `cohort/audit: full`) lists
and compares everything, and a reading falls back to it whenever the new entries are not plain forward
commits (a reset, a ledger fold, a range starting elsewhere than the mark's head: a replay).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from cohort.assignment.ledger.trail import TrailMark
from cohort.common.types import TopicPartition
from cohort.pipelines.sink.audit import LedgerReader, PartitionRecords, range_dirs_listed
from cohort.pipelines.sink.audit_ledger import fold_ledger, ledger_entries
from cohort.pipelines.sink.layout import SinkLayout, range_dir_name
from cohort.pipelines.sink.tree import OutputTree, strays

__all__ = ["mark_after", "read_records_since", "sink_trail"]

SINK_TRAIL_PREFIX = "sink:"


def sink_trail(root: str) -> str:
    """The name the sink check's marks are kept under for the sink at `root`: one per sink path, so a group
    whose sink moved is compared afresh."""
    return SINK_TRAIL_PREFIX + hashlib.sha256(root.rstrip("/").encode()).hexdigest()[:40]


def mark_after(records: PartitionRecords) -> TrailMark | None:
    """The mark a reading with no finding leaves (None when its ledger has no entry ids)."""
    if records.through_id is None:
        return None
    return TrailMark(records.tp.topic, records.tp.partition, ledger_id=records.through_id, head=records.head)


def read_records_since(
    ledger: LedgerReader, group: str, tp: TopicPartition, layouts: Mapping[str, SinkLayout], mark: TrailMark
) -> PartitionRecords | None:
    """The partition's records since `mark`: the ledger entries after it and the range directories they name,
    in each output (rows not counted). None when the whole partition must be read instead: no mark yet, or new
    entries that are not plain forward commits from the mark's head."""
    if mark.ledger_id == 0 or mark.head is None:
        return None
    entries = list(ledger_entries(ledger, group, tp, after_id=mark.ledger_id))
    position = mark.head
    for entry in entries:
        if entry.is_reset or getattr(entry, "is_fold", False) or entry.from_offset != position:
            return None
        position = entry.until_offset
    names = [
        range_dir_name(tp.topic, tp.partition, e.from_offset, e.until_offset)
        for e in entries
        if e.gap_reason is None and e.until_offset > e.from_offset
    ]
    listed = {where: OutputTree(layout.root).ranges(tp, names) if names else [] for where, layout in layouts.items()}
    fold = fold_ledger(tp, entries)
    outputs = {where: [(x, y, -1) for x, y, _name in range_dirs_listed(tp, found)] for where, found in listed.items()}
    found_strays = {where: strays(found, [tp]) for where, found in listed.items()}
    roots = {where: layout.root for where, layout in layouts.items()}
    through = entries[-1].entry_id if entries else mark.ledger_id
    head = fold.head if entries else mark.head
    return PartitionRecords(tp, fold.commits, head, outputs, found_strays, roots, None, through)
