"""The Dagster face, clicked through like a user: `dagster dev` (as `make ui` starts it, on a fresh instance)
on the demo Definitions, in headless Chromium.

On the topic asset's page: Materialize, All partitions, Launch backfill (one run: the group's batch of every
worker slot) and, while it runs, the asset's automations (worker job, schedule, both sensors). Then, following
the lineage links: the landed-data asset's row count and sink location; the demo's downstream
`events_by_kind`, materialized by declarative automation, its aggregate equal to what landed; back upstream
to the topic asset's checks, green after the batch, and one executed again from its Execute button. Then a
replay: Materialize, All, a `cohort/replay_from` tag added to the backfill's runs, Launch backfill; every
partition is read again and the sink holds each offset once. Over the whole session every sensor ticked
several times and no tick failed. The screenshots are kept in artifacts/ (dagster-ui-NN-<page>.png).
"""

import json
import time
from pathlib import Path

import dagster as dg
import pyarrow.dataset as ds
import pytest

from cohort.assets.replay import REPLAY_TAG
from cohort.assets.translator import CHECK_CONTIGUOUS, CHECK_LAG, DagsterCohortTranslator, safe_name
from cohort.demo.definitions import DEMO_AUTOMATION_SENSOR, DEMO_GROUP, DEMO_TOPIC, demo_config
from cohort.devtools.embedded_broker import free_port
from cohort.devtools.topics import create_topic, partition_counts
from cohort.devtools.ui import sample_event, serve_ui, ui_environment
from tests.support.browser import chromium_binary, headless_chromium
from tests.support.dagster_ui import (
    Screenshots,
    check_executions,
    check_passed,
    failed_ticks,
    launch_backfill_of_all,
    metadata_value,
    poll,
    sensor_ticks,
    skip_community_dialog,
    wait_for_success,
)

T = DagsterCohortTranslator()
TOPIC_ASSET = T.get_asset_key(DEMO_GROUP, DEMO_TOPIC)
LANDED_ASSET = T.get_landed_asset_key(DEMO_GROUP, DEMO_TOPIC)
DERIVED_ASSET = dg.AssetKey(["cohort", "demo_ingest", "events_by_kind"])
SENSORS = ("cohort_membership_sensor", "cohort_topic_sensor", DEMO_AUTOMATION_SENSOR)
MIN_TICKS = 3


def _path(key: dg.AssetKey) -> str:
    return "/assets/" + "/".join(key.path)


def _sink_offsets(sink: Path) -> list[tuple[int, int]]:
    """(partition, offset) of every row in the sink, sorted (duplicates kept)."""
    table = ds.dataset(str(sink), format="parquet", partitioning="hive").to_table(columns=["kafka"])
    return sorted((k["partition"], k["offset"]) for k in table.column("kafka").to_pylist())


