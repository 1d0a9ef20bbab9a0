"""The membership and topic sensors on a real Dagster instance, a real SQLite store and the real broker.

Time is a ManualClock: sessions expire because the test moves the clock, never because it sleeps.
"""

import json
import re
import time
import uuid
from datetime import UTC, datetime

import dagster as dg
import pytest

from cohort.assets.busy_slots import STARTING_GRACE_S
from cohort.assets.cursors import MembershipCursor, TopicCursor
from cohort.assets.factory import build_cohort_definitions
from cohort.assets.translator import CohortConfig, DagsterCohortTranslator
from cohort.assignment.clock import ManualClock
from cohort.assignment.protocol.group_state import GroupState
from cohort.assignment.protocol.messages import JoinComplete, JoinRequest
from cohort.resources import KafkaResource
from cohort.resources.group import CohortGroupResource

T = DagsterCohortTranslator()


class ScriptedKafka(KafkaResource):
    """Kafka whose partition counts are scripted: the embedded broker cannot add partitions."""

    counts_json: str = "{}"

    def partition_counts(self, topics=None):
        counts = json.loads(self.counts_json)
        return {t: n for t, n in counts.items() if topics is None or t in set(topics)}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000_000.0)


def _config(group: str, sqlite_url: str, **kwargs) -> CohortConfig:
    settings = {"initial_rebalance_delay_s": 0.0, "session_timeout_s": 10.0, "rebalance_timeout_s": 30.0}
    kwargs.setdefault("topics", ("orders",))
    return CohortConfig(CohortGroupResource(group=group, store_url=sqlite_url, worker_slots=3, **settings, **kwargs))


def _run(
    instance: dg.DagsterInstance, *, fail: bool, job_name: str = "some_worker_run", slot: int = 1, tags=None
) -> str:
    @dg.op(name="cohort_worker_op__x", config_schema={"slot": int})
    def work() -> None:
        if fail:
            raise RuntimeError("the batch failed")

    @dg.job(name=job_name)
    def job() -> None:
        work()

    config = {"ops": {"cohort_worker_op__x": {"config": {"slot": slot}}}}
    return job.execute_in_process(run_config=config, instance=instance, raise_on_error=False, tags=tags).run_id


def _form_group(coordinator, group: str, members: dict[int, str | None], topics=("orders",), pattern=None) -> dict:
    """Join static members for slots -> run ids and sync them: a Stable group of one generation."""
    requests = {
        slot: JoinRequest(
            instance_id=f"{group}/worker-{slot}",
            client_id=run_id,
            topics=topics,
            topic_pattern=pattern,
            session_timeout=10,
            rebalance_timeout=30,
        )
        for slot, run_id in members.items()
    }
    joined: dict[int, JoinComplete] = {}
    for _ in range(10):
        for slot, request in requests.items():
            answer = coordinator.join(group, request)
            requests[slot] = request.with_member_id(answer.member_id)
            if isinstance(answer, JoinComplete):
                joined[slot] = answer
        generations = {j.generation for j in joined.values()}
        if len(joined) == len(requests) and len(generations) == 1:
            break
    for answer in sorted(joined.values(), key=lambda j: not j.is_leader):
        coordinator.sync(group, answer.member_id, answer.generation)
    assert coordinator.describe_group(group).state is GroupState.STABLE
    return {slot: j.member_id for slot, j in joined.items()}


def _tick(sensor, instance, resources, cursor=None):
    with dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor) as context:
        return sensor.evaluate_tick(context)


def _membership(configs, resources, clock):
    defs = build_cohort_definitions(configs, kafka=resources["kafka"], clock=clock)
    return defs.resolve_sensor_def("cohort_membership_sensor")


def test_failed_run_is_evicted_and_its_slot_rerun_once(sqlite_url, kafka_config, clock):
    config = _config("orders-ingest", sqlite_url)
    group = config.group_resource
    coordinator = group.get_coordinator(clock)
    coordinator.report_topic_metadata(config.group, {"orders": 6})
    kafka = KafkaResource(bootstrap_servers=kafka_config["bootstrap.servers"])
    resources = {config.resource_key: group, "kafka": kafka}
    with dg.instance_for_test() as instance:
        failed, ok = _run(instance, fail=True), _run(instance, fail=False)
        members = _form_group(coordinator, config.group, {1: failed, 2: ok})
        sensor = _membership([config], resources, clock)
        generation = coordinator.describe_group(config.group).generation

        result = _tick(sensor, instance, resources)

        assert [r.tags["cohort/slot"] for r in result.run_requests] == ["1"]
        request = result.run_requests[0]
        assert request.job_name == T.get_job_name(config.group)
        assert request.run_key == f"{config.group}:slot-1:gen-{generation}:rerun-{failed[:8]}"
        assert request.run_config == {"ops": {"cohort_worker_op__orders_ingest": {"config": {"slot": "1"}}}}
        assert request.tags["cohort/rerun_of"] == failed
        described = coordinator.describe_group(config.group)
        assert [m.instance_id for m in described.members] == ["orders-ingest/worker-2"]
        assert described.state is GroupState.PREPARING_REBALANCE
        cursor = MembershipCursor.from_json(result.cursor)
        assert set(cursor.groups[config.group].members) == {members[2]}

        again = _tick(sensor, instance, resources, cursor=result.cursor)
        assert again.run_requests == []


