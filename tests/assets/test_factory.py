"""Pure pieces of the Dagster layer: the offset audit, cursors, the translator, the schedule, the time budget."""

from datetime import UTC, datetime

import dagster as dg
import pytest

from cohort.assets.audit import audit_partition
from cohort.assets.cursors import GroupCursor, MembershipCursor, TopicCursor
from cohort.assets.factory import build_cohort_definitions, cohort_assets
from cohort.assets.translator import CohortConfig, DagsterCohortTranslator
from cohort.assignment.clock import ManualClock
from cohort.assignment.protocol.messages import JoinRequest
from cohort.common.types import TopicPartition
from cohort.resources import KafkaResource
from cohort.resources.group import CohortGroupResource

TP = TopicPartition("orders", 3)


def test_audit_accepts_a_contiguous_history_with_a_recorded_gap():
    audit = audit_partition(
        TP,
        [(0, 10, None), (10, 12, "retention"), (12, 20, None), (20, 20, None)],
        {(0, 10), (12, 20), (20, 20)},
        kafka_committed=20,
        end_offset=26,
    )
    assert audit.ok and audit.gaps == 1 and audit.lag == 6 and audit.committed == 20


def test_audit_follows_offset_resets_and_expects_no_materialization_for_them():
    """A backward reset (replay) and a forward one (skip) keep the history contiguous; only consumed ranges
    need a materialization, the replayed range included."""
    ledger = [(0, 10, None, "commit"), (10, 4, None, "reset"), (4, 12, None, "commit"), (12, 30, None, "reset")]
    audit = audit_partition(TP, ledger, {(0, 10), (4, 12)}, kafka_committed=30, end_offset=35)
    assert audit.ok, audit.problems
    assert (audit.committed, audit.resets, audit.ledger_ranges, audit.lag) == (30, 2, 2, 5)
    missing = audit_partition(TP, ledger, {(0, 10)}, kafka_committed=30, end_offset=35)
    assert missing.problems == ("orders-3: ledger range [4, 12) has no materialization",)


def test_audit_leaves_ranges_of_another_dagster_instance_to_that_instance():
    """Several hosts on one group: a range another instance's run committed is materialized there, not here;
    a range of this instance's runs without a materialization is still a problem."""
    ledger = [(0, 10, None), (10, 20, None), (20, 30, None)]
    audit = audit_partition(TP, ledger, {(0, 10)}, kafka_committed=30, end_offset=30, elsewhere=[(10, 20)])
    assert audit.problems == ("orders-3: ledger range [20, 30) has no materialization",)
    assert audit.elsewhere == 1
    clean = audit_partition(TP, ledger, {(0, 10), (20, 30)}, kafka_committed=30, end_offset=30, elsewhere=[(10, 20)])
    assert clean.ok and clean.elsewhere == 1


@pytest.mark.parametrize(
    "ledger, shown, kafka, problem",
    [
        ([(0, 10, None), (12, 20, None)], {(0, 10), (12, 20)}, 20, "ledger gap between offset 10 and range [12, 20)"),
        ([(0, 10, None), (8, 20, None)], {(0, 10), (8, 20)}, 20, "ledger overlap between offset 10 and range [8, 20)"),
        ([(0, 10, None), (10, 20, None)], {(0, 10)}, 20, "ledger range [10, 20) has no materialization"),
        ([(0, 10, None)], {(0, 10), (10, 15)}, 10, "materialization [10, 15) is not in the ledger"),
        ([(0, 10, None)], {(0, 10)}, 7, "ledger committed offset 10 but Kafka's committed offset is 7"),
        ([], set(), 5, "ledger committed offset None but Kafka's committed offset is 5"),
    ],
)
def test_audit_names_each_disagreement(ledger, shown, kafka, problem):
    audit = audit_partition(TP, ledger, shown, kafka_committed=kafka, end_offset=20)
    assert not audit.ok
    assert f"orders-3: {problem}" in audit.problems


def test_audit_lag_without_commits_counts_from_the_first_available_offset():
    assert audit_partition(TP, [], set(), kafka_committed=None, end_offset=50, low_offset=30).lag == 20


def test_cursors_round_trip_and_start_empty():
    cursor = MembershipCursor({"g": GroupCursor(9, {"m-1": (2, "run"), "m-2": (None, None)})}, next_group=1)
    assert MembershipCursor.from_json(cursor.to_json()) == cursor
    assert MembershipCursor.from_json(None) == MembershipCursor()
    topics = TopicCursor({"g": {"a": 3, "b": 1}})
    assert TopicCursor.from_json(topics.to_json()) == topics


