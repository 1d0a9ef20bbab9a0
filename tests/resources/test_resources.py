"""The Dagster resources against the real broker and a real SQLite store: configuration, secrets, clients."""

import dagster as dg
import pytest
from confluent_kafka import TopicPartition as KafkaTopicPartition

from cohort.assignment.clock import ManualClock
from cohort.common.types import TopicPartition
from cohort.resources import CohortGroupResource, KafkaResource, SparkResource


def test_kafka_secrets_come_from_env_and_are_never_shown(monkeypatch):
    monkeypatch.setenv("COHORT_TEST_KAFKA_PASSWORD", "hunter2-secret")
    kafka = KafkaResource(
        bootstrap_servers="broker-1:9092, broker-2:9092",
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_username="cohort",
        sasl_password=dg.EnvVar("COHORT_TEST_KAFKA_PASSWORD"),
    )

    @dg.op
    def inspect(context: dg.OpExecutionContext, kafka: KafkaResource) -> dict:
        context.log.info(repr(kafka))
        return {"config": kafka.client_config(), "shown": kafka.describe_config(), "repr": repr(kafka)}

    @dg.job(resource_defs={"kafka": kafka})
    def job() -> None:
        inspect()

    result = job.execute_in_process()
    seen = result.output_for_node("inspect")
    assert seen["config"]["sasl.password"] == "hunter2-secret"
    assert seen["config"]["bootstrap.servers"] == "broker-1:9092,broker-2:9092"
    assert seen["config"]["security.protocol"] == "SASL_SSL"
    assert seen["shown"]["sasl.password"] == "***"
    assert "hunter2" not in seen["repr"]
    assert all("hunter2" not in str(event) for event in result.all_events)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"bootstrap_servers": "no-port"}, "host:port"),
        ({"bootstrap_servers": "h:1", "extra_config": {"sasl.password": "x"}}, "secrets do not belong"),
    ],
)
def test_kafka_rejects_bad_configuration(kwargs, message):
    with pytest.raises(Exception, match=message):
        KafkaResource(**kwargs)


def test_kafka_metadata_offsets_and_committed(kafka_config, topic_factory, produce_records):
    kafka = KafkaResource(bootstrap_servers=kafka_config["bootstrap.servers"])
    topic = topic_factory(2, suffix="meta")
    produce_records(topic, [(0, None, b"a"), (0, None, b"b"), (1, None, b"c")])
    assert kafka.partition_counts([topic]) == {topic: 2}
    assert kafka.subscribed_partition_counts(pattern=re_escape(topic)) == {topic: 2}
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    assert kafka.end_offsets(tps) == {tps[0]: 2, tps[1]: 1}
    assert kafka.committed_offsets("cohort-res-test", tps) == {tps[0]: None, tps[1]: None}
    consumer = kafka.get_consumer("cohort-res-test")
    assert consumer is kafka.get_consumer("cohort-res-test")
    consumer.commit(offsets=[KafkaTopicPartition(topic, 0, 2)], asynchronous=False)
    assert kafka.committed_offsets("cohort-res-test", tps) == {tps[0]: 2, tps[1]: None}
    assert kafka.get_admin() is kafka.get_admin()
    kafka.close()


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_group_resource_validates_and_builds_members(sqlite_url):
    with pytest.raises(Exception, match="unknown assignor"):
        CohortGroupResource(group="g", topics=["t"], assignors=["nope"], store_url=sqlite_url)
    with pytest.raises(Exception, match="subscribes to nothing"):
        CohortGroupResource(group="g", store_url=sqlite_url)
    with pytest.raises(Exception, match="session_timeout_s"):
        CohortGroupResource(group="g", topics=["t"], session_timeout_s=1, store_url=sqlite_url)
    with pytest.raises(Exception, match="illegal characters"):
        CohortGroupResource(group="../etc", topics=["t"], store_url=sqlite_url)

    group = CohortGroupResource(
        group="orders-ingest", topics=["orders"], worker_slots=2, initial_rebalance_delay_s=0, store_url=sqlite_url
    )
    assert group.instance_id(2) == "orders-ingest/worker-2"
    assert group.slot_of("orders-ingest/worker-2") == 2
    assert group.slot_of("orders-ingest/worker-9") is None
    assert group.slot_of("other/worker-1") is None
    with pytest.raises(ValueError, match=r"worker slots 1\.\.2"):
        group.instance_id(3)

    clock = ManualClock(1000.0)
    coordinator = group.get_coordinator(clock)
    assert coordinator is group.get_coordinator(clock)
    coordinator.report_topic_metadata("orders-ingest", {"orders": 3})
    member = group.member(1, run_id="run-1", coordinator=coordinator)
    try:
        assigned = member.join()
        assert [tp.partition for tp in assigned] == [0, 1, 2]
        described = coordinator.describe_group("orders-ingest").members[0]
        assert (described.instance_id, described.client_id) == ("orders-ingest/worker-1", "run-1")
    finally:
        member.close(leave=True)
        group.close()


