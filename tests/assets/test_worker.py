"""End-to-end worker runs in process: real broker, real Spark, real coordinator store, real Dagster instance."""

import shutil
import time
from pathlib import Path

import dagster as dg
import sqlalchemy as sa
from pyspark.sql import functions as F

from cohort.assets.checks import AUDIT_TAG
from cohort.assets.translator import CHECK_CONTIGUOUS, CHECK_LAG, CHECK_SINK, DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.assignment.clock import ManualClock
from cohort.pipelines.sink.layout import range_dir_name
from harness.dagster_group import config_for, definitions_for, json_records

T = DagsterCohortTranslator()


def _of(result, key):
    """The run's materializations of asset `key` (the landed-data asset gets its own)."""
    return [e.materialization for e in result.get_asset_materialization_events() if e.materialization.asset_key == key]


def _checks(defs, config, instance, *, full=False):
    """The checks job's evaluations; with `full`, tagged `cohort/audit: full` as the full-audit schedule runs it."""
    job = defs.resolve_job_def(T.get_checks_job_name(config.group))
    result = job.execute_in_process(instance=instance, tags={AUDIT_TAG: "full"} if full else None)
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def test_worker_materializes_each_assigned_partition_with_offsets(
    make_setup, topic_factory, produce_records, instance, spark
):
    topic = topic_factory(3, suffix="orders")
    produce_records(topic, json_records(30, 3, malformed={4, 7}))
    setup = make_setup((topic,), slots=1, settings={"initial_rebalance_delay_s": 0.0})
    config = config_for(setup)
    defs = definitions_for(setup)
    job = defs.resolve_job_def(T.get_job_name(config.group))

    result = job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance)

    assert result.success
    key = T.get_asset_key(config.group, topic)
    assert instance.get_materialized_partitions(key) == {"0", "1", "2"}
    by_partition = {}
    for materialization in _of(result, key):
        by_partition[materialization.partition] = {k: v.value for k, v in materialization.metadata.items()}
        assert isinstance(materialization.metadata["cohort/records"], dg.IntMetadataValue)
    assert sorted(by_partition) == ["0", "1", "2"]
    for p, meta in by_partition.items():
        offsets = (meta["cohort/partition"], meta["cohort/from_offset"], meta["cohort/until_offset"])
        assert offsets == (p, "0", "10")  # ids and offsets are text: Dagster does not plot them
        assert meta["cohort/lag_after"] == 0
        assert meta["cohort/group"] == config.group
        assert meta["cohort/instance_id"] == f"{config.group}/worker-1"
        assert meta["cohort/run_id"] == result.run_id
        assert int(meta["cohort/generation"]) >= 1
    # records 4 and 7 are malformed: partition 1 (4 % 3) and partition 1 (7 % 3)
    assert (by_partition["1"]["cohort/records"], by_partition["1"]["cohort/quarantined"]) == (8, 2)
    assert sum(m["cohort/records"] + m["cohort/quarantined"] for m in by_partition.values()) == 30
    sink = spark.read.parquet(setup.sink)
    assert sink.count() == 28
    assert sink.select(F.col("kafka.partition"), F.col("kafka.offset")).distinct().count() == 28
    landed = {m.partition: m.metadata for m in _of(result, T.get_landed_asset_key(config.group, topic))}
    assert {p: m["dagster/row_count"].value for p, m in landed.items()} == {"0": 10, "1": 8, "2": 10}
    assert landed["1"]["dagster/uri"].value.endswith(f"topic={topic}/partition=1")

    # the ledger, the materializations and Kafka's committed offsets agree; nothing left to consume
    checks = _checks(defs, config, instance)
    assert checks[CHECK_CONTIGUOUS].passed, checks[CHECK_CONTIGUOUS].metadata
    assert checks[CHECK_LAG].passed

    # a second batch after more records consumes exactly the new ones
    produce_records(topic, [(0, None, b'{"id": 100, "kind": "late"}')])
    again = job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance)
    ranges = {
        m.partition: (m.metadata["cohort/from_offset"].value, m.metadata["cohort/until_offset"].value)
        for m in _of(again, key)
    }
    assert ranges == {"0": ("10", "11")}  # partitions with nothing new are not reported (the ledger has no range)
    assert spark.read.parquet(setup.sink).count() == 29

    # the landed asset's check compares the sink with the ledger: a range directory gone since the check after
    # its batch passed is named by the full pass
    assert checks[CHECK_SINK].passed and checks[CHECK_SINK].asset_key == T.get_landed_asset_key(config.group, topic)
    gone = Path(setup.sink) / f"topic={topic}" / "partition=0" / range_dir_name(topic, 0, 10, 11)
    shutil.rmtree(gone)
    failed = _checks(defs, config, instance, full=True)[CHECK_SINK]
    assert not failed.passed
    assert "committed range [10, 11)" in failed.metadata["cohort/details"].value
    assert "`cohort audit --repair` publishes it if its run's staged output" in failed.metadata["cohort/details"].value


