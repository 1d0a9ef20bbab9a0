"""A worker slot's comparison of Kafka's committed offsets with the ledger before its batch
(`cohort.runtime.slot_batch.say_kafka_drift`) never stands in the batch's way: a Kafka that does not answer is said
in one line, at info level, and nothing is raised (the batch needs Kafka anyway and says so itself)."""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass

import pytest

from cohort.common.types import TopicPartition
from cohort.runtime.kafka_access import KafkaAccess
from cohort.runtime.slot_batch import say_kafka_drift


@dataclass
class Ledger:
    """What the comparison reads of a member: its group and the ledger's committed offsets."""

    group: str = "orders-ingest"

    def committed_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int | None]:
        return dict.fromkeys(partitions, 20)


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_kafka_that_does_not_answer_is_said_at_info_level_and_the_batch_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("tests.kafka_drift")
    kafka = KafkaAccess({"bootstrap.servers": f"127.0.0.1:{_closed_port()}", "log_level": 0}, request_timeout_s=1.0)
    with caplog.at_level(logging.INFO, logger=log.name):
        say_kafka_drift(Ledger(), kafka, [TopicPartition("orders", 0)], log)  # type: ignore[arg-type]
        say_kafka_drift(Ledger(), kafka, [], log)  # type: ignore[arg-type]  # nothing assigned: nothing asked
    [said] = [r for r in caplog.records if r.name == log.name]
    assert said.levelno == logging.INFO
    assert said.getMessage().startswith(
        "group 'orders-ingest': Kafka's committed offsets not compared with the ledger: KafkaException"
    ), said.getMessage()
