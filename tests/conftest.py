"""The test tree mirrors the package: tests/<name>/ holds the tests of `cohort.<name>` (tests/assignment/ledger/
those of cohort.assignment.ledger, and so on), tests/docs/ those of docs/, tests/packaging/ those of the
distribution, tests/harness/ and tests/benchmarks/ those of the tools beside it.

The infrastructure a test uses is a fixture and a marker, not a folder. The fixtures live in tests/fixtures/
(real components only, each started once per session or per test and isolated per test: a unique topic, a
fresh SQLite file, a fresh PostgreSQL database); each marks the tests that use it, so `pytest -m "not spark"`
or `pytest -m pure` (no infrastructure at all) picks a tier.
"""

from __future__ import annotations

import os
import sys

import pytest

pytest_plugins = [
    "tests.fixtures.kafka",
    "tests.fixtures.spark",
    "tests.fixtures.stores",
    "tests.fixtures.sinks",
    "tests.fixtures.dagster",
    "tests.fixtures.s3",
]

# The marker each fixture gives the tests that use it, directly or through another fixture.
FIXTURE_MARKERS: dict[str, str] = {
    "broker": "kafka",
    "kafka_config": "kafka",
    "embedded_broker": "kafka",
    "registry": "schema_registry",
    "spark": "spark",
    "connect_server": "spark_connect",
    "spark_cluster": "spark_cluster",
    "postgres_server": "postgres",
    "instance": "dagster",
    "make_setup": "dagster",
    "s3_server": "s3",
    "s3_bucket": "s3",
    "s3_env": "s3",
}

# Infrastructure a test starts itself (a process or a browser) rather than through a fixture: the test says so
# with the marker.
PROCESS_MARKERS: dict[str, str] = {
    "dagster_processes": "starts Dagster's webserver, daemon or `dagster dev` as processes",
    "airflow_processes": "starts Airflow's api-server, scheduler, dag-processor and triggerer",
    "browser": "drives headless Chromium",
}

INFRASTRUCTURE = frozenset(FIXTURE_MARKERS.values()) | frozenset(PROCESS_MARKERS)


def pytest_configure(config: pytest.Config) -> None:
    # Spark workers and subprocesses must run the venv's interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    for name in sorted(set(FIXTURE_MARKERS.values())):
        uses = ", ".join(sorted(f for f, m in FIXTURE_MARKERS.items() if m == name))
        config.addinivalue_line("markers", f"{name}: uses {uses} (set by the fixture)")
    for name, what in PROCESS_MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {what}")
    config.addinivalue_line("markers", "pure: no infrastructure at all (set when no other marker is)")
    config.addinivalue_line(
        "markers",
        "embedded_broker: runs on the embedded Tansu broker whichever broker the session uses (`kafka_config` "
        "points there; set by the `embedded_broker` fixture too)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with the infrastructure its fixtures start, or `pure` when it uses none."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        for fixture, marker in FIXTURE_MARKERS.items():
            if fixture in names:
                item.add_marker(marker)
        if "embedded_broker" in names:
            item.add_marker("embedded_broker")
        if not any(item.get_closest_marker(name) for name in INFRASTRUCTURE):
            item.add_marker("pure")
