"""The Delta Lake table sink (delta-rs, the `deltalake` package: no JVM): `TableStore` on a Delta table.

How Cohort's table contract maps onto Delta:

- **Marks** are application transactions (`txn` actions): app id `cohort/<group>/<topic>/<partition>` holds the
  head (txn version = head offset) and `<that>/generation` the generation. Delta enforces no order on txn versions;
  the compare-and-set below is ours.
- **One batch = one Delta commit** (`create_write_transaction`, mode append): an `add` per Parquet file the
  tasks wrote (relative path, exact size, stats from the file's footer so readers can prune on `kafka.offset`...),
  a `remove` per file a replay replaces, the new marks as txns, and the batch record as commit metadata
  (`cohort.batch`, `cohort.group`), which `last_batch` reads back from the history.
- **Conflicts.** The commit reads the marks from a snapshot, compares them with `TableCommit.expected` and writes
  the app ids it read (each partition's new head and generation). delta-rs rebases a commit over newer ones
  silently unless one of them wrote a txn for one of the commit's own app ids: then it refuses it
  (CommitFailedError). So a racing batch or a fence by a newer generation cannot slip between our check and our
  commit. A refused commit is retried from a fresh snapshot (the marks are read again) up to `max_attempts` times.
  (A mark that stays None, which no txn can hold, is checked on the snapshot only.)
- **Schema.** The first commit that adds a file creates the table with that file's schema (a commit without
  files, with `TableCommit.schema`); new nullable fields are added with `alter.add_columns` (its own commit)
  before the data commit, since delta-rs ignores the schema passed with a write transaction.

delta-rs checks nothing about added files (a missing file or a wrong size commits fine and breaks every later
read), so each file is checked through delta-rs's own object store before the commit; nor about removed ones, so a
commit that removes a file the table no longer holds (a compaction or a replay replaced it after the batch read it)
is refused here. The check cannot be raced: a commit that removes a partition's files writes that partition's marks,
and delta-rs refuses to rebase it over a concurrent commit writing them too, so the check runs again.

The store keeps the table it loaded last and brings it up to date with `update_incremental` (the log entries
since): a fresh load reads the last checkpoint again, most of a commit's CPU once the table has one.

**Retention** (cohort.pipelines.tables.retention): a table this store creates keeps its log `history_s` and removed
files `keep_s` plus a margin (`delta.logRetentionDuration`, `delta.deletedFileRetentionDuration`); after the commit
that takes the table's version past a multiple of `every_commits`, the store vacuums the files removed more than
`keep_s` ago and cleans up the log (cohort.pipelines.tables.maintenance), outside the commit's compare-and-set.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar, cast
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable, Field, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.fs import DeltaStorageHandler
from deltalake.transaction import AddAction, CommitProperties, RemoveAction

from cohort.common.types import TopicPartition
from cohort.pipelines.tables.maintenance import compact_files, run_safely, vacuum_delta
from cohort.pipelines.tables.retention import DEFAULT_RETENTION, TableRetention, delta_configuration, maintenance_due
from cohort.pipelines.tables.store import (
    BatchRecord,
    DataFile,
    NewFile,
    PartitionMark,
    TableCommit,
    TableConflictError,
    compare_and_set,
    mark_key,
    parse_data_path,
    removes_gone,
    swapped,
    unify_schemas,
)

__all__ = ["BATCH_KEY", "GROUP_KEY", "DeltaStoreError", "DeltaTableStore", "generation_key", "parquet_stats"]

BATCH_KEY = "cohort.batch"
GROUP_KEY = "cohort.group"
_GENERATION_SUFFIX = "/generation"
_RELATIVE_PATH = re.compile(r"[A-Za-z0-9._=+-]+(/[A-Za-z0-9._=+-]+)*")
_CONFIGURATION = {"delta.checkpointInterval": "10"}
"""A checkpoint every 10 commits (delta-rs's default is 100): each mark is read by replaying the log since the
last checkpoint, and a batch reads three marks per partition; small frequent batches pay for a long replay."""
_MAX_STRING_STAT = 64  # longer string bounds are left out (Delta itself truncates them) to keep the log small
_RECENT_HISTORY = 100  # commits last_batch reads before it reads the whole history
_T = TypeVar("_T")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FRAME = re.compile(r"(\d+: |at )")  # the lines of a Rust backtrace


class DeltaStoreError(RuntimeError):
    """delta-rs failed on the table (unreachable storage, a damaged log...): the message names the table."""


def generation_key(group: str, tp: TopicPartition) -> str:
    """The app id of a partition's generation mark (its head's app id plus `/generation`)."""
    return mark_key(group, tp) + _GENERATION_SUFFIX


def reach_key(group: str, tp: TopicPartition) -> str:
    """The app id of a partition's reach mark (its head's app id plus `/reach`)."""
    return mark_key(group, tp) + "/reach"


class DeltaTableStore:
    """One Delta table, reached through delta-rs with `storage_options` (local path or any URI it reaches)."""

    root: str

    def __init__(
        self,
        root: str,
        *,
        storage_options: Mapping[str, str] | None = None,
        max_attempts: int = 8,
        retention: TableRetention | None = DEFAULT_RETENTION,
    ):
        """`retention`: how long old versions are kept and how often the store cleans up (None: never)."""
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        stripped = root.rstrip("/")
        self.root = stripped or root
        self._options = dict(storage_options) if storage_options else None
        self._max_attempts = max_attempts
        self._retention = retention
        self._table: DeltaTable | None = None  # the version loaded last, brought up to date by `_load`

    # -- reading -------------------------------------------------------------------------------------------

    def exists(self) -> bool:
        return self._guard("check", lambda: DeltaTable.is_deltatable(self.root, self._options))

    def schema(self) -> pa.Schema | None:
        table = self._load()
        return None if table is None else self._arrow_schema(table)

    def marks(self, group: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, PartitionMark]:
        table = self._load()
        if table is None:
            return {tp: PartitionMark() for tp in partitions}
        return self._marks(table, group, partitions)

    def files(self, partitions: Sequence[TopicPartition]) -> list[DataFile]:
        table = self._load()
        if table is None:
            return []
        wanted = set(partitions)
        return sorted(f for f in self._active(table) if f.tp in wanted)

    def all_files(self) -> list[DataFile]:
        table = self._load()
        return [] if table is None else sorted(self._active(table))

    def foreign_files(self) -> list[str]:
        table = self._load()
        if table is None:
            return []
        actions = pa.table(self._guard("list the files of", lambda: table.get_add_actions(flatten=False)))
        paths = (unquote(str(p)) for p in actions.column("path").to_pylist())
        return sorted(p for p in paths if parse_data_path(p, 0) is None)

    def last_batch(self, group: str, tp: TopicPartition, head: int) -> BatchRecord | None:
        """The newest commit whose batch record (by `group`) ends `tp`'s ranges at `head`; commits the log no
        longer has (log clean-up) and damaged records are not found."""
        table = self._load()
        if table is None:
            return None
        recent = self._guard("read the history of", lambda: table.history(_RECENT_HISTORY))
        found = _find_batch(recent, group, tp, head)
        if found is None and len(recent) >= _RECENT_HISTORY:
            found = _find_batch(self._guard("read the history of", table.history), group, tp, head)
        return found

    # -- committing ----------------------------------------------------------------------------------------

    def commit(self, change: TableCommit) -> None:
        """Land `change` in one Delta commit if the table still holds `change.expected` (see the module doc);
        TableConflictError if it does not, TableSchemaError for rows that do not fit, ValueError or
        FileNotFoundError for a data file that is not what the batch says."""
        first_schema = unify_schemas(None, change.adds)[0] if change.adds else change.schema
        if first_schema is None and self._load() is None:
            return  # nothing to create the table with: the first commit that adds a file (or names a schema) does
        adds = self._add_actions(change.adds)  # each file checked before anything is written
        properties = _commit_properties(change)
        refusals, evolved, last_error = 0, False, ""
        while refusals < self._max_attempts:
            table = self._load()
            if table is None:
                if first_schema is None:  # dropped since the check above: nothing to create it with
                    return
                table = self._create(first_schema)
                if table is None:
                    refusals, last_error = refusals + 1, "another writer was creating the table"
                    continue
            if self._already_landed(table, change):
                return
            if change.removes:
                live = {f.path for f in self._active(table)}
                if swapped(change, live):
                    return  # a commit that leaves the marks as they were, already applied (its answer was lost)
                removes_gone(change, live, f"Delta table {self.root}")
            _, gained = unify_schemas(self._arrow_schema(table), change.adds)
            if gained and evolved:
                raise DeltaStoreError(f"Delta table {self.root} did not take the new fields {[f.name for f in gained]}")
            try:
                if gained:  # its own commit; then the marks are read again, from the evolved table
                    table.alter.add_columns([Field.from_arrow(f) for f in gained])
                    evolved = True
                    continue
                actions: list[AddAction | RemoveAction] = [*adds, *self._remove_actions(table, change.removes)]
                table.create_write_transaction(
                    actions, mode="append", schema=table.schema(), commit_properties=properties
                )
                self._maintain(table.version(), change)
                return
            except CommitFailedError as error:
                refusals, last_error = refusals + 1, _short(error)
            except (DeltaError, OSError) as error:
                raise DeltaStoreError(f"cannot commit to Delta table {self.root}: {_short(error)}") from error
        raise TableConflictError(
            f"Delta table {self.root}: concurrent commits refused this one {refusals} times (last: {last_error})"
        )

    def _maintain(self, based_on: int, change: TableCommit) -> None:
        """The clean-up after a commit based on version `based_on` (its own version is at least the next one),
        when that version passes a multiple of `every_commits`: the vacuum and log clean-up, then (after a batch's
        commit) the compaction of small files of the batch's group; a failure is logged, never raised."""
        retention = self._retention
        if retention is None or not maintenance_due(based_on, based_on + 1, retention.every_commits):
            return
        table = self._load()
        if table is not None:
            run_safely(self.root, lambda: vacuum_delta(table, retention))
        if change.batch is not None and retention.compact_files:
            run_safely(self.root, lambda: compact_files(self, change.owner.group, retention))

    # -- helpers -------------------------------------------------------------------------------------------

    def _load(self) -> DeltaTable | None:
        """The table's latest version, None if there is no table. The store keeps the table it loaded last and
        brings it up to date with the versions committed since (`update_incremental` reads only their log
        entries): a full load reads the last checkpoint again, most of the CPU of a commit once the table has one."""
        cached = self._table
        if cached is not None:
            try:
                cached.update_incremental()
                return cached
            except (DeltaError, OSError):  # the log moved under it (cleaned up, replaced): load it afresh
                self._table = None
        try:
            self._table = DeltaTable(self.root, storage_options=self._options)
            return self._table
        except TableNotFoundError:
            return None
        except (DeltaError, OSError) as error:  # delta-rs raises OSError when the storage cannot be reached
            raise DeltaStoreError(f"cannot open Delta table {self.root}: {_short(error)}") from error

    def _create(self, schema: pa.Schema) -> DeltaTable | None:
        """Create the table (or find it created meanwhile); None when a concurrent creation got in the way."""
        try:
            configuration = dict(_CONFIGURATION)
            if self._retention is not None:
                configuration.update(delta_configuration(self._retention))
            return DeltaTable.create(
                self.root, schema=schema, mode="ignore", storage_options=self._options, configuration=configuration
            )
        except CommitFailedError:
            return None
        except (DeltaError, OSError) as error:
            if self._load() is not None:  # a concurrent writer created it between our check and our commit
                return None
            raise DeltaStoreError(f"cannot create Delta table {self.root}: {_short(error)}") from error

    def _guard(self, doing: str, call: Callable[[], _T]) -> _T:
        """`call()`, its DeltaError turned into a short DeltaStoreError naming the table."""
        try:
            return call()
        except (DeltaError, OSError) as error:
            raise DeltaStoreError(f"cannot {doing} Delta table {self.root}: {_short(error)}") from error

    def _arrow_schema(self, table: DeltaTable) -> pa.Schema:
        exported = self._guard("read the schema of", lambda: table.schema().to_arrow())
        return pa.schema(cast(Any, exported))  # arro3 -> pyarrow through the Arrow C interface

    def _marks(
        self, table: DeltaTable, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, PartitionMark]:
        def read() -> dict[TopicPartition, PartitionMark]:
            return {
                tp: PartitionMark(
                    table.transaction_version(mark_key(group, tp)),
                    table.transaction_version(generation_key(group, tp)),
                    table.transaction_version(reach_key(group, tp)),
                )
                for tp in partitions
            }

        return self._guard("read the marks of", read)

    def _active(self, table: DeltaTable) -> list[DataFile]:
        """The table's files in Cohort's layout (a file without a row count in its stats counts 0 rows), with their
        sizes and the time their `add` says."""
        actions = pa.table(self._guard("list the files of", lambda: table.get_add_actions(flatten=True)))
        columns = ("path", "num_records", "size_bytes", "modification_time")
        paths, counts, sizes, times = (actions.column(c).to_pylist() for c in columns)
        parsed = (
            parse_data_path(str(path), int(count or 0), size=int(size or 0), added_ms=_epoch_ms(at))
            for path, count, size, at in zip(paths, counts, sizes, times, strict=True)
        )
        return [f for f in parsed if f is not None]

    def _already_landed(self, table: DeltaTable, change: TableCommit) -> bool:
        """The compare-and-set on the marks (`compare_and_set`) against the loaded version."""
        group = change.owner.group
        current = self._marks(table, group, list(change.expected))
        return compare_and_set(change, current, lambda tp, head: self.last_batch(group, tp, head))

    def _remove_actions(self, table: DeltaTable, removes: Sequence[DataFile]) -> list[RemoveAction]:
        if not removes:
            return []
        actions = pa.table(self._guard("list the files of", lambda: table.get_add_actions(flatten=False)))
        sizes = dict(zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist(), strict=True))
        now = _now_ms()
        return [RemoveAction(f.path, data_change=True, deletion_timestamp=now, size=sizes.get(f.path)) for f in removes]

    def _add_actions(self, files: Sequence[NewFile]) -> list[AddAction]:
        if not files:
            return []
        handler = self._guard("reach", lambda: DeltaStorageHandler(self.root, self._options))
        filesystem = pafs.PyFileSystem(handler)  # delta-rs's own object store: reaches what the table reaches
        return [self._add_action(filesystem, new) for new in files]

    def _add_action(self, filesystem: pafs.FileSystem, new: NewFile) -> AddAction:
        """The `add` of a file the batch wrote, after checking it is where and what the batch says."""
        if not _RELATIVE_PATH.fullmatch(new.path) or any(part in (".", "..") for part in new.path.split("/")):
            raise ValueError(
                f"data file {new.path!r} of Delta table {self.root}: paths are relative to the table root and made "
                "of letters, digits and . _ = + - (no '..', no scheme, no leading '/')"
            )
        try:
            info = filesystem.get_file_info(new.path)
        except (OSError, DeltaError) as error:
            raise DeltaStoreError(f"cannot reach {self.root}/{new.path}: {_short(error)}") from error
        if info.type != pafs.FileType.File:
            raise FileNotFoundError(f"data file {self.root}/{new.path} does not exist: nothing was committed")
        if info.size != new.size:
            raise ValueError(
                f"data file {self.root}/{new.path} has {info.size} bytes, the batch says {new.size}: "
                "nothing was committed (a partial or replaced file?)"
            )
        try:
            metadata = pq.read_metadata(new.path, filesystem=filesystem)
        except (OSError, DeltaError, pa.ArrowException) as error:
            raise ValueError(
                f"data file {self.root}/{new.path} is not a readable Parquet file: {_short(error)}"
            ) from error
        if metadata.num_rows != new.records:
            raise ValueError(
                f"data file {self.root}/{new.path} holds {metadata.num_rows} rows, the batch says {new.records}: "
                "nothing was committed"
            )
        return AddAction(
            path=new.path,
            size=new.size,
            partition_values={},
            modification_time=_now_ms(),
            data_change=True,
            stats=parquet_stats(metadata),
        )


