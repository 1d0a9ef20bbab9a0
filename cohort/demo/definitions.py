"""The Definitions that `workspace.yaml` loads: `dagster dev -w workspace.yaml` shows everything here.

One demo group, `demo-ingest`, consuming the JSON topic `demo-events` with three worker slots. Where things
live comes from the environment so the same definitions serve `make ui`, the demo and a real cluster:

- `COHORT_BOOTSTRAP_SERVERS` (default 127.0.0.1:9092): Kafka;
- `COHORT_STORE_URL` (default sqlite:///.cohort/cohort.db): the coordinator's store;
- `COHORT_SINK` (default .cohort/lake): the Parquet sink root;
- `COHORT_SPARK_MASTER` / `COHORT_SPARK_REMOTE`: Spark (default local[2]).
- `COHORT_DEMO_STALL_S` (default 0): seconds each batch task sleeps first, to watch (or terminate) a
  batch in flight.

Beside the group's own objects (built by `build_cohort_definitions`), the demo adds what a downstream team
would write: `cohort/demo_ingest/events_by_kind`, an aggregate of the landed events per `kind`, kept up to
date by declarative automation (its own automation sensor, running by default), so the lineage runs from
the consumed offsets (topic asset) through the landed Parquet to a derived table.

Loading needs no running broker: Kafka is contacted only by runs, sensors and checks.
"""

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
import pyspark.sql.types as T

from cohort.assets.factory import build_cohort_definitions
from cohort.assets.translator import CohortConfig, DagsterCohortTranslator, safe_name
from cohort.pipelines.spec import PipelineSpec, Transform
from cohort.resources.group import DEFAULT_STORE_URL, CohortGroupResource
from cohort.resources.kafka import KafkaResource
from cohort.resources.spark import SparkResource

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = [
    "DEMO_AUTOMATION_SENSOR",
    "DEMO_GROUP",
    "DEMO_TOPIC",
    "EVENT_SCHEMA",
    "defs",
    "demo_config",
    "demo_definitions",
    "events_by_kind_asset",
]

DEMO_GROUP = "demo-ingest"
DEMO_TOPIC = "demo-events"
DEMO_AUTOMATION_SENSOR = "demo_automation_sensor"
EVENT_SCHEMA = T.StructType(
    [
        T.StructField("event_id", T.LongType(), nullable=False),
        T.StructField("user", T.StringType()),
        T.StructField("kind", T.StringType()),
        T.StructField("amount", T.DoubleType()),
    ]
)
"""The JSON value schema of demo events; values that do not parse into it are quarantined."""


def _stall(seconds: float) -> Transform:
    """A transform whose tasks sleep first: the demo uses it to make one worker slot stall mid-batch."""

    def batches(iterator: "Iterator[pa.RecordBatch]") -> "Iterator[pa.RecordBatch]":
        import time

        time.sleep(seconds)
        yield from iterator

    def transform(frame: "DataFrame") -> "DataFrame":
        return frame.mapInArrow(batches, frame.schema)

    return transform


def demo_config(
    *,
    store_url: str = DEFAULT_STORE_URL,
    sink: str = ".cohort/lake",
    slots: int = 3,
    stall_s: float = 0.0,
    group_settings: dict | None = None,
) -> CohortConfig:
    """The demo group's configuration (`stall_s` > 0 makes this process's batches stall mid-way)."""
    spec = PipelineSpec(
        sink_path=str(Path(sink).absolute()) if "://" not in sink else sink,
        value_format="json",
        value_schema=EVENT_SCHEMA,
        transform=_stall(stall_s) if stall_s else None,
    )
    settings = {
        "initial_rebalance_delay_s": 8.0,
        "session_timeout_s": 10.0,
        "rebalance_timeout_s": 60.0,
        "progress_timeout_s": 300.0,
        **(group_settings or {}),
    }
    return CohortConfig(
        CohortGroupResource(group=DEMO_GROUP, topics=[DEMO_TOPIC], worker_slots=slots, store_url=store_url, **settings),
        pipeline=spec,
        lag_threshold=0,
        schedule="*/10 * * * *",
    )


