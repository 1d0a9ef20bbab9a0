"""An Airflow 3 home for a test: SQLite metadata database, the example DAG, the Kafka connection from the
environment, and readers of what Airflow recorded (runs, task instances, asset events)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "airflow.md"
BLOCK = re.compile(r'^```python title="(?P<title>[^"]+)"\n(?P<body>.*?)^```$', re.MULTILINE | re.DOTALL)
DAG_FILE = "orders.py"
"""The DAG file of docs/airflow.md (its block titled dags/orders.py), written unchanged into a home's dags."""


def guide_dag() -> str:
    """The DAG file docs/airflow.md shows."""
    blocks = {m["title"]: m["body"] for m in BLOCK.finditer(GUIDE.read_text(encoding="utf-8"))}
    assert f"dags/{DAG_FILE}" in blocks, "docs/airflow.md lost its DAG file block"
    return blocks[f"dags/{DAG_FILE}"]


@dataclass(frozen=True)
class AirflowHome:
    """A temporary AIRFLOW_HOME with a DAG file in its dags folder."""

    root: Path
    settings: Mapping[str, str]

    @property
    def database(self) -> Path:
        return self.root / "airflow.db"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of every Airflow process of this home (and of the tasks it runs)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTEST", "COHORT_"))}
        env.update(
            AIRFLOW_HOME=str(self.root),
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            AIRFLOW__CORE__DAGS_FOLDER=str(self.root / "dags"),
            AIRFLOW__CORE__PARALLELISM="4",
            AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
            PYSPARK_PYTHON=sys.executable,
            PYTHONPATH=str(ROOT),
        )
        env.update(self.settings)
        env.update(extra)
        return env

    def run(self, *args: str, timeout_s: float = 300, **extra: str) -> subprocess.CompletedProcess[str]:
        """`python <args>` in this home's environment, its output captured."""
        return subprocess.run(
            [sys.executable, *args], env=self.env(**extra), cwd=ROOT, capture_output=True, text=True, timeout=timeout_s
        )

    def asset_events(self) -> list[dict[str, Any]]:
        """Every asset event: its asset's URI, extra, source task and map index, oldest first."""
        with sqlite3.connect(self.database) as db:
            rows = db.execute(
                "select a.uri, e.extra, e.source_task_id, e.source_map_index, e.source_run_id from asset_event e "
                "join asset a on a.id = e.asset_id order by e.id"
            ).fetchall()
        return [
            {"uri": uri, "extra": json.loads(extra or "{}"), "task": task, "map_index": index, "run": run}
            for uri, extra, task, index, run in rows
        ]

    def task_tries(self, dag_id: str) -> list[tuple[str, int, int, str]]:
        """(task, map index, try, state) of every finished try of the DAG's tasks (history and current)."""
        with sqlite3.connect(self.database) as db:
            current = db.execute(
                "select task_id, map_index, try_number, state from task_instance where dag_id = ?", (dag_id,)
            ).fetchall()
            history = db.execute(
                "select task_id, map_index, try_number, state from task_instance_history where dag_id = ?", (dag_id,)
            ).fetchall()
        return sorted({*current, *history})


def make_home(root: Path, settings: Mapping[str, str], dag_source: str | None = None) -> AirflowHome:
    """A migrated Airflow home in `root` whose dags folder holds `dag_source` (default: docs/airflow.md's DAG)."""
    (root / "dags").mkdir(parents=True)
    (root / "dags" / DAG_FILE).write_text(dag_source if dag_source is not None else guide_dag())
    home = AirflowHome(root, dict(settings))
    migrated = subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        env=home.env(),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert migrated.returncode == 0, migrated.stdout[-3000:] + migrated.stderr[-3000:]
    return home


DAG_TEST = """
import json, sys
from airflow.dag_processing.dagbag import DagBag

bag = DagBag(dag_folder=sys.argv[1])
assert not bag.import_errors, bag.import_errors
dag = bag.get_dag(sys.argv[2])
run = dag.test()
print("RESULT " + json.dumps({"state": str(run.state), "run_id": run.run_id}))
"""


def dag_test(home: AirflowHome, dag_id: str) -> dict[str, Any]:
    """Run the DAG once in-process (`dag.test()`, no scheduler or API server); its run's state and id."""
    done = home.run("-c", DAG_TEST, str(home.root / "dags" / DAG_FILE), dag_id, timeout_s=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stdout[-4000:] + done.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT ") :])
