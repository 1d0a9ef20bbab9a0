"""The small configuration of one group's Dagster objects and the translator from (group, topic) to specs.

`CohortConfig` is what a user writes (group, topics or pattern, pipeline spec, a few knobs);
`DagsterCohortTranslator` decides asset keys, partition-set names, check specs and metadata; override
one method to rename or regroup. Metadata keys live under the `cohort/` prefix.

Example:
    >>> from cohort.resources import CohortGroupResource
    >>> config = CohortConfig(CohortGroupResource(group="orders-ingest", topics=["orders"]))
    >>> translator = DagsterCohortTranslator()
    >>> translator.get_asset_key(config.group, "orders").to_user_string()
    'cohort/orders_ingest/orders'
    >>> translator.get_partitions_def_name(config.group)
    'cohort__orders-ingest'
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg

from cohort.common.names import safe_name, validate_topic_name
from cohort.pipelines.sink.layout import SinkLayout
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tasks.checked import is_scalar_key
from cohort.pipelines.tasks.writer import arrow_filesystem
from cohort.resources.group import CohortGroupResource
from cohort.runtime.lineage import METADATA_PREFIX, ConsumedRange

__all__ = [
    "CHECK_CONTIGUOUS",
    "CHECK_LAG",
    "CHECK_SINK",
    "METADATA_PREFIX",
    "CohortConfig",
    "DagsterCohortTranslator",
    "RangeMetadata",
    "consumed_offsets",
    "landed_columns",
    "safe_name",
]

CHECK_CONTIGUOUS = "offsets_contiguous"
CHECK_LAG = "lag_under_threshold"
CHECK_SINK = "sink_matches_ledger"


_TEXT_FIELDS = frozenset({"partition", "from_offset", "until_offset", "generation", "replay", "content_hash"})
"""Ids and offsets: shown as text, so Dagster does not plot them as if they were measurements."""
_RUN_FIELDS = frozenset({"run_id", "reported_by"})


@dataclass(frozen=True)
class RangeMetadata(ConsumedRange):
    """A consumed range as a Dagster materialization's metadata (docs/metadata.md)."""

    @classmethod
    def of(cls, consumed: ConsumedRange) -> RangeMetadata:
        """The same record, with its Dagster form."""
        return cls(**dict(consumed.items()))

    def to_metadata(self) -> dict[str, Any]:
        """The `cohort/`-prefixed metadata: counts and durations as numbers (they plot per partition), ids
        and offsets as text, runs as links; unset keys left out."""
        metadata: dict[str, Any] = {}
        for name, value in self.items():
            key = f"{METADATA_PREFIX}{name}"
            if name in _TEXT_FIELDS:
                metadata[key] = str(value)
            elif name in _RUN_FIELDS:
                metadata[key] = dg.MetadataValue.dagster_run(value)
            elif isinstance(value, bool) or not isinstance(value, int | float):
                metadata[key] = value
            else:
                metadata[key] = dg.MetadataValue.int(value) if isinstance(value, int) else dg.MetadataValue.float(value)
        return metadata


def landed_columns(pipeline: PipelineSpec) -> list[tuple[str, str]]:
    """(name, type) of the sink's columns without a transform: the Kafka coordinates, the decoded key, then the
    value columns; a schema still to be read from the registry (when a batch starts) adds no columns."""
    columns = [
        ("kafka.topic", "string"),
        ("kafka.partition", "int"),
        ("kafka.offset", "bigint"),
        ("kafka.timestamp", "timestamp"),
        ("kafka.key", "binary"),
        ("kafka.headers", "array<struct<key:string,value:binary>>"),
    ]
    if pipeline.key_decoded and not pipeline.side("key").needs_registry_schema:
        key = pipeline.key_columns
        assert key is not None
        key_type = key.fields[0].dataType if is_scalar_key(key) else key
        columns.append(("key", key_type.simpleString()))
    if pipeline.side("value").needs_registry_schema:
        return columns
    return columns + [(f.name, f.dataType.simpleString()) for f in pipeline.value_columns.fields]


def table_schema(columns: Sequence[tuple[str, str]]) -> dg.TableSchema:
    """Dagster's column schema (shown on the asset page) from (name, type) pairs."""
    return dg.TableSchema(columns=[dg.TableColumn(name, type_) for name, type_ in columns])


def consumed_offsets(metadata: Mapping[str, Any]) -> tuple[int, int] | None:
    """The [from, until) offsets a materialization's metadata records, None when it records none."""
    values = []
    for name in ("from_offset", "until_offset"):
        entry = metadata.get(f"{METADATA_PREFIX}{name}")
        value = getattr(entry, "value", entry)
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        values.append(value)
    return values[0], values[1]


