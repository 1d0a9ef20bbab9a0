"""Spark's Python workers of a local session fork from Cohort's daemon (cohort.pipelines.tasks.python_daemon), so a
reading task starts with the reading modules imported; a session whose workers run another interpreter keeps
PySpark's own daemon."""

from __future__ import annotations

import sys
from typing import Any

from cohort.pipelines.spark import PYTHON_DAEMON, build_session


def test_a_local_sessions_workers_start_with_the_reading_modules_imported(spark: Any) -> None:
    """The tests' session is built as users build theirs (build_session, local[2]): its workers' first task
    already holds the modules (nothing in the probe imports them)."""
    assert spark.conf.get(PYTHON_DAEMON[0]) == PYTHON_DAEMON[1]
    probe = spark.sparkContext.parallelize(range(2), 2).map(
        lambda _: sorted(m for m in sys.modules if m.startswith("cohort.pipelines."))
    )
    for loaded in probe.collect():
        assert {
            "cohort.pipelines.tasks.reader",
            "cohort.pipelines.formats.decode",
            "cohort.pipelines.tasks.writer",
        } <= set(loaded)


def test_a_callers_setting_wins(monkeypatch: Any) -> None:
    """The session's settings are those of the process's live session (the tests'); what build_session would
    pass is seen on the builder it configures."""
    seen: dict[str, str] = {}

    class Builder:
        def __getattr__(self, name: str) -> Any:
            return lambda *args: self

        def config(self, key: str, value: str) -> Builder:
            seen[key] = value
            return self

        def getOrCreate(self) -> str:
            return "session"

    from pyspark.sql import SparkSession

    monkeypatch.setattr(SparkSession, "builder", Builder())
    build_session(master="local[1]", conf={PYTHON_DAEMON[0]: "pyspark.daemon"})
    assert seen[PYTHON_DAEMON[0]] == "pyspark.daemon"
    seen.clear()
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/other/python")
    build_session(master="local[1]")
    assert PYTHON_DAEMON[0] not in seen  # the workers run another interpreter, which may lack cohort
