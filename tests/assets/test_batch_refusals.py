"""A batch refused before its commit, seen from Dagster: the worker job's step fails with Cohort's error (its
cause on the first line: the quarantine limit, a registry URL that is wrong), nothing is materialized and the
group's offsets stay where they were. Real broker, Spark, coordinator store and Dagster instance; the registry
is the test registry over HTTP (harness.schema_registry)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import dagster as dg

from cohort.assets.factory import build_cohort_definitions
from cohort.assets.translator import DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.common.types import TopicPartition
from cohort.resources import KafkaResource, SchemaRegistryResource, SparkResource
from harness.dagster_group import config_for, definitions_for, json_records
from harness.schema_registry import SchemaRegistryServer
from tests.pipelines.formats.test_registry_refusals import avro_orders
from tests.support.order_schemas import ORDER_V1

T = DagsterCohortTranslator()


def failed_step(result: Any) -> dg.SerializableErrorInfo:
    """The error the worker step raised (under Dagster's own wrapper, when it adds one)."""
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    error = failure.step_failure_data.error
    return error.cause if error.cls_name == "DagsterExecutionStepExecutionError" and error.cause else error


def assert_nothing_committed(config: Any, result: Any, tps: list[TopicPartition]) -> None:
    assert not result.get_asset_materialization_events()
    coordinator = config.group_resource.get_coordinator()
    assert coordinator.fetch_offsets(config.group, tps) == dict.fromkeys(tps)


def test_a_batch_past_the_quarantine_limit_fails_the_worker_step(
    make_setup, topic_factory, produce_records, instance, spark
) -> None:
    topic = topic_factory(2, suffix="limit")
    produce_records(topic, json_records(24, 2, malformed=set(range(1, 24, 2))))  # partition 1: all 12 malformed
    setup = make_setup((topic,), slots=1, settings={"initial_rebalance_delay_s": 0.0})
    config = config_for(setup)
    job = definitions_for(setup).resolve_job_def(T.get_job_name(config.group))

    result = job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance, raise_on_error=False)

    error = failed_step(result)
    assert error.cls_name == "QuarantineLimitError", error.to_string()
    first = error.message.splitlines()[0]
    assert f"quarantine limit exceeded, nothing was committed: quarantined {topic}-1 12 of 12 records (100%)" in first
    assert "Commonest reasons: 12 x 'value is not valid JSON" in first
    assert_nothing_committed(config, result, [TopicPartition(topic, p) for p in range(2)])


def test_a_wrong_registry_path_fails_the_worker_step_naming_the_registry_not_spark(
    make_setup, topic_factory, produce_records, instance, spark, registry: SchemaRegistryServer
) -> None:
    topic = topic_factory(1, suffix="registry")
    produce_records(topic, avro_orders(registry, topic, 12))
    setup = make_setup((topic,), slots=1, settings={"initial_rebalance_delay_s": 0.0})
    base = config_for(setup)
    assert base.pipeline is not None
    # the reader schema given: the batch starts without asking the registry, the reading tasks ask first
    pipeline = dataclasses.replace(base.pipeline, value_format="avro", value_schema=json.dumps(ORDER_V1))
    config = dataclasses.replace(base, pipeline=pipeline)
    url = registry.url + "/wrong/"
    defs = build_cohort_definitions(
        [config],
        kafka=KafkaResource(bootstrap_servers=setup.bootstrap),
        spark=SparkResource(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}),
        schema_registry=SchemaRegistryResource(url=url, max_retries=1, retry_wait_ms=1),
    )
    job = defs.resolve_job_def(T.get_job_name(config.group))

    result = job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance, raise_on_error=False)

    error = failed_step(result)
    assert error.cls_name == "RegistryUnavailableError", error.to_string()
    first = error.message.splitlines()[0]
    assert f"the Schema Registry at {url} answered HTTP 404 reading schema id 1" in first, first
    assert "PythonException" not in first and "Python worker" not in first
    assert_nothing_committed(config, result, [TopicPartition(topic, 0)])
