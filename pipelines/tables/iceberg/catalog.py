"""The Iceberg store's SQL catalog: pyiceberg's, reusing the table it loaded last while the catalog still points at the
same metadata, and its tables created once under concurrent first runs (cohort.pipelines.tables.iceberg.store)."""

from __future__ import annotations

import random
import time

from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.table import Table
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import Session

from cohort.pipelines.storage.s3 import S3Settings, is_s3

__all__ = ["ReusingSqlCatalog", "create_catalog_tables", "file_io_properties"]


_CATALOG_CREATE_ATTEMPTS = 8


class ReusingSqlCatalog(SqlCatalog):
    """pyiceberg's SQL catalog, reusing the table it loaded last while the catalog still points at the same
    metadata file (one indexed query; metadata files are never rewritten, and a table object changes only by a
    commit the catalog accepted, which moves the pointer with it). Loading reads and parses the whole metadata
    file, in proportion to the snapshots kept, and a commit loads the table twice (the store, then the catalog's
    own check)."""

    def __init__(self, name: str, **properties: str) -> None:
        super().__init__(name, **properties)
        self._loaded: dict[tuple[str, ...], Table] = {}

    def load_table(self, identifier: str | tuple[str, ...]) -> Table:
        key = self.identifier_to_tuple(identifier)
        cached = self._loaded.get(key)
        if cached is not None and self._metadata_location(key) == cached.metadata_location:
            return cached
        table = super().load_table(identifier)
        self._loaded[key] = table
        return table

    def _metadata_location(self, key: tuple[str, ...]) -> str | None:
        with Session(self.engine) as session:
            return session.execute(
                select(IcebergTables.metadata_location).where(
                    IcebergTables.catalog_name == self.name,
                    IcebergTables.table_namespace == ".".join(key[:-1]),
                    IcebergTables.table_name == key[-1],
                )
            ).scalar_one_or_none()


def create_catalog_tables(catalog: SqlCatalog) -> None:
    """Create the SQL catalog's own tables where they are missing, tolerating concurrent creators.

    Slots of one run (threads or processes, on one host or several) open a fresh catalog at the same moment;
    pyiceberg checks for its tables, then creates them, so a creator that lost the race between the two fails
    ("table iceberg_tables already exists" on SQLite, a duplicate key or relation on PostgreSQL). The check and
    the creation (only of what is missing) are run again until they agree.
    """
    for attempt in range(_CATALOG_CREATE_ATTEMPTS):
        try:
            catalog.create_tables()  # SQLAlchemy's create_all: checks each table first, creates the missing ones
            return
        except (OperationalError, ProgrammingError, IntegrityError):
            if attempt + 1 == _CATALOG_CREATE_ATTEMPTS:
                raise
            time.sleep(random.uniform(0, 0.05 * 2**attempt))  # another creator was first: look again


def file_io_properties(root: str) -> dict[str, str]:
    """The catalog properties pyiceberg's file IO needs to reach a table at `root`: for an S3 root, the endpoint,
    region and keys of the environment (`s3.endpoint`, `s3.access-key-id`, ...: pyiceberg reads no AWS variable
    itself); none for other roots."""
    return S3Settings.from_environ().iceberg_properties() if is_s3(root) else {}