@pytest.mark.timeout(600)  # about 150 s on a quiet machine; a loaded one has taken over 300
@pytest.mark.slow
@pytest.mark.dagster_processes
@pytest.mark.browser
@pytest.mark.embedded_broker  # the demo's definitions on the demo's broker, as `make ui` runs them
def test_materialize_checks_automation_and_sensors_in_the_dagster_ui(kafka_config, produce_records, tmp_path: Path):
    if chromium_binary() is None:
        pytest.fail("chromium is not installed: run `make system-deps` (Debian's chromium)")
    started = time.monotonic()
    if DEMO_TOPIC not in partition_counts(kafka_config, [DEMO_TOPIC]):
        create_topic(kafka_config, DEMO_TOPIC, 3)
    partitions = partition_counts(kafka_config, [DEMO_TOPIC])[DEMO_TOPIC]
    produce_records(DEMO_TOPIC, [(i % partitions, None, sample_event(i)) for i in range(10 * partitions)])
    keys = {str(p) for p in range(partitions)}
    env = ui_environment(kafka_config["bootstrap.servers"], tmp_path)
    shots = Screenshots(tmp_path)

    with (
        serve_ui(kafka_config["bootstrap.servers"], tmp_path, port=free_port()) as url,
        dg.DagsterInstance.local_temp(tempdir=env["DAGSTER_HOME"]) as instance,
        headless_chromium() as page,
    ):
        # The topic sensor's first tick registers the Kafka partitions as the group's partition keys.
        partition_set = T.get_partitions_def_name(DEMO_GROUP)
        poll(
            lambda: set(instance.get_dynamic_partitions(partition_set)) >= keys,
            timeout_s=60,
            what=f"the topic sensor to register partitions {sorted(keys)}",
        )

        # The topic asset's page: Materialize -> All -> Launch backfill.
        page.goto(url + _path(TOPIC_ASSET))
        page.wait_for_text("Automation details", timeout_s=90)
        skip_community_dialog(page)
        launch_backfill_of_all(page, shots, partitions, "materialize-dialog")
        backfill = poll(instance.get_backfills, timeout_s=30, what="the backfill Materialize launched")
        assert len(backfill) == 1, backfill

        # While the batch runs: the asset's automations (Automation details: job, sensors, schedule).
        text = page.wait_for_text("2 sensors")
        assert T.get_job_name(DEMO_GROUP) in text
        schedule = f"/schedules/cohort_batches__{safe_name(DEMO_GROUP)}"
        assert any(link.endswith(schedule) for link in page.links()), f"no link to {schedule}: {page.links()}"
        page.click("2 sensors")
        text = page.wait_for_text("Sensor name")
        for sensor in ("cohort_membership_sensor", "cohort_topic_sensor"):
            assert sensor in text and any(link.endswith(f"/sensors/{sensor}") for link in page.links()), sensor
        shots.take(page, "topic-asset-automations")
        page.click("OK", selector="button")

        # One run for the whole selection, hosting every worker slot; it succeeds.
        batch_runs = wait_for_success(
            instance,
            lambda: instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": backfill[0].backfill_id})),
            timeout_s=180,
        )
        assert len(batch_runs) == 1, [r.run_id for r in batch_runs]
        batch = instance.get_run_by_id(batch_runs[0].run_id)
        assert batch is not None and batch.tags.get("cohort/slot") == ",".join(
            str(s) for s in range(1, demo_config().worker_slots + 1)
        )
        assert instance.get_materialized_partitions(TOPIC_ASSET) == keys
        assert instance.get_materialized_partitions(LANDED_ASSET) == keys
        page.wait_until(lambda t: "Never materialized" not in t, "the asset page to show the batch", timeout_s=60)

        # The landed-data asset's page (the topic asset's downstream link): row count and location.
        page.click_selector(f'a[href$="{_path(LANDED_ASSET)}"]')
        page.wait_for_text("landed by group", timeout_s=60)
        text = page.wait_until(
            lambda t: "Row count" in t and "Storage" in t and "Never materialized" not in t,
            "the landed asset's latest materialization and its storage",
        )
        latest_landed = instance.get_latest_materialization_event(LANDED_ASSET)
        assert latest_landed is not None and latest_landed.asset_materialization is not None
        rows = metadata_value(latest_landed.asset_materialization.metadata["dagster/row_count"])
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        assert lines[lines.index("Row count") + 1] == str(rows), lines
        uri = metadata_value(
            T.get_landed_asset_spec(demo_config(sink=env["COHORT_SINK"]), DEMO_TOPIC).metadata["dagster/uri"]
        )
        assert lines[lines.index("Storage") + 1] == uri, lines
        shots.take(page, "landed-asset")

        # The demo's downstream asset, materialized per partition by its automation sensor (eager).
        poll(
            lambda: instance.get_materialized_partitions(DERIVED_ASSET) == keys,
            timeout_s=150,
            what="declarative automation to materialize events_by_kind for every partition",
        )
        page.click_selector(f'a[href$="{_path(DERIVED_ASSET)}"]')
        page.wait_for_text(DEMO_AUTOMATION_SENSOR, timeout_s=60)  # its Automation details: the sensor, `eager`
        text = page.wait_for_text("Row count", timeout_s=60)
        assert "eager" in text, "the automation condition is not shown"
        shots.take(page, "events-by-kind")
        for key in sorted(keys):
            landed_rows = sum(
                metadata_value(record.asset_materialization.metadata["dagster/row_count"])
                for record in instance.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=LANDED_ASSET, asset_partitions=[key]), limit=100
                ).records
                if record.asset_materialization is not None
            )
            derived = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=DERIVED_ASSET, asset_partitions=[key]), limit=1
            ).records[0]
            assert derived.asset_materialization is not None
            table = json.loads(Path(metadata_value(derived.asset_materialization.metadata["dagster/uri"])).read_text())
            assert sum(row["events"] for row in table["rows"]) == landed_rows >= 10, (key, table, landed_rows)

        # Back to the topic asset (upstream links), its checks tab: both checks green after the batch; Execute
        # one again from the page.
        page.click_selector(f'a[href$="{_path(LANDED_ASSET)}"]')
        page.wait_for_text("landed by group")
        page.click_selector(f'a[href$="{_path(TOPIC_ASSET)}"]')
        page.wait_for_text("cohort/worker_slots")
        page.click("Checks", selector="a, button, span")
        page.wait_for_text("Execute all")
        page.wait_until(lambda t: t.count("Succeeded") >= 2, "both checks to show Succeeded", timeout_s=60)
        contiguous = dg.AssetCheckKey(TOPIC_ASSET, CHECK_CONTIGUOUS)
        for name in (CHECK_CONTIGUOUS, CHECK_LAG):
            latest = check_executions(instance, dg.AssetCheckKey(TOPIC_ASSET, name))
            assert latest and check_passed(latest[0]) and latest[0].run_id == batch.run_id, (name, latest[:1])
        before = len(check_executions(instance, contiguous))
        page.click(CHECK_CONTIGUOUS)
        page.wait_for_text("Per partition, the ledger's ranges are contiguous")
        page.click("Execute", selector="button, span")
        executed = poll(
            lambda: (lambda records: records if len(records) > before and check_passed(records[0]) else None)(
                check_executions(instance, contiguous)
            ),
            timeout_s=120,
            what="the executed check's evaluation",
        )
        check_run = instance.get_run_by_id(executed[0].run_id)
        assert check_run is not None and not check_run.asset_selection, "Execute ran more than the check"
        assert check_run.asset_check_selection == {contiguous}
        page.wait_until(
            lambda t: t.count("Succeeded") >= 2 and "In Progress" not in t, "the check's new result", timeout_s=60
        )
        shots.take(page, "topic-asset-checks")

        # A replay from the UI: Materialize -> All -> Tags -> Add tags (cohort/replay_from = earliest) -> Apply
        # -> Launch backfill. Every partition is read again from offset 0 and replaces what the sink held.
        landed_before = _sink_offsets(Path(env["COHORT_SINK"]))
        page.goto(url + _path(TOPIC_ASSET))
        page.wait_for_text("Automation details", timeout_s=90)
        page.click("Materialize…")
        page.wait_for_text("Launch runs to materialize")
        page.click("All")
        page.wait_for_text(f"{partitions} partitions")
        page.click("0 tags", selector="span")  # the header of the dialog's collapsed Tags section
        page.wait_for_text("Tags will be applied to all backfill runs")
        page.click("Add tags", selector="button")
        page.wait_for_text("Add tags to run")
        page.type_into('input[placeholder="Tag Key"]', REPLAY_TAG)
        page.type_into('input[placeholder="Tag Value"]', "earliest")
        page.click("Apply", selector="button")
        page.wait_for_text(REPLAY_TAG)
        shots.take(page, "replay-backfill-dialog")
        page.click("Launch backfill", selector="button")
        replay_backfill = poll(
            lambda: [b for b in instance.get_backfills() if b.tags.get(REPLAY_TAG) == "earliest"] or None,
            timeout_s=30,
            what="the replay backfill",
        )
        [replay_run] = wait_for_success(
            instance,
            lambda: instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": replay_backfill[0].backfill_id})),
            timeout_s=180,
        )
        assert replay_run.tags.get(REPLAY_TAG) == "earliest"
        replayed = [
            e.event_log_entry.dagster_event.event_specific_data.materialization  # type: ignore[union-attr]
            for e in instance.get_records_for_run(
                replay_run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
            ).records
        ]
        shown = {m.partition: m.metadata for m in replayed if m.asset_key == TOPIC_ASSET}
        assert set(shown) == keys and all(metadata_value(m["cohort/replay"]) == "earliest" for m in shown.values())
        assert all(metadata_value(m["cohort/from_offset"]) == "0" for m in shown.values())
        landed_after = _sink_offsets(Path(env["COHORT_SINK"]))
        assert landed_after == landed_before and len(set(landed_after)) == len(landed_after)  # each offset once
        evaluations = instance.get_records_for_run(
            replay_run.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION
        ).records
        assert evaluations and all(
            r.event_log_entry.dagster_event.event_specific_data.passed  # type: ignore[union-attr]
            for r in evaluations
        )

        # Every sensor ticked several times over the session, and no tick failed.
        ticks = poll(
            lambda: (lambda found: found if all(len(found.get(s, ())) >= MIN_TICKS for s in SENSORS) else None)(
                sensor_ticks(instance)
            ),
            timeout_s=90,
            what=f"{MIN_TICKS} ticks of each of {SENSORS}",
        )
        assert not failed_ticks(ticks), "\n".join(failed_ticks(ticks))
        page.click("Automation", selector="a")
        text = page.wait_for_text(DEMO_AUTOMATION_SENSOR)
        page.wait_for_js(  # the running sensors' switches are on (the schedule's is off: stopped by default)
            "document.querySelectorAll('input[type=checkbox]:checked').length >= 3", "the automations' switches"
        )
        assert all(name in text for name in (*SENSORS, "cohort_batches__demo_ingest")), text
        shots.take(page, "automation")
        failed = instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]))
        assert not failed, [(r.job_name, r.run_id) for r in failed]

    assert all(shot.stat().st_size > 10_000 for shot in shots.taken)
    print(f"UI test: {time.monotonic() - started:.0f} s, ticks: { {s: len(ticks[s]) for s in SENSORS} }")
