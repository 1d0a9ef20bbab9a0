"""Cohort's marks as Iceberg table properties (`<mark key>/head`, `/generation`, `/reach`, and `/last`: the batch
that last moved the head): read, written, and guarded by a custom table requirement (`AssertCohortMarks`) that
makes the compare-and-set and the catalog's pointer swap one atomic step (cohort.pipelines.tables.iceberg.store)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Literal

from pydantic import Field
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import ValidatableTableRequirement

from cohort.common.types import TopicPartition
from cohort.pipelines.tables.store import BatchRecord, PartitionMark, TableCommit, mark_key

__all__ = [
    "AssertCohortMarks",
    "compact_json",
    "expected_properties",
    "last_batch_of",
    "new_properties",
    "read_mark",
]

_MARKS = ("head", "generation", "reach")  # PartitionMark's fields, each a property `<mark key>/<field>`
_LAST = "/last"


class AssertCohortMarks(ValidatableTableRequirement):
    """The table's mark properties still hold what the batch read (None: the key is absent). SqlCatalog validates it
    against the freshly loaded metadata inside `commit_table`, and pyiceberg's retries keep it."""

    type: Literal["assert-cohort-marks"] = Field(default="assert-cohort-marks")
    properties: dict[str, str | None] = Field(default_factory=dict)

    def validate(self, base_metadata: TableMetadata | None) -> None:  # type: ignore[override]  # as pyiceberg's
        if base_metadata is None:
            raise CommitFailedException("cohort: the table no longer exists")
        for key, expected in self.properties.items():
            found = base_metadata.properties.get(key)
            if found != expected:
                raise CommitFailedException(f"cohort: table property {key} is {found!r}, expected {expected!r}")


def read_mark(properties: Mapping[str, str], key: str) -> PartitionMark:
    """The mark of the partition whose mark key is `key`, from the table's properties (None where absent)."""
    return PartitionMark(*(_number(properties, f"{key}/{name}") for name in _MARKS))


def _number(properties: Mapping[str, str], key: str) -> int | None:
    """A mark property's decimal value; a property that is not one is refused (the table was tampered with)."""
    value = properties.get(key)
    if value is None:
        return None
    if not (value.isascii() and value.isdigit()):
        raise ValueError(f"table property {key} is {value!r}, not an offset or generation")
    return int(value)


def last_batch_of(properties: Mapping[str, str], key: str, tp: TopicPartition, head: int) -> BatchRecord | None:
    """The batch record kept for `tp`, if the range it recorded last for `tp` ends at `head`."""
    try:
        record = BatchRecord.from_json(json.loads(properties.get(key + _LAST, "null")))
    except ValueError:
        return None
    ranges = () if record is None else record.for_partition(tp)
    return record if ranges and ranges[-1].until_offset == head else None


def expected_properties(change: TableCommit) -> dict[str, str | None]:
    """The mark properties the commit expects the table to hold (None: absent), for `AssertCohortMarks`."""
    expected: dict[str, str | None] = {}
    for tp, mark in change.expected.items():
        key = mark_key(change.owner.group, tp)
        for name in _MARKS:
            value = getattr(mark, name)
            expected[f"{key}/{name}"] = None if value is None else str(value)
    return expected


def new_properties(change: TableCommit) -> dict[str, str]:
    """The marks the commit leaves, and the record of the batch for each partition whose head it moves."""
    properties: dict[str, str] = {}
    for tp, mark in change.marks().items():
        key = mark_key(change.owner.group, tp)
        for name in _MARKS:
            value = getattr(mark, name)
            if value is not None:
                properties[f"{key}/{name}"] = str(value)
    if change.batch is not None:
        for tp in change.heads:
            record = BatchRecord(change.batch.run_id, change.batch.for_partition(tp))
            properties[mark_key(change.owner.group, tp) + _LAST] = compact_json(record.to_json())
    return properties


def compact_json(value: object) -> str:
    """`value` as JSON without spaces (table properties and snapshot summaries are kept in the metadata)."""
    return json.dumps(value, separators=(",", ":"))
