"""Decoding Schema Registry formats (Avro, Protobuf, JSON Schema) in the reading tasks.

`RegistryDecoder.decode` frames a batch of values (cohort.pipelines.formats.framing), groups them by writer schema
id, fetches each writer schema once per task (cohort.pipelines.formats.registry), and decodes each group into the
reader schema's columns: Avro column-wise with schema resolution (cohort.pipelines.formats.avro.columns), Protobuf
through a message class built from the registered descriptor (cohort.pipelines.formats.protobuf), JSON
Schema validated against the writer's schema, then decoded by the JSON decoder. A record that cannot be
decoded gets a reason and goes to the quarantine; a registry that cannot be reached fails the task.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, cast

import numpy as np
import pyarrow as pa

from cohort.pipelines.formats.avro.columns import AvroResolutionError, decode_avro, gather_payloads, scatter
from cohort.pipelines.formats.avro.schema import AvroRecord, AvroSchemaError, parse_avro
from cohort.pipelines.formats.decode import REGISTRY_SCHEMA_TYPES, ValueDecoder, arrow_type
from cohort.pipelines.formats.framing import Frames, split_frames
from cohort.pipelines.formats.registry import (
    RegistryConnection,
    RegistryError,
    RegistrySchema,
    RegistryUnavailableError,
    SchemaSource,
)

__all__ = ["FORMAT_NAMES", "ReaderSchema", "RegistryDecoder", "other_schema_type"]


@dataclass(frozen=True)
class ReaderSchema:
    """What records are decoded into: the Spark columns, and for Avro the reader schema's JSON text (derived
    from the columns when the reader schema was given as a Spark StructType). `source` says where it came
    from (a subject and version, or 'explicit') for the run's metadata."""

    value_format: str
    columns: Any  # pyspark StructType (kept untyped here: pickled into tasks as is)
    avro: str | None = None
    source: str = "explicit"
    avro_named: tuple[str, ...] = ()
    """The Avro schemas `avro` references (registry schema references), dependencies first."""
    message: str | None = None
    """Protobuf, derived from the registry: the full name of the message whose fields are the columns (records
    holding another message of the file are refused rather than read by name into nothing)."""