def test_asset_checks_fail_on_a_forged_gap_and_on_lag(make_setup, topic_factory, produce_records, instance, spark):
    topic = topic_factory(2, suffix="forged")
    produce_records(topic, json_records(20, 2))
    # a partition more than 3 records behind fails the lag check once its last commit is 30 s old: the
    # checks read a clock one minute ahead of the commits
    setup = make_setup(
        (topic,), slots=1, lag_threshold=3, freshness_s=30.0, settings={"initial_rebalance_delay_s": 0.0}
    )
    config = config_for(setup)
    defs = definitions_for(setup, clock=ManualClock(time.time() + 60))
    job = defs.resolve_job_def(T.get_job_name(config.group))
    assert job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance).success
    assert all(c.passed for c in _checks(defs, config, instance).values())

    # forge a corrupt ledger: a range [12, 15) after the committed offset 10 of partition 0, written below
    # the coordinator (which refuses non-contiguous commits), as a damaged or hand-edited store would hold
    produce_records(topic, [(0, None, b'{"id": 1}')] * 5 + [(1, None, b'{"id": 2}')] * 4)
    engine = sa.create_engine(setup.store_url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "insert into cohort_offset_ranges (group_name, topic, partition, from_offset, until_offset, records,"
                " quarantined, generation, committed_at) values (:g, :t, 0, 12, 15, 3, 0, 1, 0)"
            ),
            {"g": config.group, "t": topic},
        )
        conn.execute(
            sa.text(
                "update cohort_offsets set next_offset = 15 where group_name = :g and topic = :t and partition = 0"
            ),
            {"g": config.group, "t": topic},
        )
    engine.dispose()
    checks = _checks(defs, config, instance)
    assert not checks[CHECK_CONTIGUOUS].passed
    details = checks[CHECK_CONTIGUOUS].metadata["cohort/details"].value
    assert "gap between offset 10 and range [12, 15)" in details
    assert not checks[CHECK_LAG].passed  # partition 1 is 4 records behind, threshold 3
    assert checks[CHECK_LAG].metadata["cohort/max_lag"].value == 4


def test_a_materialization_reported_by_hand_fails_the_audit_naming_it(
    make_setup, topic_factory, produce_records, instance, spark
):
    """The UI's "Report materialization" (a runless event with no offsets) and a forged range the ledger never
    committed do not pass for Cohort's: the contiguity check fails and names them."""
    topic = topic_factory(2, suffix="faked")
    produce_records(topic, json_records(10, 2))
    setup = make_setup((topic,), slots=1, settings={"initial_rebalance_delay_s": 0.0})
    config = config_for(setup)
    defs = definitions_for(setup)
    job = defs.resolve_job_def(T.get_job_name(config.group))
    assert job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance).success
    assert all(c.passed for c in _checks(defs, config, instance).values())
    key = T.get_asset_key(config.group, topic)

    instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key, partition="1"))
    checks = _checks(defs, config, instance)
    assert not checks[CHECK_CONTIGUOUS].passed
    details = checks[CHECK_CONTIGUOUS].metadata["cohort/details"].value
    assert f"{topic}-1: materialization by run" in details and "records no offsets" in details

    forged = {"cohort/from_offset": "5", "cohort/until_offset": "9"}
    instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key, partition="0", metadata=forged))
    details = _checks(defs, config, instance)[CHECK_CONTIGUOUS].metadata["cohort/details"].value
    assert f"{topic}-0: materialization [5, 9) is not in the ledger" in details


def test_any_later_run_of_the_slot_reports_ranges_that_lost_runs_committed(
    make_setup, topic_factory, produce_records, instance, spark
):
    """Run A of slot 1 committed (and mirrored) [0, 4) of both partitions and died before reporting; its
    rerun B died too, before reporting anything. The next run of the slot, an ordinary one with no rerun tag,
    reports A's ranges from the ledger, so the audit closes whoever comes next."""
    from cohort.assignment.member import GroupMember
    from cohort.common.types import OffsetRange
    from cohort.pipelines.kafka.mirror import KafkaOffsetMirror

    topic = topic_factory(2, suffix="lost")
    produce_records(topic, json_records(8, 2))
    setup = make_setup((topic,), slots=1, settings={"initial_rebalance_delay_s": 0.0})
    config = config_for(setup)
    group = config.group_resource
    coordinator = group.get_coordinator()
    coordinator.report_topic_metadata(config.group, {topic: 2})
    lost = "0a0b0c0d-run-a-died"
    with GroupMember(
        coordinator, config.group, group.member_settings(), instance_id=f"{config.group}/worker-1", client_id=lost
    ) as member:
        assert sorted(member.join()) == [(topic, 0), (topic, 1)]
        ranges = [OffsetRange(topic, p, 0, 4, records=4) for p in (0, 1)]
        member.commit(ranges, run_id=lost)
    KafkaOffsetMirror({"bootstrap.servers": setup.bootstrap}).mirror(config.group, ranges, run_id=lost)
    defs = definitions_for(setup)
    key = T.get_asset_key(config.group, topic)
    assert instance.get_materialized_partitions(key) == set()  # the rerun B died before reporting anything

    result = defs.resolve_job_def(T.get_job_name(config.group)).execute_in_process(
        run_config=worker_run_config(config, 1), instance=instance
    )

    assert result.success
    reported = {
        (m.partition, m.metadata["cohort/from_offset"].value, m.metadata["cohort/run_id"].value)
        for m in _of(result, key)
    }
    assert reported == {("0", "0", lost), ("1", "0", lost)}
    assert all(m.metadata["cohort/reported_by"].value == result.run_id for m in _of(result, key))
    checks = _checks(defs, config, instance)
    assert checks[CHECK_CONTIGUOUS].passed and checks[CHECK_LAG].passed
    # run A's commit was made here by hand, with no output: the sink check names both ranges as missing
    assert not checks[CHECK_SINK].passed and checks[CHECK_SINK].metadata["cohort/problems"].value == 2
    group.close()


