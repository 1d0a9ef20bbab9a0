"""What a pipeline does with the records of a batch: decoding, validation, transform, sinks and limits.

A `PipelineSpec` is plain, immutable configuration, checked when it is built so a bad schema, model or
limit fails before any batch runs, with a message naming the problem.

Example:
    >>> import pyspark.sql.types as T
    >>> spec = PipelineSpec(
    ...     sink_path="/tmp/lake/orders",
    ...     value_format="json",
    ...     value_schema=T.StructType([T.StructField("id", T.LongType(), nullable=False)]),
    ...     max_records_per_partition=100_000,
    ... )
    >>> spec.quarantine_root
    '/tmp/lake/orders/_quarantine'
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from cohort.common.validation import as_integer, is_number
from cohort.pipelines.formats.decode import (
    RAW_FORMATS,
    REGISTRY_VALUE_FORMATS,
    ValueDecoder,
    ValueFormat,
    naive_timestamp_policy,
    value_columns_schema,
)
from cohort.pipelines.formats.readers import RecordSide, explicit_reader, resolve_readers
from cohort.pipelines.formats.registry import RegistryConnection
from cohort.pipelines.formats.registry_decode import ReaderSchema, RegistryDecoder
from cohort.pipelines.planning.plan import PlanLimits, ResetPolicy
from cohort.pipelines.sink.layout import SinkTarget, default_quarantine_root
from cohort.pipelines.sink.quarantine_limit import DEFAULT_FRACTION, DEFAULT_MIN_RECORDS, QuarantineLimit
from cohort.pipelines.tables.retention import DEFAULT_RETENTION, TableRetention
from cohort.pipelines.tables.target import TableTarget
from cohort.pipelines.tasks.arrow_transform import ArrowTransform
from cohort.pipelines.tasks.checked import RecordChecker
from cohort.pipelines.tasks.validate import RowCheck, compile_model

__all__ = ["TABLE_FORMATS", "PipelineSpec"]

TABLE_FORMATS = ("parquet", "delta", "iceberg")
"""Where a batch lands its rows: range directories of Parquet files, a Delta Lake table or an Iceberg table."""
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

Transform = Callable[[DataFrame], DataFrame]


@dataclass(frozen=True)
class PipelineSpec:
    """Configuration of the Spark data path (see cohort.pipelines.batch.run.run_batch).

    Attributes:
        sink_path: root of the Parquet output (local path or Hadoop-compatible URI), or the table's location
            for a table format.
        quarantine_path: root of the quarantine output; default `<sink_path>/_quarantine`, which Spark's
            readers of the sink ignore.
        table_format: 'parquet' (range directories, the default), 'delta' (a Delta Lake table through
            delta-rs) or 'iceberg' (an Apache Iceberg table through pyiceberg's SQL catalog); the quarantine is
            a table of the same format (docs/tables.md).
        iceberg_catalog: the SQLAlchemy URL of the Iceberg SQL catalog (default: a SQLite file
            `<sink_path>/_catalog.sqlite`; PostgreSQL for several hosts). It is never shown.
        iceberg_catalog_env: the name of an environment variable holding that URL, read each time the catalog
            is opened (the way to give a URL with a password: it is then in no configuration).
        iceberg_table: the Iceberg table identifier `namespace.table` (default `cohort.<last part of
            sink_path>`, other characters than letters, digits and _ made _); the quarantine's is
            `<identifier>_quarantine`.
        table_retention: how long a Delta or Iceberg sink keeps old versions (time travel) and how often the
            store cleans up after its commits (a TableRetention; default an hour of versions, the newest 10 always,
            a month of Delta log, every 50 commits); None keeps every version forever, and the commit latency of
            an Iceberg table then grows with its snapshots (docs/tables.md, "Retention").
        value_format: 'json' (into `value_schema`), the Schema Registry formats 'avro', 'protobuf' and
            'json-schema', 'utf8' (a string `value`), or 'bytes' / 'raw' (the value as it is).
        value_schema: the reader schema: a Spark StructType (required for 'json'); for 'avro' also an Avro
            schema as JSON text. For a registry format left out, it is the latest version of `value_subject`
            in the registry, read when a batch starts (docs/formats.md).
        value_subject: the registry subject whose latest version is the reader schema (default: the
            topic's `<topic>-value`, the registry's TopicNameStrategy).
        key_format: the key's format, as value_format (default 'bytes': the key stays raw in `kafka.key`); a
            decoded key is a `key` column (a struct for record schemas).
        key_schema: the key's reader schema, as value_schema.
        key_subject: the registry subject whose latest version is the key's reader schema (default: the topic's
            `<topic>-key`).
        registry: the Schema Registry the registry formats read writer schemas from.
        model: a pandera.pyspark DataFrameModel over the decoded value columns, checked row by row.
        transform: DataFrame -> DataFrame applied to valid records before the sink. Every row it returns
            keeps its record's `kafka` column; it may drop records (counted as `filtered`) and return several
            rows per record (the extra rows counted as `expanded`).
        arrow_transform: pyarrow Table -> Table applied by the reading tasks to each batch of valid sink rows,
            under the same contract as `transform` but without the JVM (cohort.pipelines.tasks.arrow_transform): the
            fast path for transforms pyarrow.compute (or Polars, DuckDB) can express. Give one of the two.
        reset: where partitions without a committed offset start: 'earliest', 'latest', a
            timezone-aware datetime, or a ResetPolicy.
        fail_on_data_loss: fail when committed offsets are gone from Kafka; when False, record a gap.
        max_records_per_partition: cap on one partition's range per batch (None: to the end offset).
        max_records_per_task: ranges longer than this are read by several Spark tasks.
        min_task_records: ranges are split further to use every core only while pieces keep this many.
        consumer_config: extra librdkafka settings for the executor-side consumers.
        read_timeout_s: how long a reading task may go without a record before it fails.
        consume_batch_size: messages per consume call, hence rows per Arrow batch.
        compression: Parquet compression codec.
        naive_timestamps: how a JSON timestamp without an offset is read: 'utc' (the default), an IANA
            time-zone name such as 'Europe/Paris' (local time there), or 'quarantine' (refused). A bare
            date for a timestamp field is midnight under the same policy (docs/sink.md, "Decoding rules").
        strict_replay: a replay whose output for the offsets it re-reads differs from what the sink holds
            fails before its commit (default: it goes through, and the ledger and the materialization say
            the output changed; docs/replay.md).
        quarantine_limit: the largest fraction of a partition's records in one batch (and of the batch's
            records) that may go to the quarantine; past it the batch fails before its commit, naming the
            partitions and the commonest reasons (default 0.5: more than half is a configuration problem, not
            bad records). None or 1.0 disables it, 0.0 refuses any quarantined record (docs/sink.md).
        quarantine_limit_min_records: the limit applies once a partition (or the batch) quarantines at least
            this many records (default 10), so a few bad records of a small batch never trip it.
    """

    sink_path: str
    quarantine_path: str | None = None
    table_format: str = "parquet"
    iceberg_catalog: str | None = field(default=None, repr=False)
    iceberg_catalog_env: str | None = None
    iceberg_table: str | None = None
    table_retention: TableRetention | None = DEFAULT_RETENTION
    value_format: ValueFormat = "json"
    value_schema: StructType | str | None = None
    value_subject: str | None = None
    key_format: ValueFormat = "bytes"
    key_schema: StructType | str | None = None
    key_subject: str | None = None
    registry: RegistryConnection | None = None
    model: Any = None
    transform: Transform | None = None
    arrow_transform: ArrowTransform | None = None
    reset: ResetPolicy | str | datetime = "earliest"
    fail_on_data_loss: bool = True
    max_records_per_partition: int | None = None
    max_records_per_task: int = 250_000
    min_task_records: int = 20_000
    consumer_config: Mapping[str, Any] = field(default_factory=dict)
    read_timeout_s: float = 30.0
    consume_batch_size: int = 10_000
    compression: str = "snappy"
    naive_timestamps: str = "utc"
    strict_replay: bool = False
    quarantine_limit: float | None = DEFAULT_FRACTION
    quarantine_limit_min_records: int = DEFAULT_MIN_RECORDS
    value_reader: ReaderSchema | None = field(default=None, repr=False)
    """The resolved value reader schema (`with_readers` fills it in)."""
    key_reader: ReaderSchema | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "reset", ResetPolicy.parse(self.reset))
        if not isinstance(self.sink_path, str) or not self.sink_path.strip():
            raise ValueError("sink_path must be a non-empty local path or Hadoop URI")
        if self.quarantine_path is not None and not self.quarantine_path.strip():
            raise ValueError("quarantine_path must be a non-empty path or None for the default")
        naive_timestamp_policy(self.naive_timestamps)
        if self.table_format not in TABLE_FORMATS:
            raise ValueError(f"table_format must be one of {', '.join(TABLE_FORMATS)}, got {self.table_format!r}")
        if self.table_format == "iceberg":
            self.iceberg_identifiers  # noqa: B018 (validates the identifier)
            if self.iceberg_catalog_env is None:  # an environment variable is read when the catalog is opened
                self.iceberg_catalog_url  # noqa: B018 (a remote sink needs a catalog URL)
            elif self.iceberg_catalog is not None:
                raise ValueError("give iceberg_catalog or iceberg_catalog_env, not both")
        if self.table_retention is not None and not isinstance(self.table_retention, TableRetention):
            kind = type(self.table_retention).__name__
            raise ValueError(f"table_retention must be a TableRetention or None, got {kind}")
        if self.registry is not None and not isinstance(self.registry, RegistryConnection):
            raise ValueError(f"registry must be a RegistryConnection, got {type(self.registry).__name__}")
        if self.resolved:
            self.value_columns  # noqa: B018 (validates the format and schema)
            self.key_columns  # noqa: B018 (the same for keys)
            self.row_checks  # noqa: B018 (compiles the model against the decoded columns)
            if self.key_decoded and "key" in self.value_columns.names:
                raise ValueError("a decoded key is the `key` column: rename the value field 'key'")
        if self.transform is not None and not callable(self.transform):
            raise ValueError(f"transform must be a callable DataFrame -> DataFrame, got {self.transform!r}")
        if self.arrow_transform is not None and not callable(self.arrow_transform):
            raise ValueError(f"arrow_transform must be a callable pyarrow Table -> Table, got {self.arrow_transform!r}")
        if self.transform is not None and self.arrow_transform is not None:
            raise ValueError("give transform (Spark) or arrow_transform (pyarrow), not both")
        if not is_number(self.read_timeout_s) or self.read_timeout_s <= 0:  # NaN would disable the timeout
            raise ValueError(f"read_timeout_s must be > 0 seconds, got {self.read_timeout_s!r}")
        if as_integer(self.consume_batch_size, "consume_batch_size") < 1:
            raise ValueError(f"consume_batch_size must be >= 1, got {self.consume_batch_size}")
        self.limits()  # validates the caps
        self.quarantine_rule  # noqa: B018 (validates the quarantine limit)

    @property
    def reshapes(self) -> bool:
        """Whether a transform (Spark or Arrow) may drop rows or add some: the staged rows are then counted by
        their offsets, and the sink's columns are the transform's."""
        return self.transform is not None or self.arrow_transform is not None

    @property
    def key_decoded(self) -> bool:
        """Whether keys are decoded into a `key` column (any key format but 'bytes' and 'raw')."""
        return self.key_format not in RAW_FORMATS

    def side(self, what: str) -> RecordSide:
        """The format settings of values (`what="value"`) or keys (`"key"`)."""
        if what == "value":
            return RecordSide(what, self.value_format, self.value_schema, self.value_subject, self.value_reader)
        return RecordSide(what, self.key_format, self.key_schema, self.key_subject, self.key_reader)

    @property
    def uses_registry(self) -> bool:
        """Whether values or keys are in a Schema Registry format."""
        return any(self.side(what).format in REGISTRY_VALUE_FORMATS for what in ("value", "key"))

    @property
    def resolved(self) -> bool:
        """Whether the reader schemas are known without asking the registry."""
        return not any(self.side(what).needs_registry_schema for what in ("value", "key"))

    def with_readers(self, topics: Collection[str]) -> PipelineSpec:
        """This spec with the reader schemas the registry holds for `topics` filled in, itself when none is needed
        (cohort.pipelines.formats.readers.resolve_readers: its errors)."""
        readers = resolve_readers(self.side("value"), self.side("key"), self.registry, topics)
        if not readers:
            return self
        value, key = readers.get("value", self.value_reader), readers.get("key", self.key_reader)
        return dataclasses.replace(self, value_reader=value, key_reader=key)

    def reader(self, what: str = "value") -> ReaderSchema:
        """The reader schema of values (or keys) of a registry format; ValueError while it is still to be
        read from the registry (`with_readers` does that when a batch starts)."""
        side = self.side(what)
        if side.reader is not None:
            return side.reader
        if side.schema is None:
            raise ValueError(
                f"the {what} reader schema comes from the Schema Registry when a batch starts; it is not known yet"
            )
        return explicit_reader(side.format, side.schema, what)

    @cached_property
    def value_columns(self) -> StructType:
        """The decoded value columns the model and the transform see (besides `kafka` and `key`)."""
        if self.value_format in REGISTRY_VALUE_FORMATS:
            return value_columns_schema(self.value_format, self.reader("value").columns)
        if isinstance(self.value_schema, str):
            raise ValueError("a value schema given as text applies to the 'avro' format only")
        return value_columns_schema(self.value_format, self.value_schema)

    @cached_property
    def key_columns(self) -> StructType | None:
        """The decoded key's columns (None when keys stay raw)."""
        if not self.key_decoded:
            return None
        if self.key_format in REGISTRY_VALUE_FORMATS:
            return self.reader("key").columns
        if isinstance(self.key_schema, str):
            raise ValueError("a key schema given as text applies to the 'avro' format only")
        return value_columns_schema(self.key_format, self.key_schema, what="key")

    @cached_property
    def row_checks(self) -> tuple[RowCheck, ...]:
        """The model compiled to row-level checks (empty without a model)."""
        return () if self.model is None else compile_model(self.model, self.value_columns)

    def _decoder(self, what: str) -> ValueDecoder | RegistryDecoder:
        fmt = self.side(what).format
        if fmt in REGISTRY_VALUE_FORMATS:
            if self.registry is None:
                raise ValueError(
                    f"the {fmt!r} {what} format reads writer schemas from a Schema Registry: give "
                    "PipelineSpec(registry=RegistryConnection(url=...))"
                )
            return RegistryDecoder(self.reader(what), self.registry, self.naive_timestamps, what)
        columns = self.value_columns if what == "value" else self.key_columns
        assert columns is not None
        return ValueDecoder(fmt, columns, self.naive_timestamps)

    @cached_property
    def checker(self) -> RecordChecker:
        """What the reading tasks run on each raw batch: decoding, then the model's row checks."""
        key = self._decoder("key") if self.key_decoded else None
        return RecordChecker(self._decoder("value"), self.row_checks, key)

    @property
    def quarantine_rule(self) -> QuarantineLimit | None:
        """The quarantine limit a batch is held to (None: no limit)."""
        return QuarantineLimit.of(self.quarantine_limit, self.quarantine_limit_min_records)

    @property
    def quarantine_root(self) -> str:
        return self.quarantine_path or default_quarantine_root(self.sink_path)

    @property
    def sink_target(self) -> SinkTarget:
        """Where a batch's outputs land: the sink's and the quarantine's roots, and the table format."""
        return SinkTarget(self.sink_path, self.quarantine_root, self.table_format)

    @property
    def table_target(self) -> TableTarget:
        """What opening the sink's tables needs (delta, iceberg); read when they are opened, since an Iceberg
        catalog's URL given by `iceberg_catalog_env` is read then (`iceberg_catalog_url`)."""
        if self.table_format != "iceberg":
            return TableTarget(self.table_format, self.sink_path, self.quarantine_root, retention=self.table_retention)
        return TableTarget(
            "iceberg",
            self.sink_path,
            self.quarantine_root,
            self.iceberg_catalog_url,
            self.iceberg_identifiers,
            retention=self.table_retention,
            default_catalog=self.iceberg_catalog is None and self.iceberg_catalog_env is None,
        )

    @property
    def iceberg_catalog_url(self) -> str:
        """The Iceberg catalog's SQLAlchemy URL (the default SQLite file needs a local sink path)."""
        if self.iceberg_catalog is not None and self.iceberg_catalog_env is not None:
            raise ValueError("give iceberg_catalog or iceberg_catalog_env, not both")
        if self.iceberg_catalog_env is not None:
            url = os.environ.get(self.iceberg_catalog_env, "").strip()
            if not url:
                raise ValueError(
                    f"the environment variable {self.iceberg_catalog_env!r} (iceberg_catalog_env) is not set: it "
                    "must hold the Iceberg catalog's SQLAlchemy URL"
                )
            return url
        if self.iceberg_catalog is not None:
            if not self.iceberg_catalog.strip():
                raise ValueError("iceberg_catalog must be a SQLAlchemy URL or None for the default")
            return self.iceberg_catalog
        if "://" in self.sink_path or ":" in self.sink_path.split("/", 1)[0]:
            raise ValueError("an Iceberg sink outside the local file system needs iceberg_catalog (a SQLAlchemy URL)")
        return f"sqlite:///{os.path.abspath(self.sink_path)}/_catalog.sqlite"

    @property
    def iceberg_identifiers(self) -> tuple[str, str]:
        """(sink table, quarantine table) identifiers, `namespace.table`, checked."""
        last = re.sub(r"[^A-Za-z0-9_]", "_", self.sink_path.rstrip("/").rsplit("/", 1)[-1])
        name = self.iceberg_table or f"cohort.{last if _IDENTIFIER.fullmatch(last) else f't_{last}'}"
        parts = name.split(".")
        if len(parts) != 2 or not all(_IDENTIFIER.fullmatch(part) for part in parts):
            raise ValueError(
                f"iceberg_table must be `namespace.table` with letters, digits and _ in each part, got {name!r}"
            )
        return name, f"{name}_quarantine"

    def limits(self, target_tasks: int = 1) -> PlanLimits:
        """The planning limits of this spec for a cluster running `target_tasks` tasks at once."""
        assert isinstance(self.reset, ResetPolicy)
        return PlanLimits(
            max_records_per_partition=self.max_records_per_partition,
            max_records_per_task=self.max_records_per_task,
            target_tasks=target_tasks,
            min_task_records=self.min_task_records,
            fail_on_data_loss=self.fail_on_data_loss,
            reset=self.reset,
        )