def test_expired_sessions_rerun_only_slots_whose_run_did_not_succeed(sqlite_url, kafka_config, clock):
    config = _config("clicks", sqlite_url)
    group = config.group_resource
    coordinator = group.get_coordinator(clock)
    coordinator.report_topic_metadata(config.group, {"orders": 4})
    kafka = KafkaResource(bootstrap_servers=kafka_config["bootstrap.servers"])
    resources = {config.resource_key: group, "kafka": kafka}
    with dg.instance_for_test() as instance:
        ok = _run(instance, fail=False)
        lost = str(uuid.uuid4())  # a run the instance never heard the end of (its process was killed)
        members = _form_group(coordinator, config.group, {1: lost, 3: ok})
        sensor = _membership([config], resources, clock)
        generation = coordinator.describe_group(config.group).generation

        quiet = _tick(sensor, instance, resources)
        assert quiet.run_requests == []
        assert len(coordinator.describe_group(config.group).members) == 2

        clock.advance(10.5)  # past the 10 s session timeout of both members
        result = _tick(sensor, instance, resources, cursor=quiet.cursor)

        assert [(r.tags["cohort/slot"], r.run_key) for r in result.run_requests] == [
            ("1", f"clicks:slot-1:gen-{generation}:{members[1][-12:]}")
        ]
        assert coordinator.describe_group(config.group).state is GroupState.EMPTY
        assert _tick(sensor, instance, resources, cursor=result.cursor).run_requests == []


def test_clean_leave_requests_no_rerun_and_the_budget_resumes(sqlite_url, kafka_config, clock):
    configs = [_config(f"g{i}", sqlite_url) for i in range(3)]
    kafka = KafkaResource(bootstrap_servers=kafka_config["bootstrap.servers"])
    resources = {"kafka": kafka, **{c.resource_key: c.group_resource for c in configs}}
    with dg.instance_for_test() as instance:
        coordinator = resources[configs[0].resource_key].get_coordinator(clock)
        coordinator.report_topic_metadata("g0", {"orders": 2})
        members = _form_group(coordinator, "g0", {2: _run(instance, fail=True)})
        defs = build_cohort_definitions(configs, kafka=kafka, clock=clock)
        sensor = defs.resolve_sensor_def("cohort_membership_sensor")
        first = _tick(sensor, instance, resources)
        assert len(first.run_requests) == 1  # the failed run's member

        coordinator.report_topic_metadata("g1", {"orders": 2})
        left = _form_group(coordinator, "g1", {1: None})
        coordinator.leave("g1", left[1], instance_id="g1/worker-1", reason="closed")
        second = _tick(sensor, instance, resources, cursor=first.cursor)
        assert second.run_requests == []
        assert MembershipCursor.from_json(second.cursor).groups["g0"].last_event > 0
        assert members


def _topic_sensor(configs, clock, kafka):
    defs = build_cohort_definitions(configs, kafka=kafka, clock=clock)
    return defs.resolve_sensor_def("cohort_topic_sensor")


