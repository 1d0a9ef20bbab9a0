"""Spark sessions (`cohort.pipelines.spark`) end cleanly with the process that built them: a session left open at
exit, and the tests' shared session, are stopped with their py4j gateway and JVM before the interpreter tears
py4j down, so nothing is printed after the process's own output. Each runs as a user runs it: a script, and
pytest over a test file that uses the `spark` fixture, in a subprocess of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = """
import contextlib
import logging
import tempfile

from cohort.pipelines.spark import build_session

captured = tempfile.TemporaryFile("w+")  # the output a test runner or an orchestrator captures, then closes
with contextlib.redirect_stderr(captured):
    logging.basicConfig(level=logging.INFO)  # a handler on that output, as Airflow's logging installs one
    session = build_session(master="local[1]")
    session.sparkContext.setLogLevel("ERROR")
    assert session.range(3).count() == 3
captured.close()
print("counted", flush=True)
"""

TEST_FILE = """
import logging
import sys


def test_a_count(spark):
    # a handler on the output pytest captures, as Airflow's logging configuration installs one when imported
    logging.getLogger().addHandler(logging.StreamHandler(sys.stdout))
    logging.getLogger().setLevel(logging.INFO)
    assert spark.range(3).count() == 3
"""


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.spark
def test_a_script_that_exits_with_its_session_open_prints_nothing_after_its_output(tmp_path: Path) -> None:
    done = _run([sys.executable, "-c", SCRIPT], tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout == "counted\n"
    assert "Logging error" not in done.stderr, done.stderr[-4000:]
    assert "py4j" not in done.stderr, done.stderr[-4000:]


@pytest.mark.slow
@pytest.mark.spark
def test_pytest_with_the_spark_fixture_ends_with_its_summary(tmp_path: Path) -> None:
    test_file = tmp_path / "test_count.py"
    test_file.write_text(textwrap.dedent(TEST_FILE), encoding="utf-8")
    plugins = ["-p", "no:cacheprovider", "-p", "tests.fixtures.spark"]  # the fixture, as tests/conftest.py loads it
    done = _run([sys.executable, "-m", "pytest", "-q", *plugins, "--rootdir", str(tmp_path), str(test_file)], REPO)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "Logging error" not in done.stdout + done.stderr, done.stderr[-4000:]
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("1 passed in "), done.stdout[-4000:]
    assert "py4j" not in done.stderr, done.stderr[-4000:]
