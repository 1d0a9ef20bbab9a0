"""Spark session construction for the pipeline: local by default, a master URL or Spark Connect remote.

Python workers must run the same interpreter as the driver (the one with confluent-kafka and pyarrow),
so `PYSPARK_PYTHON` defaults to `sys.executable`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession

__all__ = ["build_session"]

LOCAL_DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    "spark.driver.memory": "2g",
    "spark.sql.session.timeZone": "UTC",
}


def build_session(
    *,
    master: str | None = "local[2]",
    remote: str | None = None,
    app_name: str = "cohort",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get or create the process's SparkSession.

    `remote` (an `sc://host:port` Spark Connect URL) takes precedence over `master`; for local and
    master-URL sessions the Python workers use this interpreter.
    """
    if master and remote:
        raise ValueError("give either a Spark master URL or a Spark Connect remote, not both")
    builder = SparkSession.builder.appName(app_name)
    if remote:
        builder = builder.remote(remote)
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        builder = builder.master(master or "local[2]")
        for key, value in LOCAL_DEFAULTS.items():
            builder = builder.config(key, value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
