"""A span read through confluent-kafka's Python consumer into raw Arrow batches: the fallback of the C consumer
(cohort.pipelines.tasks.native_reader) and its peer in the benchmarks."""

from __future__ import annotations

import time
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cohort.pipelines.tasks.records import (
    UNREADABLE_HEADERS,
    ConsumeError,
    header_column,
    raw_batch,
)
from cohort.pipelines.tasks.spans import OffsetSpan

__all__ = ["PythonConsumer"]

_second = itemgetter(1)


def _to_batch(span: OffsetSpan, messages: list[Any]) -> pa.RecordBatch:
    """One Arrow batch from error-free messages, column by column (map over the C methods: no Python
    frame per message)."""
    from confluent_kafka import Message

    timestamps = pa.array(list(map(_second, map(Message.timestamp, messages))), type=pa.int64())
    headers, errors = _headers(messages)
    return raw_batch(
        span.topic,
        span.partition,
        pa.array(list(map(Message.offset, messages)), type=pa.int64()),
        # -1: no timestamp. (pyarrow-stubs type compute functions' operands as Arrow scalars, not Python ones.)
        pc.if_else(pc.less(timestamps, 0), pa.scalar(None, pa.int64()), timestamps),  # type: ignore[call-overload]
        pa.array(list(map(Message.key, messages)), type=pa.binary()),
        pa.array(list(map(Message.value, messages)), type=pa.binary()),
        header_column(headers, len(messages)),
        None if errors is None else pa.array(errors, type=pa.string()),
    )


def _headers(messages: list[Any]) -> tuple[list[Any], list[str | None] | None]:
    """(headers per message, read error per message or None when every message's headers were read).

    confluent-kafka cannot decode a header key that is not valid UTF-8 (any client may send one: the
    protocol carries raw bytes): `headers()` raises SystemError once and afterwards returns a list holding
    a NULL, which crashes the worker when touched. So it is called once per message, in C (`map`), and a
    message whose call fails keeps its key and value but gets no headers and an error (it is quarantined).
    """
    from confluent_kafka import Message

    headers: list[Any] = []
    errors: list[str | None] | None = None
    while len(headers) < len(messages):
        done = len(headers)
        try:
            headers.extend(map(Message.headers, messages[done:] if done else messages))
        except (SystemError, UnicodeDecodeError):  # headers now holds the messages before the failed one
            errors = errors or [None] * len(messages)
            errors[len(headers)] = UNREADABLE_HEADERS
            headers.append(None)
    return headers, errors


class PythonConsumer:
    """confluent-kafka's consumer, its messages turned into RECORD_SCHEMA batches column by column."""

    def __init__(self, consumer: Any, span: OffsetSpan) -> None:
        self._consumer = consumer
        self._span = span

    def consume(self, max_messages: int, timeout_s: float) -> tuple[pa.RecordBatch | None, list[ConsumeError]]:
        from confluent_kafka import KafkaException, Message

        try:
            messages = self._gather(max_messages, timeout_s)
        except KafkaException as exc:
            error = exc.args[0]
            return None, [ConsumeError(-1, error.code(), str(exc), fatal=error.fatal())]
        errors: list[ConsumeError] = []
        if any(map(Message.error, messages)):
            good = []
            for message in messages:
                error = message.error()
                if error is None:
                    good.append(message)
                else:
                    offset = message.offset()
                    errors.append(
                        ConsumeError(-1 if offset is None else offset, error.code(), error.str(), error.fatal())
                    )
            messages = good
        return (_to_batch(self._span, messages) if messages else None), errors

    def _gather(self, max_messages: int, timeout_s: float) -> list[Any]:
        """Up to `max_messages` messages within `timeout_s`, returned as soon as an error or end-of-partition message
        is among them (as the C consumer's `gather`): confluent-kafka's `consume` waits for `max_messages` or the
        timeout, so a span whose last offsets hold no record (a control marker, aborted or compacted records) would
        wait out the timeout after its end-of-partition. What is queued is taken at once, then one more message is
        waited for, and again, until one of the three. A KafkaException once messages are taken returns them (the
        next call raises it again if it persists): they are past the consumer's position, so dropping them would
        skip their records."""
        from confluent_kafka import KafkaException, Message

        deadline = time.monotonic() + timeout_s
        messages: list[Any] = []
        try:
            while True:
                queued = self._consumer.consume(max_messages - len(messages), 0)
                messages += queued
                left = deadline - time.monotonic()
                if len(messages) >= max_messages or any(map(Message.error, queued)) or left <= 0:
                    return messages
                following = self._consumer.consume(1, left)
                messages += following
                if not following or following[0].error() is not None or len(messages) >= max_messages:
                    return messages
        except KafkaException:
            if not messages:
                raise
            return messages

    def close(self) -> None:
        self._consumer.close()
