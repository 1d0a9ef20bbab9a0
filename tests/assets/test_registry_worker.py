"""Avro records landed through Dagster: the worker job with a `SchemaRegistryResource` (basic auth, the password
from the environment through `dg.EnvVar`), real broker (librdkafka's default batching), real Spark, real
coordinator store, and a registry HTTP server (harness.schema_registry; no JVM registry exists here)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import dagster as dg
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from cohort.assets.factory import build_cohort_definitions
from cohort.assets.translator import CohortConfig, DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.common.types import TopicPartition
from cohort.pipelines.spec import PipelineSpec
from cohort.resources import KafkaResource, SchemaRegistryResource, SparkResource
from cohort.resources.group import CohortGroupResource
from harness.dagster_group import Setup
from harness.schema_registry import SchemaRegistryServer
from tests.support.order_schemas import ORDER_V1, ORDER_V2

T = DagsterCohortTranslator()
PASSWORD = "registry-secret-7f3a"
PASSWORD_VAR = "COHORT_TEST_REGISTRY_PASSWORD"
V1, V2 = ORDER_V1, ORDER_V2


@pytest.fixture
def registry() -> Iterator[SchemaRegistryServer]:
    """A registry that wants basic auth (overrides the shared one of tests/fixtures/kafka.py)."""
    with SchemaRegistryServer(username="cohort", password=PASSWORD) as server:
        yield server


def avro_values(server: SchemaRegistryServer, topic: str, schema: dict[str, Any], records: list[dict[str, Any]]):
    serializer = AvroSerializer(SchemaRegistryClient(server.client_config()), json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE)
    return [serializer(record, context) for record in records]


def config_for(setup: Setup) -> CohortConfig:
    group = CohortGroupResource(
        group=setup.group,
        topics=setup.topics,
        worker_slots=1,
        store_url=setup.store_url,
        initial_rebalance_delay_s=0.0,
    )
    return CohortConfig(
        group, pipeline=PipelineSpec(sink_path=setup.sink, value_format="avro"), known_topics=setup.topics
    )


def definitions(setup: Setup, registry: SchemaRegistryResource) -> dg.Definitions:
    return build_cohort_definitions(
        [config_for(setup)],
        kafka=KafkaResource(bootstrap_servers=setup.bootstrap),
        spark=SparkResource(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}),
        schema_registry=registry,
    )


def test_avro_versions_land_through_the_worker_job_with_the_registry_resource(
    make_setup, topic_factory, produce_records, instance, spark, registry, monkeypatch
):
    topic = topic_factory(2, suffix="avro")
    old = avro_values(registry, topic, V1, [{"id": i, "amount": i / 2, "note": "n"} for i in range(6)])
    new = avro_values(registry, topic, V2, [{"id": 2**40 + i, "amount": 1.25, "currency": "USD"} for i in range(6)])
    broken = [b"\x01" + old[0][1:], b"\x00\x00\x00\x03\xe7" + old[0][5:]]  # wrong magic byte; unknown schema id
    values = [*old, *new, *broken]
    produce_records(topic, [(i % 2, None, v) for i, v in enumerate(values)])
    setup = make_setup((topic,))
    monkeypatch.setenv(PASSWORD_VAR, PASSWORD)
    resource = SchemaRegistryResource(url=registry.url, username="cohort", password=dg.EnvVar(PASSWORD_VAR))
    defs = definitions(setup, resource)
    config = config_for(setup)
    landed_key = T.get_landed_asset_key(config.group, topic)
    spec_metadata = defs.resolve_assets_def(landed_key).specs_by_key[landed_key].metadata
    assert f"subject '{topic}-value'" in spec_metadata["cohort/value_schema"]  # the columns come when a batch runs

    job = defs.resolve_job_def(T.get_job_name(config.group))
    result = job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance)

    assert result.success
    rows = spark.read.parquet(setup.sink).select("id", "amount", "currency").collect()
    assert sorted(tuple(r) for r in rows) == sorted(
        [(i, i / 2, "EUR") for i in range(6)] + [(2**40 + i, 1.25, "USD") for i in range(6)]
    )
    reasons = [r.reason for r in spark.read.parquet(f"{setup.sink}/_quarantine").collect()]
    assert len(reasons) == 2
    assert any("magic byte" in r for r in reasons) and any("schema id 999" in r for r in reasons)
    landed = [
        e.materialization
        for e in result.get_asset_materialization_events()
        if e.materialization.asset_key == landed_key
    ]
    assert sum(m.metadata["dagster/row_count"].value for m in landed) == 12
    columns = {c.name: c.type for c in landed[0].metadata["dagster/column_schema"].value.columns}
    assert (columns["id"], columns["amount"], columns["currency"]) == ("bigint", "double", "string")
    assert "note" not in columns

    stored = [dg.serialize_value(entry) for entry in instance.all_logs(result.run_id)]  # events, metadata, logs
    assert stored and not any(PASSWORD in text for text in stored)
    assert PASSWORD not in dg.serialize_value(instance.get_run_by_id(result.run_id))


def test_an_unreachable_registry_fails_the_run_before_anything_is_read_or_committed(
    make_setup, topic_factory, produce_records, instance, registry, monkeypatch
):
    topic = topic_factory(1, suffix="avro-outage")
    produce_records(
        topic, [(0, None, v) for v in avro_values(registry, topic, V1, [{"id": 1, "amount": 1, "note": ""}])]
    )
    setup = make_setup((topic,))
    url = registry.url
    registry.stop()
    unreachable = SchemaRegistryResource(url=url, max_retries=1, retry_wait_ms=1, timeout_s=2)
    config = config_for(setup)
    job = definitions(setup, unreachable).resolve_job_def(T.get_job_name(config.group))

    result = job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance, raise_on_error=False)

    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    assert f"the Schema Registry at {url} is unreachable" in failure.step_failure_data.error.message
    assert not result.get_asset_materialization_events()
    coordinator = config.group_resource.get_coordinator()
    assert coordinator.fetch_offsets(config.group, [TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): None}


def test_definitions_refuse_a_registry_format_without_a_registry(make_setup) -> None:
    setup = make_setup(("orders",))
    with pytest.raises(ValueError, match=r"read a Schema Registry format: give build_cohort_definitions\("):
        build_cohort_definitions([config_for(setup)], kafka=KafkaResource(bootstrap_servers=setup.bootstrap))


def test_the_resource_hides_its_password_and_refuses_bad_settings() -> None:
    resource = SchemaRegistryResource(url="https://registry.internal:8081", username="u", password="hunter2")
    assert "hunter2" not in repr(resource) and "hunter2" not in repr(resource.connection())
    with pytest.raises(Exception, match="must be http") as refused_url:
        SchemaRegistryResource(url="registry.internal:8081")
    with pytest.raises(Exception, match="both a Schema Registry username and password") as refused:
        SchemaRegistryResource(url="https://registry.internal:8081", password="hunter2")
    assert "hunter2" not in str(refused.value) and "hunter2" not in str(refused_url.value)
