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
    from cohort.pipelines.batch.results import BatchResult, CountMismatchError, PartitionResult
    from cohort.pipelines.batch.run import run_batch
    from cohort.pipelines.kafka.mirror import KafkaOffsetMirror, MirrorError, kafka_committed
    from cohort.pipelines.planning.batch_plan import plan_for
    from cohort.pipelines.planning.plan import BatchPlan, OffsetOutOfRangeError, PartitionPlan, PlanLimits, ResetPolicy
    from cohort.pipelines.sink.layout import SinkError, SinkLayout
    from cohort.pipelines.spark import build_session
    from cohort.pipelines.spec import PipelineSpec
    from cohort.pipelines.tasks.reader import RECORD_SCHEMA, OffsetSpan, ReadError, read_range, read_spans
    from cohort.pipelines.tasks.validate import ModelError

__all__ = [
    "RECORD_SCHEMA",
    "BatchPlan",
    "BatchResult",
    "CountMismatchError",
    "KafkaOffsetMirror",
    "MirrorError",
    "ModelError",
    "OffsetOutOfRangeError",
    "OffsetSpan",
    "PartitionPlan",
    "PartitionResult",
    "PipelineSpec",
    "PlanLimits",
    "ReadError",
    "ResetPolicy",
    "SinkError",
    "SinkLayout",
    "build_session",
    "kafka_committed",
    "plan_for",
    "read_range",
    "read_spans",
    "run_batch",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "plan_for": "cohort.pipelines.planning.batch_plan",
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
    },
)
