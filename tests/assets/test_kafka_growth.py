"""A topic grown with CreatePartitions on Apache Kafka (the embedded broker cannot grow one), through the path a user
takes: the topic sensor evaluated as Dagster's daemon evaluates it (the real sensor on the instance, its dynamic
partition requests applied, its run requests executed as runs of the worker job), real Spark, store and broker.

The group starts with the `latest` reset policy, so the new partitions being read from their first offset is the
promise of docs/guarantees.md ("Where a partition starts"), not the policy's doing. What the sink holds is counted
with DuckDB against the producer's delivery reports: every record produced since the group started, once.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import dagster as dg

from cohort.assets.factory import build_cohort_definitions
from cohort.assets.translator import CHECK_CONTIGUOUS, CHECK_LAG, CHECK_SINK, DagsterCohortTranslator
from cohort.assignment.protocol.group_state import GroupState
from cohort.common.types import TopicPartition
from cohort.resources import KafkaResource, SparkResource
from harness.dagster_group import config_for
from tests.support.kafka_records import grow, produce_events, require_kafka, sink_events

T = DagsterCohortTranslator()


def tick(sensor: dg.SensorDefinition, instance: dg.DagsterInstance, defs: dg.Definitions, cursor: str | None) -> Any:
    """One evaluation of `sensor` as the daemon makes it; its dynamic partition requests applied as the daemon does."""
    with dg.build_sensor_context(instance=instance, resources=defs.resources, cursor=cursor) as context:
        result = sensor.evaluate_tick(context)
    for request in result.dynamic_partitions_requests:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return result


def consumed(result: dg.ExecuteInProcessResult, key: dg.AssetKey) -> dict[int, tuple[int, int, str]]:
    """The run's materializations of topic asset `key`: partition -> (from, until, where it started)."""
    found = {}
    for event in result.get_asset_materialization_events():
        meta = event.materialization.metadata
        if event.materialization.asset_key == key:
            start = (int(meta["cohort/from_offset"].value), int(meta["cohort/until_offset"].value))
            found[int(event.materialization.partition)] = (*start, str(meta["cohort/start"].value))
    return found


def test_partitions_added_by_create_partitions_are_read_from_their_first_offset(
    make_setup, topic_factory, kafka_config, instance, spark
):
    # `spark`: the session's Spark, which the runs share (a run stops only a session it started)
    require_kafka("CreatePartitions")
    topic = topic_factory(2, suffix="grow")
    setup = make_setup((topic,), slots=2, settings={"initial_rebalance_delay_s": 0.0})
    base = config_for(setup)
    assert base.pipeline is not None
    config = replace(base, pipeline=replace(base.pipeline, reset="latest"))
    defs = build_cohort_definitions(
        [config],
        kafka=KafkaResource(bootstrap_servers=setup.bootstrap),
        spark=SparkResource(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}),
    )
    job = defs.resolve_job_def(T.get_job_name(config.group))
    sensor = defs.resolve_sensor_def("cohort_topic_sensor")
    key = T.get_asset_key(config.group, topic)
    partitions_def = T.get_partitions_def_name(config.group)
    coordinator = config.group_resource.get_coordinator()

    # the group starts on the empty topic ('latest': each partition's first, empty range pins its position)
    assert job.execute_in_process(instance=instance).success
    seen = tick(sensor, instance, defs, None)
    assert seen.run_requests == []
    produced = produce_events(kafka_config, topic, range(0, 20), partition=lambda i: i % 2)
    first = job.execute_in_process(instance=instance)
    assert first.success and consumed(first, key) == {0: (0, 10, "committed"), 1: (0, 10, "committed")}
    before = coordinator.describe_group(config.group).generation

    # the topic grows to 4 partitions; records reach the new ones before the group knows of them
    grow(kafka_config, topic, 4)
    produced += produce_events(kafka_config, topic, range(20, 60), partition=lambda i: i % 4)
    grown = tick(sensor, instance, defs, seen.cursor)

    assert [(r.partitions_def_name, list(r.partition_keys)) for r in grown.dynamic_partitions_requests] == [
        (partitions_def, ["2", "3"])
    ]
    assert instance.get_dynamic_partitions(partitions_def) == ["0", "1", "2", "3"]
    assert sorted(r.tags["cohort/slot"] for r in grown.run_requests) == ["1", "2"]
    assert all(":topics-" in r.run_key for r in grown.run_requests)
    assert coordinator.describe_group(config.group).partitions_per_topic == {topic: 4}
    assert tick(sensor, instance, defs, grown.cursor).run_requests == []  # one look per change

    runs = [job.execute_in_process(run_config=r.run_config, tags=r.tags, instance=instance) for r in grown.run_requests]
    assert all(run.success for run in runs)
    read = {p: r for run in runs for p, r in consumed(run, key).items()}
    # the new partitions from their first offset (whatever the reset policy), the old ones from their commits
    assert read == {
        0: (10, 20, "committed"),
        1: (10, 20, "committed"),
        2: (0, 10, "new-partition"),
        3: (0, 10, "new-partition"),
    }
    described = coordinator.describe_group(config.group)
    assert described.generation > before and described.state is GroupState.EMPTY  # rebalanced, then left
    assert instance.get_materialized_partitions(key) == {"0", "1", "2", "3"}

    # more records everywhere, then the group's next batch (Materialize of every slot)
    produced += produce_events(kafka_config, topic, range(60, 80), partition=lambda i: i % 4)
    last = job.execute_in_process(instance=instance)
    assert last.success and consumed(last, key) == {
        0: (20, 25, "committed"),
        1: (20, 25, "committed"),
        2: (10, 15, "committed"),
        3: (10, 15, "committed"),
    }

    landed = sink_events(setup.sink)
    assert landed == sorted(produced), "every record produced since the group started, once"
    assert len({(e.partition, e.offset) for e in landed}) == len(landed) == 80
    tps = [TopicPartition(topic, p) for p in range(4)]
    assert coordinator.fetch_offsets(config.group, tps) == dict(zip(tps, (25, 25, 15, 15), strict=True))
    checks = defs.resolve_job_def(T.get_checks_job_name(config.group)).execute_in_process(instance=instance)
    assert {e.check_name: e.passed for e in checks.get_asset_check_evaluations()} == {
        CHECK_CONTIGUOUS: True,
        CHECK_LAG: True,
        CHECK_SINK: True,
    }
    coordinator.close()
