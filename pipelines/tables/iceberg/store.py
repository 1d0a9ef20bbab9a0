"""The Apache Iceberg table sink: `TableStore` on pyiceberg's SQL catalog (SQLite for one host, PostgreSQL for
several), each batch one atomic Iceberg commit.

How Cohort's marks map onto Iceberg:

- **Marks are table properties**, `cohort/<group>/<topic>/<partition>/head`, `.../generation` and `.../reach`
  (decimal strings), plus `.../last`: the run id and this partition's ranges of the batch that last moved the head
  (what `last_batch` answers from). Properties are part of the table metadata, so they change in the same commit as
  the data files and survive snapshot expiry (snapshot summaries do not).
- **The batch record** also goes to the snapshot summary (`cohort.batch`), as an audit trail.
- **The compare-and-set is a custom table requirement** (`AssertCohortMarks`). `SqlCatalog.commit_table` validates a
  commit's requirements against the metadata it has just loaded, then swaps the metadata pointer with a conditional
  UPDATE: a requirement on the mark properties makes the check and the swap one atomic step. pyiceberg's own
  requirements do not protect the marks: a properties-only commit (a fence) asserts nothing, and pyiceberg's
  built-in retry rebases a failed data commit after dropping `AssertRefSnapshotId`, so a zombie would land its
  duplicate range. The custom requirement is kept and re-validated on those retries. Tables this store creates turn
  pyiceberg's retries off (`commit.retry.num-retries=0`): the store's own loop reloads, re-checks the marks (and
  whether the batch already landed) and rebuilds the commit instead.

Requirements are staged with the private `Transaction._stage` (pyiceberg keeps one requirement per type, so all marks
go into one requirement); they are validated client-side, which SqlCatalog does and a REST catalog would not.
Files are added by path (`append_data_file` of the Parquet footers, no duplicate scan of every manifest) and
removed by path in the same snapshot (an overwrite), never by predicate: pyiceberg keeps no statistics for nested
fields such as `kafka.offset`. A commit that removes a file the table no longer holds (a compaction or a replay
replaced it after the batch read it) is refused.

Cost over years of commits: the staged metadata is computed once per staged change without pyiceberg's deep copy
(`MetadataOnceTransaction`), and the catalog reuses the table it loaded while its pointer still names the same
metadata file (`ReusingSqlCatalog`); what still grows with the snapshots kept is bounded by the retention.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, ValidationException
from pyiceberg.io.pyarrow import UnsupportedPyArrowTypeException, parquet_file_to_data_file
from pyiceberg.manifest import DataFile as IcebergFile
from pyiceberg.table import Table, TableProperties, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.utils.properties import property_as_bool
from sqlalchemy.exc import ArgumentError, IntegrityError

from cohort.common.types import TopicPartition
from cohort.pipelines.storage.parallel import in_parallel
from cohort.pipelines.tables.iceberg.catalog import ReusingSqlCatalog, create_catalog_tables, file_io_properties
from cohort.pipelines.tables.iceberg.errors import catalog_errors, first_line, schema_mismatch
from cohort.pipelines.tables.iceberg.files import (
    ReportedFooters,
    check_files_exist,
    live_files,
    referenced_paths,
    relative_path,
    snapshot_entries,
)
from cohort.pipelines.tables.iceberg.marks import (
    AssertCohortMarks,
    compact_json,
    expected_properties,
    last_batch_of,
    new_properties,
    read_mark,
)
from cohort.pipelines.tables.iceberg.schema import (
    arrow_schema,
    check_required_fields,
)
from cohort.pipelines.tables.iceberg.transaction import MetadataOnceTransaction
from cohort.pipelines.tables.maintenance import ICEBERG_PROPERTIES, compact_files, expire_iceberg, run_safely
from cohort.pipelines.tables.retention import DEFAULT_RETENTION, TableRetention, maintenance_due
from cohort.pipelines.tables.store import (
    BatchRecord,
    DataFile,
    NewFile,
    PartitionMark,
    TableCommit,
    TableConflictError,
    TableSchemaError,
    compare_and_set,
    mark_key,
    parse_data_path,
    removes_gone,
    swapped,
    unify_schemas,
)

__all__ = [
    "BATCH_SUMMARY_KEY",
    "CATALOG_NAME",
    "AssertCohortMarks",
    "IcebergTableStore",
    "ReusingSqlCatalog",
]

CATALOG_NAME = "cohort"
BATCH_SUMMARY_KEY = "cohort.batch"
_CREATE_PROPERTIES = {TableProperties.COMMIT_NUM_RETRIES: "0"}  # the store's loop retries, re-checking the marks


class IcebergTableStore:
    """One Iceberg table in a SQL catalog, written by Cohort's sink (see the module docstring for the mapping)."""

    root: str

    def __init__(
        self,
        root: str,
        *,
        catalog_url: str,
        identifier: str,
        max_attempts: int = 8,
        retention: TableRetention | None = DEFAULT_RETENTION,
    ) -> None:
        """`retention`: how long old snapshots are kept and how often the store expires them (None: never)."""
        namespace, _, name = identifier.rpartition(".")
        if not namespace or not name or "" in namespace.split("."):
            raise ValueError(f"an Iceberg table identifier is namespace.table, got {identifier!r}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
        if "://" not in root and not root.startswith("file:"):
            root = os.path.abspath(root)  # a relative location would be written into the metadata as it is
        self.root = root.rstrip("/")
        self.identifier = identifier
        self.namespace = namespace
        self.max_attempts = max_attempts
        self._catalog_url = catalog_url  # may hold a password: never in a message or repr
        self._catalog_instance: SqlCatalog | None = None
        self._retention = retention

    def __repr__(self) -> str:
        return f"IcebergTableStore(identifier={self.identifier!r}, root={self.root!r})"

    def __str__(self) -> str:
        return f"Iceberg table {self.identifier} at {self.root}"

    # -- reading ------------------------------------------------------------------------------------------------

    def exists(self) -> bool:
        """Whether the catalog holds the table (the first commit that adds a file creates it)."""
        with self._catalog_errors():
            return self._catalog().table_exists(self.identifier)

    def schema(self) -> pa.Schema | None:
        """The table's schema as plain Arrow types (see `arrow_schema`), None if it does not exist."""
        table = self._load()
        return None if table is None else arrow_schema(table.schema())

    def marks(self, group: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, PartitionMark]:
        """The partitions' marks from the table's properties (all None for a missing table)."""
        keys = {tp: mark_key(group, tp) for tp in partitions}
        table = self._load()
        properties = {} if table is None else table.properties
        return {tp: read_mark(properties, key) for tp, key in keys.items()}

    def files(self, partitions: Sequence[TopicPartition]) -> list[DataFile]:
        """The current snapshot's data files of `partitions` in Cohort's layout, sorted; read from the manifests
        (no scan planning, no metrics decoding)."""
        wanted = set(partitions)
        table = self._load()
        if table is None or not wanted:
            return []
        return sorted(ours for ours, _ in self._live_files(table) if ours.tp in wanted)

    def all_files(self) -> list[DataFile]:
        """Every data file of the current snapshot in Cohort's layout, sorted."""
        table = self._load()
        return [] if table is None else sorted(ours for ours, _ in self._live_files(table))

    def foreign_files(self) -> list[str]:
        """The current snapshot's data files outside Cohort's layout (relative to the root when under it)."""
        table = self._load()
        if table is None:
            return []
        return sorted(
            entry.data_file.file_path if relative is None else relative
            for entry, relative, _ in snapshot_entries(table, self.root)
            if relative is None or parse_data_path(relative, 0) is None
        )

    def last_batch(self, group: str, tp: TopicPartition, head: int) -> BatchRecord | None:
        """The batch that moved `tp`'s head to `head`, from the `/last` property (it outlives snapshot expiry)."""
        key = mark_key(group, tp)
        table = self._load()
        return None if table is None else last_batch_of(table.properties, key, tp, head)

    # -- committing ---------------------------------------------------------------------------------------------

    def commit(self, change: TableCommit) -> None:
        """Land `change` in one Iceberg commit if the table still holds `change.expected`; nothing when it already
        landed. TableConflictError when the marks moved, TableSchemaError for rows that do not fit, ValueError or
        FileNotFoundError for a data file that is not what the batch says (checked before anything is written)."""
        unknown = sorted(set(change.heads) - set(change.expected))
        if unknown:
            raise ValueError(f"{unknown[0]}: a table commit moves the head only of a partition whose marks it expects")
        check_files_exist(self.root, change.adds)
        with self._catalog_errors():
            failure = self._commit_with_retries(change)
        if failure is not None:
            raise TableConflictError(
                f"{self}: gave up after {self.max_attempts} attempts, other commits kept changing the table "
                f"(last: {failure})"
            )

    def _commit_with_retries(self, change: TableCommit) -> str | None:
        """Commit `change` (or find it landed), reloading and re-checking after each lost race; None when done,
        else the last failure once `max_attempts` are spent."""
        first_schema = unify_schemas(None, change.adds)[0] if change.adds else change.schema
        failure = ""
        for attempt in range(self.max_attempts):
            table = self._load()
            if table is None:
                if first_schema is None:  # the first commit that adds a file (or names a schema) creates it
                    return None
                self._landed(change, {})  # raises if the batch expected marks the (missing) table cannot hold
                for new in change.adds:
                    check_required_fields(first_schema, new)
                table = self._create(first_schema)
            if self._landed(change, table.properties):
                return None
            live = {ours.path: theirs for ours, theirs in self._live_files(table)} if change.removes else {}
            if change.removes and swapped(change, live):
                return None  # a replay that leaves the marks as they were, already applied (its answer was lost)
            try:
                based_on = table.last_sequence_number
                self._commit_once(table, change, live)
                self._maintain(table, based_on, change)
                return None
            except CommitFailedException as error:  # the marks moved, or another commit won the catalog's swap
                failure = first_line(error)
                if attempt + 1 < self.max_attempts:
                    time.sleep(random.uniform(0, min(1.0, 0.02 * 2**attempt)))
        return failure

    def _landed(self, change: TableCommit, properties: Mapping[str, str]) -> bool:
        """The compare-and-set on the marks (`compare_and_set`) against the table's properties."""
        group = change.owner.group
        current = {tp: read_mark(properties, mark_key(group, tp)) for tp in change.expected}
        return compare_and_set(
            change,
            current,
            lambda tp, head: last_batch_of(properties, mark_key(group, tp), tp, head),
            where=f" in {self.identifier}",
        )

    def _commit_once(self, table: Table, change: TableCommit, live: Mapping[str, IcebergFile]) -> None:
        """Stage and commit `change` as one transaction on `table`, guarded by the marks it expects; `live`: the
        table's files by relative path (needed only when the commit removes files)."""
        current = arrow_schema(table.schema())
        _, gained = unify_schemas(current, change.adds)
        for new in change.adds:
            check_required_fields(current, new)
        removes_gone(change, live, str(self))
        removed = [live[r.path] for r in change.removes]
        tx = MetadataOnceTransaction(table)
        tx._stage((), (AssertCohortMarks(properties=expected_properties(change)),))  # type: ignore[arg-type]
        if gained:
            try:
                with tx.update_schema() as update:
                    update.union_by_name(pa.schema(gained))
            except (UnsupportedPyArrowTypeException, ValueError, TypeError) as error:
                raise TableSchemaError(f"{self}: cannot add {[f.name for f in gained]}: {first_line(error)}") from None
        if change.adds or change.removes:
            self._stage_snapshot(tx, table, change, removed)
        properties = new_properties(change)
        if properties:
            tx.set_properties(properties)
        try:
            tx.commit_transaction()
        except ValidationException as error:  # an overwrite rebased by pyiceberg found a removed file gone
            raise TableConflictError(f"{self}: the commit's removes no longer apply: {first_line(error)}") from None

    def _maintain(self, table: Table, based_on: int, change: TableCommit) -> None:
        """Expire old snapshots (cohort.pipelines.tables.maintenance) after a commit that took the table's sequence
        number past a multiple of `every_commits`, then (after a batch's commit) compact the small files of the
        batch's group; outside the compare-and-set: a failure is logged, never raised."""
        retention = self._retention
        after = table.last_sequence_number
        if retention is None or not maintenance_due(based_on, after, retention.every_commits):
            return
        run_safely(str(self), lambda: expire_iceberg(table, retention, self._relative))
        if change.batch is not None and retention.compact_files:
            run_safely(str(self), lambda: compact_files(self, change.owner.group, retention))

    def _stage_snapshot(self, tx: Transaction, table: Table, change: TableCommit, removed: list[IcebergFile]) -> None:
        """The snapshot of the commit: its added and removed files, the batch record in its summary."""
        metadata = tx.table_metadata
        if metadata.name_mapping() is None:  # files carry no field ids: readers resolve their columns by name
            mapping = metadata.schema().name_mapping.model_dump_json()
            tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})
            metadata = tx.table_metadata
        added = in_parallel(lambda new: self._data_file(table, metadata, new), change.adds)  # each reads a footer
        summary = {}
        if change.batch is not None:
            summary[BATCH_SUMMARY_KEY] = compact_json({"group": change.owner.group, **change.batch.to_json()})
        update = tx.update_snapshot(snapshot_properties=summary)
        if removed:
            with update.overwrite() as overwrite:
                for old in removed:
                    overwrite.delete_data_file(old)
                for data_file in added:
                    overwrite.append_data_file(data_file)
            return
        merge = property_as_bool(metadata.properties, TableProperties.MANIFEST_MERGE_ENABLED, False)
        with update.merge_append() if merge else update.fast_append() as append:
            for data_file in added:
                append.append_data_file(data_file)

    def _data_file(self, table: Table, metadata: TableMetadata, new: NewFile) -> IcebergFile:
        """The Iceberg data file of an added Parquet file, from its footer (statistics, row count): the one its writer
        reported, else read from the file (its size was checked before: `check_files_exist`)."""
        location = f"{self.root}/{new.path}"
        io = table.io if new.footer is None else ReportedFooters(location, new.size, new.footer)
        try:
            data_file = parquet_file_to_data_file(io, metadata, location)
        except ValueError as error:
            raise TableSchemaError(
                f"{new.path}: the file's columns do not fit the schema of {self.identifier}: {schema_mismatch(error)}"
            ) from None
        if data_file.record_count != new.records:
            raise ValueError(
                f"{new.path} under {self.root} holds {data_file.record_count} rows, the batch wrote {new.records}"
            )
        return data_file

    # -- the catalog --------------------------------------------------------------------------------------------

    def _catalog(self) -> SqlCatalog:
        if self._catalog_instance is None:
            try:
                catalog = ReusingSqlCatalog(
                    CATALOG_NAME,
                    uri=self._catalog_url,
                    warehouse=self.root,
                    pool_pre_ping="true",
                    init_catalog_tables="false",  # created below, where concurrent creators are expected
                    **file_io_properties(self.root),
                )
            except ArgumentError:
                raise ValueError(f"{self}: the catalog URL is not a SQLAlchemy URL") from None
            create_catalog_tables(catalog)
            self._catalog_instance = catalog
        return self._catalog_instance

    def _load(self) -> Table | None:
        with self._catalog_errors():
            try:
                return self._catalog().load_table(self.identifier)
            except NoSuchTableError:
                return None

    def _create(self, schema: pa.Schema) -> Table:
        """The table, created with `schema` at the root unless a concurrent creator was first."""
        with self._catalog_errors():
            catalog = self._catalog()
            try:
                catalog.create_namespace_if_not_exists(self.namespace)
            except IntegrityError:  # a concurrent creator was first (SqlCatalog does not say "already exists")
                if not catalog.namespace_exists(self.namespace):
                    raise
            try:
                properties = dict(_CREATE_PROPERTIES) | (ICEBERG_PROPERTIES if self._retention is not None else {})
                return catalog.create_table_if_not_exists(
                    self.identifier, schema=schema, location=self.root, properties=properties
                )
            except (UnsupportedPyArrowTypeException, TypeError) as error:
                raise TableSchemaError(f"{self}: cannot create the table: {first_line(error)}") from None

    def _relative(self, location: str) -> str | None:
        """`location` relative to the table's root, None when it lies outside it."""
        return relative_path(self.root, location)

    def _live_files(self, table: Table) -> Iterator[tuple[DataFile, IcebergFile]]:
        """The data files of the table's current snapshot that follow Cohort's layout under the root."""
        return live_files(table, self.root)

    def _catalog_errors(self) -> AbstractContextManager[None]:
        """Database errors as one short line naming the table, never the catalog URL (it may hold a password)."""
        return catalog_errors(str(self), self._catalog_url)


def referenced_data_paths(store: IcebergTableStore) -> tuple[list[str], Iterator[str]]:
    """Read-only: (the data files the current snapshot holds, then, lazily, those every other snapshot the table
    keeps holds, newest first, each manifest read once), as paths relative to the table root (files elsewhere are
    left out). A file a snapshot deleted is held by the snapshots before it, as long as the table keeps one. What
    cohort.pipelines.tables.files compares the files on disk with."""
    table = store._load()
    if table is None:
        return [], iter(())
    return referenced_paths(table, store.root)
