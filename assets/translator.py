"""The small configuration of one group's Dagster objects and the translator from (group, topic) to specs.

`CohortConfig` is what a user writes (group, topics or pattern, pipeline spec, a few knobs);
`DagsterCohortTranslator` decides asset keys, partition-set names, check specs and metadata; override
one method to rename or regroup. Metadata keys live under the `cohort/` prefix.

Example:
    >>> config = CohortConfig(group="orders-ingest", topics=("orders",), pipeline=None)
    >>> translator = DagsterCohortTranslator()
    >>> translator.get_asset_key(config.group, "orders").to_user_string()
    'cohort/orders_ingest/orders'
    >>> translator.get_partitions_def_name(config.group, "orders")
    'cohort__orders-ingest__orders'
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from cohort.assignment.messages import DEFAULT_ASSIGNORS
from cohort.common.names import validate_group_name, validate_topic_name
from cohort.resources.group import DEFAULT_STORE_URL, CohortGroupResource

__all__ = ["CHECK_CONTIGUOUS", "CHECK_LAG", "METADATA_PREFIX", "CohortConfig", "DagsterCohortTranslator", "safe_name"]

METADATA_PREFIX = "cohort/"
CHECK_CONTIGUOUS = "offsets_contiguous"
CHECK_LAG = "lag_under_threshold"


def safe_name(text: str) -> str:
    """`text` with every character Dagster does not allow in names replaced by '_'."""
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


@dataclass(frozen=True)
class CohortConfig:
    """One consumer group as Dagster objects: its topics (or pattern), pipeline and group settings.

    Attributes:
        group: the consumer group name.
        topics: explicitly subscribed topics (one asset each).
        topic_pattern: regular expression subscription; topics it matches when the definitions load
            (`known_topics`) get assets, later ones are picked up by the topic sensor and the next reload.
        pipeline: the `cohort.pipelines.spec.PipelineSpec` the workers run.
        known_topics: topics matching the pattern at load time (the caller looked them up).
        worker_slots: number of worker slots (static members); the schedule launches one run per slot.
        lag_threshold: the lag check fails above this many records per partition.
        schedule: cron of the worker schedule (None: no schedule).
        resource_key: the group resource's key (default `cohort_group_<group>`).
        group_settings: further `CohortGroupResource` fields (timeouts, assignors, store URL...).
    """

    group: str
    topics: Sequence[str] = ()
    pipeline: Any = None
    topic_pattern: str | None = None
    known_topics: Sequence[str] = ()
    worker_slots: int = 3
    lag_threshold: int = 0
    schedule: str | None = "*/15 * * * *"
    store_url: str = DEFAULT_STORE_URL
    assignors: Sequence[str] = DEFAULT_ASSIGNORS
    group_settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_group_name(self.group)
        if isinstance(self.topics, str):
            raise TypeError("topics must be a sequence of topic names, not a string")
        for topic in (*self.topics, *self.known_topics):
            validate_topic_name(topic)
        if self.lag_threshold < 0:
            raise ValueError(f"lag_threshold must be >= 0, got {self.lag_threshold}")
        if not self.topics and self.topic_pattern is None:
            raise ValueError(f"group {self.group!r} subscribes to nothing: give topics or topic_pattern")
        unknown = sorted(set(self.group_settings) - set(CohortGroupResource.model_fields))
        if unknown:
            raise ValueError(
                f"unknown group_settings {unknown}; CohortGroupResource fields are "
                f"{sorted(CohortGroupResource.model_fields)}"
            )
        self.group_resource()  # refuses a bad assignor, slot count, timeout or limit here, where it is written

    @property
    def asset_topics(self) -> tuple[str, ...]:
        """The topics that get an asset: explicit ones plus pattern matches known at load time."""
        matched = []
        if self.topic_pattern is not None:
            regex = re.compile(self.topic_pattern)
            matched = [t for t in self.known_topics if regex.fullmatch(t)]
        return tuple(sorted(set(self.topics).union(matched)))

    @property
    def resource_key(self) -> str:
        """The key of this group's `CohortGroupResource` in the Definitions."""
        return f"cohort_group_{safe_name(self.group)}"

    def group_resource(self) -> CohortGroupResource:
        """The group resource these settings describe."""
        return CohortGroupResource(
            group=self.group,
            topics=list(self.topics),
            topic_pattern=self.topic_pattern,
            assignors=list(self.assignors),
            worker_slots=self.worker_slots,
            store_url=self.store_url,
            **self.group_settings,
        )


class DagsterCohortTranslator:
    """Maps a group and a topic to Dagster names and specs; subclass and override to customise."""

    def get_asset_key(self, group: str, topic: str) -> dg.AssetKey:
        """`cohort/<group>/<topic>` (characters Dagster refuses become '_')."""
        return dg.AssetKey(["cohort", safe_name(group), safe_name(topic)])

    def get_partitions_def_name(self, group: str, topic: str) -> str:
        """The dynamic partition set holding the topic's partition numbers for this group."""
        return f"cohort__{group}__{topic}"

    def get_partitions_def(self, group: str, topic: str) -> dg.DynamicPartitionsDefinition:
        """Dynamic partitions keyed by the topic's partition numbers ('0', '1', ...)."""
        return dg.DynamicPartitionsDefinition(name=self.get_partitions_def_name(group, topic))

    def get_job_name(self, group: str) -> str:
        """The worker job of the group."""
        return f"cohort_worker__{safe_name(group)}"

    def get_checks_job_name(self, group: str) -> str:
        """The job running the group's asset checks."""
        return f"cohort_checks__{safe_name(group)}"

    def get_asset_spec(self, config: CohortConfig, topic: str) -> dg.AssetSpec:
        """The asset of one topic as consumed by one group."""
        return dg.AssetSpec(
            key=self.get_asset_key(config.group, topic),
            description=(
                f"Topic {topic!r} as consumed by group {config.group!r}: one partition per Kafka partition; "
                "each materialization is one committed offset range."
            ),
            partitions_def=self.get_partitions_def(config.group, topic),
            group_name=safe_name(config.group),
            kinds={"kafka", "spark"},
            metadata={
                f"{METADATA_PREFIX}group": config.group,
                f"{METADATA_PREFIX}topic": topic,
                f"{METADATA_PREFIX}worker_slots": dg.MetadataValue.int(config.worker_slots),
            },
            tags={"cohort/group": safe_name(config.group)},
        )

    def get_check_specs(self, config: CohortConfig, topic: str) -> list[dg.AssetCheckSpec]:
        """Offset contiguity (ledger vs materializations vs Kafka's committed offsets) and lag."""
        key = self.get_asset_key(config.group, topic)
        return [
            dg.AssetCheckSpec(
                CHECK_CONTIGUOUS,
                asset=key,
                description="Per partition, the ledger's ranges are contiguous and agree with the "
                "materializations and with Kafka's committed offsets.",
            ),
            dg.AssetCheckSpec(
                CHECK_LAG,
                asset=key,
                description=f"Per partition, lag (end offset - committed offset) <= {config.lag_threshold}.",
            ),
        ]
