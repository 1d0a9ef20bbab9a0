"""Cohort's Spark data path: plan, read (mapInArrow + confluent-kafka), decode, validate, sink, commit.

Pure PySpark, confluent-kafka, pandera and pyarrow (no Dagster): usable from a plain script.

Example:
    >>> from pipelines import PipelineSpec, build_session, run_batch  # doctest: +SKIP
    >>> result = run_batch(build_session(), PipelineSpec(sink_path="/tmp/lake", value_format="utf8"),
    ...                    {"bootstrap.servers": "localhost:9092"}, [TopicPartition("orders", 0)], ledger)
"""

from pipelines.batch import plan_for, run_batch
from pipelines.kafka_mirror import KafkaOffsetMirror, MirrorError, kafka_committed
from pipelines.plan import BatchPlan, OffsetOutOfRangeError, PartitionPlan, PlanLimits, ResetPolicy
from pipelines.reader import RECORD_SCHEMA, OffsetSpan, ReadError, read_range, read_spans
from pipelines.results import BatchResult, CountMismatchError, PartitionResult
from pipelines.sink import SinkError, SinkLayout
from pipelines.spark import build_session
from pipelines.spec import PipelineSpec
from pipelines.validate import ModelError

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
