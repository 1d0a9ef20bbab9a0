"""The resources facing a store or a broker fail with a short message naming the problem."""

from __future__ import annotations

import socket
import time

import dagster as dg
import pytest
from confluent_kafka import KafkaException

from cohort.assignment.errors import InvalidStoreUrlError, StoreError, StoreUnavailableError
from cohort.common.types import TopicPartition
from cohort.resources import CohortGroupResource, KafkaResource


def test_the_group_resource_raises_a_store_error_naming_the_store():
    group = CohortGroupResource(group="g", topics=["t"], store_url="postgresql+psycopg://u:s3cret@127.0.0.1:1/db")
    with pytest.raises(StoreUnavailableError) as raised:
        group.get_coordinator()
    assert "cannot open the store postgresql+psycopg://u:***@127.0.0.1:1/db: connection failed" in str(raised.value)
    assert "s3cret" not in str(raised.value)


def test_a_store_url_from_the_environment_is_checked_when_used(monkeypatch):
    monkeypatch.setenv("COHORT_TEST_BAD_STORE", "foo://x")

    @dg.op
    def open_store(group: CohortGroupResource) -> None:
        group.get_coordinator()

    @dg.job(
        resource_defs={
            "group": CohortGroupResource(group="g", topics=["t"], store_url=dg.EnvVar("COHORT_TEST_BAD_STORE"))
        }
    )
    def job() -> None:
        open_store()

    with pytest.raises(InvalidStoreUrlError, match=r"the store URL foo://x names a database SQLAlchemy does not know"):
        job.execute_in_process()
    assert issubclass(InvalidStoreUrlError, StoreError)


def test_the_kafka_resource_names_a_broker_that_does_not_answer():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kafka = KafkaResource(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_s=1, extra_config={"log_level": "0"})
    started = time.monotonic()
    with pytest.raises(KafkaException, match=rf"^could not read offsets from 127\.0\.0\.1:{port}: .*Local: "):
        kafka.end_offsets([TopicPartition("t", 0)])
    with pytest.raises(KafkaException, match=rf"^could not read topic metadata from 127\.0\.0\.1:{port}: .*Local: "):
        kafka.partition_counts()
    assert time.monotonic() - started < 15
    kafka.close()
