"""docs/airflow.md's `cohort_dag` settings and its Airflow deployment settings, checked against the code.

- The table of `cohort_dag`'s arguments lists every keyword argument with the default the code has, and a DAG
  built with those defaults has what the page says (its id, one run at a time, no catch-up, retries).
- The page's "airflow settings" block, evaluated by bash, sets exactly what the end-to-end harness
  (tests/airflow/processes.py and tests/airflow/support.py) sets for those names, the harness's free port
  written 8088; every `AIRFLOW__<SECTION>__<KEY>` is an option of the installed Airflow's configuration,
  whose reference also says what the page says of the defaults (LocalExecutor, the api-server on 8080, the
  execution API at `http://localhost:8080/execution/` when nothing else is set).

Airflow is imported in a subprocess with a temporary AIRFLOW_HOME: importing it writes into its home.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.airflow.processes import AirflowProcesses
from tests.airflow.support import AirflowHome
from tests.support.doc_blocks import DOCS, titled_blocks

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"^\| `(?P<name>\w+)` \| `(?P<default>[^`]+)` \|", re.MULTILINE)
DOC_PORT = "8088"

PROBE = r"""
import inspect, json, sys
from datetime import UTC, datetime, timedelta

from airflow.configuration import conf
from cohort.airflow import AirflowGroup, cohort_dag
from cohort.assignment.worker_group import WorkerGroup
from cohort.pipelines.spec import PipelineSpec

documented = json.loads(sys.argv[1])
names = json.loads(sys.argv[2])
keyword = [p for p in inspect.signature(cohort_dag).parameters.values() if p.kind is p.KEYWORD_ONLY]
names_in_scope = {"UTC": UTC, "datetime": datetime, "timedelta": timedelta}
values = {name: eval(text, names_in_scope) for name, text in documented.items()}
wrong = {p.name: repr(p.default) for p in keyword if p.name not in values or values[p.name] != p.default}
group = WorkerGroup("orders-eu.1", topics=("orders",))
dag = cohort_dag(AirflowGroup(group, PipelineSpec(sink_path="/tmp/lake", value_format="utf8")))
options = conf.configuration_description
print("RESULT " + json.dumps({
    "keywords": [p.name for p in keyword],
    "wrong_defaults": wrong,
    "dag": {
        "dag_id": dag.dag_id,
        "max_active_runs": dag.max_active_runs,
        "catchup": dag.catchup,
        "tags": sorted(dag.tags),
        "retries": dag.default_args["retries"] == values["retries"],
        "retry_delay": dag.default_args["retry_delay"] == values["retry_delay"],
        "start_date": dag.start_date == values["start_date"],
    },
    "unknown_options": [
        n for n in names
        if n.lower().split("__")[2] not in options.get(n.lower().split("__")[1], {}).get("options", {})
    ],
    "executor": options["core"]["options"]["executor"]["default"],
    "api_port": options["api"]["options"]["port"]["default"],
    "execution_url": options["core"]["options"]["execution_api_server_url"]["description"],
}))
"""


def _documented_defaults() -> dict[str, str]:
    """argument -> its default as the table of the page's `cohort_dag` section writes it."""
    text = (DOCS / "airflow.md").read_text(encoding="utf-8")
    section = text.split("## `cohort_dag`'s settings", 1)[1].split("\n## ", 1)[0]
    return {m["name"]: m["default"] for m in ROW.finditer(section)}


def _documented_settings(cwd: Path) -> dict[str, str]:
    """What the page's "airflow settings" block exports, as bash evaluates it in `cwd`."""
    block = titled_blocks("airflow.md")["airflow settings"]
    names = re.findall(r"^export (\w+)=", block, re.MULTILINE)
    script = block + "\n" + "".join(f'printf "%s\\0" "{name}=${{{name}}}"\n' for name in names)
    done = subprocess.run(["bash", "-euc", script], cwd=cwd, capture_output=True, text=True, env={}, timeout=30)
    assert done.returncode == 0, done.stderr
    return dict(item.split("=", 1) for item in done.stdout.split("\0") if item)


def _probe(defaults: dict[str, str], names: list[str], home: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(home), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(defaults), json.dumps(names)],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-6000:]
    return dict(json.loads(lines[-1][len("RESULT ") :]))


def test_the_page_states_the_code_and_the_harness_settings(tmp_path: Path) -> None:
    defaults = _documented_defaults()
    settings = _documented_settings(tmp_path)
    options = [name for name in settings if name.startswith("AIRFLOW__")]
    assert "AIRFLOW__CORE__EXECUTION_API_SERVER_URL" in options and "AIRFLOW__API__PORT" in options

    home = tmp_path / "airflow-probe"
    home.mkdir()
    found = _probe(defaults, options, home)

    # the table: every keyword argument, each with the code's default; a DAG built with them
    assert sorted(defaults) == sorted(found["keywords"]), (sorted(defaults), found["keywords"])
    assert found["wrong_defaults"] == {}, f"docs/airflow.md states other defaults than the code's: {found}"
    assert found["dag"] == {
        "dag_id": "cohort__orders_eu_1",
        "max_active_runs": 1,
        "catchup": False,
        "tags": ["cohort"],
        "retries": True,
        "retry_delay": True,
        "start_date": True,
    }

    # the settings: the harness's, on the page's port; names Airflow knows; what the page says of the defaults
    harness_home = AirflowHome(tmp_path / "airflow", {})
    harness = AirflowProcesses(harness_home)
    harness_settings = {**harness_home.env(), **harness.settings}
    on_doc_port = {k: v.replace(f":{harness.port}", f":{DOC_PORT}") for k, v in harness_settings.items()}
    on_doc_port = {k: (DOC_PORT if v == str(harness.port) else v) for k, v in on_doc_port.items()}
    differ = {k: (v, on_doc_port.get(k)) for k, v in settings.items() if on_doc_port.get(k) != v}
    assert not differ, f"docs/airflow.md's settings differ from the harness's (page, harness): {differ}"
    assert found["unknown_options"] == [], found["unknown_options"]
    assert (found["executor"], found["api_port"]) == ("LocalExecutor", "8080")
    assert "http://localhost:8080" in found["execution_url"] and "/execution/" in found["execution_url"]
