"""Asset checks of a topic asset: offset contiguity and agreement per partition, and lag under a threshold.

Both checks of a topic run in one step (they share the Kafka and ledger reads). Contiguity fails on any
ledger gap or overlap, on a ledger range without a materialization or a materialization the ledger does
not hold, and when Kafka's committed offset differs from the ledger's. Lag fails when some partition is
more than `lag_threshold` records behind its end offset.
"""

from collections.abc import Iterator

import dagster as dg

from cohort.assets.audit import gather_audits
from cohort.assets.translator import CHECK_CONTIGUOUS, CHECK_LAG, CohortConfig, DagsterCohortTranslator, safe_name
from cohort.resources.group import CohortGroupResource
from cohort.resources.kafka import KafkaResource

__all__ = ["build_topic_checks"]

_MAX_SHOWN = 20


def build_topic_checks(
    config: CohortConfig, topic: str, translator: DagsterCohortTranslator
) -> dg.AssetChecksDefinition:
    """The contiguity and lag checks of one topic's asset."""
    group_key = config.resource_key
    key = translator.get_asset_key(config.group, topic)

    @dg.multi_asset_check(
        name=f"cohort_checks__{safe_name(config.group)}__{safe_name(topic)}",
        specs=translator.get_check_specs(config, topic),
        required_resource_keys={group_key, "kafka"},
        description=f"Offset audit of {topic!r} for group {config.group!r}.",
    )
    def topic_checks(context: dg.AssetCheckExecutionContext) -> Iterator[dg.AssetCheckResult]:
        group: CohortGroupResource = getattr(context.resources, group_key)
        kafka: KafkaResource = context.resources.kafka
        partitions = kafka.partition_counts([topic]).get(topic, 0)
        audits = gather_audits(
            group.get_coordinator(),
            config.group,
            topic,
            partitions,
            instance=context.instance,
            asset_key=key,
            kafka=kafka,
        )
        problems = [p for a in audits for p in a.problems]
        yield dg.AssetCheckResult(
            check_name=CHECK_CONTIGUOUS,
            asset_key=key,
            passed=not problems,
            metadata={
                "cohort/partitions": dg.MetadataValue.int(len(audits)),
                "cohort/ledger_ranges": dg.MetadataValue.int(sum(a.ledger_ranges for a in audits)),
                "cohort/gaps_recorded": dg.MetadataValue.int(sum(a.gaps for a in audits)),
                "cohort/problems": dg.MetadataValue.int(len(problems)),
                "cohort/details": dg.MetadataValue.md(
                    "\n".join(f"- {p}" for p in problems[:_MAX_SHOWN]) or "every partition agrees"
                ),
            },
        )
        behind = {str(a.tp.partition): a.lag for a in audits if a.lag > config.lag_threshold}
        yield dg.AssetCheckResult(
            check_name=CHECK_LAG,
            asset_key=key,
            passed=not behind,
            metadata={
                "cohort/max_lag": dg.MetadataValue.int(max((a.lag for a in audits), default=0)),
                "cohort/total_lag": dg.MetadataValue.int(sum(a.lag for a in audits)),
                "cohort/threshold": dg.MetadataValue.int(config.lag_threshold),
                "cohort/partitions_behind": dg.MetadataValue.json(dict(list(behind.items())[:_MAX_SHOWN])),
            },
        )

    return topic_checks
