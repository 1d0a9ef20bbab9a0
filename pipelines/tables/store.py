"""What the table sinks (Delta Lake, Apache Iceberg) share: the per-partition marks a table keeps, one table
commit as an immutable record, the data files' names, and the interface each format implements.

A table sink keeps, per (group, topic, partition), two marks inside the table itself:

- the **head**: the `until` offset of the last range a table commit recorded for the partition;
- the **generation**: the group generation of the last member that committed or fenced the partition;
- the **reach**: the highest offset any commit reached (a batch starting below it is a replay).

Every table commit is a compare-and-set on the marks of the partitions it touches: it carries the marks the
batch read when it started (`TableCommit.expected`) and lands only if the table still holds them, writing the
new head and its own generation in the same atomic commit (Delta: application transaction ids, checked by
delta-rs's conflict detection; Iceberg: table properties, checked by a table requirement inside the catalog's
commit). A zombie whose partition was fenced by a newer generation, or a batch that lost a race, is refused
with `TableConflictError` and nothing of it becomes visible.

Data files live under `<table root>/data/topic=<t>/partition=<p>/<from>-<until>-<attempt>/part-*.parquet`: the
path alone says which offset range of which partition a file holds, so the audit, replays and orphan clean-up
need no commit history.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from cohort.common.names import validate_group_name, validate_topic_name
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.tasks.spans import validate_partition

__all__ = [
    "DATA_DIR",
    "BatchRecord",
    "DataFile",
    "NewFile",
    "Owner",
    "PartitionMark",
    "TableCommit",
    "TableConflictError",
    "TableSchemaError",
    "TableStore",
    "compare_and_set",
    "data_dir",
    "mark_key",
    "parse_data_path",
    "removes_gone",
    "swapped",
]

DATA_DIR = "data"
_RANGE_DIR = re.compile(r"(\d+)-(\d+)-([0-9a-z]+)")


class TableConflictError(RuntimeError):
    """The table no longer holds the marks the batch read (a newer generation fenced the partition, or another
    commit moved its head): the commit was refused and nothing of it is visible."""


class TableSchemaError(ValueError):
    """The batch's rows do not fit the table's schema in a way Cohort evolves (only nullable fields are added)."""


@dataclass(frozen=True)
class Owner:
    """Who commits: the group, and the member's generation (None for a standalone ledger, which has none: its
    commits check the heads only)."""

    group: str
    generation: int | None

    def __post_init__(self) -> None:
        validate_group_name(self.group)


@dataclass(frozen=True)
class PartitionMark:
    """A partition's marks in a table (None: never written): the head offset (the `until` of the last range
    committed: it moves back when a replay rewrites earlier offsets), the generation that last wrote it, and the
    reach (the highest `until` ever committed: while a batch starts below it, it re-reads offsets the table
    holds, a replay, and replaces them)."""

    head: int | None = None
    generation: int | None = None
    reach: int | None = None

    def describe(self) -> str:
        """`head 120, generation 7` (the reach only when a replay moved the head back), for messages."""
        head = "no head" if self.head is None else f"head {self.head}"
        generation = "no generation" if self.generation is None else f"generation {self.generation}"
        reach = "" if self.reach == self.head else f", reach {self.reach}"
        return f"{head}, {generation}{reach}"


def mark_key(group: str, tp: TopicPartition) -> str:
    """The table-side key of a partition's marks: `cohort/<group>/<topic>/<partition>` (names checked)."""
    validate_group_name(group)
    validate_topic_name(tp.topic)
    return f"cohort/{group}/{tp.topic}/{validate_partition(tp.topic, tp.partition)}"


def data_dir(tp: TopicPartition, from_offset: int, until_offset: int, attempt: str) -> str:
    """A range's data directory, relative to the table root."""
    validate_topic_name(tp.topic)
    if not attempt.isalnum() or attempt != attempt.lower():
        raise ValueError(f"attempt ids are lower-case alphanumeric, got {attempt!r}")
    if from_offset < 0 or until_offset < from_offset:
        raise ValueError(f"invalid offset range [{from_offset}, {until_offset}) for {tp}")
    partition = validate_partition(tp.topic, tp.partition)
    return f"{DATA_DIR}/topic={tp.topic}/partition={partition}/{from_offset}-{until_offset}-{attempt}"


