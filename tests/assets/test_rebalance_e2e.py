"""Two worker slots share a topic; one is killed mid-batch; the membership sensor reruns its slot.

Real broker, real Spark, real coordinator store and a real Dagster instance shared with the killed worker's
process. The sensor reads time through a ManualClock advanced past the session timeout: nothing sleeps
for a timeout.
"""

import re
import time

import dagster as dg
import pytest
from pyspark.sql import functions as F

from cohort.assets.translator import CHECK_CONTIGUOUS, CHECK_LAG, CHECK_SINK, DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.assignment.clock import ManualClock
from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from harness.dagster_group import (
    config_for,
    definitions_for,
    json_records,
    kill_process_group,
    start_worker_process,
    wait_for,
)

T = DagsterCohortTranslator()


def _of(result, key):
    """The run's materializations of asset `key` (the landed-data asset gets its own)."""
    return [e.materialization for e in result.get_asset_materialization_events() if e.materialization.asset_key == key]


@pytest.mark.slow
def test_killed_slot_is_rerun_from_committed_offsets(
    make_setup, topic_factory, produce_records, instance, spark, tmp_path
):
    topic = topic_factory(4, suffix="shared")
    produce_records(topic, json_records(80, 4, malformed={5, 6}))
    setup = make_setup((topic,), slots=2, settings={"initial_rebalance_delay_s": 10.0})
    config = config_for(setup)
    coordinator = Coordinator.from_url(setup.store_url)

    # slot 2 runs in its own process with a transform that stalls mid-batch (after reading, before writing)
    victim = start_worker_process(setup.__class__(**{**setup.__dict__, "slow_s": 600.0}), 2, tmp_path / "victim.log")
    try:
        wait_for(
            lambda: any(
                m.instance_id == f"{config.group}/worker-2" for m in coordinator.describe_group(config.group).members
            ),
            timeout_s=60,
            what="slot 2 to join",
        )
        # slot 1 joins within the initial rebalance delay: one generation, partitions split between the two
        defs = definitions_for(setup)
        job = defs.resolve_job_def(T.get_job_name(config.group))
        survivor = job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance)
        assert survivor.success
        key = T.get_asset_key(config.group, topic)
        mine = {int(m.partition) for m in _of(survivor, key)}
        assert len(mine) == 2, mine
        orphaned = sorted({0, 1, 2, 3} - mine)
        # the victim is stuck in its batch: it owns its partitions and committed nothing
        assert victim.poll() is None, (tmp_path / "victim.log").read_text()[-3000:]
        assert all(
            coordinator.fetch_offsets(config.group, [TopicPartition(topic, p)])[TopicPartition(topic, p)] is None
            for p in orphaned
        )
    finally:
        kill_process_group(victim)
    victim_runs = [r for r in instance.get_runs() if r.run_id != survivor.run_id and r.job_name == job.name]
    assert len(victim_runs) == 1 and victim_runs[0].status is dg.DagsterRunStatus.STARTED

    # the membership sensor, past the victim's session timeout, evicts it and requests a rerun of slot 2
    clock = ManualClock(time.time() + 60)
    sensor_defs = definitions_for(setup, clock=clock)
    sensor = sensor_defs.resolve_sensor_def("cohort_membership_sensor")
    with dg.build_sensor_context(instance=instance, resources=sensor_defs.resources) as context:
        result = sensor.evaluate_tick(context)
    assert len(result.run_requests) == 1
    request = result.run_requests[0]
    assert request.tags["cohort/slot"] == "2" and request.tags["cohort/rerun_of"] == victim_runs[0].run_id
    assert request.run_key.startswith(f"{config.group}:slot-2:gen-")
    assert coordinator.describe_group(config.group).members == ()

    # a second tick with the new cursor asks for nothing more
    with dg.build_sensor_context(instance=instance, resources=sensor_defs.resources, cursor=result.cursor) as context:
        assert sensor.evaluate_tick(context).run_requests == []

    # the rerun consumes exactly the orphaned ranges: from their committed offset (none) to the end
    rerun = job.execute_in_process(run_config=request.run_config, tags=request.tags, instance=instance)
    assert rerun.success
    consumed = {
        int(m.partition): (int(m.metadata["cohort/from_offset"].value), int(m.metadata["cohort/until_offset"].value))
        for m in _of(rerun, key)
    }
    # only the orphaned ranges: the survivor's partitions had nothing new, and empty ranges are not reported
    assert consumed == {p: (0, 20) for p in orphaned}

    # the sink holds every good record once; the two malformed ones are quarantined
    sink = spark.read.parquet(setup.sink)
    assert sink.count() == 78
    assert sink.select(F.col("kafka.partition"), F.col("kafka.offset")).distinct().count() == 78
    checks = defs.resolve_job_def(T.get_checks_job_name(config.group)).execute_in_process(instance=instance)
    evaluations = {e.check_name: e.passed for e in checks.get_asset_check_evaluations()}
    assert evaluations == {CHECK_CONTIGUOUS: True, CHECK_LAG: True, CHECK_SINK: True}  # the sink too: nothing twice
    coordinator.close()


def test_new_topic_matching_the_pattern_is_consumed_after_the_topic_sensor(
    make_setup, topic_factory, produce_records, instance, spark, request
):
    first = topic_factory(2, suffix="grow-a")
    produce_records(first, json_records(10, 2))
    pattern = r"t\d+-" + re.escape(request.node.name) + r"-grow-.*"
    setup = make_setup((), topic_pattern=pattern, slots=1, settings={"initial_rebalance_delay_s": 0.0})
    setup = setup.__class__(**{**setup.__dict__, "topics": (first,)})  # known at load time: gets an asset
    config = config_for(setup)
    defs = definitions_for(setup)
    job = defs.resolve_job_def(T.get_job_name(config.group))
    assert job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance).success
    assert instance.get_materialized_partitions(T.get_asset_key(config.group, first)) == {"0", "1"}

    sensor = defs.resolve_sensor_def("cohort_topic_sensor")
    with dg.build_sensor_context(instance=instance, resources=defs.resources) as context:
        seen = sensor.evaluate_tick(context)
    second = topic_factory(3, suffix="grow-b")
    produce_records(second, json_records(9, 3))
    with dg.build_sensor_context(instance=instance, resources=defs.resources, cursor=seen.cursor) as context:
        grown = sensor.evaluate_tick(context)
    # one partition set per group: the new topic's 3 partitions add key "2" to the first topic's "0", "1"
    assert [(r.partitions_def_name, list(r.partition_keys)) for r in grown.dynamic_partitions_requests] == [
        (T.get_partitions_def_name(config.group), ["2"])
    ]
    assert len(grown.run_requests) == 1
    run = grown.run_requests[0]
    result = job.execute_in_process(run_config=run.run_config, tags=run.tags, instance=instance)
    assert result.success
    key = T.get_asset_key(config.group, second)
    consumed = {m.partition: m.metadata["cohort/records"].value for m in _of(result, key)}
    assert consumed == {"0": 3, "1": 3, "2": 3}
    assert instance.get_dynamic_partitions(T.get_partitions_def_name(config.group)) == ["0", "1", "2"]
    assert spark.read.parquet(setup.sink).count() == 19
