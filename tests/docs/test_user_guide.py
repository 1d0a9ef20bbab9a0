"""docs/user-guide.md, run as written: its titled code blocks land a JSON topic end to end.

The guide's blocks carry a title in their info string (```python title="definitions.py"```). The files
(`produce_sample.py`, `definitions.py`, `slot1.yaml`) are written into a fresh project directory unchanged,
and the commands ("produce", "run slot 1", "check offsets") run there with bash, unchanged, against the
session's embedded broker. The guide reads where things live from the environment, as a user would export
it: `COHORT_BOOTSTRAP_SERVERS` (the broker), `COHORT_SINK` (a temporary lake) and `DAGSTER_HOME`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "user-guide.md"
BLOCK = re.compile(r'^```(?P<lang>\w+) title="(?P<title>[^"]+)"\n(?P<body>.*?)^```$', re.MULTILINE | re.DOTALL)

FILES = ("produce_sample.py", "definitions.py", "slot1.yaml")
COMMANDS = ("produce", "run slot 1", "check offsets")
GROUP = "orders-ingest"
TOPIC = "orders"
NAMES = {
    "job": ["cohort_worker__orders_ingest", "cohort_checks__orders_ingest"],
    "schedule": ["cohort_batches__orders_ingest"],
    "sensor": ["cohort_membership_sensor", "cohort_topic_sensor"],
    "asset": ["cohort/orders_ingest/orders"],
}
"""Names the guide tells the reader to look for; each must exist in the guide's Definitions."""


def guide_blocks() -> dict[str, str]:
    """title -> body of every titled code block of the guide."""
    blocks: dict[str, str] = {}
    for match in BLOCK.finditer(GUIDE.read_text(encoding="utf-8")):
        title = match["title"]
        assert title not in blocks, f"two blocks of docs/user-guide.md are titled {title!r}"
        blocks[title] = match["body"]
    return blocks


def test_the_guide_has_every_block_this_test_runs() -> None:
    blocks = guide_blocks()
    missing = [t for t in (*FILES, *COMMANDS, "production resources") if t not in blocks]
    assert not missing, f"docs/user-guide.md lost the blocks {missing}"
    text = GUIDE.read_text(encoding="utf-8")
    for names in NAMES.values():
        for name in names:
            assert name in text, name


def test_the_production_resources_block_builds_its_resources() -> None:
    """The real-infrastructure block builds (its secrets are `dg.EnvVar`s, resolved only when a run starts)."""
    namespace: dict[str, Any] = {}
    exec(compile(guide_blocks()["production resources"], "production resources", "exec"), namespace)
    assert namespace["orders"].group == GROUP
    assert namespace["orders"].progress_timeout_s == 900
    assert namespace["kafka"].security_protocol == "SASL_SSL"
    assert "KAFKA_PASSWORD" not in repr(namespace["kafka"])
    assert namespace["spark"].master.startswith("spark://")


def _environment(broker: Any, tmp_path: Path) -> dict[str, str]:
    """What a user of the guide would have exported, pointed at the test's broker and a temporary lake."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COHORT_", "DAGSTER_"))}
    home = tmp_path / "dagster-home"
    home.mkdir()
    env.update(
        {
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",  # the venv's commands
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "COHORT_BOOTSTRAP_SERVERS": broker.bootstrap_servers,
            "COHORT_SINK": str(tmp_path / "lake"),
            "DAGSTER_HOME": str(home),
        }
    )
    return env


def _run(command: str, project: Path, env: dict[str, str], *, timeout_s: float) -> str:
    """Run a guide command with bash in the project directory; fail with its output if it fails."""
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, (
        f"`{command.strip()}` exited {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n"
        f"--- stderr\n{done.stderr[-8000:]}"
    )
    return done.stdout


def _definitions(project: Path, env: dict[str, str]) -> dict[str, list[str]]:
    """The names the guide's Definitions hold, loaded in a fresh interpreter in the project directory."""
    script = (
        "import json, runpy\n"
        "defs = runpy.run_path('definitions.py')['defs']\n"
        "print(json.dumps({\n"
        "    'job': [j.name for j in defs.resolve_all_job_defs()],\n"
        "    'schedule': [s.name for s in defs.schedules or ()],\n"
        "    'sensor': [s.name for s in defs.sensors or ()],\n"
        "    'asset': [s.key.to_user_string() for s in defs.resolve_all_asset_specs()],\n"
        "}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-8000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(900)
def test_the_guide_lands_its_topic(broker: Any, tmp_path: Path) -> None:
    blocks = guide_blocks()
    project = tmp_path / "project"
    project.mkdir()
    for name in FILES:
        (project / name).write_text(blocks[name], encoding="utf-8")
    env = _environment(broker, tmp_path)

    defined = _definitions(project, env)
    for kind, names in NAMES.items():
        assert set(names) <= set(defined[kind]), (kind, names, defined[kind])

    assert "20 records produced" in _run(blocks["produce"], project, env, timeout_s=120)
    _run(blocks["run slot 1"], project, env, timeout_s=600)

    # the 18 good orders are in the sink, once each; the 2 bad records are in the quarantine with a reason
    lake = Path(env["COHORT_SINK"])
    sink = ds.dataset(lake, format="parquet", partitioning="hive").to_table()
    assert sorted(sink.column("order_id").to_pylist()) == list(range(1, 19))
    assert set(sink.column("topic").to_pylist()) == {TOPIC}
    quarantine = ds.dataset(lake / "_quarantine", format="parquet", partitioning="hive").to_table().to_pylist()
    reasons = {row["kafka"]["key"]: row["reason"] for row in quarantine}
    assert sorted(reasons) == [b"19", b"20"]
    assert "not valid JSON" in reasons[b"19"]
    assert reasons[b"20"].startswith("amount:")

    # the ledger's committed offsets reached each partition's end, as the guide's command shows them
    shown = _run(blocks["check offsets"], project, env, timeout_s=120)
    assert TOPIC in shown and GROUP in shown
    described = json.loads(_run(blocks["check offsets"].strip() + " --json", project, env, timeout_s=120))
    partitions = {row["partition"]: row for row in described["partitions"] if row["topic"] == TOPIC}
    assert sorted(partitions) == [0, 1]
    for row in partitions.values():
        assert row["current_offset"] == row["log_end_offset"] and row["lag"] == 0, row
    assert sum(row["current_offset"] for row in partitions.values()) == 20

    # and they were mirrored to Kafka under the group id
    from cohort.common.types import TopicPartition
    from cohort.pipelines.kafka.mirror import kafka_committed

    mirrored = kafka_committed(
        {"bootstrap.servers": broker.bootstrap_servers}, GROUP, [TopicPartition(TOPIC, p) for p in (0, 1)]
    )
    assert {tp.partition: offset for tp, (offset, _run_id) in mirrored.items()} == {
        p: row["current_offset"] for p, row in partitions.items()
    }
