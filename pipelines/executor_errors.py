"""A reading task that cannot import what it needs, said as such: the Spark executors' Python lacks a package.

Spark reports a task's failure as a `PythonException` whose message is the executor's whole Python traceback;
a missing module is only its last line, under frames that have nothing to do with it. The batch turns that
into one sentence naming the module, the interpreter the executors run and what to install there. Modules
Cohort's own code imports late (confluent-kafka in the reading task) and those Python loads with the task's
code (cohort itself, pyarrow, msgspec) fail the same way, so the driver is where all of them can be named.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark.errors import PythonException

__all__ = ["ExecutorDependencyError", "executor_imports_named"]

_MISSING = re.compile(r"^(?:ModuleNotFoundError|ImportError): No module named '([^']+)'", re.MULTILINE)


class ExecutorDependencyError(RuntimeError):
    """The Spark executors' Python cannot import a module the reading tasks need."""


def _executor_python(spark: Any) -> str:
    """The interpreter the executors run, as far as the driver knows."""
    try:
        configured = spark.conf.get("spark.pyspark.python", None)
    except Exception:  # a session that cannot answer: say what the environment says
        configured = None
    return configured or os.environ.get("PYSPARK_PYTHON") or "the executors' default python3"


@contextmanager
def executor_imports_named(spark: Any) -> Iterator[None]:
    """Around a Spark job running Cohort's reading tasks: a task's missing module becomes an
    `ExecutorDependencyError` naming it (the original error chained)."""
    try:
        yield
    except PythonException as error:
        found = _MISSING.findall(str(error))
        if not found:
            raise
        module = found[-1].split(".")[0]
        raise ExecutorDependencyError(
            f"Spark executors cannot import {module!r}, which Cohort's reading tasks need; the executors run "
            f"{_executor_python(spark)} (PYSPARK_PYTHON / spark.pyspark.python): install cohort there with "
            "confluent-kafka, pyarrow and msgspec (docs/deployment.md). Nothing was committed"
        ) from error
