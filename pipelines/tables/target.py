"""Where a group's two tables are and how they are kept: `TableTarget`, all that opening them needs
(cohort.pipelines.tables.batch.open_tables). A spec builds it (`PipelineSpec.table_target`) when its tables are
opened; the tables know nothing of the spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cohort.pipelines.tables.retention import DEFAULT_RETENTION, TableRetention

__all__ = ["TableTarget"]


@dataclass(frozen=True)
class TableTarget:
    """A sink's two tables: their `table_format` (delta or iceberg), the sink's and the quarantine's roots, for
    Iceberg the SQL catalog's URL (never shown: it may hold a password) and the two tables' identifiers,
    `retention` (how long they keep old versions; None: forever) and `default_catalog` (the catalog is the default
    SQLite file at the sink's root, whose directory must exist before the tables open)."""

    table_format: str
    sink_root: str
    quarantine_root: str
    catalog_url: str | None = field(default=None, repr=False)
    identifiers: tuple[str, str] | None = None
    retention: TableRetention | None = DEFAULT_RETENTION
    default_catalog: bool = False