def events_by_kind_asset(
    config: CohortConfig, output_dir: str | Path, translator: DagsterCohortTranslator | None = None
) -> dg.AssetsDefinition:
    """`cohort/<group>/events_by_kind`: events and amount per `kind` of the landed demo events, per partition.

    Partitioned like the landed-data asset (the group's dynamic partition set, an identity partition
    mapping: partition key = Kafka partition), so each batch that lands records in a partition makes that
    partition's aggregate stale, and `AutomationCondition.eager()` recomputes exactly that partition. An
    unpartitioned aggregate over all partitions (`AllPartitionMapping`) would wait forever under `eager()`
    for a topic partition that never received a record, since a partition with no new records is never
    materialized.

    A materialization reads the partition's landed Parquet with `pyarrow.dataset` (hive partitioning under
    the landed asset's `dagster/uri`, `topic=<t>/partition=<p>/`, docs/sink.md), writes the aggregate as
    JSON to `<output_dir>/partition=<p>.json` and records its rows (`dagster/row_count`), its path
    (`dagster/uri`) and the landed events it read. It reads every published range, committed or not (a
    range in flight is replaced by its partition's next batch, docs/guarantees.md): good enough for a demo.
    """
    translator = translator or DagsterCohortTranslator()
    topic = config.asset_topics[0]
    landed = translator.get_landed_asset_spec(config, topic)
    source = str(landed.metadata["dagster/uri"])
    target = Path(output_dir).absolute()

    @dg.asset(
        key=dg.AssetKey(["cohort", safe_name(config.group), "events_by_kind"]),
        deps=[dg.AssetDep(landed.key, partition_mapping=dg.IdentityPartitionMapping())],
        partitions_def=translator.get_partitions_def(config.group),
        automation_condition=dg.AutomationCondition.eager(),
        group_name=safe_name(config.group),
        kinds={"pyarrow", "json"},
        description=f"Events and amount per kind of topic {topic!r} as landed, per Kafka partition (demo).",
        metadata={
            "dagster/uri": str(target),
            "dagster/column_schema": dg.TableSchema(
                columns=[
                    dg.TableColumn("kind", "string"),
                    dg.TableColumn("events", "bigint", description="landed events of this kind"),
                    dg.TableColumn("amount", "double", description="sum of their amounts"),
                ]
            ),
        },
    )
    def events_by_kind(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        import pyarrow as pa
        import pyarrow.dataset as ds

        partition = context.partition_key
        try:
            landed_events = ds.dataset(source, format="parquet", partitioning="hive")
        except FileNotFoundError:  # nothing landed yet for this topic (every record quarantined)
            events = pa.table({"kind": pa.array([], pa.string()), "amount": pa.array([], pa.float64())})
        else:
            events = landed_events.to_table(columns=["kind", "amount"], filter=ds.field("partition") == int(partition))
        grouped = events.group_by("kind").aggregate([([], "count_all"), ("amount", "sum")])
        rows = sorted(
            (
                {"kind": r["kind"], "events": r["count_all"], "amount": r["amount_sum"] or 0.0}
                for r in grouped.to_pylist()
            ),
            key=lambda r: (r["kind"] is None, r["kind"] or ""),
        )
        target.mkdir(parents=True, exist_ok=True)
        path = target / f"partition={partition}.json"
        staged = path.with_suffix(".json.tmp")
        staged.write_text(json.dumps({"topic": topic, "partition": int(partition), "rows": rows}, indent=1))
        staged.replace(path)
        context.log.info(f"partition {partition}: {events.num_rows} landed events -> {len(rows)} kinds in {path}")
        return dg.MaterializeResult(
            metadata={
                "dagster/row_count": dg.MetadataValue.int(len(rows)),
                "dagster/uri": str(path),
                "landed_events": dg.MetadataValue.int(events.num_rows),
                "source": source,
            }
        )

    return events_by_kind


def demo_definitions(
    bootstrap_servers: str,
    *,
    store_url: str = DEFAULT_STORE_URL,
    sink: str = ".cohort/lake",
    derived: str | None = None,
    stall_s: float = 0.0,
    spark_master: str | None = "local[2]",
    spark_remote: str | None = None,
    automation_interval_s: int = 10,
    **kwargs: object,
) -> dg.Definitions:
    """The demo Definitions against a given broker, store and sink: the group's, plus `events_by_kind`.

    `derived` is where `events_by_kind` writes (default: `derived/` beside a local sink, `.cohort/derived`
    otherwise). Its automation sensor is declared running: Dagster's `default_automation_condition_sensor`
    would be created stopped, to be turned on by hand in the UI.
    """
    config = demo_config(store_url=store_url, sink=sink, stall_s=stall_s)
    translator = kwargs.get("translator")
    if not isinstance(translator, DagsterCohortTranslator):
        translator = DagsterCohortTranslator()
    if derived is None:
        derived = str(Path(sink).absolute().parent / "derived") if "://" not in sink else ".cohort/derived"
    aggregate = events_by_kind_asset(config, Path(derived) / "events_by_kind", translator)
    cohort_defs = build_cohort_definitions(
        [config],
        kafka=KafkaResource(bootstrap_servers=bootstrap_servers),
        spark=SparkResource(master=None if spark_remote else spark_master, remote=spark_remote),
        **kwargs,  # type: ignore[arg-type]
    )
    downstream = dg.Definitions(
        assets=[aggregate],
        sensors=[
            dg.AutomationConditionSensorDefinition(
                DEMO_AUTOMATION_SENSOR,
                target=dg.AssetSelection.assets(aggregate),
                default_status=dg.DefaultSensorStatus.RUNNING,
                minimum_interval_seconds=automation_interval_s,
                description="Declarative automation of the demo's downstream assets (events_by_kind: eager).",
            )
        ],
    )
    return dg.Definitions.merge(cohort_defs, downstream)


defs = demo_definitions(
    os.environ.get("COHORT_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
    store_url=os.environ.get("COHORT_STORE_URL", DEFAULT_STORE_URL),
    sink=os.environ.get("COHORT_SINK", ".cohort/lake"),
    spark_master=os.environ.get("COHORT_SPARK_MASTER", "local[2]"),
    spark_remote=os.environ.get("COHORT_SPARK_REMOTE") or None,
    stall_s=float(os.environ.get("COHORT_DEMO_STALL_S") or 0),
)
