"""Reader schemas of the Schema Registry formats: given explicitly, or the latest version of a subject.

Resolved once per batch on the driver (`resolve_readers`), before any task starts, so every record of the
batch decodes into the same columns and a subject that is missing fails the batch with its name. It reads a
spec's `RecordSide`s (its value's and its key's format settings) and the registry's connection, and returns the
reader schemas it read; the spec with them filled in (`PipelineSpec.with_readers`) is what the reading tasks
receive.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import NamedTuple

from pyspark.sql.types import StructType

from cohort.pipelines.formats.decode import REGISTRY_VALUE_FORMATS
from cohort.pipelines.formats.registry import RegistryConnection, SchemaSource
from cohort.pipelines.formats.registry_decode import ReaderSchema

__all__ = ["RecordSide", "explicit_reader", "resolve_readers"]


class RecordSide(NamedTuple):
    """One side of a record (its value or its key): the format settings a spec holds for it."""

    what: str
    format: str
    schema: StructType | str | None
    subject: str | None
    reader: ReaderSchema | None

    @property
    def needs_registry_schema(self) -> bool:
        """A registry format whose reader schema is neither given nor resolved yet."""
        return self.format in REGISTRY_VALUE_FORMATS and self.schema is None and self.reader is None


def explicit_reader(fmt: str, schema: StructType | str, what: str = "value") -> ReaderSchema:
    """The reader of a schema given in the spec: Spark columns (any registry format), or Avro JSON text."""
    from cohort.pipelines.formats.avro.schema import AvroSchemaError, avro_from_spark, parse_avro, value_columns

    if isinstance(schema, str):
        if fmt != "avro":
            raise ValueError(f"a {what} schema given as text must be an Avro schema ('avro' format), not {fmt!r}")
        try:
            return ReaderSchema(fmt, value_columns(parse_avro(schema)), schema)
        except AvroSchemaError as exc:
            raise ValueError(f"the Avro {what} reader schema cannot be read: {exc}") from None
    if not isinstance(schema, StructType) or not schema.fields:
        raise ValueError(f"the {fmt!r} {what} schema must be a non-empty Spark StructType")
    return ReaderSchema(fmt, schema, avro_from_spark(schema) if fmt == "avro" else None)


def resolve_readers(
    value: RecordSide, key: RecordSide, registry: RegistryConnection | None, topics: Collection[str]
) -> dict[str, ReaderSchema]:
    """The reader schemas the registry holds for the sides that need one (`value`, `key`), by side (`what`);
    empty when none does.

    Raises ValueError naming the subject when it is missing, when the topics' subjects hold different
    schemas, or when the latest schema cannot become columns; RegistryUnavailableError when the registry
    cannot be reached, RegistryError when it refuses the credentials.
    """
    needed = [side for side in (value, key) if side.needs_registry_schema]
    if not needed:
        return {}
    if registry is None:
        raise ValueError(
            f"the {value.format!r} format reads its schemas from a Schema Registry: give "
            "PipelineSpec(registry=RegistryConnection(url=...))"
        )
    source = SchemaSource(registry)
    return {side.what: _latest_reader(source, side.format, side.subject, topics, side.what) for side in needed}


def _latest_reader(
    source: SchemaSource, fmt: str, subject: str | None, topics: Collection[str], what: str
) -> ReaderSchema:
    subjects = [subject] if subject else sorted(f"{t}-{what}" for t in topics)
    if not subjects:
        raise ValueError(f"no topic to derive the {what} subject from: give {what}_subject")
    found = {}
    for name in subjects:
        registered = source.latest(name)
        if registered is None:
            raise ValueError(
                f"subject {name!r} is not in the Schema Registry at {source.connection.url}; register a schema or "
                f"give {what}_schema / {what}_subject"
            )
        found[name] = registered
    texts = {s.text for s in found.values()}
    if len(texts) > 1:
        raise ValueError(
            f"the subjects {sorted(found)} hold different {what} schemas; one batch decodes into one reader schema: "
            f"give {what}_subject or {what}_schema"
        )
    name, latest = next(iter(found.items()))
    origin = f"subject {name} (latest: schema id {latest.schema_id})"
    try:
        if fmt == "avro":
            from cohort.pipelines.formats.avro.schema import parse_avro, value_columns

            named = tuple(s.text for s in source.referenced(latest))
            return ReaderSchema(fmt, value_columns(parse_avro(latest.text, named)), latest.text, origin, named)
        if fmt == "json-schema":
            from cohort.pipelines.formats.json_schema import json_schema_columns

            return ReaderSchema(fmt, json_schema_columns(latest.text), None, origin)
        from cohort.pipelines.formats.protobuf import message_columns, message_pool, reader_message

        serialized = source.by_id(latest.schema_id, serialized=True)
        assert serialized is not None
        message = reader_message(message_pool(serialized, source), name)
        columns = message_columns(message)
        return ReaderSchema(fmt, columns, None, f"{origin}, message {message.full_name}", message=message.full_name)
    except ValueError as exc:
        raise ValueError(f"the {what} reader schema from {origin} cannot become columns: {exc}") from None
