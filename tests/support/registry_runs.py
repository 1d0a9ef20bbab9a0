"""One `run_batch` over a single-partition topic of registry-framed records, and where its records landed: for
the registry-format tests that go the way a user does (confluent-kafka's serializers, the real broker, the
test registry over HTTP, real Spark, the coordinator's ledger)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.results import BatchResult
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.formats.registry import RegistryConnection
from cohort.pipelines.spec import PipelineSpec

__all__ = ["Landed", "connection", "landed", "run_one_partition"]

NOT_VALUES = ("kafka", "topic", "partition")


def connection(server: Any) -> RegistryConnection:
    """Fast failures against the test registry (harness.schema_registry)."""
    return RegistryConnection(server.url, max_retries=1, retry_wait_ms=1)


def run_one_partition(
    spark: Any, spec: PipelineSpec, kafka_config: dict[str, Any], topic: str, ledger: Any
) -> BatchResult:
    """One batch over partition 0 of `topic`, committed to `ledger`."""
    return run_batch(spark, spec, kafka_config, [TopicPartition(topic, 0)], ledger)


class Landed:
    """The sink and quarantine rows of a batch, by offset: sink rows as their decoded columns (`key` too, when
    keys are decoded), quarantine rows as their reason."""

    def __init__(self, spark: Any, spec: PipelineSpec) -> None:
        self.rows: dict[int, dict[str, Any]] = {}
        self.reasons: dict[int, str] = {}
        if any(Path(spec.sink_path).glob("topic=*/partition=*/*.parquet")):
            for row in spark.read.parquet(spec.sink_path).collect():
                values = row.asDict(recursive=True)
                self.rows[row.kafka.offset] = {k: v for k, v in values.items() if k not in NOT_VALUES}
        if any(Path(spec.quarantine_root).glob("**/*.parquet")):
            for row in spark.read.parquet(spec.quarantine_root).collect():
                self.reasons[row.kafka.offset] = row.reason

    @property
    def columns(self) -> list[str]:
        first = next(iter(self.rows.values()), {})
        return list(first)


def landed(spark: Any, spec: PipelineSpec) -> Landed:
    return Landed(spark, spec)
