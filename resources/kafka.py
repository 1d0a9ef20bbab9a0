"""The Kafka resource: confluent-kafka configuration (SASL/SSL secrets from `EnvVar`) and client factories.

Typed configuration plus cached clients, nothing else: the producer, and a `KafkaAccess`
(cohort.runtime.kafka_access: the admin client, topic metadata, end offsets, Kafka's committed offsets of a
group, the mirror that copies ledger commits to Kafka) that the worker slots share with the Airflow face and the
CLI. Secrets (`sasl_password`, `ssl_key_password`) are hidden from `repr`, from `describe_config()` and from
every error message raised here.

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

from collections.abc import Iterable, Sequence
from typing import Any, Literal

import dagster as dg
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from pydantic import Field, PrivateAttr, field_validator

from cohort.common.types import TopicPartition
from cohort.pipelines.kafka.mirror import KafkaOffsetMirror
from cohort.runtime.kafka_access import DEFAULT_CLIENT_ID, DEFAULT_SECURITY_PROTOCOL, KafkaAccess, parse_bootstrap

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
    security_protocol: SecurityProtocol = Field(
        default=DEFAULT_SECURITY_PROTOCOL, description="librdkafka security.protocol."
    )
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
    client_id: str = Field(default=DEFAULT_CLIENT_ID, description="librdkafka client.id shown in broker logs.")
    request_timeout_s: float = Field(default=10.0, gt=0, description="Timeout of admin and offset requests.")
    extra_config: dict[str, str] = Field(
        default_factory=dict, description="Further librdkafka properties (no secrets here: they would be shown)."
    )

    _access: KafkaAccess | None = PrivateAttr(default=None)
    _producer: Producer | None = PrivateAttr(default=None)

    @field_validator("bootstrap_servers")
    @classmethod
    def _check_bootstrap(cls, value: str) -> str:
        return parse_bootstrap(value)

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

    def access(self) -> KafkaAccess:
        """This resource's `KafkaAccess` (created on first use, released by `close()`): the configuration and
        the metadata requests the face-neutral runtime takes."""
        if self._access is None:
            self._access = KafkaAccess(self.client_config(), request_timeout_s=self.request_timeout_s)
        return self._access

    def get_admin(self) -> AdminClient:
        """The AdminClient of this resource (created on first use, released by `close()`)."""
        return self.access().admin

    def get_producer(self) -> Producer:
        """The cached Producer (acks=all)."""
        if self._producer is None:
            self._producer = Producer({**self.client_config(), "acks": "all"})
        return self._producer

    def get_consumer(self, group_id: str = "cohort-metadata") -> Consumer:
        """A cached Consumer for `group_id` with auto-commit off (Cohort commits explicitly)."""
        return self.access().consumer(group_id)

    def get_mirror(self) -> KafkaOffsetMirror:
        """The `OffsetMirror` copying ledger commits to Kafka's committed offsets under the group id."""
        return self.access().mirror()

    def close(self) -> None:
        """Close the consumers, flush the producer and release the admin client this resource created."""
        if self._access is not None:
            self._access.close()
        self._access = None
        if self._producer is not None:
            self._producer.flush(self.request_timeout_s)
        self._producer = None

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        """Dagster's end of a run or sensor tick: release every client this resource created."""
        self.close()

    # --------------------------------------------------------------------------------------- metadata

    def partition_counts(self, topics: Iterable[str] | None = None) -> dict[str, int]:
        """Partition count per topic (all non-internal topics when `topics` is None; missing ones omitted)."""
        return self.access().partition_counts(topics)

    def subscribed_partition_counts(self, topics: Iterable[str] = (), pattern: str | None = None) -> dict[str, int]:
        """Partition counts of `topics` plus every topic fully matching `pattern` (what a group subscribes to)."""
        return self.access().subscribed_partition_counts(topics, pattern)

    def watermarks(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(first available offset, end offset) per partition (`KafkaAccess.watermarks`)."""
        return self.access().watermarks(partitions)

    def end_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """The end offset per partition (see `watermarks`)."""
        return self.access().end_offsets(partitions)

    def committed_offsets(self, group: str, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
        """Kafka's committed offsets of `group` (what `kafka-consumer-groups --describe` shows); None if none."""
        return self.access().committed_offsets(group, partitions)
