"""Spark's Python worker daemon with the reading tasks' modules imported once, before it forks their workers.

Spark starts one daemon per executor (`spark.python.daemon.module`; pyspark.daemon by default) and forks a
Python worker from it for each task, reused while busy and dropped after a minute idle. A fresh worker imports
pyarrow, confluent-kafka, msgspec and the reading modules on its first task (about 0.5 CPU s each on a 2-core
machine); forked from this daemon it starts with them imported. `cohort.pipelines.spark.build_session` sets it
(`PYTHON_DAEMON`) for local sessions whose executors run the driver's interpreter, unless the caller set another;
a cluster or a Spark Connect server can set it where `cohort` is installed on the executors (docs/deployment.md).

Run as `python -m cohort.pipelines.tasks.python_daemon`, as Spark runs its daemon module.
"""

from __future__ import annotations

import importlib

from pyspark import daemon

__all__ = ["PRELOADED", "main"]

PRELOADED: tuple[str, ...] = (
    "cohort.pipelines.tasks.reader",
    "cohort.pipelines.tasks.native_reader",
    "cohort.pipelines.formats.decode",
    "cohort.pipelines.tasks.checked",
    "cohort.pipelines.tasks.writer",
    "cohort.pipelines.tasks.transformed_writer",
    "pyarrow.parquet",
)
"""What the daemon imports before forking: the modules a reading task starts with (and what they import)."""


def main() -> None:
    """Import PRELOADED, then serve Spark as pyspark.daemon does. A module that fails to import here is left to
    the task that needs it, which fails naming it (cohort.pipelines.batch.executor_errors)."""
    for name in PRELOADED:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
    daemon.manager()


if __name__ == "__main__":
    main()
