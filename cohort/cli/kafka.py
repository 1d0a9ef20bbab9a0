"""Kafka for the `cohort` commands: a `KafkaAccess` from `--bootstrap-servers` (a bad value is a usage error) and
`--command-config` (security, SASL and TLS settings: cohort.cli.command_config), and Kafka's failures as one short
line naming how long the command waited (librdkafka's own log lines silenced). When the cluster refuses the client (a
wrong password, a certificate it does not trust), the line names that cause first (`KafkaAccess`'s error_cb)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from cohort.cli.command_config import CommandConfig
    from cohort.runtime.kafka_access import KafkaAccess

__all__ = ["kafka_errors", "kafka_for"]


def kafka_for(bootstrap_servers: str, timeout_s: float, command_config: CommandConfig | None = None) -> KafkaAccess:
    """The Kafka a command talks to, each request bounded by `timeout_s`: PLAINTEXT unless `command_config` (the
    `--command-config` option's value) says otherwise."""
    from cohort.runtime.kafka_access import DEFAULT_CLIENT_ID, DEFAULT_SECURITY_PROTOCOL, KafkaAccess, parse_bootstrap

    try:
        bootstrap = parse_bootstrap(bootstrap_servers)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--bootstrap-servers'") from None
    config = {"security.protocol": DEFAULT_SECURITY_PROTOCOL, "client.id": DEFAULT_CLIENT_ID}
    if command_config is not None:
        config.update(command_config.client_settings())
    config.update({"bootstrap.servers": bootstrap, "log_level": "0"})
    return KafkaAccess(config, request_timeout_s=timeout_s)


@contextmanager
def kafka_errors(timeout_s: float) -> Iterator[None]:
    """Turn a KafkaException raised inside into the command's one-line error."""
    from confluent_kafka import KafkaException

    try:
        yield
    except KafkaException as exc:
        raise click.ClickException(f"{exc} (waited up to {timeout_s:g} s per request)") from None
