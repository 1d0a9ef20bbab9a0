"""Shared fixtures: the real embedded broker, Spark, SQLite and PostgreSQL for every test tier.

Real components only; each is started once per session and isolated per test (a unique topic, a fresh
SQLite file, a fresh PostgreSQL database).
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.postgres import PostgresServer

_topic_counter = itertools.count()


@pytest.fixture(scope="session")
def broker() -> Iterator[Any]:
    """One embedded Tansu broker for the whole session."""
    from cohort.devtools.embedded_broker import EmbeddedBroker

    with EmbeddedBroker() as running:
        yield running


@pytest.fixture
def kafka_config(broker: Any) -> dict[str, Any]:
    """A librdkafka configuration pointing at the session broker."""
    return {"bootstrap.servers": broker.bootstrap_servers}


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", text)[:80]


@pytest.fixture
def topic_factory(request: pytest.FixtureRequest, kafka_config: dict[str, Any]) -> Callable[..., str]:
    """Create topics with names unique to this test: `topic_factory(partitions=4)` -> name."""
    from cohort.devtools.topics import create_topic

    def make(partitions: int = 1, suffix: str = "") -> str:
        name = f"t{next(_topic_counter)}-{_safe(request.node.name)}{('-' + suffix) if suffix else ''}"
        create_topic(kafka_config, name, partitions)
        return name

    return make


@pytest.fixture
def topic(topic_factory: Callable[..., str]) -> str:
    """A fresh single-partition topic."""
    return topic_factory(1)


@pytest.fixture
def produce_records(kafka_config: dict[str, Any]) -> Callable[..., int]:
    """Produce (partition, key, value) records with librdkafka's default batching, as ordinary producers do
    (`one_per_batch=True`: one record per batch, for a test that needs it and says why)."""
    from cohort.devtools.topics import produce

    def send(topic: str, records: Iterable[tuple[int, bytes | None, bytes | None]], **kwargs: Any) -> int:
        return produce(kafka_config, topic, records, **kwargs)

    return send


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for the session: UI off, few shuffle partitions."""
    from cohort.pipelines.spark import build_session

    session = build_session(master="local[2]", app_name="cohort-tests", conf={"spark.sql.shuffle.partitions": "2"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def registry() -> Iterator[Any]:
    """A fresh Schema Registry HTTP server per test (harness.schema_registry), stopped afterwards."""
    from harness.schema_registry import SchemaRegistryServer

    with SchemaRegistryServer() as server:
        yield server


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """The SQLAlchemy URL of a fresh SQLite file for this test."""
    return f"sqlite:///{tmp_path / 'cohort.db'}"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server (Debian package, initdb/pg_ctl) on a free loopback port.

    Its directory is private to this session (not under pytest's shared basetemp, whose retention clean-up
    in a concurrent pytest run could delete a live data directory).
    """
    root = Path(tempfile.mkdtemp(prefix="cohort-pg-"))
    server = PostgresServer(root)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_url(postgres_server: PostgresServer, request: pytest.FixtureRequest) -> str:
    """The SQLAlchemy URL of a fresh PostgreSQL database for this test."""
    name = "t_" + re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:40] + f"_{next(_topic_counter)}"
    return postgres_server.create_database(name)


def pytest_configure(config: pytest.Config) -> None:
    # Spark workers and subprocesses must run the venv's interpreter.
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