def test_a_run_with_no_config_hosts_every_slot_and_they_split_the_partitions(
    make_setup, topic_factory, produce_records, instance, spark
):
    """What Materialize launches: one run, both worker slots as members of one generation, the assignor
    splitting the four partitions between them; everything consumed once and the checks green."""
    topic = topic_factory(4, suffix="hosted")
    produce_records(topic, json_records(40, 4))
    setup = make_setup((topic,), slots=2, settings={"initial_rebalance_delay_s": 2.0})
    config = config_for(setup)
    defs = definitions_for(setup)
    result = defs.resolve_job_def(T.get_job_name(config.group)).execute_in_process(instance=instance)

    assert result.success
    shown = _of(result, T.get_asset_key(config.group, topic))
    by_slot: dict[str, set[str]] = {}
    for m in shown:
        by_slot.setdefault(m.metadata["cohort/instance_id"].value, set()).add(m.partition)
    assert sorted(by_slot) == [f"{config.group}/worker-1", f"{config.group}/worker-2"]
    assert sorted(p for parts in by_slot.values() for p in parts) == ["0", "1", "2", "3"]
    assert len({m.metadata["cohort/generation"].value for m in shown}) == 1
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and run.tags["cohort/slot"] == "1,2" and run.tags["cohort/group"] == config.group
    assert {e.check_name: e.passed for e in result.get_asset_check_evaluations()} == {
        CHECK_CONTIGUOUS: True,
        CHECK_LAG: True,
        CHECK_SINK: True,
    }
    assert spark.read.parquet(setup.sink).count() == 40


def test_an_unknown_slot_is_refused_at_launch(make_setup):
    setup = make_setup(("t",), slots=2)
    config = config_for(setup)
    job = definitions_for(setup).resolve_job_def(T.get_job_name(config.group))
    with dg.instance_for_test() as fresh:
        try:
            job.execute_in_process(run_config=worker_run_config(config, 3), instance=fresh)
        except dg.DagsterInvalidConfigError as refused:
            assert "slot" in str(refused)
        else:
            raise AssertionError("slot 3 of a two-slot group was accepted")
        assert fresh.get_runs() == []  # refused before any run exists


def _undelivered_outputs(instance, run_id):
    """The run's log lines saying an op did not yield outputs it declared (Dagster's note when a check spec's
    result never comes back as the op's own result)."""
    return [e.user_message for e in instance.all_logs(run_id) if "did not yield" in e.user_message]


def test_a_group_batch_yields_its_checks_as_its_own_results(
    make_setup, topic_factory, produce_records, instance, spark
):
    """The checks declared on the group's batch op are that op's results: a passing batch's run log (and the
    checks job's) says nothing of outputs it did not yield, and a failing check still shows as failed."""
    topic = topic_factory(2, suffix="yielded")
    produce_records(topic, json_records(10, 2))
    setup = make_setup((topic,), slots=2, settings={"initial_rebalance_delay_s": 0.0})
    config = config_for(setup)
    defs = definitions_for(setup)
    batch = defs.resolve_job_def(T.get_job_name(config.group))
    checks_job = defs.resolve_job_def(T.get_checks_job_name(config.group))
    every_check = {CHECK_CONTIGUOUS: True, CHECK_LAG: True, CHECK_SINK: True}

    passing = batch.execute_in_process(instance=instance)
    assert passing.success
    assert {e.check_name: e.passed for e in passing.get_asset_check_evaluations()} == every_check
    assert _undelivered_outputs(instance, passing.run_id) == []
    alone = checks_job.execute_in_process(instance=instance)
    assert {e.check_name: e.passed for e in alone.get_asset_check_evaluations()} == every_check
    assert _undelivered_outputs(instance, alone.run_id) == []

    key = T.get_asset_key(config.group, topic)
    instance.report_runless_asset_event(dg.AssetMaterialization(asset_key=key, partition="1"))  # by hand: no offsets
    failing = batch.execute_in_process(instance=instance)
    assert failing.success  # the checks are not blocking: the batch's work stands
    assert {e.check_name: e.passed for e in failing.get_asset_check_evaluations()} == {
        **every_check,
        CHECK_CONTIGUOUS: False,
    }
    [record] = instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(key, CHECK_CONTIGUOUS), limit=1
    )
    assert record.run_id == failing.run_id and record.status.value == "FAILED"
    assert _undelivered_outputs(instance, failing.run_id) == []