def test_new_topic_matching_a_pattern_adds_partitions_and_requests_runs(
    sqlite_url, kafka_config, topic_factory, clock, request
):
    first = topic_factory(2, suffix="pat-a")
    pattern = r"t\d+-" + re.escape(request.node.name) + r"-pat-.*"
    config = _config("pattern-group", sqlite_url, topics=(), topic_pattern=pattern)
    group = config.group_resource
    kafka = KafkaResource(bootstrap_servers=kafka_config["bootstrap.servers"])
    resources = {config.resource_key: group, "kafka": kafka}
    coordinator = group.get_coordinator(clock)
    sensor = _topic_sensor([config], clock, kafka)
    with dg.instance_for_test() as instance:
        tick1 = _tick(sensor, instance, resources)
        assert tick1.run_requests == []
        assert [(r.partitions_def_name, list(r.partition_keys)) for r in tick1.dynamic_partitions_requests] == [
            (T.get_partitions_def_name(config.group), ["0", "1"])
        ]
        assert coordinator.describe_group(config.group).partitions_per_topic.get(first) == 2
        instance.add_dynamic_partitions(T.get_partitions_def_name(config.group), ["0", "1"])

        _form_group(coordinator, config.group, {1: None}, topics=(), pattern=pattern)
        assert _tick(sensor, instance, resources, cursor=tick1.cursor).run_requests == []

        second = topic_factory(3, suffix="pat-b")
        topic_factory(1, suffix="other")  # not matching: ignored
        tick2 = _tick(sensor, instance, resources, cursor=tick1.cursor)

        assert [(r.partitions_def_name, list(r.partition_keys)) for r in tick2.dynamic_partitions_requests] == [
            (T.get_partitions_def_name(config.group), ["2"])  # one set per group: "0", "1" are there
        ]
        assert sorted(r.tags["cohort/slot"] for r in tick2.run_requests) == ["1", "2", "3"]
        assert all(":gen-1:topics-" in r.run_key for r in tick2.run_requests)
        described = coordinator.describe_group(config.group)
        assert described.state is GroupState.PREPARING_REBALANCE
        assert described.partitions_per_topic[second] == 3
        assert TopicCursor.from_json(tick2.cursor).counts[config.group] == {first: 2, second: 3}
        assert _tick(sensor, instance, resources, cursor=tick2.cursor).run_requests == []


def test_partition_count_growth_adds_the_new_partitions_and_rebalances(sqlite_url, clock):
    config = _config("growing", sqlite_url, topics=("orders",))
    group = config.group_resource
    coordinator = group.get_coordinator(clock)
    with dg.instance_for_test() as instance:
        kafka = ScriptedKafka(bootstrap_servers="scripted:9092", counts_json='{"orders": 2, "unrelated": 5}')
        sensor = _topic_sensor([config], clock, kafka)
        tick1 = _tick(sensor, instance, {config.resource_key: group, "kafka": kafka})
        assert [list(r.partition_keys) for r in tick1.dynamic_partitions_requests] == [["0", "1"]]
        instance.add_dynamic_partitions(T.get_partitions_def_name(config.group), ["0", "1"])
        _form_group(coordinator, config.group, {1: None, 2: None})

        grown = ScriptedKafka(bootstrap_servers="scripted:9092", counts_json='{"orders": 3, "unrelated": 5}')
        tick2 = _tick(sensor, instance, {config.resource_key: group, "kafka": grown}, cursor=tick1.cursor)

        assert [list(r.partition_keys) for r in tick2.dynamic_partitions_requests] == [["2"]]
        assert len(tick2.run_requests) == 3
        assert coordinator.describe_group(config.group).state is GroupState.PREPARING_REBALANCE
        assert coordinator.describe_group(config.group).partitions_per_topic == {"orders": 3}


def test_failed_runs_that_left_or_were_never_seen_are_rerun_once(sqlite_url, kafka_config, clock):
    config = _config("leavers", sqlite_url)
    group = config.group_resource
    coordinator = group.get_coordinator(clock)
    coordinator.report_topic_metadata(config.group, {"orders": 4})
    kafka = KafkaResource(bootstrap_servers=kafka_config["bootstrap.servers"])
    resources = {config.resource_key: group, "kafka": kafka}
    job_name = T.get_job_name(config.group)
    with dg.instance_for_test() as instance:
        sensor = _membership([config], resources, clock)
        members = _form_group(coordinator, config.group, {1: str(uuid.uuid4()), 2: str(uuid.uuid4())})
        first = _tick(sensor, instance, resources)  # sees the members; starts watching worker runs
        assert first.run_requests == []

        # slot 1's run fails and its worker leaves cleanly; slot 3 fails before the sensor ever saw it;
        # slot 2 fails too, but it was itself a rerun: it is not rerun again
        failed_1 = _run(instance, fail=True, job_name=job_name, slot=1)
        coordinator.leave(config.group, members[1], instance_id=f"{config.group}/worker-1", reason="closed")
        failed_3 = _run(instance, fail=True, job_name=job_name, slot=3)
        _run(instance, fail=True, job_name=job_name, slot=2, tags={"cohort/rerun_of": "an-earlier-run"})
        _run(instance, fail=False, job_name=job_name, slot=2)

        second = _tick(sensor, instance, resources, cursor=first.cursor)
        assert sorted((r.tags["cohort/slot"], r.tags["cohort/rerun_of"]) for r in second.run_requests) == [
            ("1", failed_1),
            ("3", failed_3),
        ]
        assert all(r.run_key.split(":")[-1].startswith("rerun-") for r in second.run_requests)
        assert _tick(sensor, instance, resources, cursor=second.cursor).run_requests == []


