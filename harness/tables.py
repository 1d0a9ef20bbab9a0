"""Reading a table sink back with the format's own reader (deltalake, pyiceberg) and with DuckDB, for tests."""

from __future__ import annotations

from typing import Any

import duckdb
import pyarrow as pa

from cohort.pipelines.spec import PipelineSpec

__all__ = ["duckdb_offsets", "table_arrow", "table_offsets"]


def table_arrow(spec: PipelineSpec, *, quarantine: bool = False) -> pa.Table | None:
    """The sink (or quarantine) table's rows as its format's reader returns them; None if it does not exist."""
    root = spec.quarantine_root if quarantine else spec.sink_path
    if spec.table_format == "delta":
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(root):
            return None
        return DeltaTable(root).to_pyarrow_table()
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import NoSuchTableError

    from cohort.pipelines.tables.iceberg.catalog import file_io_properties

    warehouse = root if "://" in root else f"file://{root}"
    catalog = SqlCatalog("cohort", uri=spec.iceberg_catalog_url, warehouse=warehouse, **file_io_properties(root))
    identifier = spec.iceberg_identifiers[1 if quarantine else 0]
    try:
        return catalog.load_table(identifier).scan().to_arrow()
    except NoSuchTableError:
        return None


def table_offsets(spec: PipelineSpec, *, quarantine: bool = False) -> list[tuple[int, int]]:
    """(partition, offset) of every row, sorted (duplicates kept)."""
    table = table_arrow(spec, quarantine=quarantine)
    if table is None:
        return []
    kafka = table.column("kafka").combine_chunks()
    return sorted(zip(kafka.field("partition").to_pylist(), kafka.field("offset").to_pylist(), strict=True))


def duckdb_offsets(spec: PipelineSpec) -> list[tuple[int, int]]:
    """The same as `table_offsets` for the sink, counted by DuckDB over the table's Arrow data."""
    rows = table_arrow(spec)
    if rows is None:
        return []
    con: Any = duckdb.connect()
    con.register("t", rows)
    return sorted(con.execute("SELECT kafka.partition, kafka.offset FROM t").fetchall())
