"""A consume call of the Python consumer (the fallback of the C one) returns as soon as end-of-partition or an
error is among its messages, not after its timeout, and never drops messages it took (pure: a scripted
confluent-kafka consumer; the C consumer's `gather` is timed against Kafka in test_transactions_kafka.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Message

from cohort.pipelines.tasks.python_consumer import PythonConsumer
from cohort.pipelines.tasks.spans import OffsetSpan

SPAN = OffsetSpan("t", 0, 0, 10)


def record(offset: int) -> Message:
    return Message(topic="t", partition=0, offset=offset, value=b"v", timestamp=(1, 5))


def end_of_partition(offset: int) -> Message:
    return Message(topic="t", partition=0, offset=offset, error=KafkaError(KafkaError._PARTITION_EOF))


class Scripted:
    """A consumer whose `consume` calls answer in turn from `answers` (a list of messages, or an exception to raise);
    with none left, it waits out the timeout and returns nothing, as librdkafka does."""

    def __init__(self, *answers: list[Message] | Exception) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[int, float]] = []

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        self.calls.append((num_messages, timeout))
        if not self.answers:
            time.sleep(timeout)
            return []
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer[:num_messages]


def offsets(consumer: Scripted, max_messages: int = 10, timeout_s: float = 5.0) -> tuple[list[int], list[int], float]:
    """(record offsets, error offsets, seconds) of one consume call."""
    started = time.monotonic()
    batch, errors = PythonConsumer(consumer, SPAN).consume(max_messages, timeout_s)
    records = [] if batch is None else batch.column("offset").to_pylist()
    return records, [e.offset for e in errors], time.monotonic() - started


def test_end_of_partition_ends_the_call_at_once():
    """Three records and a marker: end-of-partition at 4 comes with fewer messages than asked for."""
    consumer = Scripted([record(0), record(1)], [record(2)], [end_of_partition(4)])
    assert offsets(consumer)[:2] == ([0, 1, 2], [4])
    assert offsets(Scripted([record(0), end_of_partition(1)]))[2] < 1.0
    assert consumer.calls[0] == (10, 0), "what is queued first, without waiting"
    assert [n for n, _timeout in consumer.calls] == [10, 1, 7]


def test_a_full_call_or_the_timeout_ends_it_as_before():
    full = Scripted([record(0), record(1)], [record(2)], [record(3)])
    assert offsets(full, max_messages=3)[0] == [0, 1, 2]
    records, errors, seconds = offsets(Scripted([record(0)]), timeout_s=0.3)
    assert (records, errors) == ([0], []) and 0.25 < seconds < 2


@pytest.mark.parametrize("when", [lambda: [record(0)], lambda: []], ids=["after-a-record", "at-once"])
def test_an_exception_keeps_the_messages_taken(when: Callable[[], Any]):
    failure = KafkaException(KafkaError(KafkaError._TRANSPORT))
    taken = when()
    consumer = Scripted(taken, failure)
    records, errors, _seconds = offsets(consumer)
    if taken:
        assert (records, errors) == ([0], []), "the record is not dropped; the next call sees the failure"
    else:
        assert records == [] and len(errors) == 1
