"""docs/user-guide.md, "With dg", run as written: a dg project lands the guide's topic from a YAML group.

The section's titled blocks run unchanged with bash against the session's embedded broker: `create-dagster`
makes the project, `dg scaffold defs` writes the group's defs.yaml (checked as scaffolded), the guide's
defs.yaml and model replace it, `dg check defs` passes, the guide's sample orders are produced, `dg launch`
runs a batch of the whole group (by job, then by assets), and `dg dev` (started here on a free port, the
guide's command plus `--port`) serves the project's assets and per-group sensors. What the blocks leave out is
done here as the guide says: Cohort is installed in the project's `.venv` (tests/dagster/dg_support.py,
without downloads) and `.env` holds the store, the sink and the test's broker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from cohort.devtools.embedded_broker import EmbeddedBroker, free_port
from tests.dagster.dg_support import activated, install_cohort
from tests.support.doc_blocks import titled_blocks
from tests.support.polling import poll
from tests.support.processes import kill, marked

PROJECT = "orders_dg"
DEFS_YAML = "src/orders_dg/defs/orders_ingest/defs.yaml"
MODELS = "src/orders_dg/models.py"
COMMANDS = (
    "dg: create the project",
    "dg: scaffold the group",
    "dg: check",
    "dg: launch a batch",
    "dg: launch the assets",
)
MARK = "COHORT_DG_GUIDE_TEST"
"""Marks the processes this test starts (dg dev's webserver, daemon and code server), to stop what is left."""


def _run(command: str, cwd: Path, env: dict[str, str], *, timeout_s: float) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, (
        f"`{command.strip()}` exited {done.returncode}\n--- stdout\n{done.stdout[-4000:]}\n"
        f"--- stderr\n{done.stderr[-8000:]}"
    )
    return done.stdout


def test_the_section_has_every_block_this_test_runs() -> None:
    blocks = titled_blocks("user-guide.md")
    missing = [t for t in (*COMMANDS, DEFS_YAML, MODELS, "produce_sample.py", "produce") if t not in blocks]
    assert not missing, f"docs/user-guide.md lost the blocks {missing}"


def _landed(lake: Path) -> tuple[list[int], list[bytes]]:
    sink = ds.dataset(lake, format="parquet", partitioning="hive").to_table()
    quarantine = ds.dataset(lake / "_quarantine", format="parquet", partitioning="hive").to_table().to_pylist()
    return sorted(sink.column("order_id").to_pylist()), sorted(row["kafka"]["key"] for row in quarantine)


def _served(url: str) -> dict[str, Any] | None:
    """The project's repository as dg dev's webserver shows it, once its code location has loaded."""
    query = (
        "{ repositoriesOrError { ... on RepositoryConnection { nodes { name "
        "sensors { name } schedules { name } assetNodes { assetKey { path } } } } } }"
    )
    request = urllib.request.Request(
        f"{url}/graphql", data=json.dumps({"query": query}).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            nodes = json.loads(answer.read())["data"]["repositoriesOrError"].get("nodes") or []
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return nodes[0] if nodes and nodes[0]["assetNodes"] else None


@pytest.mark.timeout(1500)
def test_the_dg_walkthrough_lands_its_topic(tmp_path: Path) -> None:
    """On a broker of its own: the guide's `orders` topic is the Python walkthrough's too (tests/docs/test_user_guide.py
    runs it on the session's broker), and each expects to find only its own 20 records there."""
    with EmbeddedBroker() as broker:
        _walkthrough(broker, tmp_path)


def _walkthrough(broker: Any, tmp_path: Path) -> None:
    blocks = titled_blocks("user-guide.md")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COHORT_", "DAGSTER_"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",  # create-dagster
        PYTHONWARNINGS="ignore",  # dg warns that its version differs from Dagster's by a patch release
        COHORT_BOOTSTRAP_SERVERS=broker.bootstrap_servers,  # produce_sample.py reads it
        **{MARK: uuid.uuid4().hex},
    )
    _run(blocks["dg: create the project"], tmp_path, env, timeout_s=300)
    project = tmp_path / PROJECT
    env = activated(install_cohort(project), env)
    env["PYSPARK_PYTHON"] = str(project / ".venv" / "bin" / "python")
    lake = project / "lake"
    (project / ".env").write_text(
        f"COHORT_STORE_URL=sqlite:///{project / 'cohort.db'}\nCOHORT_SINK={lake}\n"
        f"COHORT_BOOTSTRAP_SERVERS={broker.bootstrap_servers}\n",
        encoding="utf-8",
    )

    _run(blocks["dg: scaffold the group"], project, env, timeout_s=300)
    assert "# worker_slots: 3" in (project / DEFS_YAML).read_text(encoding="utf-8")
    _run(blocks["dg: check"], project, env, timeout_s=300)  # the scaffold loads as written

    (project / DEFS_YAML).write_text(blocks[DEFS_YAML], encoding="utf-8")
    (project / MODELS).write_text(blocks[MODELS], encoding="utf-8")
    (project / "produce_sample.py").write_text(blocks["produce_sample.py"], encoding="utf-8")
    assert "All definitions loaded successfully." in _run(blocks["dg: check"], project, env, timeout_s=300)
    assert "20 records produced" in _run(blocks["produce"], project, env, timeout_s=120)

    _run(blocks["dg: launch a batch"], project, env, timeout_s=900)
    orders, quarantined = _landed(lake)
    assert orders == list(range(1, 19)) and quarantined == [b"19", b"20"]
    env["DAGSTER_HOME"] = str(project / ".dagster")  # as the launch block exported it
    _run(blocks["dg: launch the assets"], project, env, timeout_s=900)
    assert _landed(lake) == (orders, quarantined)  # a second batch finds nothing new: nothing twice

    port = free_port()
    server = subprocess.Popen(
        ["bash", "-c", f"exec dg dev --port {port}"],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        served = poll(lambda: _served(f"http://127.0.0.1:{port}"), timeout_s=300, what="dg dev's project")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        finally:
            kill(marked(MARK, env[MARK]))
    assert {"/".join(node["assetKey"]["path"]) for node in served["assetNodes"]} == {
        "cohort/orders_ingest/orders",
        "cohort/orders_ingest/orders_landed",
    }
    assert {s["name"] for s in served["sensors"]} == {
        "cohort_membership_sensor__orders_ingest",
        "cohort_topic_sensor__orders_ingest",
    }
    assert {s["name"] for s in served["schedules"]} >= {"cohort_batches__orders_ingest"}
