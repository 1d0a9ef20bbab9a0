"""docs/replay.md's replays from the command line, run as written in the project of docs/user-guide.md.

- In `make test`: the commands name what the guide's Definitions define (the worker job, its op, the topic
  asset) and the replay tag Cohort reads, with starts Cohort accepts.
- Slow: against an embedded broker of its own (the guide's topic is `orders`, which the session's broker
  may hold for another test), the guide's project produces its 20 records and lands them with its "run slot 1"
  command; then `dagster job execute` with the page's tags resets partition 1 to offset 4 and reads it again,
  and `dagster asset materialize` with the page's config replays both partitions from the earliest offset. The
  ledger shows each reset and the replayed ranges, the runs' materializations say they are replays, and the
  sink and the quarantine hold every offset once.
"""

from __future__ import annotations

import json
import os
import runpy
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

import dagster as dg
import pyarrow.dataset as ds
import pytest

from cohort.assets.replay import REPLAY_TAG, Replay
from cohort.assignment.coordinator import Coordinator
from tests.support.doc_blocks import titled_blocks

ONE, RANGE = "replay one partition", "replay a range of partitions"
GUIDE_FILES = ("produce_sample.py", "definitions.py", "slot1.yaml")
GROUP, TOPIC = "orders-ingest", "orders"


def _arguments(command: str) -> list[str]:
    """A block's command as the shell splits it (line continuations joined)."""
    return shlex.split(command.replace("\\\n", " "))


def _option(arguments: list[str], name: str) -> str:
    assert name in arguments, f"{name} is missing from {arguments}"
    return arguments[arguments.index(name) + 1]


def _project(root: Path) -> Path:
    """The guide's project: its files, unchanged, in a fresh directory."""
    guide = titled_blocks("user-guide.md")
    project = root / "project"
    project.mkdir()
    for name in GUIDE_FILES:
        (project / name).write_text(guide[name], encoding="utf-8")
    return project


def test_the_replay_commands_name_the_guides_definitions(tmp_path: Path) -> None:
    blocks = titled_blocks("replay.md")
    one, many = _arguments(blocks[ONE]), _arguments(blocks[RANGE])
    defs = runpy.run_path(str(_project(tmp_path) / "definitions.py"))["defs"]
    jobs = {job.name: job for job in defs.resolve_all_job_defs()}
    assets = {spec.key.to_user_string() for spec in defs.resolve_all_asset_specs()}

    assert one[:3] == ["dagster", "job", "execute"] and _option(one, "-f") == "definitions.py"
    job = jobs[_option(one, "-j")]
    tags = json.loads(_option(one, "--tags"))
    assert set(tags) == {"dagster/partition", REPLAY_TAG}
    assert Replay.parse(tags[REPLAY_TAG], [tags["dagster/partition"]]).partitions == {1}

    assert many[:3] == ["dagster", "asset", "materialize"] and _option(many, "-f") == "definitions.py"
    assert _option(many, "--select") in assets
    first, last = _option(many, "--partition-range").split("...")
    config = json.loads(_option(many, "--config-json"))
    [(op, settings)] = config["ops"].items()
    assert op in {node.name for node in job.nodes}  # the group's batch op, which the asset job runs too
    assert Replay.parse(settings["config"]["replay_from"], [first, last]).partitions == {0, 1}


def _environment(bootstrap: str, root: Path) -> dict[str, str]:
    """What the guide's reader exported, pointed at this test's broker and a temporary lake."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COHORT_", "DAGSTER_"))}
    home = root / "dagster-home"
    home.mkdir()
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        COHORT_BOOTSTRAP_SERVERS=bootstrap,
        COHORT_SINK=str(root / "lake"),
        DAGSTER_HOME=str(home),
    )
    return env


def _run(command: str, project: Path, env: dict[str, str]) -> None:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command], cwd=project, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, (
        f"`{command.strip()}` exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )


def _ledger(project: Path) -> dict[int, list[tuple[str, int, int]]]:
    coordinator = Coordinator.from_url(f"sqlite:///{project / 'cohort.db'}")
    try:
        return {
            p: [(e.kind, e.from_offset, e.until_offset) for e in coordinator.ledger_history(GROUP, TOPIC, p)]
            for p in (0, 1)
        }
    finally:
        coordinator.close()


def _last_run_replays(home: str) -> tuple[dict[str, str], dict[str, tuple[int, int, str]]]:
    """The last run's tags, and per partition of the topic asset it materialized: (from, until, replay)."""
    with dg.DagsterInstance.from_config(home) as instance:
        [run] = instance.get_runs(limit=1)
        events = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
        shown = {}
        for record in events:
            materialization = record.event_log_entry.asset_materialization
            assert materialization is not None
            if materialization.asset_key == dg.AssetKey(["cohort", "orders_ingest", TOPIC]):
                meta = materialization.metadata
                shown[str(materialization.partition)] = (
                    int(meta["cohort/from_offset"].value),
                    int(meta["cohort/until_offset"].value),
                    str(meta["cohort/replay"].value),
                )
        return dict(run.tags), shown


def _landed(lake: Path) -> Counter[tuple[int, int]]:
    """(partition, offset) of every row of the sink and the quarantine."""
    found: Counter[tuple[int, int]] = Counter()
    for root in (lake, lake / "_quarantine"):
        kafka = ds.dataset(root, format="parquet", partitioning="hive").to_table(columns=["kafka"]).column("kafka")
        rows = kafka.combine_chunks()
        found.update(zip(rows.field("partition").to_pylist(), rows.field("offset").to_pylist(), strict=True))
    return found


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.timeout(1800)
def test_the_documented_replays_read_the_chosen_partitions_again(tmp_path: Path) -> None:
    from cohort.devtools.embedded_broker import EmbeddedBroker

    guide, blocks = titled_blocks("user-guide.md"), titled_blocks("replay.md")
    project = _project(tmp_path)
    every_offset = Counter((p, o) for p in (0, 1) for o in range(10))
    with EmbeddedBroker() as broker:
        env = _environment(broker.bootstrap_servers, tmp_path)
        _run(guide["produce"], project, env)
        _run(guide["run slot 1"], project, env)
        assert _ledger(project) == {p: [("commit", 0, 10)] for p in (0, 1)}

        _run(blocks[ONE], project, env)
        assert _ledger(project) == {
            0: [("commit", 0, 10)],
            1: [("commit", 0, 10), ("reset", 10, 4), ("commit", 4, 10)],
        }
        tags, shown = _last_run_replays(env["DAGSTER_HOME"])
        assert tags[REPLAY_TAG] == "offset 4" and tags["dagster/partition"] == "1"  # the run names its start
        assert shown == {"1": (4, 10, "offset 4")}
        assert _landed(Path(env["COHORT_SINK"])) == every_offset

        _run(blocks[RANGE], project, env)
        again = [("reset", 10, 0), ("commit", 0, 10)]
        assert _ledger(project) == {
            0: [("commit", 0, 10), *again],
            1: [("commit", 0, 10), ("reset", 10, 4), ("commit", 4, 10), *again],
        }
        tags, shown = _last_run_replays(env["DAGSTER_HOME"])
        assert tags[REPLAY_TAG] == "earliest"
        assert shown == {"0": (0, 10, "earliest"), "1": (0, 10, "earliest")}
        assert _landed(Path(env["COHORT_SINK"])) == every_offset
