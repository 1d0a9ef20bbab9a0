"""A reading task's failure said by its cause: the error a Spark executor raised, not Spark's wrapper around it.

Spark reports a task's failure as a `PythonException` whose message is the executor's whole Python traceback
("An exception was thrown from the Python worker", frames, then the cause on its last line), sometimes followed
by a Java trace. The batch turns it into an error whose first line is the cause (the original chained):

- a module the executors' Python cannot import (confluent-kafka, imported late by the reading task, or what
  Python loads with the task's code: cohort itself, pyarrow, msgspec) is an `ExecutorDependencyError` naming the
  module, the interpreter the executors run and what to install there;
- the registry's errors are raised again as themselves (`RegistryUnavailableError`, `RegistryError`), so a
  caller's `except` for them holds wherever the task ran;
- anything else (a range that cannot be read: `ReadError`; a decoder that cannot be set up on the executor; a
  bug) is a `ReadingTaskError` naming the executor's exception type and message.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.errors import PythonException

from cohort.pipelines.formats.registry import RegistryError, RegistryUnavailableError

__all__ = ["ExecutorDependencyError", "ReadingTaskError", "TaskFailure", "executor_errors_named", "task_failure"]

_MISSING = re.compile(r"^(?:ModuleNotFoundError|ImportError): No module named '([^']+)'", re.MULTILINE)
_TRACEBACK = "Traceback (most recent call last):"
_RAISED = re.compile(r"(?P<type>[A-Za-z_][\w.]*)(?::[ ]?(?P<message>.*))?")
_JAVA_TAIL = re.compile(r"^(?:JVM stacktrace:|\s+at [\w$.]+\(|\tat )", re.MULTILINE)

_COHORT_ERRORS: dict[str, type[Exception]] = {
    "cohort.pipelines.formats.registry.RegistryUnavailableError": RegistryUnavailableError,
    "cohort.pipelines.formats.registry.RegistryError": RegistryError,
}
"""Errors of the reading tasks raised again on the driver as themselves, by their qualified names."""


class ExecutorDependencyError(RuntimeError):
    """The Spark executors' Python cannot import a module the reading tasks need."""


class ReadingTaskError(RuntimeError):
    """A reading task failed on a Spark executor with an error Cohort does not raise itself."""


@dataclass(frozen=True)
class TaskFailure:
    """The exception a Python task raised, as its traceback printed it: the type's (qualified) name and message."""

    type_name: str
    message: str

    @property
    def short_type(self) -> str:
        return self.type_name.rsplit(".", 1)[-1]


def task_failure(text: str) -> TaskFailure | None:
    """The exception at the bottom of the last Python traceback in Spark's message of a failed task (the one
    the task raised: chained causes are printed before it), None when the message holds no traceback."""
    java = _JAVA_TAIL.search(text)
    python = text[: java.start()] if java else text
    at = python.rfind(_TRACEBACK)
    if at < 0:
        return None
    lines = python[at + len(_TRACEBACK) :].splitlines()[1:]
    for i, line in enumerate(lines):
        if not line or line[0].isspace():  # a frame, its source line or its caret marks
            continue
        found = _RAISED.fullmatch(line)
        if found is None:
            return None
        message = "\n".join([found.group("message") or "", *lines[i + 1 :]]).strip()
        return TaskFailure(found.group("type"), message)
    return None


def _executor_python(spark: Any) -> str:
    """The interpreter the executors run, as far as the driver knows."""
    try:
        configured = spark.conf.get("spark.pyspark.python", None)
    except Exception:  # a session that cannot answer: say what the environment says
        configured = None
    return configured or os.environ.get("PYSPARK_PYTHON") or "the executors' default python3"


def named_error(spark: Any, text: str) -> Exception | None:
    """The error a failed reading task's message (`text`) stands for (see the module doc), None when it holds
    no Python exception to name."""
    missing = _MISSING.findall(text)
    if missing:
        module = missing[-1].split(".")[0]
        return ExecutorDependencyError(
            f"Spark executors cannot import {module!r}, which Cohort's reading tasks need; the executors run "
            f"{_executor_python(spark)} (PYSPARK_PYTHON / spark.pyspark.python): install cohort there with "
            "confluent-kafka, pyarrow and msgspec (docs/deployment.md). Nothing was committed"
        )
    failure = task_failure(text)
    if failure is None:
        return None
    known = _COHORT_ERRORS.get(failure.type_name)
    if known is not None:
        return known(f"{failure.message} (in a reading task on a Spark executor; nothing was committed)")
    return ReadingTaskError(
        f"a reading task failed on a Spark executor: {failure.short_type}: {failure.message or '(no message)'} "
        "(nothing was committed)"
    )


@contextmanager
def executor_errors_named(spark: Any) -> Iterator[None]:
    """Around a Spark job running Cohort's reading tasks: a task's failure becomes the error it stands for
    (`named_error`), Spark's own error chained."""
    try:
        yield
    except PythonException as error:
        named = named_error(spark, str(error))
        if named is None:
            raise
        raise named from error
