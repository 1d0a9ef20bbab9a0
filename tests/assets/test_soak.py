"""The soak's short version: three minutes of scheduled batches under `dagster dev`'s real daemon, with a
producer writing throughout (librdkafka's default batching), a worker run SIGKILLed, the broker unreachable
for 25 s and one store transaction failing; then the audit (benchmarks/soak.py; the 30-minute run's figures
are in benchmarks/RELIABILITY.md).

Marked `slow`: `make test-all` runs it, `make test` (CI) does not. The script runs as a subprocess, as a person
runs it. Memory growth is printed but not asserted here: three
minutes say nothing about a leak (the full soak asserts it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.dagster_processes
@pytest.mark.timeout(1200)
def test_three_minutes_of_batches_and_faults_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    report_file = tmp_path / "soak.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.soak", "--minutes", "3", "--json-out", str(report_file)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1100,
    )
    assert report_file.exists(), f"the soak ended without a report ({done.returncode}):\n{done.stdout[-4000:]}"
    report = json.loads(report_file.read_text())
    summary = json.dumps({k: v for k, v in report.items() if k != "plan"}, indent=1)[:6000]
    assert report["problems"] == [], summary
    assert done.returncode == 0, summary

    assert report["lost"] == 0 and report["duplicated"] == 0, summary
    assert report["log_records"] >= 3 * 60 * report["plan"]["rate_per_s"], summary
    assert report["in_sink"] + report["quarantined"] == report["log_records"], summary
    assert report["quarantined"] >= report["log_records"] // 500 - 1, summary  # one malformed value in 500
    assert report["audit_problems"] == [], summary

    kills = report["kills"]
    assert len(kills) == 1, summary
    assert kills[0]["slot_commit_s"] is not None, summary  # the killed run's slot committed again
    if kills[0]["held"]:  # it held partitions: the membership sensor reran its slot
        assert kills[0]["rerun"] and kills[0]["rerun_commit_s"] is not None, summary
    assert len(report["outages"]) == 1, summary
    assert report["store_fault"].startswith("fired"), summary
    assert report["runs"]["scheduled"] >= 2 * 3, summary  # a run per slot each minute
    assert {m["role"] for m in report["memory"]} >= {"daemon", "code server"}, summary
