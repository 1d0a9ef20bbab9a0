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

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from cohort.common.validation import as_integer, is_number
from cohort.pipelines.checked import RecordChecker
from cohort.pipelines.decode import ValueDecoder, ValueFormat, naive_timestamp_policy, value_columns_schema
from cohort.pipelines.plan import PlanLimits, ResetPolicy
from cohort.pipelines.validate import RowCheck, compile_model

__all__ = ["PipelineSpec"]

Transform = Callable[[DataFrame], DataFrame]


@dataclass(frozen=True)
class PipelineSpec:
    """Configuration of the Spark data path (see cohort.pipelines.batch.run_batch).

    Attributes:
        sink_path: root of the Parquet output (local path or Hadoop-compatible URI).
        quarantine_path: root of the quarantine output; default `<sink_path>/_quarantine`, which Spark's
            readers of the sink ignore.
        value_format: 'json' (into `value_schema`), 'utf8' (a string `value`) or 'bytes'.
        value_schema: the Spark StructType of JSON values; required for 'json' only.
        model: a pandera.pyspark DataFrameModel over the decoded value columns, checked row by row.
        transform: DataFrame -> DataFrame applied to valid records before the sink. It must keep the
            `kafka` column and one output row per input row (the batch checks the counts).
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
    """

    sink_path: str
    quarantine_path: str | None = None
    value_format: ValueFormat = "json"
    value_schema: StructType | None = None
    model: Any = None
    transform: Transform | None = None
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "reset", ResetPolicy.parse(self.reset))
        if not isinstance(self.sink_path, str) or not self.sink_path.strip():
            raise ValueError("sink_path must be a non-empty local path or Hadoop URI")
        if self.quarantine_path is not None and not self.quarantine_path.strip():
            raise ValueError("quarantine_path must be a non-empty path or None for the default")
        naive_timestamp_policy(self.naive_timestamps)
        self.value_columns  # noqa: B018 (validates the format and schema)
        self.row_checks  # noqa: B018 (compiles the model against the decoded columns)
        if self.transform is not None and not callable(self.transform):
            raise ValueError(f"transform must be a callable DataFrame -> DataFrame, got {self.transform!r}")
        if not is_number(self.read_timeout_s) or self.read_timeout_s <= 0:  # NaN would disable the timeout
            raise ValueError(f"read_timeout_s must be > 0 seconds, got {self.read_timeout_s!r}")
        if as_integer(self.consume_batch_size, "consume_batch_size") < 1:
            raise ValueError(f"consume_batch_size must be >= 1, got {self.consume_batch_size}")
        self.limits()  # validates the caps

    @cached_property
    def value_columns(self) -> StructType:
        """The decoded value columns the model and the transform see (besides `kafka`)."""
        return value_columns_schema(self.value_format, self.value_schema)

    @cached_property
    def row_checks(self) -> tuple[RowCheck, ...]:
        """The model compiled to row-level checks (empty without a model)."""
        return () if self.model is None else compile_model(self.model, self.value_columns)

    @cached_property
    def checker(self) -> RecordChecker:
        """What the reading tasks run on each raw batch: decoding, then the model's row checks."""
        decoder = ValueDecoder(self.value_format, self.value_columns, self.naive_timestamps)
        return RecordChecker(decoder, self.row_checks)

    @property
    def quarantine_root(self) -> str:
        return self.quarantine_path or f"{self.sink_path.rstrip('/')}/_quarantine"

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
