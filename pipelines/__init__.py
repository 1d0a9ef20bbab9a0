"""Cohort's Spark data path: plan, read (mapInArrow + confluent-kafka), decode, validate, sink, commit.

Pure PySpark, confluent-kafka, pandera and pyarrow (no Dagster): usable from a plain script. The names below
are imported on first use, so a Spark executor running a reading task loads only `cohort.pipelines.tasks.reader`
and what it needs (confluent-kafka, pyarrow, msgspec).

Example:
    >>> from cohort.assignment import Coordinator, StandaloneLedger  # doctest: +SKIP
    >>> from cohort.common import TopicPartition  # doctest: +SKIP
    >>> from cohort.pipelines import PipelineSpec, build_session, run_batch  # doctest: +SKIP
    >>> ledger = StandaloneLedger(Coordinator.from_url("sqlite:///cohort.db"), "orders-ingest")  # doctest: +SKIP
    >>> result = run_batch(build_session(), PipelineSpec(sink_path="/tmp/lake", value_format="utf8"),
    ...                    {"bootstrap.servers": "localhost:9092"}, [TopicPartition("orders", 0)], ledger)
"""

from typing import TYPE_CHECKING

from cohort.common.lazy import lazy_exports

if TYPE_CHECKING:
    from cohort.pipelines.batch.executor_errors import ExecutorDependencyError, ReadingTaskError
    from cohort.pipelines.batch.results import BatchResult, CountMismatchError, PartitionResult
    from cohort.pipelines.batch.run import plan_for, run_batch
    from cohort.pipelines.formats.registry import RegistryConnection, RegistryError, RegistryUnavailableError
    from cohort.pipelines.kafka.mirror import KafkaOffsetMirror, MirrorError, kafka_committed
    from cohort.pipelines.planning.plan import BatchPlan, OffsetOutOfRangeError, PartitionPlan, PlanLimits, ResetPolicy
    from cohort.pipelines.replay.check import ReplayChangedError
    from cohort.pipelines.sink.layout import SinkError, SinkLayout
    from cohort.pipelines.sink.quarantine_limit import QuarantineLimitError
    from cohort.pipelines.spark import build_session
    from cohort.pipelines.spec import PipelineSpec
    from cohort.pipelines.spec_settings import SettingError, spec_from_settings
    from cohort.pipelines.tables.retention import TableRetention
    from cohort.pipelines.tables.store import TableConflictError
    from cohort.pipelines.tasks.arrow_transform import ArrowTransform, ArrowTransformError
    from cohort.pipelines.tasks.reader import RECORD_SCHEMA, OffsetSpan, ReadError, read_range, read_spans
    from cohort.pipelines.tasks.validate import ModelError

__all__ = [
    "RECORD_SCHEMA",
    "ArrowTransform",
    "ArrowTransformError",
    "BatchPlan",
    "BatchResult",
    "CountMismatchError",
    "ExecutorDependencyError",
    "KafkaOffsetMirror",
    "MirrorError",
    "ModelError",
    "OffsetOutOfRangeError",
    "OffsetSpan",
    "PartitionPlan",
    "PartitionResult",
    "PipelineSpec",
    "PlanLimits",
    "QuarantineLimitError",
    "ReadError",
    "ReadingTaskError",
    "RegistryConnection",
    "RegistryError",
    "RegistryUnavailableError",
    "ReplayChangedError",
    "ResetPolicy",
    "SettingError",
    "SinkError",
    "SinkLayout",
    "TableConflictError",
    "TableRetention",
    "build_session",
    "kafka_committed",
    "plan_for",
    "read_range",
    "read_spans",
    "run_batch",
    "spec_from_settings",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "plan_for": "cohort.pipelines.batch.run",
        "run_batch": "cohort.pipelines.batch.run",
        "KafkaOffsetMirror": "cohort.pipelines.kafka.mirror",
        "MirrorError": "cohort.pipelines.kafka.mirror",
        "kafka_committed": "cohort.pipelines.kafka.mirror",
        "BatchPlan": "cohort.pipelines.planning.plan",
        "OffsetOutOfRangeError": "cohort.pipelines.planning.plan",
        "PartitionPlan": "cohort.pipelines.planning.plan",
        "PlanLimits": "cohort.pipelines.planning.plan",
        "ResetPolicy": "cohort.pipelines.planning.plan",
        "RECORD_SCHEMA": "cohort.pipelines.tasks.reader",
        "OffsetSpan": "cohort.pipelines.tasks.reader",
        "ReadError": "cohort.pipelines.tasks.reader",
        "read_range": "cohort.pipelines.tasks.reader",
        "read_spans": "cohort.pipelines.tasks.reader",
        "BatchResult": "cohort.pipelines.batch.results",
        "CountMismatchError": "cohort.pipelines.batch.results",
        "PartitionResult": "cohort.pipelines.batch.results",
        "SinkError": "cohort.pipelines.sink.layout",
        "SinkLayout": "cohort.pipelines.sink.layout",
        "build_session": "cohort.pipelines.spark",
        "PipelineSpec": "cohort.pipelines.spec",
        "ModelError": "cohort.pipelines.tasks.validate",
        "RegistryConnection": "cohort.pipelines.formats.registry",
        "RegistryError": "cohort.pipelines.formats.registry",
        "RegistryUnavailableError": "cohort.pipelines.formats.registry",
        "TableRetention": "cohort.pipelines.tables.retention",
        "TableConflictError": "cohort.pipelines.tables.store",
        "ArrowTransform": "cohort.pipelines.tasks.arrow_transform",
        "ArrowTransformError": "cohort.pipelines.tasks.arrow_transform",
        "QuarantineLimitError": "cohort.pipelines.sink.quarantine_limit",
        "ReplayChangedError": "cohort.pipelines.replay.check",
        "ReadingTaskError": "cohort.pipelines.batch.executor_errors",
        "ExecutorDependencyError": "cohort.pipelines.batch.executor_errors",
        "SettingError": "cohort.pipelines.spec_settings",
        "spec_from_settings": "cohort.pipelines.spec_settings",
    },
)
