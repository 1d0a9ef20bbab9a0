"""The landed asset's `sink_matches_ledger` check sees what readers of the sink see (real broker, Spark, store and
Dagster instance): copies of a range directory under names no commit accounts for fail its full pass (a run
tagged `cohort/audit: full`, as the full-audit schedule launches), each named with its path; the check after a
batch reads only the ranges committed since its mark and fails on a missing one until it is back; an executed
offset reset whose replay has not run yet passes it, and is said."""

import shutil
from pathlib import Path

import pytest

from cohort.assets.translator import CHECK_SINK, DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.common.types import TopicPartition
from cohort.pipelines.sink.layout import range_dir_name
from harness.dagster_group import config_for, definitions_for, json_records
from tests.assets.test_worker import _checks

T = DagsterCohortTranslator()


@pytest.mark.slow
def test_the_sink_check_names_copies_readers_read_and_passes_a_pending_replay(
    make_setup, topic_factory, produce_records, instance, spark
):
    topic = topic_factory(2, suffix="copies")
    produce_records(topic, json_records(20, 2))
    setup = make_setup((topic,), slots=1, settings={"initial_rebalance_delay_s": 0.0})
    config = config_for(setup)
    defs = definitions_for(setup)
    job = defs.resolve_job_def(T.get_job_name(config.group))
    assert job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance).success
    assert _checks(defs, config, instance)[CHECK_SINK].passed

    partition_0, partition_1 = (Path(setup.sink) / f"topic={topic}" / f"partition={p}" for p in (0, 1))
    live = partition_0 / range_dir_name(topic, 0, 0, 10)
    copies = [partition_0 / f"{topic}-0-0-10-copy.parquet", partition_1 / range_dir_name(topic, 0, 0, 10)]
    for copy in copies:
        shutil.copytree(live, copy)
    assert spark.read.parquet(setup.sink).count() == 20 + 2 * 10  # readers see partition 0's offsets three times

    assert _checks(defs, config, instance)[CHECK_SINK].passed  # older ranges: not read after a batch
    failed = _checks(defs, config, instance, full=True)[CHECK_SINK]
    assert not failed.passed and failed.metadata["cohort/problems"].value == 2
    details = failed.metadata["cohort/details"].value
    assert all(f"{copy} (" in details for copy in copies), details
    assert "range directory of partition 0" in details

    for copy in copies:
        shutil.rmtree(copy)
    coordinator = config.group_resource.get_coordinator()
    coordinator.reset_offsets(config.group, {TopicPartition(topic, 0): 4}, actor="ann@host", reason="bad rule")
    pending = _checks(defs, config, instance)[CHECK_SINK]
    assert pending.passed, pending.metadata["cohort/details"].value
    assert pending.metadata["cohort/pending_replays"].value == 1
    assert f"{topic}-0: pending: reset to 4 at " in pending.metadata["cohort/details"].value
    assert "by ann@host (bad rule); the next batch replays [4, 10)" in pending.metadata["cohort/details"].value

    assert job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance).success
    done = _checks(defs, config, instance)[CHECK_SINK]
    assert done.passed and done.metadata["cohort/pending_replays"].value == 0
    assert spark.read.parquet(setup.sink).count() == 20


def test_the_check_after_a_batch_reads_the_new_ranges_and_keeps_failing_until_fixed(
    make_setup, topic_factory, produce_records, instance
):
    topic = topic_factory(1, suffix="since")
    produce_records(topic, json_records(10, 1))
    setup = make_setup((topic,), slots=1, settings={"initial_rebalance_delay_s": 0.0})
    config = config_for(setup)
    defs = definitions_for(setup)
    job = defs.resolve_job_def(T.get_job_name(config.group))
    run_config = worker_run_config(config, 1)
    assert job.execute_in_process(run_config=run_config, instance=instance).success
    assert _checks(defs, config, instance)[CHECK_SINK].passed  # the first pass reads everything, then marks

    produce_records(topic, json_records(5, 1))
    keys = {T.get_asset_key(config.group, topic), T.get_landed_asset_key(config.group, topic)}
    unchecked = job.get_subset(asset_selection=keys, asset_check_selection=set())  # its checks not run yet
    assert unchecked.execute_in_process(run_config=run_config, instance=instance).success
    folder = Path(setup.sink) / f"topic={topic}" / "partition=0"
    newest = folder / range_dir_name(topic, 0, 10, 15)
    moved = Path(setup.sink).parent / "kept-aside"
    shutil.move(newest, moved)
    for _ in range(2):  # the mark does not pass a range it did not find
        failed = _checks(defs, config, instance)[CHECK_SINK]
        assert not failed.passed
        assert "[10, 15)" in failed.metadata["cohort/details"].value, failed.metadata["cohort/details"].value
    shutil.move(moved, newest)
    assert _checks(defs, config, instance)[CHECK_SINK].passed
    assert _checks(defs, config, instance, full=True)[CHECK_SINK].passed