def _commit_properties(change: TableCommit) -> CommitProperties:
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


def _find_batch(history: list[dict[str, Any]], group: str, tp: TopicPartition, head: int) -> BatchRecord | None:
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


def _short(error: BaseException) -> str:
    """An error in one line of at most 240 characters: delta-rs messages are nested cause chains over many
    lines, with terminal colours and sometimes a backtrace; the first line says what failed, the last one why."""
    lines = [_ANSI.sub("", line).strip().lstrip("↳").strip() for line in str(error).splitlines()]
    lines = [line for line in lines if line and not _FRAME.match(line)]
    if not lines:
        return type(error).__name__
    text = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return text if len(text) <= 240 else text[:237] + "..."


def _now_ms() -> int:
    return int(time.time() * 1000)


def _epoch_ms(value: Any) -> int | None:
    """An `add` action's modification time (a datetime, or epoch ms) in epoch ms."""
    if isinstance(value, dt.datetime):
        return int((value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp() * 1000)
    return int(value) if isinstance(value, int) else None


# -- statistics ----------------------------------------------------------------------------------------------


def parquet_stats(metadata: pq.FileMetaData) -> str:
    """Delta's `stats` JSON for a Parquet file, from its footer alone: numRecords, and minValues / maxValues /
    nullCount per primitive leaf column (struct fields nest: `{"kafka": {"offset": 5}}`). Columns inside lists
    and maps get none; a bound left out only costs pruning, a wrong one would hide rows, so anything not exactly
    representable (binary, decimal, bool, unsigned, nanosecond or zone-less timestamps, long strings) is left out."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, Any] = {}
    leaves = [leaf for f in metadata.schema.to_arrow_schema() for leaf in _leaves(f.type, (f.name,))]
    if len(leaves) == metadata.num_columns:  # else an unexpected layout: numRecords only
        for index, leaf in enumerate(leaves):
            if leaf is not None:
                _column_stats(metadata, index, leaf[0], leaf[1], mins, maxs, nulls)
    return json.dumps(
        {"numRecords": metadata.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls},
        separators=(",", ":"),
    )


def _leaves(arrow_type: pa.DataType, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], pa.DataType] | None]:
    """Per Parquet leaf column under `path`, in file order: its path and type, or None when it gets no stats."""
    if pa.types.is_struct(arrow_type):
        for i in range(arrow_type.num_fields):
            child = arrow_type.field(i)
            yield from _leaves(child.type, (*path, child.name))
    elif pa.types.is_dictionary(arrow_type):
        yield from _leaves(arrow_type.value_type, path)
    elif pa.types.is_map(arrow_type):
        yield from (None for _ in range(_leaf_count(arrow_type.key_type) + _leaf_count(arrow_type.item_type)))
    elif pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        yield from (None for _ in range(_leaf_count(arrow_type.value_type)))
    else:
        yield path, arrow_type


def _leaf_count(arrow_type: pa.DataType) -> int:
    return sum(1 for _ in _leaves(arrow_type, ("",)))


def _column_stats(
    metadata: pq.FileMetaData,
    index: int,
    path: tuple[str, ...],
    arrow_type: pa.DataType,
    mins: dict[str, Any],
    maxs: dict[str, Any],
    nulls: dict[str, Any],
) -> None:
    """Fold column `index`'s row-group statistics into the three maps; leave out what is unknown."""
    null_count = 0
    low: Any = None
    high: Any = None
    bounded = True
    for group in range(metadata.num_row_groups):
        chunk = metadata.row_group(group)
        stats = chunk.column(index).statistics
        if stats is None or stats.null_count is None:
            return  # nothing known about this column
        null_count += stats.null_count
        if stats.has_min_max:
            low = stats.min if low is None else min(low, stats.min)
            high = stats.max if high is None else max(high, stats.max)
        elif stats.null_count != chunk.num_rows:  # values without bounds: the file's bounds are unknown
            bounded = False
    _nest(nulls, path, null_count)
    if bounded and low is not None:
        low_json, high_json = _bound(low, arrow_type), _bound(high, arrow_type)
        if low_json is not None and high_json is not None:
            _nest(mins, path, low_json)
            _nest(maxs, path, high_json)


def _bound(value: Any, arrow_type: pa.DataType) -> Any:
    """A statistics bound as Delta's stats JSON writes it, None when the type gets no bounds."""
    if pa.types.is_signed_integer(arrow_type):
        return int(value)
    if pa.types.is_float32(arrow_type) or pa.types.is_float64(arrow_type):
        number = float(value)
        return number if number == number and abs(number) != float("inf") else None
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return value if isinstance(value, str) and len(value) <= _MAX_STRING_STAT else None
    if pa.types.is_date32(arrow_type) and isinstance(value, dt.date):
        return value.isoformat()
    if (
        pa.types.is_timestamp(arrow_type)
        and arrow_type.tz is not None
        and arrow_type.unit in ("s", "ms", "us")
        and isinstance(value, dt.datetime)
        and value.tzinfo is not None
    ):
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return None


def _nest(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        target = target.setdefault(name, {})
    target[path[-1]] = value
