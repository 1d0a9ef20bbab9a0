"""Kafka for the `cohort` commands: a `KafkaResource` from `--bootstrap-servers` (a bad value is a usage error) and
Kafka's failures as one short line naming how long the command waited (librdkafka's own log lines silenced)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from cohort.resources.kafka import KafkaResource

__all__ = ["kafka_errors", "kafka_for"]


def kafka_for(bootstrap_servers: str, timeout_s: float) -> KafkaResource:
    """The Kafka resource a command talks through, each request bounded by `timeout_s`."""
    from pydantic import ValidationError

    from cohort.resources.kafka import KafkaResource

    try:
        return KafkaResource(
            bootstrap_servers=bootstrap_servers, request_timeout_s=timeout_s, extra_config={"log_level": "0"}
        )
    except ValidationError as exc:
        message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise click.BadParameter(message, param_hint="'--bootstrap-servers'") from None


@contextmanager
def kafka_errors(timeout_s: float) -> Iterator[None]:
    """Turn a KafkaException raised inside into the command's one-line error."""
    from confluent_kafka import KafkaException

    try:
        yield
    except KafkaException as exc:
        raise click.ClickException(f"{exc} (waited up to {timeout_s:g} s per request)") from None
