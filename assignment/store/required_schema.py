"""The schema an existing store must hold for the operator's read-only tools (`create=False`): this code's
coordinator schema version, found without creating or migrating anything."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from cohort.assignment.errors import StoreError, StoreNotFoundError
from cohort.assignment.store.schema import SCHEMA_VERSION, SchemaVersionError

__all__ = ["check_schema_version", "schema_version_found"]


def schema_version_found(conn: Connection) -> int | None:
    """The coordinator schema version the store records, None when it holds no Cohort tables."""
    if not sa.inspect(conn).has_table("cohort_schema_version"):
        return None
    query = sa.text("SELECT version FROM cohort_schema_version WHERE component = 'coordinator'")
    found = conn.execute(query).scalar()
    return None if found is None else int(found)


def check_schema_version(found: int | None, shown: str) -> None:
    """Refuse a store (named `shown`) that holds no coordinator tables, or tables of another schema version."""
    if found is None:
        raise StoreNotFoundError(f"the store {shown} holds no Cohort tables: no group has used it yet")
    if found > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"the store {shown} holds coordinator schema version {found}; this code supports up to {SCHEMA_VERSION}"
        )
    if found < SCHEMA_VERSION:
        raise StoreError(
            f"the store {shown} holds coordinator schema version {found}, older than this code's "
            f"{SCHEMA_VERSION}: a worker of this version upgrades it on its first run"
        )