@dataclass(frozen=True, order=True)
class DataFile:
    """A data file a table references: where it is (relative to the table root), the range its directory names,
    and its row count as the table records it; its byte size and when a commit added it (epoch ms, None when the
    table no longer says) where the store knows them (what compaction decides on)."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    attempt: str
    path: str
    records: int
    size: int = field(default=0, compare=False)
    added_ms: int | None = field(default=None, compare=False)

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def directory(self) -> str:
        return self.path.rsplit("/", 1)[0]


def parse_data_path(path: str, records: int, *, size: int = 0, added_ms: int | None = None) -> DataFile | None:
    """The `DataFile` of a relative path in Cohort's layout, None for any other file (another writer's)."""
    parts = path.split("/")
    if len(parts) != 5 or parts[0] != DATA_DIR:
        return None
    topic, partition, range_dir = parts[1].removeprefix("topic="), parts[2].removeprefix("partition="), parts[3]
    matched = _RANGE_DIR.fullmatch(range_dir)
    if not (parts[1].startswith("topic=") and parts[2].startswith("partition=") and partition.isdigit() and matched):
        return None
    low, high, attempt = matched.groups()
    return DataFile(topic, int(partition), int(low), int(high), attempt, path, records, size, added_ms)


@dataclass(frozen=True)
class NewFile:
    """A Parquet file the batch adds: relative path, byte size, rows, and the Parquet schema it was written with;
    its footer when its writer reported it (a store then records its statistics without reading it again)."""

    path: str
    size: int
    records: int
    schema: pa.Schema = field(compare=False)
    footer: pq.FileMetaData | None = field(default=None, compare=False, repr=False)


def _range(item: Any) -> OffsetRange:
    """One range of a `BatchRecord`'s JSON (see there)."""
    t, p, a, b, n, q, g, *more = item
    f, e = more if more else (0, 0)
    return OffsetRange(
        str(t),
        int(p),
        int(a),
        int(b),
        records=int(n),
        quarantined=int(q),
        gap_reason=g if g is None else str(g),
        filtered=int(f),
        expanded=int(e),
    )


@dataclass(frozen=True)
class BatchRecord:
    """What a table commit records about the batch (commit metadata): its run and the ledger ranges it lands,
    gaps included, so a commit the ledger never saw can be adopted range for range. A range is a list (topic,
    partition, from, until, records, quarantined, gap reason), then its filtered and expanded counts when either
    is not 0 (a record written before they existed has seven items)."""

    run_id: str
    ranges: tuple[OffsetRange, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "ranges": [
                [r.topic, r.partition, r.from_offset, r.until_offset, r.records, r.quarantined, r.gap_reason]
                + ([r.filtered, r.expanded] if r.filtered or r.expanded else [])
                for r in self.ranges
            ],
        }

    @classmethod
    def from_json(cls, data: object) -> BatchRecord | None:
        """The record from commit metadata; None if it is not one (a foreign commit, a damaged value)."""
        try:
            assert isinstance(data, dict)
            ranges = tuple(_range(item) for item in data["ranges"])
            return cls(str(data["run_id"]), ranges)
        except (AssertionError, KeyError, TypeError, ValueError):
            return None

    def for_partition(self, tp: TopicPartition) -> tuple[OffsetRange, ...]:
        return tuple(r for r in self.ranges if r.topic_partition == tp)


@dataclass(frozen=True)
class TableCommit:
    """One atomic table commit.

    `expected`: the marks the batch read, per partition it writes (the compare-and-set); `heads`: the new head
    per partition the batch lands a range for; `fence`: partitions whose generation becomes the owner's without a
    range (a new owner's first move). `adds` and `removes` are data files (replays remove what they re-read).
    `batch` is recorded as commit metadata (None for a fence or a clean-up). `schema` creates the table when it
    does not exist and the commit adds no file (else the first file's schema does). `reaches` sets a
    partition's reach outright (a roll-back moves it back; otherwise it only grows).
    """

    owner: Owner
    expected: Mapping[TopicPartition, PartitionMark]
    heads: Mapping[TopicPartition, int] = field(default_factory=dict)
    adds: tuple[NewFile, ...] = ()
    removes: tuple[DataFile, ...] = ()
    batch: BatchRecord | None = None
    schema: pa.Schema | None = field(default=None, compare=False)
    reaches: Mapping[TopicPartition, int] = field(default_factory=dict)

    def marks(self) -> dict[TopicPartition, PartitionMark]:
        """The marks this commit leaves on each partition it touches."""
        return {
            tp: PartitionMark(
                self.heads.get(tp, mark.head),
                mark.generation if self.owner.generation is None else self.owner.generation,
                self.reaches[tp]
                if tp in self.reaches
                else max((x for x in (mark.reach, mark.head, self.heads.get(tp)) if x is not None), default=None),
            )
            for tp, mark in self.expected.items()
        }

    def landed_in(self, marks: Mapping[TopicPartition, PartitionMark], last_run: str | None) -> bool:
        """Whether a table holding `marks`, whose last commit of these partitions was by run `last_run`, holds
        this commit already (it landed but its answer was lost). A fence or roll-back without a batch record has
        landed when the marks are its own: they move in the same atomic commit as its removals."""
        mine = self.marks()
        if any(marks.get(tp) != mark for tp, mark in mine.items()):
            return False
        if self.batch is None:
            return True
        return bool(self.heads) and last_run == self.batch.run_id


