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
The marks are read from all the version's txns at once (cohort.pipelines.tables.delta.txns: the checkpoint's
`txn` column and the entries since, once per table version and table id), not app id by app id: delta-rs replays
the log for each, and a batch reads three marks per partition at each of its steps.

**Retention** (cohort.pipelines.tables.retention): a table this store creates keeps its log `history_s` and removed
files `keep_s` plus a margin (`delta.logRetentionDuration`, `delta.deletedFileRetentionDuration`); after the commit
that takes the table's version past a multiple of `every_commits`, the store vacuums the files removed more than
`keep_s` ago and cleans up the log (cohort.pipelines.tables.maintenance), outside the commit's compare-and-set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs
from deltalake import DeltaTable, Field
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.fs import DeltaStorageHandler
from deltalake.transaction import AddAction, RemoveAction

from cohort.common.types import TopicPartition
from cohort.pipelines.storage.parallel import in_parallel
from cohort.pipelines.tables.delta.errors import DeltaStoreError, short_error
from cohort.pipelines.tables.delta.files import active_files, checked_add_action, remove_actions
from cohort.pipelines.tables.delta.log import (
    BATCH_KEY,
    GROUP_KEY,
    commit_properties,
    find_batch,
    generation_key,
    reach_key,
)
from cohort.pipelines.tables.delta.stats import parquet_stats
from cohort.pipelines.tables.delta.txns import LogTxns, read_entry, read_transactions
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

__all__ = [
    "BATCH_KEY",
    "GROUP_KEY",
    "DeltaStoreError",
    "DeltaTableStore",
    "generation_key",
    "parquet_stats",
]

_CONFIGURATION = {"delta.checkpointInterval": "10"}
"""A checkpoint every 10 commits (delta-rs's default is 100): each mark is read by replaying the log since the
last checkpoint, and a batch reads three marks per partition; small frequent batches pay for a long replay."""
_RECENT_HISTORY = 100  # commits last_batch reads before it reads the whole history
_T = TypeVar("_T")


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
        self._txns: tuple[tuple[str, int], LogTxns] | None = None  # (table id, version) and its txns, read last
        self._handler: DeltaStorageHandler | None = None

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
        found = find_batch(recent, group, tp, head)
        if found is None and len(recent) >= _RECENT_HISTORY:
            found = find_batch(self._guard("read the history of", table.history), group, tp, head)
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
        properties = commit_properties(change)
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
                refusals, last_error = refusals + 1, short_error(error)
            except (DeltaError, OSError) as error:
                raise DeltaStoreError(f"cannot commit to Delta table {self.root}: {short_error(error)}") from error
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
                if not self._recreated(cached):
                    return cached
            except (DeltaError, OSError):  # the log moved under it (cleaned up, replaced): load it afresh
                pass
            self._table = None
        try:
            self._table = DeltaTable(self.root, storage_options=self._options)
            return self._table
        except TableNotFoundError:
            return None
        except (DeltaError, OSError) as error:  # delta-rs raises OSError when the storage cannot be reached
            raise DeltaStoreError(f"cannot open Delta table {self.root}: {short_error(error)}") from error

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
            raise DeltaStoreError(f"cannot create Delta table {self.root}: {short_error(error)}") from error

    def _guard(self, doing: str, call: Callable[[], _T]) -> _T:
        """`call()`, its DeltaError turned into a short DeltaStoreError naming the table."""
        try:
            return call()
        except (DeltaError, OSError) as error:
            raise DeltaStoreError(f"cannot {doing} Delta table {self.root}: {short_error(error)}") from error

    def _arrow_schema(self, table: DeltaTable) -> pa.Schema:
        exported = self._guard("read the schema of", lambda: table.schema().to_arrow())
        return pa.schema(cast(Any, exported))  # arro3 -> pyarrow through the Arrow C interface

    def _marks(
        self, table: DeltaTable, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, PartitionMark]:
        """The marks of `partitions` at the loaded version: from its txns read in one pass (`_transactions`), or
        app id by app id from delta-rs when that reader does not apply."""
        txns = self._transactions(table)
        lookup: Callable[[str], int | None] = txns.get if txns is not None else table.transaction_version

        def read() -> dict[TopicPartition, PartitionMark]:
            return {
                tp: PartitionMark(
                    lookup(mark_key(group, tp)), lookup(generation_key(group, tp)), lookup(reach_key(group, tp))
                )
                for tp in partitions
            }

        return self._guard("read the marks of", read)

    def _transactions(self, table: DeltaTable) -> dict[str, int] | None:
        """Every txn of the loaded version (None: ask delta-rs), read once per table version: kept under the
        table's id and version, so any new version (a commit, a concurrent writer's) is read afresh, and a log that
        is another table's (re-created at the same root under the loaded one) is not used. The compare-and-set is
        unchanged: the commit is based on this version, and delta-rs refuses it if a newer one wrote one of its
        app ids."""
        metadata = self._guard("read the metadata of", table.metadata)
        key = (str(metadata.id), table.version())  # (a UUID string; the stubs say int)
        if self._txns is not None and self._txns[0] == key:
            return self._txns[1].txns
        log = self._guard("read the marks of", lambda: read_transactions(self._fs(), key[1], metadata.configuration))
        if log is None or log.table_id not in (None, key[0]):
            return None
        self._txns = (key, log)
        return log.txns

    def _recreated(self, table: DeltaTable) -> bool:
        """Whether the log entry of the loaded version is no longer the one its txns were read from: the table was
        re-created at the same root (and reached the same version) under the loaded one. One small read; False when
        this version's txns were not read (`_transactions` then checks the table's id)."""
        if self._txns is None or self._txns[0][1] != table.version():
            return False
        return read_entry(self._fs(), table.version()) != self._txns[1].entry

    def _fs(self) -> pafs.FileSystem:
        """The table's root through delta-rs's own object store (reaches what the table reaches)."""
        if self._handler is None:
            self._handler = self._guard("reach", lambda: DeltaStorageHandler(self.root, self._options))
        return pafs.PyFileSystem(self._handler)

    def _active(self, table: DeltaTable) -> list[DataFile]:
        """The table's files in Cohort's layout, with their row counts, sizes and the time their `add` says."""
        return active_files(pa.table(self._guard("list the files of", lambda: table.get_add_actions(flatten=True))))

    def _already_landed(self, table: DeltaTable, change: TableCommit) -> bool:
        """The compare-and-set on the marks (`compare_and_set`) against the loaded version."""
        group = change.owner.group
        current = self._marks(table, group, list(change.expected))
        return compare_and_set(change, current, lambda tp, head: self.last_batch(group, tp, head))

    def _remove_actions(self, table: DeltaTable, removes: Sequence[DataFile]) -> list[RemoveAction]:
        """The `remove` of each file a commit replaces."""
        if not removes:
            return []
        actions = pa.table(self._guard("list the files of", lambda: table.get_add_actions(flatten=False)))
        return remove_actions(actions, removes)

    def _add_actions(self, files: Sequence[NewFile]) -> list[AddAction]:
        """The `add` of each file the batch wrote, each checked through delta-rs's own object store first (the
        files side by side: on an object store each check is a few requests)."""
        if not files:
            return []
        filesystem = self._fs()
        return in_parallel(lambda new: checked_add_action(self.root, filesystem, new), files)
