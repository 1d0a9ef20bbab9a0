"""The Spark standalone cluster of the cluster tests: one master and two workers (1 core, 1 GB each), shared by
the package's tests, stopped (every JVM killed) when they are done. harness/spark_cluster.py starts it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from harness.spark_cluster import SparkStandaloneCluster


@pytest.fixture(scope="package")
def spark_cluster() -> Iterator[SparkStandaloneCluster]:
    with SparkStandaloneCluster(workers=2, cores=1, memory="1g") as cluster:
        yield cluster
