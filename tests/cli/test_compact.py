"""`cohort compact` run as the user runs it (a subprocess) on a real SQLite store: dry run, execute, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cohort.assignment.clock import ManualClock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.protocol.group_state import GroupConfig
from cohort.common.types import OffsetRange, TopicPartition

COHORT = str(Path(sys.executable).with_name("cohort"))
DAY = 86_400.0


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
    return subprocess.run([COHORT, *args], env=env, capture_output=True, text=True, timeout=120)


def _ledger(url: str, *, days: int) -> None:
    """One range a day for `days` days, ending yesterday, on two partitions."""
    clock = ManualClock(1_700_000_000.0)
    coordinator = Coordinator.from_url(url, clock=clock, config=GroupConfig(initial_rebalance_delay=0))
    ledger = coordinator.standalone_ledger("orders", run_id="run")
    for day in range(days):
        ledger.commit([OffsetRange("t", p, 100 * day, 100 * (day + 1), records=100) for p in (0, 1)])
        clock.advance(DAY)
    coordinator.close()


def test_compact_dry_run_changes_nothing_and_execute_folds(sqlite_url: str) -> None:
    _ledger(sqlite_url, days=40)
    before = "2023-11-20T00:00:00Z"  # 1_700_000_000 is 2023-11-14T22:13:20Z: six ranges per partition are older
    dry = _run("compact", "orders", "--store-url", sqlite_url, "--before", before, "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["executed"] is False and plan["rows_removed"] == 10
    assert [p["ranges_folded"] for p in plan["partitions"]] == [6, 6]
    coordinator = Coordinator.from_url(sqlite_url)
    assert len(coordinator.ledger_history("orders", "t", 0)) == 40

    table = _run("compact", "orders", "--store-url", sqlite_url, "--before", before)
    assert table.returncode == 0 and "Dry run: nothing changed" in table.stdout
    assert len(coordinator.ledger_history("orders", "t", 0)) == 40
    done = _run("compact", "orders", "--store-url", sqlite_url, "--before", before, "--execute")
    assert done.returncode == 0, done.stderr
    assert "Folded 10 ledger rows" in done.stdout
    history = coordinator.ledger_history("orders", "t", 0)
    assert len(history) == 35 and (history[0].kind, history[0].from_offset, history[0].until_offset) == ("fold", 0, 600)
    assert coordinator.fetch_offsets("orders", [TopicPartition("t", 0)]) == {TopicPartition("t", 0): 4000}
    described = _run("describe", "orders", "--store-url", sqlite_url, "--json")
    assert described.returncode == 0, described.stderr
    coordinator.close()


def test_compact_refuses_bad_input_in_one_line_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nothing.db"
    bad = _run("compact", "orders", "--store-url", f"sqlite:///{missing}", "--before", "last tuesday")
    assert bad.returncode != 0 and "--before" in bad.stderr and "Traceback" not in bad.stderr
    gone = _run("compact", "orders", "--store-url", f"sqlite:///{missing}")
    assert gone.returncode != 0 and "Traceback" not in gone.stderr and len(gone.stderr.strip().splitlines()) <= 2
    assert not missing.exists()
