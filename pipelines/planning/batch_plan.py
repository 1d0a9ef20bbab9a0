"""The plan of one batch within a spec's limits: ledger offsets and Kafka's watermarks through `plan_batch`, for the
session's parallelism."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from cohort.common.ledger import OffsetLedger
from cohort.common.types import TopicPartition
from cohort.pipelines.planning.plan import BatchPlan, PlanLimits, plan_batch
from cohort.pipelines.planning.positions import gather_positions
from cohort.pipelines.spark import parallelism

__all__ = ["plan_within"]


def plan_within(
    spark: Any,
    limits: PlanLimits,
    kafka_config: Mapping[str, Any],
    partitions: Sequence[TopicPartition],
    ledger: OffsetLedger,
    *,
    new_partitions: Collection[TopicPartition] = (),
) -> BatchPlan:
    """The batch plan for `partitions` within `limits` (a spec's `limits()`: its caps and where partitions without
    a committed offset start), split for the session's parallelism: ledger offsets + Kafka watermarks through
    `cohort.pipelines.planning.plan`."""
    positions = gather_positions(kafka_config, ledger, partitions, limits.reset, new_partitions=new_partitions)
    return plan_batch(positions, replace(limits, target_tasks=parallelism(spark)))
