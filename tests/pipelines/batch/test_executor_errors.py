# ruff: noqa: E501  (a Python worker's traceback, quoted line for line)
"""Reading Spark's message of a failed Python task (pure): the exception the task raised, and the error the
batch raises for it. The texts are the shapes PySpark prints (classic, with a chained cause, with a Java trace
after it); test_failures.py and test_spark_connect_errors.py check the
real thing."""

from __future__ import annotations

from typing import Any

from cohort.pipelines.batch.executor_errors import (
    ExecutorDependencyError,
    ReadingTaskError,
    TaskFailure,
    named_error,
    task_failure,
)
from cohort.pipelines.formats.registry import RegistryError, RegistryUnavailableError

CLASSIC = """An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/work/pipelines/registry_decode.py", line 107, in _decode_group
    writer = self._source.by_id(schema_id, serialized=fmt == "protobuf")
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
cohort.pipelines.formats.registry.RegistryUnavailableError: the Schema Registry at http://r:8081/wrong/ answered HTTP 404"""

CHAINED = """[PYTHON_EXCEPTION] An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "<stdin>", line 3, in parse
KeyError: 'type'

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "<stdin>", line 5, in task
ValueError: the reader schema cannot be read:
  field 'type' is missing

JVM stacktrace:
org.apache.spark.SparkException: Job aborted due to stage failure: Traceback (most recent call last):
\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:531)"""

MISSING = """Traceback (most recent call last):
  File "/usr/lib/python3/pyspark/worker.py", line 1, in main
ModuleNotFoundError: No module named 'confluent_kafka'"""


class _Session:
    class conf:
        @staticmethod
        def get(key: str, default: Any = None) -> Any:
            return "/opt/python3" if key == "spark.pyspark.python" else default


def test_the_task_s_own_exception_is_read_from_the_last_traceback() -> None:
    assert task_failure(CLASSIC) == TaskFailure(
        "cohort.pipelines.formats.registry.RegistryUnavailableError",
        "the Schema Registry at http://r:8081/wrong/ answered HTTP 404",
    )
    assert task_failure(CHAINED) == TaskFailure(
        "ValueError", "the reader schema cannot be read:\n  field 'type' is missing"
    )
    assert task_failure("Python worker exited unexpectedly (crashed)") is None


def test_the_registry_s_errors_are_raised_again_as_themselves_with_the_cause_first() -> None:
    named = named_error(_Session(), CLASSIC)
    assert type(named) is RegistryUnavailableError
    first = str(named).splitlines()[0]
    assert first.startswith("the Schema Registry at http://r:8081/wrong/ answered HTTP 404")
    assert "nothing was committed" in first
    refused = named_error(_Session(), CLASSIC.replace("RegistryUnavailableError", "RegistryError"))
    assert type(refused) is RegistryError


def test_other_errors_name_their_type_and_message_on_the_first_line() -> None:
    named = named_error(_Session(), CHAINED)
    assert isinstance(named, ReadingTaskError)
    assert str(named).splitlines()[0] == (
        "a reading task failed on a Spark executor: ValueError: the reader schema cannot be read:"
    )
    assert "JVM" not in str(named) and "Traceback" not in str(named)


def test_a_missing_module_names_the_module_and_the_executors_python() -> None:
    named = named_error(_Session(), MISSING)
    assert isinstance(named, ExecutorDependencyError)
    assert str(named).startswith("Spark executors cannot import 'confluent_kafka'") and "/opt/python3" in str(named)