def compare_and_set(
    change: TableCommit,
    current: Mapping[TopicPartition, PartitionMark],
    last_batch: Callable[[TopicPartition, int], BatchRecord | None],
    *,
    where: str = "",
) -> bool:
    """The compare-and-set every table commit starts with, on the marks `current` a table holds for
    `change.expected`: False when they are the expected ones (the commit may go ahead), True when the table holds
    this very commit already (it landed, its answer was lost: `last_batch(tp, head)` names the run that moved a
    head), else TableConflictError naming the first partition whose marks moved (`where`: the table, for it)."""
    moved = sorted(tp for tp, mark in change.expected.items() if current.get(tp) != mark)
    if not moved:
        return False
    last_run = None
    if change.heads:
        first = min(change.heads)
        head = current[first].head if first in current else None
        record = None if head is None else last_batch(first, head)
        last_run = None if record is None else record.run_id
    if change.landed_in(current, last_run):
        return True
    tp = moved[0]
    found = current.get(tp, PartitionMark())
    raise TableConflictError(
        f"{tp}{where}: the table's marks are {found.describe()}; this batch expected "
        f"{change.expected[tp].describe()} (a newer generation fenced the partition, or another batch committed it)"
    )


def swapped(change: TableCommit, live: Collection[str]) -> bool:
    """Whether a table whose latest version holds the files `live` (relative paths) already shows `change`, a
    commit that leaves the marks as they were (a compaction, a replay of a partition's last range): none of its
    removes are live, all of its adds are (their paths name the writing attempt, so no other commit adds them)."""
    if change.marks() != dict(change.expected):
        return False  # the marks tell whether it landed
    return all(r.path not in live for r in change.removes) and all(a.path in live for a in change.adds)


def removes_gone(change: TableCommit, live: Collection[str], where: str) -> None:
    """TableConflictError when a file `change` removes is no longer in the table (`live`): another commit (a
    replay, a compaction) replaced it after the batch read it, and removing it again would keep its rows twice."""
    gone = [r.path for r in change.removes if r.path not in live]
    if gone:
        raise TableConflictError(
            f"{where}: {gone[0]} is no longer in the table (another commit replaced it after this one read it): "
            "nothing was committed"
        )


class TableStore(Protocol):
    """One table (the sink's or the quarantine's) in one format."""

    root: str

    def exists(self) -> bool:
        """Whether the table has been created."""
        ...

    def marks(self, group: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, PartitionMark]:
        """The partitions' marks as the table's latest version holds them."""
        ...

    def files(self, partitions: Sequence[TopicPartition]) -> list[DataFile]:
        """The data files of `partitions` the table's latest version references (Cohort's layout only)."""
        ...

    def all_files(self) -> list[DataFile]:
        """Every data file in Cohort's layout the table's latest version references, sorted."""
        ...

    def foreign_files(self) -> list[str]:
        """The data files the table's latest version references outside Cohort's layout (relative to the root when
        under it): another writer's, or a compaction Cohort did not make (their offsets are unknown to Cohort)."""
        ...

    def last_batch(self, group: str, tp: TopicPartition, head: int) -> BatchRecord | None:
        """The record of the commit that moved `tp`'s head to `head`, None when the table no longer has it."""
        ...

    def commit(self, change: TableCommit) -> None:
        """Apply `change` atomically, or raise TableConflictError (marks changed) / TableSchemaError.
        Creates the table with the added files' schema if it does not exist; adds new nullable fields."""
        ...

    def schema(self) -> pa.Schema | None:
        """The table's current schema, None if it does not exist."""
        ...


def unify_schemas(table: pa.Schema | None, files: Sequence[NewFile]) -> tuple[pa.Schema, list[pa.Field]]:
    """The table's schema after adding `files`, and the fields it gains; TableSchemaError naming a field whose
    type changed or a new field that is not nullable."""
    schema = table
    added: list[pa.Field] = []
    for new in files:
        if schema is None:
            schema = new.schema
            continue
        for f in new.schema:
            index = schema.get_field_index(f.name)
            if index < 0:
                if not f.nullable:
                    raise TableSchemaError(
                        f"the rows gained field {f.name!r} ({f.type}), which is not nullable: a table only gains "
                        "nullable fields (older rows read it as null)"
                    )
                schema = schema.append(f)
                added.append(f)
            elif not _compatible(schema.field(index).type, f.type):
                raise TableSchemaError(
                    f"field {f.name!r} is {f.type} in the batch but {schema.field(index).type} in the table at "
                    f"{new.path.rsplit('/', 1)[0]}: change it with a new table, Cohort adds nullable fields only"
                )
    if schema is None:
        raise TableSchemaError("no schema: the table does not exist and the batch adds no file")
    return schema, added


def _compatible(table: pa.DataType, batch: pa.DataType) -> bool:
    """Whether a batch column of type `batch` lands in a table column of type `table` as it is: the same shape,
    whatever the nullability and the names of list items, string and binary widths (formats differ there)."""
    return _shape(table).equals(_shape(batch))


_WIDE: dict[pa.DataType, pa.DataType] = {
    pa.large_string(): pa.string(),
    pa.string_view(): pa.string(),
    pa.large_binary(): pa.binary(),
    pa.binary_view(): pa.binary(),
}


def _shape(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _shape(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return pa.list_(_shape(t.value_type))
    if pa.types.is_map(t):
        return pa.map_(_shape(t.key_type), _shape(t.item_type))
    return _WIDE.get(t, t)
