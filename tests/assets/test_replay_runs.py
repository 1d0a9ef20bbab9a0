"""Replays launched as Dagster runs (real broker, Spark, store, instance): a run of the group's asset job
for some partitions with `replay_from` resets them as a member and reads them again; the sink holds each
offset once, the materializations say they are replays, and the checks still pass."""

import dagster as dg
from pyspark.sql import functions as F

from cohort.assets.replay import REPLAY_TAG
from cohort.assets.translator import CHECK_CONTIGUOUS, DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from harness.dagster_group import config_for, definitions_for, json_records

T = DagsterCohortTranslator()


def test_a_backfill_of_some_partitions_replays_them_from_the_start(
    make_setup, topic_factory, produce_records, instance, spark
):
    topic = topic_factory(3, suffix="replay")
    produce_records(topic, json_records(30, 3))
    setup = make_setup((topic,), slots=2, settings={"initial_rebalance_delay_s": 1.0})
    config = config_for(setup)
    defs = definitions_for(setup)
    job = defs.resolve_job_def(T.get_job_name(config.group))
    assert job.execute_in_process(instance=instance).success
    key = T.get_asset_key(config.group, topic)

    # what a backfill of partitions 0..1 launches under the single-run policy, with the replay's launch config
    replay = job.execute_in_process(
        run_config=worker_run_config(config, replay_from="earliest"),
        instance=instance,
        tags={"dagster/asset_partition_range_start": "0", "dagster/asset_partition_range_end": "1"},
    )
    assert replay.success
    shown = {
        e.materialization.partition: e.materialization.metadata
        for e in replay.get_asset_materialization_events()
        if e.materialization.asset_key == key
    }
    assert sorted(shown) == ["0", "1"]  # partition 2 was not selected: not read again
    for meta in shown.values():
        assert (meta["cohort/from_offset"].value, meta["cohort/until_offset"].value) == ("0", "10")
        assert meta["cohort/replay"].value == "earliest"
    run = instance.get_run_by_id(replay.run_id)
    assert run is not None and run.tags[REPLAY_TAG] == "earliest"

    sink = spark.read.parquet(setup.sink)
    assert sink.count() == 30
    assert sink.select(F.col("kafka.partition"), F.col("kafka.offset")).distinct().count() == 30
    coordinator = config.group_resource.get_coordinator()
    history = [(e.kind, e.from_offset, e.until_offset) for e in coordinator.ledger_history(config.group, topic, 0)]
    assert history == [("commit", 0, 10), ("reset", 10, 0), ("commit", 0, 10)]
    [reset] = [e for e in coordinator.ledger_history(config.group, topic, 0) if e.is_reset]
    assert reset.run_id == replay.run_id and reset.member_id is not None
    checks = defs.resolve_job_def(T.get_checks_job_name(config.group)).execute_in_process(instance=instance)
    assert {e.check_name: e.passed for e in checks.get_asset_check_evaluations()}[CHECK_CONTIGUOUS]

    # a backfill launched from the UI carries no config: the run tag asks for the replay (from offset 4 here)
    by_tag = job.execute_in_process(instance=instance, tags={"dagster/partition": "2", REPLAY_TAG: "offset 4"})
    assert by_tag.success
    [(partition, meta)] = [
        (e.materialization.partition, e.materialization.metadata)
        for e in by_tag.get_asset_materialization_events()
        if e.materialization.asset_key == key
    ]
    assert (partition, meta["cohort/from_offset"].value, meta["cohort/replay"].value) == ("2", "4", "offset 4")
    assert spark.read.parquet(setup.sink).count() == 30


def test_a_bad_replay_start_fails_the_run_before_it_joins(make_setup, topic_factory, instance):
    topic = topic_factory(1, suffix="badreplay")
    setup = make_setup((topic,), slots=1)
    config = config_for(setup)
    job = definitions_for(setup).resolve_job_def(T.get_job_name(config.group))
    result = job.execute_in_process(
        run_config=worker_run_config(config, replay_from="last tuesday"), instance=instance, raise_on_error=False
    )
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert "replay_from must be 'earliest', an offset or an ISO 8601 time" in str(failure.step_failure_data.error)
    assert config.group_resource.get_coordinator().describe_group(config.group).members == ()