@dataclass(frozen=True)
class RegistryDecoder:
    """Decodes framed values of one registry format into the reader schema's columns (pickled into tasks:
    plain values only; the parsed schemas are rebuilt in each task, the registry client is the process's)."""

    reader: ReaderSchema
    registry: RegistryConnection
    naive_timestamps: str = "utc"
    what: str = "value"
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cache"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def _source(self) -> SchemaSource:
        if "source" not in self._cache:
            self._cache["source"] = SchemaSource(self.registry, shared=True)
        source: SchemaSource = self._cache["source"]
        return source

    @property
    def columns(self) -> Any:
        """The decoded columns (a Spark StructType)."""
        return self.reader.columns

    @property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema(list(self.arrow_struct))

    @cached_property
    def arrow_struct(self) -> pa.StructType:
        return pa.struct([pa.field(f.name, arrow_type(f.dataType, where=f.name)) for f in self.reader.columns])

    def decode(self, values: pa.Array) -> tuple[list[pa.Array], list[str | None]]:
        """(value columns, reason per record) for a batch of framed values."""
        frames = split_frames(values, what=self.what, message_indexes=self.reader.value_format == "protobuf")
        reasons: list[str | None] = [None] * len(values)
        for row, reason in frames.reasons.items():
            reasons[row] = reason
        parts: list[tuple[np.ndarray, pa.Array]] = []
        for schema_id in np.unique(frames.schema_ids[frames.schema_ids >= 0]).tolist():
            rows = np.flatnonzero(frames.schema_ids == schema_id)
            decoded, failed = self._decode_group(frames, rows, int(schema_id))
            for local, reason in failed.items():
                reasons[int(rows[local])] = reason
            parts.append((rows, decoded))
        struct = scatter(parts, len(values), self.arrow_struct)
        return cast(Any, struct).flatten(), reasons

    def _decode_group(self, frames: Frames, rows: np.ndarray, schema_id: int) -> tuple[pa.Array, dict[int, str]]:
        """One writer schema's records: (reader-typed struct, reasons by position in `rows`)."""
        fmt = self.reader.value_format
        writer = self._source.by_id(schema_id, serialized=fmt == "protobuf")
        problem = None
        if writer is None:
            problem = f"schema id {schema_id} is not in the Schema Registry at {self.registry.url}"
        elif writer.schema_type != REGISTRY_SCHEMA_TYPES[fmt]:
            problem = other_schema_type(schema_id, writer.schema_type, fmt, self.what)
        if problem is not None or writer is None:
            return pa.nulls(rows.size, self.arrow_struct), dict.fromkeys(range(rows.size), str(problem))
        try:
            if fmt == "avro":
                return self._avro(frames, rows, writer)
            if fmt == "protobuf":
                return self._protobuf(frames, rows, writer)
            return self._json_schema(frames, rows, writer)
        except _Unreadable as exc:
            return pa.nulls(rows.size, self.arrow_struct), dict.fromkeys(range(rows.size), str(exc))

    def _avro(self, frames: Frames, rows: np.ndarray, writer: RegistrySchema) -> tuple[pa.Array, dict[int, str]]:
        try:
            named = self._parsed(f"avro-refs:{writer.schema_id}", lambda: self._named(writer))
            writer_node = self._parsed(f"avro:{writer.schema_id}", lambda: parse_avro(writer.text, named))
            reader = self.reader
            reader_node = self._parsed("avro:reader", lambda: parse_avro(reader.avro or "", reader.avro_named))
        except (AvroSchemaError, RegistryError) as exc:
            if isinstance(exc, RegistryUnavailableError):
                raise
            raise _Unreadable(f"writer schema id {writer.schema_id} cannot be read: {exc}") from None
        try:
            batch = decode_avro(
                frames.data,
                frames.starts[rows],
                frames.ends[rows],
                writer_node,
                reader_node,
                writer_text=writer.text,
                schema_id=writer.schema_id,
                writer_named=named,
            )
        except AvroResolutionError as exc:
            raise _Unreadable(
                f"writer schema id {writer.schema_id} cannot be read as the reader schema ({self.reader.source}): {exc}"
            ) from None
        unrelated = _no_shared_field(writer.text, reader.avro or "")
        if unrelated is not None:  # resolved, but every record would be the reader's defaults
            raise _Unreadable(
                f"writer schema id {writer.schema_id} ({unrelated}) has none of the reader's fields "
                f"({', '.join(f.name for f in self.reader.columns)}; reader schema: {self.reader.source}): its "
                "records would land as rows of nulls or defaults"
            )
        values = batch.values
        if not isinstance(reader_node, AvroRecord):  # a single `value` column
            values = pa.StructArray.from_arrays([values], fields=list(self.arrow_struct))
        return values.cast(self.arrow_struct), batch.reasons

    def _named(self, writer: RegistrySchema) -> tuple[str, ...]:
        """The texts of the Avro schemas `writer` references, dependencies first."""
        return tuple(s.text for s in self._source.referenced(writer))

    def _protobuf(self, frames: Frames, rows: np.ndarray, writer: RegistrySchema) -> tuple[pa.Array, dict[int, str]]:
        from cohort.pipelines.formats.protobuf import ProtobufUnreadable, decode_messages, message_pool

        try:
            pool = self._parsed(f"protobuf:{writer.schema_id}", lambda: message_pool(writer, self._source))
        except ProtobufUnreadable as exc:
            raise _Unreadable(f"writer schema id {writer.schema_id} cannot be read: {exc}") from None
        payloads = [bytes(frames.data[frames.starts[r] : frames.ends[r]]) for r in rows.tolist()]
        indexes = [frames.indexes[r] for r in rows.tolist()]
        reader = self.reader
        decoded, reasons = decode_messages(
            pool,
            payloads,
            indexes,
            reader.columns,
            self.arrow_struct,
            expected=reader.message,
            origin=reader.source,
            what=self.what,
        )
        for local, row in enumerate(rows.tolist()):  # the indexes were not read: decode_messages found no message
            if row in frames.malformed:
                reasons[local] = frames.malformed[row]
        return decoded, reasons

    def _json_schema(self, frames: Frames, rows: np.ndarray, writer: RegistrySchema) -> tuple[pa.Array, dict[int, str]]:
        from cohort.pipelines.formats.json_schema import objects_without_columns, validation_errors, validator_for

        try:
            validator = self._parsed(f"json:{writer.schema_id}", lambda: validator_for(writer.text))
        except ValueError as exc:
            raise _Unreadable(f"writer schema id {writer.schema_id} cannot be read: {exc}") from None
        payloads = gather_payloads(frames.data, frames.starts[rows], frames.ends[rows])
        reasons = validation_errors(validator, payloads, writer.schema_id)
        decoder = ValueDecoder("json", self.reader.columns, self.naive_timestamps)
        columns, decoded_reasons = decoder.decode(payloads)
        for i, reason in enumerate(decoded_reasons):
            if reason is not None:
                reasons.setdefault(i, reason)
        empty = _all_null(columns)
        candidates = [i for i in np.flatnonzero(empty).tolist() if i not in reasons]
        reasons.update(objects_without_columns(payloads, candidates, [f.name for f in self.reader.columns]))
        struct = pa.StructArray.from_arrays(columns, fields=list(self.arrow_struct))
        return struct, reasons

    def _parsed(self, key: str, build: Any) -> Any:
        """A parsed schema, kept for this task (parse errors are kept too, and raised again)."""
        if key not in self._cache:
            try:
                self._cache[key] = build()
            except Exception as exc:
                self._cache[key] = exc
        found = self._cache[key]
        if isinstance(found, Exception):
            raise found
        return found


