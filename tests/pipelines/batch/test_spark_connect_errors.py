"""A reading task's failure over Spark Connect reaches the client by its cause: a registry URL with a wrong path,
asked first by the reading tasks on the server's executors, fails run_batch with the registry's error (its first
line naming the URL and the status), not with Spark Connect's PythonException, and nothing is committed."""

from __future__ import annotations

from pathlib import Path

import pytest

from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.pipelines.formats.registry import RegistryUnavailableError
from harness.schema_registry import SchemaRegistryServer
from harness.spark_connect import ConnectClient
from tests.pipelines.batch.test_spark_connect import batch_over_connect
from tests.pipelines.formats.test_registry_refusals import avro_orders, spec_for


def test_a_registry_refusal_in_a_reading_task_reaches_the_client_by_its_cause(
    connect: ConnectClient,
    kafka_config,
    topic,
    produce_records,
    coordinator: Coordinator,
    sqlite_url: str,
    tmp_path: Path,
    registry: SchemaRegistryServer,
) -> None:
    produce_records(topic, avro_orders(registry, topic, 5))
    tp, lake, url = TopicPartition(topic, 0), tmp_path / "lake", registry.url + "/wrong/"

    with pytest.raises(RegistryUnavailableError) as refused:
        connect.call(batch_over_connect, spec_for(lake, url, explicit=True), kafka_config, [tp], sqlite_url, "g")

    first = str(refused.value).splitlines()[0]
    assert first.startswith(f"the Schema Registry at {url} answered HTTP 404 reading schema id 1"), first
    assert coordinator.standalone_ledger("g").committed_offsets([tp]) == {tp: None}
    assert not lake.exists() or not [p for p in lake.rglob("*") if p.is_file()]
