"""What a Cohort commit writes to a Delta table's log and reads back from it: the marks as application
transactions (`txn` actions, one app id per mark), the batch record as commit metadata, and the commit that
recorded a partition's last batch, found in the table's history."""

from __future__ import annotations

from typing import Any

from deltalake import Transaction
from deltalake.transaction import CommitProperties

from cohort.common.types import TopicPartition
from cohort.pipelines.tables.store import BatchRecord, TableCommit, mark_key

__all__ = ["BATCH_KEY", "GROUP_KEY", "commit_properties", "find_batch", "generation_key", "reach_key"]

BATCH_KEY = "cohort.batch"
GROUP_KEY = "cohort.group"
_GENERATION_SUFFIX = "/generation"


def generation_key(group: str, tp: TopicPartition) -> str:
    """The app id of a partition's generation mark (its head's app id plus `/generation`)."""
    return mark_key(group, tp) + _GENERATION_SUFFIX


def reach_key(group: str, tp: TopicPartition) -> str:
    """The app id of a partition's reach mark (its head's app id plus `/reach`)."""
    return mark_key(group, tp) + "/reach"


def commit_properties(change: TableCommit) -> CommitProperties:
    """The commit's txns (the new marks, one per app id) and its metadata (the batch record)."""
    group = change.owner.group
    versions: dict[str, int] = {}
    for tp, mark in change.marks().items():
        if mark.head is not None:
            versions.setdefault(mark_key(group, tp), mark.head)
        if mark.generation is not None:
            versions.setdefault(generation_key(group, tp), mark.generation)
        if mark.reach is not None:
            versions.setdefault(reach_key(group, tp), mark.reach)
    metadata: dict[str, Any] = {GROUP_KEY: group}
    if change.batch is not None:
        metadata[BATCH_KEY] = {"group": group, **change.batch.to_json()}
    return CommitProperties(
        custom_metadata=metadata,
        app_transactions=[Transaction(app_id, version) for app_id, version in versions.items()],
    )


def find_batch(history: list[dict[str, Any]], group: str, tp: TopicPartition, head: int) -> BatchRecord | None:
    """The newest record in `history` (newest first) by `group` whose last range of `tp` ends at `head`."""
    for commit in history:
        raw = commit.get(BATCH_KEY)
        if not isinstance(raw, dict) or raw.get("group") != group:
            continue
        record = BatchRecord.from_json(raw)
        ranges = record.for_partition(tp) if record is not None else ()
        if ranges and ranges[-1].until_offset == head:
            return record
    return None
