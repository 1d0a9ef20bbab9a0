"""Cohort as an Airflow provider, and a group read from a dg project's defs.yaml (docs/airflow.md).

`airflow providers list` (this environment's airflow, in a fresh AIRFLOW_HOME) shows the package `cohort` with
its description, and `airflow providers triggers` its trigger. The DAG file of docs/airflow.md that reads the
user guide's defs.yaml builds the same group settings and pipeline as the dg component loading that file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from dagster.components.testing import create_defs_folder_sandbox

from tests.support.doc_blocks import titled_blocks

DEFS_YAML = "src/orders_dg/defs/orders_ingest/defs.yaml"
MODELS = "src/orders_dg/models.py"


def _airflow(home: Path, *args: str) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTEST", "COHORT_"))}
    env.update(AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    done = subprocess.run(
        [str(Path(sys.executable).parent / "airflow"), "providers", *args, "--output", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)


def test_airflow_lists_cohort_as_a_provider_with_its_trigger(tmp_path: Path) -> None:
    listed = {row["package_name"]: row for row in _airflow(tmp_path, "list")}
    assert "cohort" in listed, sorted(listed)
    assert "connection (type kafka" in listed["cohort"]["description"]
    assert "store URL in an environment variable" in listed["cohort"]["description"]
    triggers = [row for row in _airflow(tmp_path, "triggers") if row["package_name"] == "cohort"]
    assert [row["class"] for row in triggers] == ["cohort.airflow.trigger"]


def test_the_dag_file_reads_the_group_the_dg_component_reads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    guide, airflow_doc = titled_blocks("user-guide.md"), titled_blocks("airflow.md")
    monkeypatch.setenv("COHORT_STORE_URL", f"sqlite:///{tmp_path / 'cohort.db'}")
    monkeypatch.setenv("COHORT_SINK", str(tmp_path / "lake"))
    monkeypatch.setenv("COHORT_BOOTSTRAP_SERVERS", "localhost:19092")
    with create_defs_folder_sandbox(project_name="orders_dg") as box:
        (box.defs_folder_path.parent / "models.py").write_text(guide[MODELS], encoding="utf-8")
        defs_yaml = box.defs_folder_path / "orders_ingest" / "defs.yaml"
        defs_yaml.parent.mkdir()
        defs_yaml.write_text(guide[DEFS_YAML], encoding="utf-8")
        with box.load_component_and_build_defs(defs_yaml.parent) as (component, _defs):
            namespace: dict[str, Any] = {}
            source = airflow_doc["dags/orders_from_yaml.py"].replace(
                "/srv/orders_dg/src/orders_dg/defs/orders_ingest/defs.yaml", str(defs_yaml)
            )
            assert str(defs_yaml) in source
            exec(compile(source, "dags/orders_from_yaml.py", "exec"), namespace)
    dag = namespace["dag"]
    assert dag.dag_id == "cohort__orders_ingest"
    assert [task.task_id for task in dag.tasks] == ["slots", "run_slot"]
    group = namespace["group_from_settings"](namespace["attributes"])
    dagster_group = component.config.group_resource
    assert group.store_url_env == "COHORT_STORE_URL"
    assert group.group.store_url != os.environ["COHORT_STORE_URL"]  # read where the tasks run, not parsed in
    for field in dataclasses.fields(group.group):
        if field.name != "store_url":
            ours, dagsters = getattr(group.group, field.name), getattr(dagster_group, field.name)
            assert ours == (tuple(dagsters) if isinstance(dagsters, list) else dagsters), field.name
    assert group.pipeline == component.config.pipeline
    assert group.spark_master == "local[2]"