@dataclass(frozen=True)
class CohortConfig:
    """One consumer group as Dagster objects: the group resource that declares it, and what to build for it.

    The group's protocol settings (name, subscription, worker slots, assignors, timeouts, store URL) are
    declared once, in the `CohortGroupResource`; this record adds only what the Dagster objects need.

    Attributes:
        group_resource: the group's `CohortGroupResource`; the Definitions carry it under `resource_key`,
            and the worker job, the sensors and the checks all take it from there.
        pipeline: the `PipelineSpec` the workers run.
        known_topics: topics matching the group's pattern when the definitions load (they get assets; later
            ones are consumed at once and get an asset after the next reload).
        lag_threshold: records a partition may be behind its end offset before the lag check looks at its
            freshness (default 0).
        schedule: cron of the worker schedule (None: no schedule).
        freshness_s: the lag check fails for a partition that is more than `lag_threshold` records behind
            and has had no commit for this many seconds (default one hour: a group on a 15-minute schedule
            that misses four batches in a row).
        audit_schedule: cron of the full audit: the checks over the whole ledger and sink (default daily at
            03:00; None: none). The checks after each batch read only what changed since their marks.
        host_slots: the worker slots this Dagster deployment launches (its schedule, the topic sensor, a
            Materialize of every slot); None: all of them. When several Dagster instances (hosts) run one group
            on a shared store, give each its own share; a lost slot is rerun by whichever host's membership
            sensor claims the loss first in the store.
    """

    group_resource: CohortGroupResource
    pipeline: PipelineSpec | None = None
    known_topics: Sequence[str] = ()
    lag_threshold: int = 0
    schedule: str | None = "*/15 * * * *"
    freshness_s: float = 3600.0
    host_slots: Sequence[int] | None = None
    audit_schedule: str | None = "0 3 * * *"

    def __post_init__(self) -> None:
        if not isinstance(self.group_resource, CohortGroupResource):
            raise TypeError(
                "CohortConfig's first argument is the group's CohortGroupResource, "
                f"got {type(self.group_resource).__name__}"
            )
        if isinstance(self.known_topics, str):
            raise TypeError("known_topics must be a sequence of topic names, not a string")
        for topic in self.known_topics:
            validate_topic_name(topic)
        if self.lag_threshold < 0:
            raise ValueError(f"lag_threshold must be >= 0, got {self.lag_threshold}")
        if not self.freshness_s > 0:
            raise ValueError(f"freshness_s must be > 0, got {self.freshness_s}")
        if self.host_slots is not None:
            self._check_host_slots(self.host_slots)

    def _check_host_slots(self, slots: Sequence[int]) -> None:
        if isinstance(slots, str) or not slots:
            raise ValueError(f"host_slots must be a non-empty sequence of worker slots, got {slots!r}")
        wrong = [s for s in slots if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= self.worker_slots]
        if wrong:
            raise ValueError(f"group {self.group!r} has worker slots 1..{self.worker_slots}; host_slots has {wrong}")
        if len(set(slots)) != len(slots):
            raise ValueError(f"host_slots names a slot twice: {list(slots)}")

    @property
    def group(self) -> str:
        """The consumer group's name."""
        return self.group_resource.group

    @property
    def topics(self) -> tuple[str, ...]:
        """The explicitly subscribed topics."""
        return tuple(self.group_resource.topics)

    @property
    def topic_pattern(self) -> str | None:
        """The group's pattern subscription, if any."""
        return self.group_resource.topic_pattern

    @property
    def worker_slots(self) -> int:
        """How many worker slots (static members) the group has."""
        return self.group_resource.worker_slots

    @property
    def launched_slots(self) -> tuple[int, ...]:
        """The worker slots this deployment launches: `host_slots`, or every slot."""
        if self.host_slots is None:
            return tuple(range(1, self.worker_slots + 1))
        return tuple(sorted(self.host_slots))

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


