"""The settings of an Airflow-driven group that live outside its DAG file: Kafka's librdkafka configuration
from an Airflow connection, and the store URL from an environment variable.

Like Airflow's Kafka provider, the connection's `extra` is the librdkafka configuration (`bootstrap.servers`,
`security.protocol`, `sasl.*`, `ssl.*`), so credentials stay in Airflow's connections: an
`AIRFLOW_CONN_<ID>` environment variable or a secrets backend. The configuration is passed to clients and
never logged: `describe` masks its secrets.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["KafkaConnectionError", "bootstrap_of", "describe", "kafka_config", "store_url_from_env"]

_SECRET_WORDS = ("password", "secret", "token", "key")


class KafkaConnectionError(ValueError):
    """An Airflow connection that does not describe a Kafka cluster (named, never echoed)."""


def kafka_config(conn_id: str) -> dict[str, Any]:
    """The librdkafka configuration held by Airflow connection `conn_id` (its `extra`)."""
    from airflow.sdk import Connection

    try:
        connection = Connection.get(conn_id)
    except Exception as exc:  # AirflowNotFoundException and the secrets backends' own errors
        raise KafkaConnectionError(f"Airflow connection {conn_id!r} cannot be read: {type(exc).__name__}") from None
    return config_from_extra(conn_id, connection.extra_dejson)


def config_from_extra(conn_id: str, extra: Mapping[str, Any]) -> dict[str, Any]:
    """The connection's `extra` as a librdkafka configuration; `bootstrap.servers` is required."""
    config = {str(k): v for k, v in extra.items()}
    if not str(config.get("bootstrap.servers") or "").strip():
        raise KafkaConnectionError(
            f"Airflow connection {conn_id!r} has no 'bootstrap.servers' in its extra (the librdkafka settings)"
        )
    return config


def store_url_from_env(variable: str) -> str:
    """The group's store URL from environment variable `variable` (it may hold a password: never in a DAG's
    code or a trigger's kwargs, which Airflow stores); a ValueError naming the variable when it is not set."""
    url = os.environ.get(variable)
    if not url:
        raise ValueError(f"the environment variable {variable!r} (the group's store URL) is not set")
    return url


def bootstrap_of(config: Mapping[str, Any]) -> str:
    """The first bootstrap server, lower-cased: the host part of the topics' asset URIs."""
    return str(config["bootstrap.servers"]).split(",")[0].strip().lower()


def describe(config: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration with every secret-looking value masked: safe for logs."""
    return {k: "***" if any(word in k.lower() for word in _SECRET_WORDS) else v for k, v in config.items()}
