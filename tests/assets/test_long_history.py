"""A group with a long history: more than 10,000 batches of one partition, fast-forwarded (harness/history.py).

Every batch run starts by reporting the ranges no run reported (`unreported_materializations`) and ends with the
offsets check; both must still hold after years of minute-by-minute batches: nothing re-reported, the check
green. The history is real rows of the store (through the coordinator's commit decision), materializations built
by the worker's own builder, the broker's records and Kafka's committed offsets through the real mirror. The
first test checks that a fast-forwarded event is the event a run's step stores.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import dagster as dg
import pyspark.sql.types as T
import pytest

from cohort.assets.checks import check_results
from cohort.assets.translator import CHECK_CONTIGUOUS, CHECK_LAG, CohortConfig, DagsterCohortTranslator
from cohort.assets.worker import op_name, unreported_materializations
from cohort.common.types import TopicPartition
from cohort.devtools.topics import create_topic, produce
from cohort.pipelines.spec import PipelineSpec
from cohort.resources import KafkaResource
from cohort.resources.group import CohortGroupResource
from harness.history import HistorySpec, Membership, fast_forward, mirror_heads, run_events, step_event

BATCHES = 10_050  # more materializations of the partition than one Dagster query returns (10,000)
GROUP = "long-history"
TOPIC = "long-history"
SCHEMA = T.StructType([T.StructField("id", T.LongType())])


def config_for(store_url: str, sink: str) -> CohortConfig:
    resource = CohortGroupResource(
        group=GROUP, topics=[TOPIC], worker_slots=1, initial_rebalance_delay_s=0.0, store_url=store_url
    )
    return CohortConfig(resource, pipeline=PipelineSpec(sink_path=sink, value_format="json", value_schema=SCHEMA))


def test_a_fast_forwarded_event_is_the_event_a_run_stores(tmp_path: Any) -> None:
    config = config_for(f"sqlite:///{tmp_path / 'c.db'}", str(tmp_path / "lake"))
    translator = DagsterCohortTranslator()
    spec = HistorySpec(GROUP, TOPIC, 2, 3, end_at=1_700_000_000.0)
    built = run_events(spec, Membership("m-1", 4, f"{GROUP}/worker-1"), config, translator, 1)
    assert len(built) == 4  # the topic's and the landed asset's, per partition

    @dg.op(name=op_name(config))
    def batch() -> Iterator[Any]:
        for event in built:
            yield event.asset_materialization
        yield dg.Output(None)

    job = dg.GraphDefinition(name=translator.get_job_name(GROUP), node_defs=[batch]).to_job()
    with dg.DagsterInstance.ephemeral() as instance:
        job.execute_in_process(instance=instance)
        stored = [
            r.event_log_entry
            for key in {e.asset_materialization.asset_key for e in built if e.asset_materialization}
            for r in instance.fetch_materializations(key, limit=10).records
        ]
    assert len(stored) == 4
    for real in stored:
        materialization = real.asset_materialization
        assert materialization is not None
        made = step_event(
            materialization,
            run_id=real.run_id,
            job_name=real.job_name or "",
            step_key=real.step_key or "",
            timestamp=real.timestamp,
        )
        assert made == real
        assert materialization in [e.asset_materialization for e in built]


@dataclass(frozen=True)
class LongHistory:
    config: CohortConfig
    instance: dg.DagsterInstance
    kafka: KafkaResource


@pytest.fixture(scope="module")
def long_history(broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LongHistory]:
    """10,050 batches of one partition: ledger, materializations, the broker's records, Kafka's committed offset."""
    tmp = tmp_path_factory.mktemp("long-history")
    config = config_for(f"sqlite:///{tmp / 'cohort.db'}", str(tmp / "lake"))
    kafka_config = {"bootstrap.servers": broker.bootstrap_servers}
    spec = HistorySpec(GROUP, TOPIC, 1, BATCHES)
    create_topic(kafka_config, TOPIC, 1)
    produce(kafka_config, TOPIC, ((0, None, b"{}") for _ in range(spec.head)))
    group = config.group_resource.worker_group()
    coordinator = group.open_coordinator()
    kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
    with dg.DagsterInstance.ephemeral() as instance:
        try:
            fast_forward(group, coordinator, instance, config, spec)
            mirror_heads(kafka_config, spec)
            yield LongHistory(config, instance, kafka)
        finally:
            kafka.close()
            config.group_resource.close()
            coordinator.close()


def test_a_run_start_after_10050_batches_reports_nothing(long_history: LongHistory) -> None:
    """The first run after the upgrade reads the whole history once (no mark yet); the next reads what changed."""
    config, resource = long_history.config, long_history.config.group_resource
    for run in ("the-next-run", "the-run-after"):
        reported = list(
            unreported_materializations(
                long_history.instance,
                resource.get_coordinator(),
                config,
                DagsterCohortTranslator(),
                {resource.instance_id(1)},
                {TOPIC: 1},
                run,
            )
        )
        assert not reported, f"{len(reported) // 2} ranges reported again, the first: {reported[0].description}"
    [mark] = resource.get_coordinator().trail_marks(GROUP, "dagster", [TopicPartition(TOPIC, 0)]).values()
    assert mark.head == BATCHES and mark.ranges == BATCHES  # one record per batch


@pytest.mark.parametrize("full", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["since-the-mark", "full"])
def test_the_offsets_check_after_10050_batches_is_green(long_history: LongHistory, full: bool) -> None:
    config = long_history.config
    key = DagsterCohortTranslator().get_asset_key(GROUP, TOPIC)
    selected = {dg.AssetCheckKey(key, CHECK_CONTIGUOUS), dg.AssetCheckKey(key, CHECK_LAG)}
    evaluations = list(
        check_results(
            long_history.instance,
            config,
            DagsterCohortTranslator(),
            config.group_resource,
            long_history.kafka,
            selected,
            full=full,
        )
    )
    assert {e.check_name: e.passed for e in evaluations} == {CHECK_CONTIGUOUS: True, CHECK_LAG: True}, [
        e.metadata["cohort/details"].value for e in evaluations if not e.passed and "cohort/details" in e.metadata
    ]
    contiguous = next(e for e in evaluations if e.check_name == CHECK_CONTIGUOUS)
    assert contiguous.metadata["cohort/ledger_ranges"].value == BATCHES