class DagsterCohortTranslator:
    """Maps a group and a topic to Dagster names and specs; subclass and override to customise."""

    def get_asset_key(self, group: str, topic: str) -> dg.AssetKey:
        """`cohort/<group>/<topic>` (characters Dagster refuses become '_')."""
        return dg.AssetKey(["cohort", safe_name(group), safe_name(topic)])

    def get_landed_asset_key(self, group: str, topic: str) -> dg.AssetKey:
        """`cohort/<group>/<topic>_landed`: the topic's records as the sink holds them (Parquet)."""
        return dg.AssetKey(["cohort", safe_name(group), f"{safe_name(topic)}_landed"])

    def get_partitions_def_name(self, group: str) -> str:
        """The dynamic partition set of the group's assets: the Kafka partition numbers of its topics."""
        return f"cohort__{group}"

    def get_partitions_def(self, group: str) -> dg.DynamicPartitionsDefinition:
        """Dynamic partitions keyed by Kafka partition number ('0', '1', ...), one set per group.

        Every asset of the group shares it, so one run (and one Materialize click) covers the whole
        group; a topic with fewer partitions than another of the same group never fills the higher keys.
        """
        return dg.DynamicPartitionsDefinition(name=self.get_partitions_def_name(group))

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
            partitions_def=self.get_partitions_def(config.group),
            group_name=safe_name(config.group),
            kinds={"kafka", "spark"},
            skippable=True,
            metadata={
                f"{METADATA_PREFIX}group": config.group,
                f"{METADATA_PREFIX}topic": topic,
                f"{METADATA_PREFIX}worker_slots": dg.MetadataValue.int(config.worker_slots),
            },
            tags={"cohort/group": safe_name(config.group)},
        )

    def get_landed_asset_spec(self, config: CohortConfig, topic: str) -> dg.AssetSpec:
        """The records of one topic as landed in the sink: what a downstream team reads.

        Partitioned like the topic asset (partition key = Kafka partition), so a downstream asset maps
        partition to partition; its materializations carry the row counts and the path.
        """
        metadata: dict[str, Any] = {f"{METADATA_PREFIX}group": config.group, f"{METADATA_PREFIX}topic": topic}
        if config.pipeline is not None:
            layout = SinkLayout(config.pipeline.sink_path)
            table_format = config.pipeline.table_format
            root = f"{layout.root}/topic={topic}" if table_format == "parquet" else layout.root
            metadata[f"{METADATA_PREFIX}sink"] = root
            metadata[f"{METADATA_PREFIX}table_format"] = table_format
            metadata["dagster/uri"] = root
            if table_format == "iceberg":
                metadata["dagster/table_name"] = config.pipeline.iceberg_identifiers[0]
            metadata["dagster/column_schema"] = table_schema(landed_columns(config.pipeline))
            metadata[f"{METADATA_PREFIX}value_format"] = config.pipeline.value_format
            if config.pipeline.side("value").needs_registry_schema:
                subject = config.pipeline.value_subject or f"{topic}-value"
                metadata[f"{METADATA_PREFIX}value_schema"] = (
                    f"the latest version of subject {subject!r} in the Schema Registry, read when a batch starts "
                    "(each materialization shows the columns it landed)"
                )
            metadata[f"{METADATA_PREFIX}quarantine"] = f"{config.pipeline.quarantine_root}/topic={topic}"
        return dg.AssetSpec(
            key=self.get_landed_asset_key(config.group, topic),
            description=(
                f"The records of topic {topic!r} landed by group {config.group!r} as Parquet "
                f"(`topic=<topic>/partition=<n>/` folders, one per Kafka partition; docs/sink.md)."
            ),
            deps=[
                dg.AssetDep(self.get_asset_key(config.group, topic), partition_mapping=dg.IdentityPartitionMapping())
            ],
            partitions_def=self.get_partitions_def(config.group),
            group_name=safe_name(config.group),
            kinds={"parquet"},
            skippable=True,
            metadata=metadata,
            tags={"cohort/group": safe_name(config.group)},
        )

    def get_check_specs(self, config: CohortConfig, topic: str) -> list[dg.AssetCheckSpec]:
        """Offset contiguity (ledger vs materializations vs Kafka's committed offsets) and lag on the topic
        asset; on the landed asset, the sink against the ledger (when pyarrow can read the sink)."""
        key = self.get_asset_key(config.group, topic)
        specs = [
            dg.AssetCheckSpec(
                CHECK_CONTIGUOUS,
                asset=key,
                description="Per partition, the ledger's ranges are contiguous and agree with the "
                "materializations and with Kafka's committed offsets; a materialization the ledger does not "
                "account for (no offsets, or offsets it never committed) fails the check, named.",
            ),
            dg.AssetCheckSpec(
                CHECK_LAG,
                asset=key,
                description=(
                    f"Per partition: no more than {config.lag_threshold} records behind the end offset, or a "
                    f"commit within the last {config.freshness_s:.0f} s (a group that keeps up passes; a stalled "
                    "one fails)."
                ),
            ),
        ]
        if config.pipeline is not None and arrow_filesystem(config.pipeline.sink_path) is not None:
            specs.append(
                dg.AssetCheckSpec(
                    CHECK_SINK,
                    asset=self.get_landed_asset_key(config.group, topic),
                    description=(
                        "Per partition, the sink's and the quarantine's range directories are what the ledger "
                        "committed: none missing, none extra, no offset twice, row counts as committed (the "
                        "comparison `cohort audit` makes; its --repair fixes what is safe to fix)."
                    ),
                )
            )
        return specs