FORMAT_NAMES: dict[str, str] = {"avro": "Avro", "protobuf": "Protobuf", "json-schema": "JSON Schema"}
_SCHEMA_TYPE_ARTICLES: dict[str, str] = {"AVRO": "an"}


def other_schema_type(schema_id: int, schema_type: str, fmt: str, what: str = "value") -> str:
    """The reason of a record framed with the id of another type's schema (written by another serializer).

    Example:
        >>> other_schema_type(7, "AVRO", "protobuf")
        "schema id 7 is an AVRO schema, but the topic's values are read as Protobuf (value_format 'protobuf')"
    """
    article = _SCHEMA_TYPE_ARTICLES.get(schema_type, "a")
    return (
        f"schema id {schema_id} is {article} {schema_type} schema, but the topic's {what}s are read as "
        f"{FORMAT_NAMES.get(fmt, fmt)} ({what}_format {fmt!r})"
    )


def _no_shared_field(writer_text: str, reader_text: str) -> str | None:
    """When both Avro schemas are records and no writer field is a reader field (by name or the reader field's
    aliases): the writer record's name and fields, for the reason. None otherwise (or when either is not
    written out as a record, e.g. a reference to a named type)."""
    try:
        writer, reader = json.loads(writer_text), json.loads(reader_text)
    except ValueError:
        return None
    if not all(isinstance(s, dict) and s.get("type") == "record" for s in (writer, reader)):
        return None
    reader_names = {f.get("name") for f in reader.get("fields", ())}
    reader_names |= {a for f in reader.get("fields", ()) for a in f.get("aliases", ())}
    written = [f.get("name") for f in writer.get("fields", ())]
    if not written or reader_names & set(written):
        return None
    shown = ", ".join(str(n) for n in written[:5]) + (", ..." if len(written) > 5 else "")
    return f"record {writer.get('name')}: {shown}"


def _all_null(columns: list[pa.Array]) -> np.ndarray:
    """Per row: whether every column is null."""
    if not columns:
        return np.zeros(0, bool)
    empty = np.ones(len(columns[0]), bool)
    for column in columns:
        empty &= np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    return empty


class _Unreadable(Exception):
    """A writer schema none of whose records can be decoded; the argument is their reason."""
