"""Kafka as every face reaches it: one librdkafka configuration and the few requests a worker slot, a sensor, a
trigger or a command makes (topic metadata, end offsets, Kafka's committed offsets, the commit mirror).

Dagster's `KafkaResource` builds one from its typed settings (`KafkaResource.access()`), the Airflow tasks and
trigger from their connection's extra, the CLI from `--bootstrap-servers`; nothing here imports an orchestrator.
Errors name the bootstrap servers and what librdkafka said, never the configuration (it may hold secrets). When no
broker could be reached because the SASL login was refused or the TLS handshake failed, a request's own error says
only `Broker transport failure` or `Timed out`: librdkafka reports the cause as a client-wide error event, which
the clients made here record (`error_cb`) and the error names first (`ConnectionErrors`).

Example:
    >>> kafka = KafkaAccess({"bootstrap.servers": "localhost:9092"}, request_timeout_s=5)
    >>> kafka.bootstrap
    'localhost:9092'
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Final

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from cohort.assignment.protocol.group_state import subscribed_counts
from cohort.common.names import validate_group_name
from cohort.common.types import TopicPartition
from cohort.pipelines.kafka.client import read_partition_counts
from cohort.pipelines.kafka.client import watermarks as fetched_watermarks
from cohort.pipelines.kafka.mirror import KafkaOffsetMirror

__all__ = [
    "CONNECTION_CAUSES",
    "DEFAULT_CLIENT_ID",
    "DEFAULT_SECURITY_PROTOCOL",
    "ConnectionErrors",
    "KafkaAccess",
    "kafka_reason",
    "parse_bootstrap",
]

DEFAULT_SECURITY_PROTOCOL: Final = "PLAINTEXT"
"""librdkafka's `security.protocol` when a face's settings name none."""

DEFAULT_CLIENT_ID: Final = "cohort"
"""librdkafka's `client.id` (shown in broker logs) when a face's settings name none."""


def parse_bootstrap(value: str) -> str:
    """`host:port[,host:port...]` with blanks dropped; a ValueError naming the value otherwise."""
    hosts = [h.strip() for h in value.split(",") if h.strip()]
    bad = [h for h in hosts if not re.fullmatch(r"[^\s:]+:\d{1,5}", h)]
    if not hosts or bad:
        raise ValueError(f"bootstrap_servers must be host:port[,host:port...], got {value!r}")
    return ",".join(hosts)


def kafka_reason(exc: BaseException) -> str:
    """What librdkafka said, without the KafkaError repr (`Local: Broker transport failure`)."""
    cause: BaseException | None = exc
    while cause is not None:
        if cause.args and isinstance(cause.args[0], KafkaError):
            return str(cause.args[0].str())
        cause = cause.__cause__
    return str(exc)


CONNECTION_CAUSES: Final = frozenset({KafkaError._AUTHENTICATION, KafkaError._SSL})
"""librdkafka's client-wide error codes that say why a broker could not be used: a SASL login refused (wrong
user or password, mechanism not enabled), a TLS handshake failed (a certificate the client does not trust, a host
name the certificate does not name)."""

_BROKER_PREFIX = re.compile(r"^\S+://\S+/\S+: ")  # "sasl_ssl://host:9093/bootstrap: "
_STATE_SUFFIX = re.compile(r"\s*\(after \d+ms in state \w+\)$")


class ConnectionErrors:
    """A librdkafka `error_cb` that keeps the latest error of `CONNECTION_CAUSES`, without the broker name and the
    state suffix (`SASL authentication error: Authentication failed ... with SASL mechanism SCRAM-SHA-512`).

    librdkafka serves error events when a client is polled or closed, not during a blocking request: call
    `cause(client)` after a request failed. `clear()` after one succeeded, so a cause is never stale."""

    def __init__(self) -> None:
        self.latest: str | None = None

    def __call__(self, error: KafkaError) -> None:
        if error.code() in CONNECTION_CAUSES:
            self.latest = _STATE_SUFFIX.sub("", _BROKER_PREFIX.sub("", str(error.str())))

    def cause(self, client: Any = None) -> str | None:
        """The latest cause, once `client`'s pending error events (if any) are served."""
        if client is not None:
            with contextlib.suppress(Exception):
                client.poll(0)
        return self.latest

    def clear(self) -> None:
        self.latest = None

    def explain(self, reason: str, client: Any = None) -> str:
        """`reason` (what the failed request said) preceded by the cause librdkafka reported, if any."""
        cause = self.cause(client)
        return f"{cause} ({reason})" if cause else reason


