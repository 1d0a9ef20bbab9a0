"""The plan of one batch for a spec: ledger offsets and Kafka's watermarks through `plan_batch`, for the
session's parallelism."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from cohort.common.ledger import OffsetLedger
from cohort.common.types import TopicPartition
from cohort.pipelines.planning.plan import BatchPlan, plan_batch
from cohort.pipelines.planning.positions import gather_positions
from cohort.pipelines.spark import parallelism
from cohort.pipelines.spec import PipelineSpec


def plan_for(
    spark: Any,
    spec: PipelineSpec,
    kafka_config: Mapping[str, Any],
    partitions: Sequence[TopicPartition],
    ledger: OffsetLedger,
    *,
    new_partitions: Collection[TopicPartition] = (),
) -> BatchPlan:
    """The batch plan for `partitions`: ledger offsets + Kafka watermarks through `cohort.pipelines.planning.plan`."""
    positions = gather_positions(kafka_config, ledger, partitions, spec.limits().reset, new_partitions=new_partitions)
    return plan_batch(positions, spec.limits(target_tasks=parallelism(spark)))
