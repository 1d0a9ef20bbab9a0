"""The assignor balance benchmark's smoke run (benchmarks/balance.py) at its tiny scale: two assignors on the skewed
backlog, end to end on the embedded broker and Spark, run as a person runs it (a subprocess); its JSON line has
every figure, the slots read the backlog exactly, and lag-sticky gave the heavy partition a slot of its own.

Marked `slow` (a JVM, a broker and four groups: a few minutes on a busy machine): `make test-all` runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROUND_FIELDS = {"makespan_s", "idle_s", "ideal_s", "makespan_over_ideal", "load_over_ideal", "cpu_s", "attempts"}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_tiny_run_reports_every_figure_and_lag_sticky_balances_the_backlog() -> None:
    command = [sys.executable, "-m", "benchmarks.balance", "--scale", "tiny", "--shapes", "skewed"]
    done = subprocess.run(
        [*command, "--assignors", "sticky", "lag-sticky", "--no-warm-up"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=850,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    report = json.loads(lines[-1])
    assert any(line.startswith("skewed: 8,000 records") for line in lines), done.stdout

    assert (report["records"], report["slots"], report["partitions"]) == (8000, 4, 32)
    for assignor in ("sticky", "lag-sticky"):
        case = report["skewed"][assignor]
        for key in ("round1", "round2"):
            figures = case[key]
            assert ROUND_FIELDS | {"vs_sticky", "slots", "generations"} <= set(figures), figures
            assert figures["makespan_s"] > 0 and figures["ideal_s"] > 0 and figures["idle_s"] >= 0, figures
            assert len(figures["generations"]) == 1, figures  # the four slots ran in one generation
            assert sum(records for _, records, _ in figures["slots"].values()) == 8000, figures
        assert case["moved_leave"] >= case["leaver_had"] > 0, case  # the leaver's partitions all moved
        assert case["moved_return"] >= 1, case
    assert report["skewed"]["sticky"]["round1"]["vs_sticky"] == 1.0
    # the heavy partition (20x each other one, 39% of the backlog) alone on a slot: the records balance is ideal
    assert report["skewed"]["lag-sticky"]["round1"]["load_over_ideal"] <= 1.15, report
    assert report["skewed"]["sticky"]["round1"]["load_over_ideal"] > 1.2, report  # count balance pairs it
    for key in ("lag_sticky_skewed_makespan_over_ideal", "lag_sticky_skewed_vs_sticky", "lag_sticky_skewed_moved"):
        assert report[key] > 0, report