def test_config_validates_and_translator_can_be_overridden(sqlite_url):
    with pytest.raises(ValueError, match="subscribes to nothing"):
        CohortConfig(CohortGroupResource(group="g"))
    with pytest.raises(ValueError, match="valid list"):
        CohortConfig(CohortGroupResource(group="g", topics="orders"))
    with pytest.raises(ValueError, match="illegal characters"):
        CohortConfig(CohortGroupResource(group="g", topics=["bad topic"]))

    class Flat(DagsterCohortTranslator):
        def get_asset_key(self, group: str, topic: str) -> dg.AssetKey:
            return dg.AssetKey(["lake", topic.replace(".", "_")])

    config = CohortConfig(
        CohortGroupResource(group="g", topics=["a.b"], topic_pattern=r"c\..*", store_url=sqlite_url),
        known_topics=("c.x", "d.y"),
    )
    parts = cohort_assets(config, translator=Flat())
    specs = {s.key: s for s in parts.assets.specs}
    assert [k for k in specs if k.path[0] == "lake"] == [dg.AssetKey(["lake", "a_b"]), dg.AssetKey(["lake", "c_x"])]
    assert parts.assets.partitions_def is not None and parts.assets.partitions_def.name == "cohort__g"
    assert specs[dg.AssetKey(["lake", "a_b"])].metadata["cohort/topic"] == "a.b"
    landed = specs[dg.AssetKey(["cohort", "g", "a_b_landed"])]
    assert [d.asset_key for d in landed.deps] == [dg.AssetKey(["lake", "a_b"])]
    assert {c.name for c in parts.assets.check_specs} == {"offsets_contiguous", "lag_under_threshold"}


def test_schedule_launches_one_run_per_slot(sqlite_url):
    config = CohortConfig(
        CohortGroupResource(group="orders-ingest", topics=["orders"], worker_slots=3, store_url=sqlite_url)
    )
    schedule = cohort_assets(config).schedule
    assert schedule is not None and schedule.default_status is dg.DefaultScheduleStatus.STOPPED
    when = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
    with (
        dg.instance_for_test() as instance,
        dg.build_schedule_context(
            instance=instance, resources={config.resource_key: config.group_resource}, scheduled_execution_time=when
        ) as context,
    ):
        requests = schedule.evaluate_tick(context).run_requests
    assert [r.tags["cohort/slot"] for r in requests] == ["1", "2", "3"]
    assert requests[0].run_key == "orders-ingest:slot-1:scheduled-2026-11-21T12:00:00+00:00"
    assert len({r.run_key for r in requests}) == 3
    assert requests[1].run_config == {"ops": {"cohort_worker_op__orders_ingest": {"config": {"slot": "2"}}}}


def test_membership_sensor_resumes_where_its_time_budget_stopped(sqlite_url, kafka_config):
    from cohort.assets.sensors import build_membership_sensor

    clock = ManualClock(1000.0)
    settings = {"initial_rebalance_delay_s": 0.0, "session_timeout_s": 10.0}
    configs = [
        CohortConfig(CohortGroupResource(group=f"b{i}", topics=["orders"], store_url=sqlite_url, **settings))
        for i in range(3)
    ]
    defs = build_cohort_definitions(configs, kafka=KafkaResource(bootstrap_servers=kafka_config["bootstrap.servers"]))
    jobs = [defs.resolve_job_def(DagsterCohortTranslator().get_job_name(c.group)) for c in configs]
    sensor = build_membership_sensor(configs, jobs, clock=clock, time_budget_s=0.0)
    coordinator = configs[0].group_resource.get_coordinator(clock)
    for config in configs:
        coordinator.report_topic_metadata(config.group, {"orders": 2})
        request = JoinRequest(instance_id=f"{config.group}/worker-1", topics=["orders"], session_timeout=10)
        joined = coordinator.join(config.group, request)
        coordinator.sync(config.group, joined.member_id, joined.generation)
    clock.advance(11)
    seen, cursor = [], None
    with dg.instance_for_test() as instance:
        for _ in range(3):  # a zero budget handles one group per tick, in turn
            with dg.build_sensor_context(instance=instance, cursor=cursor, resources=defs.resources) as context:
                result = sensor.evaluate_tick(context)  # as the daemon evaluates it
            cursor = result.cursor
            seen += [r.tags["cohort/group"] for r in result.run_requests]
    assert seen == ["b0", "b1", "b2"]


def test_partitions_added_after_the_group_started_are_marked_new(sqlite_url):
    from cohort.assignment.coordinator import Coordinator
    from cohort.common.types import OffsetRange
    from cohort.runtime.slot_batch import new_partitions as _new_partitions

    coordinator = Coordinator.from_url(sqlite_url)
    ledger = coordinator.standalone_ledger("grower")
    ledger.commit([OffsetRange("orders", 0, 0, 5, records=5)])
    assigned = [TopicPartition("orders", 0), TopicPartition("orders", 2), TopicPartition("fresh", 0)]
    # orders-2 appeared after orders-0 was consumed; 'fresh' never had a commit: the reset policy decides there
    assert _new_partitions(ledger, assigned, {"orders": 3, "fresh": 1}) == [TopicPartition("orders", 2)]
    coordinator.close()


def test_workers_registering_partitions_at_the_same_moment_do_not_fail(tmp_path):
    from cohort.assets.worker import _register_partitions

    translator = DagsterCohortTranslator()
    name = translator.get_partitions_def_name("g")
    ours = dg.DagsterInstance.local_temp(tempdir=str(tmp_path))
    other = dg.DagsterInstance.local_temp(tempdir=str(tmp_path))
    read = ours.get_dynamic_partitions

    def read_then_lose_the_race(partitions_def_name: str):  # another worker inserts right after our read
        existing = read(partitions_def_name)
        if not existing:
            other.add_dynamic_partitions(partitions_def_name, ["2"])
        return existing

    ours.get_dynamic_partitions = read_then_lose_the_race
    _register_partitions(
        ours, CohortConfig(CohortGroupResource(group="g", topics=["t"])), translator, [TopicPartition("t", 0)], {"t": 4}
    )
    assert sorted(read(name)) == ["0", "1", "2", "3"]
