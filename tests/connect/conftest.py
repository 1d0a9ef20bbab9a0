"""The Spark Connect server of the Connect tests (local[2], PySpark's distribution) and the client process that
holds the remote session, both shared by the package's tests and stopped when they are done (every JVM and
Python worker of the server ended). harness/spark_connect.py starts them.

The client runs in a process of its own: PySpark refuses a remote session in a process with a classic one, and
the tests compare with batches on the classic `spark` fixture (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.protocol.group_state import GroupConfig
from harness.spark_connect import ConnectClient, SparkConnectServer


@pytest.fixture(scope="package")
def connect_server() -> Iterator[SparkConnectServer]:
    with SparkConnectServer() as server:
        print(f"Spark Connect server up in {server.started_in:.1f} s at {server.url}")
        yield server


@pytest.fixture(scope="package")
def connect(connect_server: SparkConnectServer) -> Iterator[ConnectClient]:
    """Runs `connect.call(function, *args)` as `function(session, *args)` with a Spark Connect session."""
    with ConnectClient(connect_server.url, connect_server.root) as client:
        print(f"Spark Connect client session up in {client.started_in:.1f} s")
        yield client


@pytest.fixture
def coordinator(sqlite_url: str) -> Iterator[Coordinator]:
    """The real coordinator on the test's SQLite file (the client process opens its own on the same file)."""
    made = Coordinator.from_url(sqlite_url, config=GroupConfig(initial_rebalance_delay=0.0))
    yield made
    made.close()
