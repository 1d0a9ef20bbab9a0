"""Arrow schemas of Iceberg tables: a table's schema as Arrow without Iceberg's field ids, and the check that a batch's
file fills every required field the table has (cohort.pipelines.tables.iceberg.store)."""

from __future__ import annotations

from typing import Any, cast

import pyarrow as pa
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema

from cohort.pipelines.tables.store import (
    NewFile,
    TableSchemaError,
)

__all__ = ["arrow_schema", "check_required_fields"]


def arrow_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema of an Iceberg schema as Parquet writers produce it (string, binary, list; not pyiceberg's
    large_* types), so that it compares equal to the schema of the files the batches add."""
    converted = schema_to_pyarrow(schema, include_field_ids=False)
    return pa.schema([_plain_field(f) for f in converted])


def _plain_field(f: pa.Field) -> pa.Field:
    return f.with_type(_plain_type(f.type))


def _plain_type(t: pa.DataType) -> pa.DataType:
    if isinstance(t, pa.MapType):  # before lists: a map type is a list type
        key, item = _plain_field(t.key_field), _plain_field(t.item_field)
        return pa.map_(cast(Any, key), cast(Any, item), t.keys_sorted)  # fields keep nullability (stubs: types only)
    if isinstance(t, (pa.ListType, pa.LargeListType)):
        return pa.list_(_plain_field(t.value_field))
    if isinstance(t, pa.StructType):
        return pa.struct([_plain_field(t.field(i)) for i in range(t.num_fields)])
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    return t


def check_required_fields(table: pa.Schema, new: NewFile) -> None:
    """TableSchemaError when a file lacks a field the table requires, or lets it be null, at any depth: Iceberg
    refuses such a file (and pyiceberg prints its whole schema comparison on the way)."""
    for f in table:
        index = new.schema.get_field_index(f.name)
        problem = _required_gap(f, new.schema.field(index) if index >= 0 else None, f.name)
        if problem is not None:
            raise TableSchemaError(f"{new.path.rsplit('/', 1)[0]} {problem}, which the table requires (not null)")


def _required_gap(table: pa.Field, batch: pa.Field | None, path: str) -> str | None:
    """How the file's field `batch` (None: absent) fails what the table's field `table` requires, None if not."""
    if batch is None:
        return None if table.nullable else f"has no field {path!r}"
    if not table.nullable and batch.nullable:
        return f"has a nullable field {path!r}"
    for table_child, batch_child, name in _children(table.type, batch.type):
        problem = _required_gap(table_child, batch_child, f"{path}.{name}")
        if problem is not None:
            return problem
    return None


def _children(table: pa.DataType, batch: pa.DataType) -> list[tuple[pa.Field, pa.Field | None, str]]:
    """The nested fields of two types of the same shape, paired by name (struct), element or map value."""
    if isinstance(table, pa.MapType) and isinstance(batch, pa.MapType):
        return [(table.item_field, batch.item_field, "value")]
    if isinstance(table, (pa.ListType, pa.LargeListType)) and isinstance(batch, (pa.ListType, pa.LargeListType)):
        return [(table.value_field, batch.value_field, "element")]
    if isinstance(table, pa.StructType) and isinstance(batch, pa.StructType):
        pairs: list[tuple[pa.Field, pa.Field | None, str]] = []
        for child in table:
            index = batch.get_field_index(child.name)
            pairs.append((child, batch.field(index) if index >= 0 else None, child.name))
        return pairs
    return []
