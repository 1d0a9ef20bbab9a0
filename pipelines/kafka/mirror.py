"""Mirroring ledger commits to Kafka's committed offsets, so Kafka tooling sees the group's progress.

`KafkaOffsetMirror` implements `cohort.common.ledger.OffsetMirror` with an OffsetCommit from a consumer that
never joins Kafka's group: it commits each partition's `until` offset under the group id, with the run id as the
commit metadata. Each attempt is asynchronous and bounded by `timeout_s` (a synchronous commit can wait for a
coordinator for the whole session timeout). Kafka accepts such a standalone commit while its own
view of the group is Empty, which it always is for Cohort's groups (members live in Cohort's store). A
failed commit is retried with exponential backoff; if it still fails, `mirror` raises MirrorError and the
caller reports it: the ledger's commit is the source of truth and is never undone by a mirror failure.

Example:
    >>> mirror = KafkaOffsetMirror({"bootstrap.servers": "localhost:9092"})  # doctest: +SKIP
    >>> mirror.mirror("orders-ingest", [OffsetRange("orders", 0, 0, 100, records=100)], run_id="r1")  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from tenacity import RetryError, retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from cohort.common.names import validate_group_name
from cohort.common.types import OffsetRange, TopicPartition

__all__ = ["KafkaOffsetMirror", "MirrorError", "kafka_committed"]


class MirrorError(RuntimeError):
    """Kafka refused or did not answer the mirror commit after every retry."""


def _heads(ranges: Sequence[OffsetRange]) -> dict[TopicPartition, int]:
    """The last `until` per partition: what Kafka's committed offset must become."""
    heads: dict[TopicPartition, int] = {}
    for r in ranges:
        tp = r.topic_partition
        heads[tp] = max(heads.get(tp, r.until_offset), r.until_offset)
    return heads


class KafkaOffsetMirror:
    """Commits offsets to Kafka under a group id without joining the group (see the module doc).

    Args:
        config: librdkafka settings (bootstrap servers, security).
        attempts: commit attempts before giving up; waits grow exponentially from `backoff_s` to
            `max_backoff_s` between them.
        timeout_s: socket timeout of each attempt.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        attempts: int = 5,
        backoff_s: float = 0.2,
        max_backoff_s: float = 5.0,
        timeout_s: float = 10.0,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be >= 1, got {attempts}")
        self.config = dict(config)
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.timeout_s = timeout_s

    def _commit_once(self, group: str, offsets: list[KafkaTopicPartition]) -> None:
        """One OffsetCommit through a consumer that never subscribes, answered within `timeout_s`.

        Not the admin API's AlterConsumerGroupOffsets: when the group's coordinator broker dies during that call,
        librdkafka 2.16 can abort the whole process (an assertion in its request queue), which a plain commit
        does not reach. The commit is asynchronous and polled against a deadline, and the consumer's session timeout
        (what its close waits for an unanswered commit) is `timeout_s` too, so a coordinator that does not answer
        costs about twice `timeout_s`, never the 45 s default session timeout."""
        answers: list[tuple[Any, list[KafkaTopicPartition]]] = []
        session_ms = max(1000, int(self.timeout_s * 1000))
        settings = {
            **self.config,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "socket.timeout.ms": int(self.timeout_s * 1000),
            # close() waits for an unanswered commit up to the session timeout (45 s by default): bound it too (the
            # consumer never joins the group, so no broker sees it)
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": max(1, session_ms // 3),
            "on_commit": lambda error, partitions: answers.append((error, partitions)),
        }
        consumer = Consumer(settings)
        try:
            consumer.commit(offsets=offsets, asynchronous=True)
            deadline = time.monotonic() + self.timeout_s
            while not answers and time.monotonic() < deadline:
                consumer.poll(0.1)
        except KafkaException:
            raise
        except Exception as exc:  # a transport failure surfaced as another type
            raise KafkaException(f"committing offsets of group {group!r}: {type(exc).__name__}: {exc}") from exc
        finally:
            consumer.close()
        if not answers:
            raise KafkaException(f"committing offsets of group {group!r}: no answer within {self.timeout_s:g} s")
        error, partitions = answers[0]
        if error is not None:
            raise KafkaException(f"committing offsets of group {group!r}: {error}")
        failed = [f"{a.topic}-{a.partition}: {a.error}" for a in partitions if a.error is not None]
        if failed:
            raise KafkaException(f"Kafka refused offsets of group {group!r}: {'; '.join(failed)}")

    def mirror(self, group: str, ranges: Sequence[OffsetRange], *, run_id: str | None) -> None:
        """Commit each partition's last `until_offset` for `group`, with `run_id` as metadata."""
        validate_group_name(group)
        heads = _heads(ranges)
        if not heads:
            return
        metadata = run_id or ""
        offsets = [
            KafkaTopicPartition(tp.topic, tp.partition, until, metadata=metadata) for tp, until in sorted(heads.items())
        ]
        committer = retry(
            retry=retry_if_exception_type(KafkaException),
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=self.backoff_s, max=self.max_backoff_s),
        )(self._commit_once)
        try:
            committer(group, offsets)
        except RetryError as exc:
            cause = exc.last_attempt.exception()
            raise MirrorError(
                f"mirroring {len(offsets)} offsets of group {group!r} to Kafka failed after {self.attempts} "
                f"attempts: {cause}; the ledger's commit stands"
            ) from cause


def kafka_committed(
    config: Mapping[str, Any], group: str, partitions: Sequence[TopicPartition], *, timeout_s: float = 10.0
) -> dict[TopicPartition, tuple[int | None, str | None]]:
    """Kafka's committed (offset, metadata) per partition for `group`; offset None when nothing is committed.

    Read by a consumer that never joins the group (an OffsetFetch, as `kafka-consumer-groups --describe` makes):
    it waits out a group coordinator still loading (a new cluster's first groups), where the admin API's
    ListConsumerGroupOffsets fails at once, and an AdminClient dropped after that failure can crash the process
    (confluent-kafka 2.16)."""
    validate_group_name(group)
    if not partitions:
        return {}
    settings = {**config, "group.id": group, "enable.auto.commit": False, "enable.auto.offset.store": False}
    consumer = Consumer(settings)
    try:
        answers = consumer.committed(
            [KafkaTopicPartition(tp.topic, tp.partition) for tp in partitions], timeout=timeout_s
        )
    finally:
        consumer.close()
    return {
        TopicPartition(a.topic, a.partition): (a.offset if a.offset >= 0 else None, a.metadata or None) for a in answers
    }