def test_a_run_removed_at_its_deadline_that_fails_later_is_not_rerun_twice(sqlite_url, kafka_config, clock):
    config = _config("zombies", sqlite_url)
    group = config.group_resource
    coordinator = group.get_coordinator(clock)
    coordinator.report_topic_metadata(config.group, {"orders": 2})
    kafka = KafkaResource(bootstrap_servers=kafka_config["bootstrap.servers"])
    resources = {config.resource_key: group, "kafka": kafka}
    job_name = T.get_job_name(config.group)
    with dg.instance_for_test() as instance:
        stalled = instance.add_run(
            dg.DagsterRun(
                job_name=job_name,
                run_id=str(uuid.uuid4()),
                status=dg.DagsterRunStatus.STARTED,
                run_config={"ops": {"cohort_worker_op__zombies": {"config": {"slot": 1}}}},
            )
        )
        _form_group(coordinator, config.group, {1: stalled.run_id})
        sensor = _membership([config], resources, clock)
        first = _tick(sensor, instance, resources)
        clock.advance(11)  # the stalled run stops heartbeating: its session expires
        second = _tick(sensor, instance, resources, cursor=first.cursor)
        assert [r.tags["cohort/rerun_of"] for r in second.run_requests] == [stalled.run_id]

        instance.report_run_failed(stalled)  # the zombie's commit is refused later and its run fails
        assert instance.get_run_by_id(stalled.run_id).status is dg.DagsterRunStatus.FAILURE
        third = _tick(sensor, instance, resources, cursor=second.cursor)
        assert third.run_requests == []


def test_the_membership_sensor_uses_the_group_resource_the_definitions_carry(sqlite_url, tmp_path, kafka_config, clock):
    """Swap the group resource (another store): the sensor follows it, as the workers do; nothing private."""
    config = _config("swapped", sqlite_url)
    elsewhere = CohortGroupResource(
        group="swapped",
        topics=["orders"],
        worker_slots=3,
        store_url=f"sqlite:///{tmp_path / 'elsewhere.db'}",
        initial_rebalance_delay_s=0.0,
        session_timeout_s=10.0,
        rebalance_timeout_s=30.0,
    )
    kafka = KafkaResource(bootstrap_servers=kafka_config["bootstrap.servers"])
    coordinator = elsewhere.get_coordinator(clock)
    coordinator.report_topic_metadata("swapped", {"orders": 3})
    with dg.instance_for_test() as instance:
        failed = _run(instance, fail=True)
        _form_group(coordinator, "swapped", {1: failed})
        sensor = _membership([config], {"kafka": kafka}, clock)
        on_default = _tick(sensor, instance, {"kafka": kafka, config.resource_key: config.group_resource})
        on_swapped = _tick(sensor, instance, {"kafka": kafka, config.resource_key: elsewhere})
    assert on_default.run_requests == []  # the configured store knows no member
    assert [r.tags["cohort/slot"] for r in on_swapped.run_requests] == ["1"]
    assert coordinator.describe_group("swapped").members == ()  # evicted in the swapped store
    elsewhere.close()


def test_a_failed_materialize_run_reruns_every_slot_it_hosted(sqlite_url, kafka_config, clock):
    """Materialize launches Dagster's implicit asset job, not the worker job: the sensor finds the group's
    batch runs by the tags every batch run sets, and reruns each slot the run hosted."""
    config = _config("materialized", sqlite_url)
    group = config.group_resource
    kafka = KafkaResource(bootstrap_servers=kafka_config["bootstrap.servers"])
    resources = {config.resource_key: group, "kafka": kafka}
    with dg.instance_for_test() as instance:
        sensor = _membership([config], resources, clock)
        first = _tick(sensor, instance, resources)  # starts watching the group's runs
        tags = {"cohort/group": config.group, "cohort/slot": "1,2"}
        failed = _run(instance, fail=True, job_name="__ASSET_JOB", tags=tags)
        _run(instance, fail=True, job_name="__ASSET_JOB", tags={"cohort/group": "another-group", "cohort/slot": "1"})
        second = _tick(sensor, instance, resources, cursor=first.cursor)
    assert sorted((r.tags["cohort/slot"], r.tags["cohort/rerun_of"]) for r in second.run_requests) == [
        ("1", failed),
        ("2", failed),
    ]
    assert {r.job_name for r in second.run_requests} == {T.get_job_name(config.group)}