@dataclass(frozen=True, eq=False)
class KafkaAccess:
    """A Kafka cluster's librdkafka configuration and its metadata requests, each bounded by `request_timeout_s`.

    The admin client and the consumers of `committed_offsets` are created on first use and released by `close()`
    (confluent-kafka's AdminClient has no close: dropping it stops its threads)."""

    config: Mapping[str, Any] = field(repr=False)
    request_timeout_s: float = 10.0
    errors: ConnectionErrors = field(default_factory=ConnectionErrors, init=False, repr=False)

    @property
    def bootstrap(self) -> str:
        """The bootstrap servers, for messages (the one setting that is never secret)."""
        return str(self.config.get("bootstrap.servers", ""))

    @property
    def _client_config(self) -> dict[str, Any]:
        """`config` plus the `error_cb` that records why brokers could not be used (clients made here only: the
        executors get `config`, plain data)."""
        return {**self.config, "error_cb": self.errors}

    @cached_property
    def admin(self) -> AdminClient:
        """This access's AdminClient (created on first use)."""
        return AdminClient(self._client_config)

    @cached_property
    def _consumers(self) -> dict[str, Consumer]:
        return {}

    def partition_counts(self, topics: Iterable[str] | None = None) -> dict[str, int]:
        """Partition count per topic (all non-internal topics when `topics` is None; missing ones omitted)."""
        try:
            counts = read_partition_counts(self.admin, topics, timeout_s=self.request_timeout_s)
        except KafkaException as exc:
            reason = self.errors.explain(kafka_reason(exc), self.admin)
            raise KafkaException(f"could not read topic metadata from {self.bootstrap}: {reason}") from None
        self.errors.clear()
        return counts

    def subscribed_partition_counts(self, topics: Iterable[str] = (), pattern: str | None = None) -> dict[str, int]:
        """Partition counts of `topics` plus every topic fully matching `pattern` (what a group subscribes to)."""
        return subscribed_counts(self.partition_counts(), set(topics), pattern)

    def watermarks(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(first available offset, end offset) per partition; the end offset is the one a fetch from the
        high watermark confirms (`cohort.pipelines.kafka.client.watermarks`), so lag counts every record."""
        try:
            marks = fetched_watermarks(self._client_config, partitions, timeout_s=self.request_timeout_s)
        except KafkaException as exc:  # its consumer is closed: closing served the error events
            reason = self.errors.explain(kafka_reason(exc))
            raise KafkaException(f"could not read offsets from {self.bootstrap}: {reason}") from None
        self.errors.clear()
        return marks

    def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The end offset per partition (see `watermarks`)."""
        return {tp: high for tp, (_low, high) in self.watermarks(partitions).items()}

    def committed_offsets(self, group: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """Kafka's committed offsets of `group` (what `kafka-consumer-groups --describe` shows); None if none."""
        if not partitions:
            return {}
        consumer = self.consumer(group)
        try:
            answers = consumer.committed(
                [KafkaTopicPartition(tp.topic, tp.partition) for tp in partitions], timeout=self.request_timeout_s
            )
        except KafkaException as exc:
            reason = self.errors.explain(kafka_reason(exc), consumer)
            raise KafkaException(f"could not read the committed offsets of group {group!r}: {reason}") from None
        self.errors.clear()
        return {TopicPartition(a.topic, a.partition): (int(a.offset) if a.offset >= 0 else None) for a in answers}

    def consumer(self, group: str) -> Consumer:
        """A cached Consumer for `group` with auto-commit off (Cohort commits explicitly)."""
        validate_group_name(group)
        consumer = self._consumers.get(group)
        if consumer is None:
            settings = {**self._client_config, "group.id": group, "enable.auto.commit": False}
            consumer = Consumer({**settings, "enable.auto.offset.store": False})
            self._consumers[group] = consumer
        return consumer

    def mirror(self) -> KafkaOffsetMirror:
        """The `OffsetMirror` copying ledger commits to Kafka's committed offsets under the group id."""
        return KafkaOffsetMirror(dict(self.config))

    def close(self) -> None:
        """Close the consumers and drop the admin client this access created."""
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()
        self.__dict__.pop("admin", None)
