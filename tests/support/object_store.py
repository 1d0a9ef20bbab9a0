"""Helpers for the Parquet sink's tests on the S3 server: the AWS variables handed to a running Spark session's
Python workers, and what readers see under an `s3://` root."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from harness.reliability.outcome import object_offsets

__all__ = ["AWS_VARIABLES", "arrow_offsets", "duckdb_offsets", "spark_environ"]

AWS_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ENDPOINT_URL",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ALLOW_HTTP",
)


@contextlib.contextmanager
def spark_environ(spark: Any, environ: Mapping[str, str] | None = None) -> Iterator[None]:
    """The AWS variables of this process (or `environ`) in the environment of the Python workers the session starts
    from now on (a session started before the test set them: a deployment sets them on its executors instead)."""
    values = dict(environ) if environ is not None else {k: os.environ[k] for k in AWS_VARIABLES if k in os.environ}
    workers: dict[str, str] = spark.sparkContext.environment
    before = {k: workers.get(k) for k in values}
    workers.update(values)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                workers.pop(key, None)
            else:
                workers[key] = value


def arrow_offsets(root: str) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of every row pyarrow.dataset reads under `root` (skipping names that start with _
    or .)."""
    return object_offsets(root)


def spark_offsets(root: str) -> list[tuple[str, int, int]]:
    """The same rows as a Spark session reads them through Hadoop's S3A file system (a session of its own, in a
    child process: harness.spark_s3), with this process's AWS variables."""
    from harness.spark_s3 import spark_offsets as read

    return read(root, {k: os.environ[k] for k in AWS_VARIABLES if k in os.environ})


def duckdb_offsets(root: str) -> list[tuple[str, int, int]]:
    """The same rows as DuckDB counts them, scanning the pyarrow dataset of `root`."""
    return object_offsets(root, duckdb=True)
