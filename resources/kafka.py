"""The Kafka resource: confluent-kafka configuration (SASL/SSL secrets from `EnvVar`) and client factories.

Typed configuration plus cached clients, nothing else: admin, producer and consumer
factories, topic metadata, end offsets, Kafka's committed offsets of a group, and the mirror that copies
ledger commits to Kafka. Secrets (`sasl_password`, `ssl_key_password`) are hidden from `repr`, from
`describe_config()` and from every error message raised here.

Example:
    >>> import dagster as dg
    >>> kafka = KafkaResource(
    ...     bootstrap_servers="broker-1:9092",
    ...     security_protocol="SASL_SSL",
    ...     sasl_mechanism="SCRAM-SHA-512",
    ...     sasl_username="cohort",
    ...     sasl_password=dg.EnvVar("KAFKA_PASSWORD"),
    ... )  # doctest: +SKIP
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import dagster as dg
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from pydantic import Field, PrivateAttr, field_validator

from cohort.assignment.protocol.group_state import subscribed_counts
from cohort.common.names import validate_group_name
from cohort.common.types import TopicPartition
from cohort.pipelines.kafka.client import read_partition_counts
from cohort.pipelines.kafka.client import watermarks as fetched_watermarks

__all__ = ["SECRET_KEYS", "KafkaResource", "redact"]

SECRET_KEYS: frozenset[str] = frozenset(
    {"sasl.password", "ssl.key.password", "ssl.keystore.password", "sasl.oauthbearer.client.secret"}
)
"""librdkafka properties whose values are never shown."""

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]


def redact(config: dict[str, Any]) -> dict[str, Any]:
    """A copy of a librdkafka configuration with secret values replaced by '***'."""
    return {k: ("***" if k in SECRET_KEYS or "password" in k or "secret" in k else v) for k, v in config.items()}


class KafkaResource(dg.ConfigurableResource):
    """Connection settings for a Kafka cluster and factories for confluent-kafka clients.

    Clients are created lazily and cached per resource instance (one admin, one producer, one consumer
    per group id); `client_config()` gives the full librdkafka configuration for code that builds its own
    clients (Spark executors read Kafka themselves).
    """

    bootstrap_servers: str = Field(description="Comma-separated host:port list (librdkafka bootstrap.servers).")
    security_protocol: SecurityProtocol = Field(default="PLAINTEXT", description="librdkafka security.protocol.")
    sasl_mechanism: str | None = Field(
        default=None, description="SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER."
    )
    sasl_username: str | None = Field(default=None, description="SASL user name.")
    sasl_password: str | None = Field(
        default=None, repr=False, description="SASL password; give it as dg.EnvVar('...'). Never logged."
    )
    ssl_ca_location: str | None = Field(default=None, description="Path of the CA certificate (PEM).")
    ssl_certificate_location: str | None = Field(default=None, description="Path of the client certificate.")
    ssl_key_location: str | None = Field(default=None, description="Path of the client private key.")
    ssl_key_password: str | None = Field(
        default=None, repr=False, description="Password of the client key; give it as dg.EnvVar('...')."
    )
    client_id: str = Field(default="cohort", description="librdkafka client.id shown in broker logs.")
    request_timeout_s: float = Field(default=10.0, gt=0, description="Timeout of admin and offset requests.")
    extra_config: dict[str, str] = Field(
        default_factory=dict, description="Further librdkafka properties (no secrets here: they would be shown)."
    )

    _admin: AdminClient | None = PrivateAttr(default=None)
    _producer: Producer | None = PrivateAttr(default=None)
    _consumers: dict[str, Consumer] = PrivateAttr(default_factory=dict)

    @field_validator("bootstrap_servers")
    @classmethod
    def _check_bootstrap(cls, value: str) -> str:
        hosts = [h.strip() for h in value.split(",") if h.strip()]
        bad = [h for h in hosts if not re.fullmatch(r"[^\s:]+:\d{1,5}", h)]
        if not hosts or bad:
            raise ValueError(f"bootstrap_servers must be host:port[,host:port...], got {value!r}")
        return ",".join(hosts)

    @field_validator("extra_config")
    @classmethod
    def _check_extra(cls, value: dict[str, str]) -> dict[str, str]:
        secret = sorted(k for k in value if k in SECRET_KEYS)
        if secret:
            raise ValueError(f"secrets do not belong in extra_config (they would be shown): {secret}")
        return value

    # ------------------------------------------------------------------------------------ configuration

    def client_config(self) -> dict[str, Any]:
        """The full librdkafka configuration, secrets included: pass it to clients, never log it."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "security.protocol": self.security_protocol,
            "client.id": self.client_id,
        }
        optional = {
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password,
            "ssl.ca.location": self.ssl_ca_location,
            "ssl.certificate.location": self.ssl_certificate_location,
            "ssl.key.location": self.ssl_key_location,
            "ssl.key.password": self.ssl_key_password,
        }
        config.update({k: v for k, v in optional.items() if v is not None})
        config.update(self.extra_config)
        return config

    def describe_config(self) -> dict[str, Any]:
        """The configuration with secrets masked, safe for logs and metadata."""
        return redact(self.client_config())

    # ---------------------------------------------------------------------------------------- clients

    def get_admin(self) -> AdminClient:
        """The AdminClient of this resource (created on first use, released by `close()`)."""
        if self._admin is None:
            self._admin = AdminClient(self.client_config())
        return self._admin

    def get_producer(self) -> Producer:
        """The cached Producer (acks=all)."""
        if self._producer is None:
            self._producer = Producer({**self.client_config(), "acks": "all"})
        return self._producer

    def get_consumer(self, group_id: str = "cohort-metadata") -> Consumer:
        """A cached Consumer for `group_id` with auto-commit off (Cohort commits explicitly)."""
        validate_group_name(group_id)
        consumer = self._consumers.get(group_id)
        if consumer is None:
            consumer = Consumer(
                {
                    **self.client_config(),
                    "group.id": group_id,
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                }
            )
            self._consumers[group_id] = consumer
        return consumer

    def get_mirror(self) -> Any:
        """The `OffsetMirror` copying ledger commits to Kafka's committed offsets under the group id."""
        from cohort.pipelines.kafka.mirror import KafkaOffsetMirror

        return KafkaOffsetMirror(self.client_config())

    def close(self) -> None:
        """Close the consumers, flush the producer and release the admin client this resource created."""
        for consumer in self._consumers.values():
            consumer.close()
        self._consumers.clear()
        if self._producer is not None:
            self._producer.flush(self.request_timeout_s)
        self._producer = None
        self._admin = None  # confluent-kafka's AdminClient has no close(): dropping it stops its threads

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        """Dagster's end of a run or sensor tick: release every client this resource created."""
        self.close()

    # --------------------------------------------------------------------------------------- metadata

    def partition_counts(self, topics: Iterable[str] | None = None) -> dict[str, int]:
        """Partition count per topic (all non-internal topics when `topics` is None; missing ones omitted)."""
        try:
            return read_partition_counts(self.get_admin(), topics, timeout_s=self.request_timeout_s)
        except KafkaException as exc:
            reason = _reason(exc)
            raise KafkaException(f"could not read topic metadata from {self.bootstrap_servers}: {reason}") from None

    def subscribed_partition_counts(self, topics: Iterable[str] = (), pattern: str | None = None) -> dict[str, int]:
        """Partition counts of `topics` plus every topic fully matching `pattern` (what a group subscribes to)."""
        return subscribed_counts(self.partition_counts(), set(topics), pattern)

    def watermarks(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(first available offset, end offset) per partition; the end offset is the one a fetch from the
        high watermark confirms (`cohort.pipelines.kafka.client.watermarks`), so lag counts every record."""
        try:
            return fetched_watermarks(self.client_config(), partitions, timeout_s=self.request_timeout_s)
        except KafkaException as exc:
            raise KafkaException(f"could not read offsets from {self.bootstrap_servers}: {_reason(exc)}") from None

    def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The end offset per partition (see `watermarks`)."""
        return {tp: high for tp, (_low, high) in self.watermarks(partitions).items()}

    def committed_offsets(self, group: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """Kafka's committed offsets of `group` (what `kafka-consumer-groups --describe` shows); None if none."""
        if not partitions:
            return {}
        consumer = self.get_consumer(group)
        try:
            answers = consumer.committed(
                [KafkaTopicPartition(tp.topic, tp.partition) for tp in partitions], timeout=self.request_timeout_s
            )
        except KafkaException as exc:
            raise KafkaException(f"could not read the committed offsets of group {group!r}: {exc}") from None
        return {TopicPartition(a.topic, a.partition): (int(a.offset) if a.offset >= 0 else None) for a in answers}


def _reason(exc: BaseException) -> str:
    """What librdkafka said, without the KafkaError repr (`Local: Broker transport failure`)."""
    cause: BaseException | None = exc
    while cause is not None:
        if cause.args and isinstance(cause.args[0], KafkaError):
            return str(cause.args[0].str())
        cause = cause.__cause__
    return str(exc)