def _in_flight(instance: dg.DagsterInstance, job_name: str, slot: int, status: dg.DagsterRunStatus) -> str:
    """A batch run of `slot` that Dagster records as `status` (queued, or running in a process of its own)."""
    run = dg.DagsterRun(
        job_name=job_name,
        run_id=str(uuid.uuid4()),
        status=status,
        tags={"cohort/slot": str(slot)},
        run_config={"ops": {"cohort_worker_op__x": {"config": {"slot": str(slot)}}}},
    )
    return instance.add_run(run).run_id


def _schedule_slots(defs: dg.Definitions, config: CohortConfig, instance: dg.DagsterInstance) -> list[str]:
    """Evaluate the group's schedule as the daemon does; the slots it launches."""
    schedule = defs.resolve_schedule_def(f"cohort_batches__{config.group.replace('-', '_')}")
    resources = {config.resource_key: config.group_resource}
    when = datetime.now(UTC)
    with dg.build_schedule_context(instance=instance, resources=resources, scheduled_execution_time=when) as context:
        result = schedule.evaluate_tick(context)
    return sorted(r.tags["cohort/slot"] for r in result.run_requests or [])


def test_the_schedule_launches_no_slot_whose_batch_is_still_in_flight(sqlite_url, kafka_config):
    """A batch slower than the schedule's interval: its slot is not launched again (a second run would fence
    it), until its run can no longer commit (its session expired) or never started within the grace."""
    clock = ManualClock(time.time())  # Dagster records runs in wall-clock time
    config = CohortConfig(_config("slow", sqlite_url).group_resource, schedule="* * * * *")
    kafka = KafkaResource(bootstrap_servers=kafka_config["bootstrap.servers"])
    defs = build_cohort_definitions([config], kafka=kafka, clock=clock)
    job_name = T.get_job_name(config.group)
    coordinator = config.group_resource.get_coordinator(clock)
    coordinator.report_topic_metadata(config.group, {"orders": 3})
    with dg.instance_for_test() as instance:
        assert _schedule_slots(defs, config, instance) == ["1", "2", "3"]
        reading = _in_flight(instance, job_name, 1, dg.DagsterRunStatus.STARTED)
        _in_flight(instance, job_name, 2, dg.DagsterRunStatus.NOT_STARTED)  # launched, not running yet
        killed_early = _in_flight(instance, job_name, 3, dg.DagsterRunStatus.STARTED)
        assert _schedule_slots(defs, config, instance) == []  # all three in flight (3 is within its grace)
        # Past the grace with a margin: Dagster stamps the runs in wall-clock time, some seconds after this clock
        # began on a loaded machine.
        clock.advance(STARTING_GRACE_S + 120)
        _form_group(coordinator, config.group, {1: reading})  # slot 1's run joined and heartbeats
        assert killed_early not in {m.client_id for m in coordinator.store.load(config.group).members.values()}
        assert _schedule_slots(defs, config, instance) == ["3"]  # never joined within the grace: lost
        clock.advance(11)  # slot 1's run stops heartbeating (killed): its session expires
        assert _schedule_slots(defs, config, instance) == ["1", "3"]


def test_a_lost_slot_with_another_batch_in_flight_is_not_rerun(sqlite_url, kafka_config):
    """A member lost while the schedule already launched its slot's next run: that run resumes from the
    committed offsets; a rerun beside it would fence it."""
    clock = ManualClock(time.time())
    config = _config("taken-over", sqlite_url)
    coordinator = config.group_resource.get_coordinator(clock)
    coordinator.report_topic_metadata(config.group, {"orders": 2})
    kafka = KafkaResource(bootstrap_servers=kafka_config["bootstrap.servers"])
    resources = {config.resource_key: config.group_resource, "kafka": kafka}
    job_name = T.get_job_name(config.group)
    with dg.instance_for_test() as instance:
        lost_1 = _in_flight(instance, job_name, 1, dg.DagsterRunStatus.STARTED)
        lost_2 = _in_flight(instance, job_name, 2, dg.DagsterRunStatus.STARTED)
        _form_group(coordinator, config.group, {1: lost_1, 2: lost_2})
        sensor = _membership([config], resources, clock)
        first = _tick(sensor, instance, resources)
        _in_flight(instance, job_name, 1, dg.DagsterRunStatus.NOT_STARTED)  # the schedule's next batch of slot 1
        clock.advance(11)  # both runs were killed: their sessions expire
        second = _tick(sensor, instance, resources, cursor=first.cursor)
        assert [(r.tags["cohort/slot"], r.tags["cohort/rerun_of"]) for r in second.run_requests] == [("2", lost_2)]
        assert _tick(sensor, instance, resources, cursor=second.cursor).run_requests == []
