"""The Dagster UI shows the audit trail: `dagster dev` (as `make ui` starts it) on the demo Definitions,
opened in headless Chromium on the asset's partitions page. The screenshot is kept in artifacts/."""

import shutil

import dagster as dg
import pytest

from cohort.assets.translator import DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.demo.definitions import DEMO_GROUP, DEMO_TOPIC, demo_config, demo_definitions
from cohort.devtools.embedded_broker import free_port
from cohort.devtools.topics import create_topic, partition_counts
from cohort.devtools.ui import serve_ui, ui_environment
from tests.dagster.browser import chromium_binary, headless_chromium
from tests.dagster.support import ROOT

T = DagsterCohortTranslator()
ARTIFACTS = ROOT / "artifacts"


def test_partitions_page_shows_materialized_partitions_and_offsets(
    kafka_config, produce_records, spark, tmp_path, monkeypatch
):
    if chromium_binary() is None:
        pytest.fail("chromium is not installed: run `make system-deps` (Debian's chromium)")
    if DEMO_TOPIC not in partition_counts(kafka_config, [DEMO_TOPIC]):
        create_topic(kafka_config, DEMO_TOPIC, 3)
    events = [
        (i % 3, None, f'{{"event_id": {i}, "user": "u{i}", "kind": "view", "amount": 2.5}}'.encode()) for i in range(12)
    ]
    produce_records(DEMO_TOPIC, events)
    env = ui_environment(kafka_config["bootstrap.servers"], tmp_path)
    (tmp_path / "dagster").mkdir()
    defs = demo_definitions(env["COHORT_BOOTSTRAP_SERVERS"], store_url=env["COHORT_STORE_URL"], sink=env["COHORT_SINK"])
    job = defs.resolve_job_def(T.get_job_name(DEMO_GROUP))
    with dg.DagsterInstance.local_temp(tempdir=env["DAGSTER_HOME"]) as instance:
        result = job.execute_in_process(run_config=worker_run_config(demo_config(), 1), instance=instance)
        assert result.success
        assert instance.get_materialized_partitions(T.get_asset_key(DEMO_GROUP, DEMO_TOPIC)) == {"0", "1", "2"}

    with serve_ui(kafka_config["bootstrap.servers"], tmp_path, port=free_port()) as url, headless_chromium() as page:
        page.goto(f"{url}/assets/cohort/demo_ingest/demo_events?view=partitions")
        page.wait_for_text("Materialized (3)", timeout_s=90)
        page.wait_for_text("Join the Dagster community", timeout_s=60)  # a fresh browser profile gets it
        assert page.click_text("Skip"), "the community dialog has no Skip button"
        page.wait_until(lambda text: "Join the Dagster community" not in text, "the dialog to close")
        assert page.click_text("1"), "partition 1 is not listed"
        text = page.wait_for_text("cohort/until_offset", timeout_s=60)
        ARTIFACTS.mkdir(exist_ok=True)
        shot = tmp_path / "dagster-ui-partitions.png"
        page.screenshot(shot)
        shutil.copy(shot, ARTIFACTS / shot.name)

    assert "Join the Dagster community" not in text
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    metadata = {lines[i]: lines[i + 1] for i in range(len(lines) - 1) if lines[i].startswith("cohort/")}
    assert metadata["cohort/partition"] == "1"
    assert (metadata["cohort/from_offset"], metadata["cohort/until_offset"], metadata["cohort/records"]) == (
        "0",
        "4",
        "4",
    )
    assert metadata["cohort/instance_id"] == f"{DEMO_GROUP}/worker-1"
    assert metadata["cohort/run_id"] == result.run_id
    assert shot.stat().st_size > 10_000