def test_spark_resource_rejects_master_and_remote():
    with pytest.raises(Exception, match="not both"):
        SparkResource(master="local[1]", remote="sc://h:15002")
    with pytest.raises(Exception, match="sc://"):
        SparkResource(master=None, remote="http://h")
    assert SparkResource().master == "local[2]"


def test_each_resource_owns_its_clients_and_closes_them_at_teardown(sqlite_url, kafka_config, tmp_path):
    """No process-wide cache: two resources on one store have their own coordinators, and the end of a run
    (Dagster's teardown) closes what the run's resources opened."""
    first = CohortGroupResource(group="owned", topics=["t"], store_url=sqlite_url)
    second = CohortGroupResource(group="owned", topics=["t"], store_url=sqlite_url)
    clock = ManualClock(0.0)
    assert first.get_coordinator(clock) is first.get_coordinator(clock)
    assert first.get_coordinator(clock) is not second.get_coordinator(clock)
    first.close()
    second.close()

    opened: dict[str, object] = {}

    @dg.op
    def use(context: dg.OpExecutionContext, group: CohortGroupResource, kafka: KafkaResource) -> None:
        opened["coordinator"] = group.get_coordinator()
        opened["admin"] = kafka.get_admin()
        opened["kafka"] = kafka
        opened["group"] = group
        assert kafka.partition_counts(["no-such-topic"]) == {}

    @dg.job(
        resource_defs={
            "group": CohortGroupResource(group="owned", topics=["t"], store_url=f"sqlite:///{tmp_path / 'c.db'}"),
            "kafka": KafkaResource(bootstrap_servers=kafka_config["bootstrap.servers"]),
        }
    )
    def job() -> None:
        use()

    assert job.execute_in_process().success
    kafka, group = opened["kafka"], opened["group"]
    assert isinstance(kafka, KafkaResource) and isinstance(group, CohortGroupResource)
    assert kafka._access is None  # its admin client and consumers released at teardown
    assert group._coordinators == {}  # closed at teardown
    assert group.get_coordinator() is not opened["coordinator"]  # a later use opens a new one
    group.close()


def test_group_resource_refuses_misspelt_settings_and_takes_the_store_url_from_the_environment(monkeypatch):
    with pytest.raises(ValueError, match=r"unknown settings \['sesion_timeout_s'\]"):
        CohortGroupResource(group="g", topics=["t"], sesion_timeout_s=10)
    monkeypatch.setenv("COHORT_TEST_STORE_URL", "sqlite:///:memory:")

    @dg.op
    def url(group: CohortGroupResource) -> str:
        return group.store_url

    @dg.job(
        resource_defs={
            "group": CohortGroupResource(group="g", topics=["t"], store_url=dg.EnvVar("COHORT_TEST_STORE_URL"))
        }
    )
    def job() -> None:
        url()

    assert job.execute_in_process().output_for_node("url") == "sqlite:///:memory:"


def test_member_settings_are_the_resources_settings(sqlite_url):
    group = CohortGroupResource(
        group="g",
        topics=["a", "b"],
        assignors=["range"],
        session_timeout_s=12.0,
        heartbeat_interval_s=2.0,
        store_url=sqlite_url,
    )
    settings = group.member_settings()
    assert settings.topics == ("a", "b") and settings.assignors == ("range",)
    assert settings.session_timeout == 12.0 and settings.effective_heartbeat_interval == 2.0
    member = group.member(1, run_id="run-1", coordinator=group.get_coordinator(ManualClock(0.0)))
    assert member.settings == settings and member.instance_id == "g/worker-1"
    group.close()
