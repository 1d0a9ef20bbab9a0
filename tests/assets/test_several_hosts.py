"""Two Dagster instances (two hosts) on one store and one group: each launches its own slots, neither takes a
live member's slot from the other, and a lost slot is rerun once, by whichever host claims the loss first.

Real Dagster instances (one per host, each its own run storage), a real SQLite store shared by both, sensors and
schedules evaluated as the daemon evaluates them; time is a ManualClock. tests/assets/test_several_hosts_daemons.py
runs the same with two `dagster-daemon` processes and PostgreSQL."""

import uuid
from datetime import UTC, datetime

import dagster as dg
import pytest

from cohort.assets.factory import build_cohort_definitions
from cohort.assets.translator import CohortConfig
from cohort.assignment.clock import ManualClock
from cohort.assignment.protocol.group_state import EventKind
from cohort.resources.group import CohortGroupResource
from tests.assets.test_sensors import ScriptedKafka, _form_group, _run, _tick

GROUP = "shared-orders"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000_000.0)


def _host(sqlite_url: str, slots: tuple[int, ...]) -> CohortConfig:
    group = CohortGroupResource(
        group=GROUP,
        topics=["orders"],
        store_url=sqlite_url,
        worker_slots=2,
        initial_rebalance_delay_s=0.0,
        session_timeout_s=10.0,
        rebalance_timeout_s=30.0,
    )
    return CohortConfig(group, host_slots=slots, schedule="*/5 * * * *")


def _definitions(config: CohortConfig, clock: ManualClock) -> dg.Definitions:
    kafka = ScriptedKafka(bootstrap_servers="scripted:9092", counts_json='{"orders": 4}')
    return build_cohort_definitions([config], kafka=kafka, clock=clock)


def _resources(config: CohortConfig) -> dict:
    kafka = ScriptedKafka(bootstrap_servers="scripted:9092", counts_json='{"orders": 4}')
    return {config.resource_key: config.group_resource, "kafka": kafka}


def _slots(requests) -> list[str]:
    return sorted(r.tags["cohort/slot"] for r in requests)


def test_each_host_schedules_and_follows_topic_growth_for_its_own_slots(sqlite_url, clock):
    host_a, host_b = _host(sqlite_url, (1,)), _host(sqlite_url, (2,))
    for config, expected in ((host_a, ["1"]), (host_b, ["2"])):
        defs = _definitions(config, clock)
        schedule = defs.resolve_schedule_def(f"cohort_batches__{GROUP.replace('-', '_')}")
        with dg.instance_for_test() as instance:
            when = datetime(2026, 11, 25, tzinfo=UTC)
            with dg.build_schedule_context(
                instance=instance, resources=_resources(config), scheduled_execution_time=when
            ) as context:
                assert _slots(schedule.evaluate_tick(context).run_requests) == expected
            topic_sensor = defs.resolve_sensor_def("cohort_topic_sensor")
            first = _tick(topic_sensor, instance, _resources(config))
            grown = ScriptedKafka(bootstrap_servers="scripted:9092", counts_json='{"orders": 6}')
            _form_group(config.group_resource.get_coordinator(clock), GROUP, {1: None, 2: None})
            resources = {config.resource_key: config.group_resource, "kafka": grown}
            assert _slots(_tick(topic_sensor, instance, resources, cursor=first.cursor).run_requests) == expected
        config.group_resource.get_coordinator(clock).store.close()
        clock.advance(11)  # the members of this round expire before the next host forms the group again


def test_a_host_never_takes_a_slot_whose_member_lives_and_one_host_reruns_a_lost_one(sqlite_url, clock):
    host_a, host_b = _host(sqlite_url, (1,)), _host(sqlite_url, (2,))
    coordinator = host_a.group_resource.get_coordinator(clock)
    coordinator.report_topic_metadata(GROUP, {"orders": 4})
    with dg.instance_for_test() as instance_a, dg.instance_for_test() as instance_b:
        sensor_a = _definitions(host_a, clock).resolve_sensor_def("cohort_membership_sensor")
        sensor_b = _definitions(host_b, clock).resolve_sensor_def("cohort_membership_sensor")
        failed_on_a = _run(instance_a, fail=True, slot=1)  # host A's run of slot 1 failed
        lost_on_b = str(uuid.uuid4())  # host B's run of slot 2: its process was killed, B never heard its end
        _form_group(coordinator, GROUP, {1: failed_on_a, 2: lost_on_b})

        # B cannot see A's run: it evicts nothing and reruns nothing while the member's session lives
        b1 = _tick(sensor_b, instance_b, _resources(host_b))
        assert b1.run_requests == []
        assert len(coordinator.describe_group(GROUP).members) == 2

        # A sees its run failed: evicts the member, claims the loss, reruns slot 1
        a1 = _tick(sensor_a, instance_a, _resources(host_a))
        assert _slots(a1.run_requests) == ["1"]
        assert a1.run_requests[0].tags["cohort/rerun_of"] == failed_on_a

        # B sees the removal too, but A holds the claim: no second rerun
        b2 = _tick(sensor_b, instance_b, _resources(host_b), cursor=b1.cursor)
        assert b2.run_requests == []

        # slot 2's member is really gone (its session expired): the first host to tick claims it, only that one
        clock.advance(10.5)
        b3 = _tick(sensor_b, instance_b, _resources(host_b), cursor=b2.cursor)
        a2 = _tick(sensor_a, instance_a, _resources(host_a), cursor=a1.cursor)
        assert _slots(b3.run_requests) == ["2"] and a2.run_requests == []
        assert _tick(sensor_b, instance_b, _resources(host_b), cursor=b3.cursor).run_requests == []

        claims = [e.reason for _, e in coordinator.group_events(GROUP) if e.kind is EventKind.RERUN_CLAIMED]
        assert len(claims) == 2
        assert claims[0].startswith(f"slot 1: rerun of {failed_on_a} by ")
        assert claims[1].startswith(f"slot 2: rerun of {lost_on_b} by ")
        assert str(instance_a.root_directory) in claims[0] and str(instance_b.root_directory) in claims[1]


@pytest.mark.parametrize(
    ("slots", "message"),
    [
        ((), "non-empty"),
        ((0,), "has worker slots 1..2; host_slots has [0]"),
        ((3,), "has worker slots 1..2; host_slots has [3]"),
        ((1, 1), "names a slot twice"),
        ((True,), "host_slots has [True]"),
    ],
)
def test_host_slots_outside_the_group_are_refused(sqlite_url, slots, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        _host(sqlite_url, slots)
