"""`cohort gc` (cohort.cli.gc, through click's runner): staging areas and table data files laid out the way
killed batches leave them, the coordinator's real store on SQLite with a live member, the file system's own
modification times (aged with os.utime, no sleeping)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.member import GroupMember
from cohort.assignment.settings import MemberSettings
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.sink.layout import SinkLayout, attempt_id
from cohort.pipelines.tasks.writer import ArrowFs

TP = TopicPartition("t", 0)

COHORT = str(Path(sys.executable).with_name("cohort"))


def _stage(layout: SinkLayout, attempt: str, rows: int, *, prepared: tuple[int, int] | None = None) -> None:
    staged = Path(layout.staged_range_dir(attempt, TP.topic, TP.partition))
    staged.mkdir(parents=True)
    pq.write_table(pa.table({"kafka": [{"offset": o} for o in range(rows)]}), staged / f"part-0-{rows}.parquet")
    if prepared is not None:
        layout.prepare(ArrowFs(), attempt, {TP: prepared})


def _age(path: Path, seconds: float) -> None:
    """Set the modification time of `path` and everything under it `seconds` back."""
    when = time.time() - seconds
    for found in [path, *path.rglob("*")]:
        os.utime(found, (when, when))


def _gc(*args: str) -> tuple[int, dict[str, Any], str]:
    """`cohort gc ... --json` run as the user runs it (a subprocess)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
    done = subprocess.run([COHORT, "gc", *args, "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout) if done.returncode == 0 else {}, done.stdout + done.stderr


def _member(coordinator: Coordinator, group: str, run: str) -> GroupMember:
    member = GroupMember(
        coordinator, group, MemberSettings(topics=("t",), session_timeout=30.0), client_id=run,
        topic_metadata=lambda: {"t": 1},
    )  # fmt: skip
    member.join()
    return member


def test_gc_deletes_only_what_no_run_can_need_and_only_with_execute(
    coordinator: Coordinator, sqlite_url: str, group: str, lake: Path
) -> None:
    layout = SinkLayout(str(lake))
    live = _member(coordinator, group, "live-run")
    try:
        live.commit([OffsetRange("t", 0, 0, 5, records=5)], run_id="died-after-commit")
        areas = {
            "dead": attempt_id("killed-before-commit"),
            "to-publish": attempt_id("died-after-commit"),
            "live": attempt_id("live-run"),
            "young": attempt_id("not-joined-yet"),
        }
        _stage(layout, areas["dead"], 5, prepared=(5, 10))  # its commit never came
        _stage(layout, areas["to-publish"], 5, prepared=(0, 5))
        _stage(layout, areas["live"], 3)
        (lake / "_staging" / "notes").mkdir()
        _age(lake / "_staging", 2 * 3600)
        _stage(layout, areas["young"], 2)
        args = [group, "--store-url", sqlite_url, "--sink", str(lake)]

        code, dry, _ = _gc(*args)
        assert code == 0 and dry["executed"] is False and dry["deleted"] == []
        verdicts = {v["path"].rsplit("/", 1)[1]: (v["delete"], v["reason"]) for v in dry["staging"]}
        assert verdicts == {
            areas["dead"]: (True, "dead"),
            areas["to-publish"]: (False, "to-publish"),
            areas["live"]: (False, "live"),
            areas["young"]: (False, "young"),
        }
        assert dry["left_alone"] == [str(lake / "_staging" / "notes")]
        assert sorted(p.name for p in (lake / "_staging").iterdir()) == sorted([*areas.values(), "notes"])

        code, done, _ = _gc(*args, "--execute")
        assert code == 0 and done["deleted"] == [str(lake / "_staging" / areas["dead"])]
        left = sorted(p.name for p in (lake / "_staging").iterdir())
        assert left == sorted([areas["to-publish"], areas["live"], areas["young"], "notes"])

        code, done, _ = _gc(*args, "--grace", "PT5M", "--execute")  # a shorter grace period: the young one goes
        assert code == 0 and done["deleted"] == []  # changed seconds ago: still within five minutes
        assert layout.complete(ArrowFs(), "died-after-commit", TP, 0, 5, rows=5)  # what was kept was needed
    finally:
        live.close()

    code, _, output = _gc(group, "--store-url", sqlite_url, "--sink", str(lake), "--grace", "an hour")
    assert code == 2 and "ISO 8601 duration" in output
    code, _, output = _gc("no-such-group", "--store-url", sqlite_url, "--sink", str(lake))
    assert code == 1 and "does not exist" in output


def test_gc_of_a_delta_sink_deletes_its_staging_and_data_files_no_version_references_but_a_live_runs(
    coordinator: Coordinator, sqlite_url: str, group: str, lake: Path
) -> None:
    from deltalake import write_deltalake

    table = lake / "orders"
    write_deltalake(str(table), pa.table({"id": [1, 2]}))
    dead, live_attempt = attempt_id("killed-run"), attempt_id("live-run")
    placed = {}
    for attempt, (low, high) in ((dead, (0, 5)), (live_attempt, (5, 9))):
        directory = table / "data" / "topic=t" / "partition=0" / f"{low}-{high}-{attempt}"
        directory.mkdir(parents=True)
        pq.write_table(pa.table({"id": [3]}), directory / "part-0.parquet")
        placed[attempt] = directory
    _stage(SinkLayout(str(table)), dead, 4)
    _age(table / "data", 2 * 24 * 3600)
    _age(table / "_staging", 2 * 3600)
    live = _member(coordinator, group, "live-run")
    try:
        code, done, _ = _gc(group, "--store-url", sqlite_url, "--sink", str(table), "--execute")
    finally:
        live.close()
    assert code == 0
    assert done["deleted"] == [str(table / "_staging" / dead)]
    assert done["data_files"] == [str(placed[dead] / "part-0.parquet")] and done["live_data_files"] == 1
    assert not placed[dead].exists() and (placed[live_attempt] / "part-0.parquet").exists()
