"""A registry that cannot serve the batch fails it before its commit, with an error whose first line names the
registry URL and what it answered, wherever it was asked: when the batch starts (the reader schema) or in the
reading tasks on the executors (the writer schemas). Never is a batch quarantined for it. Real broker, real
Spark, the SQLite ledger, the test registry over HTTP and a plain HTTP server answering as proxies do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.executor_errors import ReadingTaskError, executor_errors_named
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.formats.registry import RegistryConnection, RegistryUnavailableError
from cohort.pipelines.spec import PipelineSpec
from harness.schema_registry import SchemaRegistryServer
from tests.support.http_answers import UNAVAILABLE_PAGE, FixedAnswerServer
from tests.support.order_schemas import ORDER_V1


def avro_orders(registry: SchemaRegistryServer, topic: str, count: int) -> list[tuple[int, None, bytes]]:
    serializer = AvroSerializer(SchemaRegistryClient(registry.client_config()), json.dumps(ORDER_V1))
    context = SerializationContext(topic, MessageField.VALUE)
    return [(0, None, serializer({"id": i, "amount": 1.0, "note": "n"}, context)) for i in range(count)]


def spec_for(lake: Path, url: str, *, explicit: bool) -> PipelineSpec:
    """An Avro spec reading from `url`; `explicit`: the reader schema given, so the reading tasks are the first to
    ask the registry (for the writer schemas)."""
    return PipelineSpec(
        sink_path=str(lake),
        value_format="avro",
        value_schema=json.dumps(ORDER_V1) if explicit else None,
        registry=RegistryConnection(url, max_retries=1, retry_wait_ms=1, timeout_s=5),
    )


def nothing_happened(ledger: Any, tp: TopicPartition, lake: Path) -> None:
    assert ledger.committed_offsets([tp]) == {tp: None}
    assert not lake.exists() or not [p for p in lake.rglob("*") if p.is_file()]


@pytest.mark.parametrize("explicit", [False, True], ids=["reader-from-registry", "asked-in-the-tasks"])
def test_a_registry_url_with_a_wrong_path_fails_the_batch_instead_of_quarantining_it(
    explicit, spark, kafka_config, topic, produce_records, ledger, lake, registry
) -> None:
    produce_records(topic, avro_orders(registry, topic, 12))
    tp = TopicPartition(topic, 0)
    url = registry.url + "/wrong/"
    asked = "schema id 1" if explicit else f"subject '{topic}-value'"

    with pytest.raises(RegistryUnavailableError) as refused:
        run_batch(spark, spec_for(lake, url, explicit=explicit), kafka_config, [tp], ledger)

    first = str(refused.value).splitlines()[0]
    assert first.startswith(f"the Schema Registry at {url} answered HTTP 404 reading {asked}"), first
    assert "check the registry URL" in first
    nothing_happened(ledger, tp, lake)
    assert registry.request_count("/wrong/") > 0

    result = run_batch(spark, spec_for(lake, registry.url, explicit=explicit), kafka_config, [tp], ledger)
    assert (result.records, result.quarantined) == (12, 0)


def test_a_proxy_answering_503_to_the_reading_tasks_fails_the_batch(
    spark, kafka_config, topic, produce_records, ledger, lake, registry
) -> None:
    produce_records(topic, avro_orders(registry, topic, 3))
    tp = TopicPartition(topic, 0)
    with FixedAnswerServer(503, UNAVAILABLE_PAGE) as proxy, pytest.raises(RegistryUnavailableError) as failed:
        run_batch(spark, spec_for(lake, proxy.url, explicit=True), kafka_config, [tp], ledger)
    first = str(failed.value).splitlines()[0]
    assert first.startswith(f"the Schema Registry at {proxy.url} failed reading schema id 1: HTTP 503"), first
    nothing_happened(ledger, tp, lake)


def test_any_other_error_of_a_reading_task_names_its_cause_on_the_first_line(spark) -> None:
    def broken(batches: Any) -> Any:
        for _ in batches:
            raise ValueError("the decoder cannot be set up: no such codec 'zzz'")
        yield from ()

    with pytest.raises(ReadingTaskError) as failed, executor_errors_named(spark):
        spark.range(2).mapInArrow(broken, "id long").collect()

    assert str(failed.value).splitlines()[0] == (
        "a reading task failed on a Spark executor: ValueError: the decoder cannot be set up: no such codec 'zzz' "
        "(nothing was committed)"
    )
    assert "PythonException" in type(failed.value.__cause__).__name__  # Spark's own error, kept for its trace
