"""Helpers of the Dagster UI test: what the test reads from the Dagster instance `dagster dev` writes (runs,
backfills, check executions, sensor ticks) while it clicks through the UI, and the screenshots it keeps."""

import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.definitions.metadata import MetadataValue
from dagster._core.scheduler.instigation import InstigatorType, TickStatus
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from harness.dagster_group import ROOT
from tests.support.browser import Page
from tests.support.polling import poll

ARTIFACTS = ROOT / "artifacts"
COMMUNITY_DIALOG = "Join the Dagster community"


class Screenshots:
    """Screenshots named `dagster-ui-NN-<name>.png` in `folder`, each copied to the repository's artifacts/."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.taken: list[Path] = []

    def take(self, page: Page, name: str, settle_s: float = 1.0) -> Path:
        """Screenshot the page once its dialogs and toasts have finished animating (`settle_s`)."""
        time.sleep(settle_s)
        path = self.folder / f"dagster-ui-{len(self.taken) + 1:02d}-{name}.png"
        page.screenshot(path)
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(path, ARTIFACTS / path.name)
        self.taken.append(path)
        return path


def skip_community_dialog(page: Page, timeout_s: float = 30.0) -> None:
    """A fresh browser profile gets Dagster's newsletter dialog over the first page: click Skip."""
    page.wait_for_text(COMMUNITY_DIALOG, timeout_s=timeout_s)
    page.click("Skip", selector="button")
    page.wait_until(lambda text: COMMUNITY_DIALOG not in text, "the community dialog to close")


def launch_backfill_of_all(page: Page, shots: Screenshots, partitions: int, shot: str) -> None:
    """On a Cohort topic asset's page: Materialize…, All (`partitions` keys, in a single run: the group's assets'
    backfill policy), a screenshot of the dialog named `shot`, then Launch backfill."""
    page.click("Materialize…")
    page.wait_for_text("Launch runs to materialize")
    page.click("All")
    page.wait_for_text(f"{partitions} partitions")
    page.wait_for_text("in a single run")  # the group's assets' backfill policy
    shots.take(page, shot)
    page.click("Launch backfill", selector="button")


def run_failure_messages(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """The messages of a run's failure events (step and run), to print when it did not succeed."""
    failures = {dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE}
    return [
        f"{entry.dagster_event.event_type_value}: {entry.message}"
        for entry in instance.all_logs(run_id)
        if entry.dagster_event is not None and entry.dagster_event.event_type in failures
    ]


def wait_for_success(
    instance: dg.DagsterInstance, runs: Callable[[], Sequence[dg.DagsterRun]], *, timeout_s: float
) -> list[dg.DagsterRun]:
    """Wait until `runs()` is non-empty and all of them succeeded; fail at once, with its errors, on a failed run."""

    def finished() -> list[dg.DagsterRun] | None:
        found = list(runs())
        for run in found:
            if run.status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED):
                raise AssertionError(
                    f"run {run.run_id} {run.status.value}: {run_failure_messages(instance, run.run_id)}"
                )
        return found if found and all(r.status == dg.DagsterRunStatus.SUCCESS for r in found) else None

    return poll(finished, timeout_s=timeout_s, what="the runs to succeed")


def check_executions(instance: dg.DagsterInstance, key: dg.AssetCheckKey) -> list[Any]:
    """The check's execution records, newest first."""
    return list(instance.event_log_storage.get_asset_check_execution_history(key, limit=50))


def check_passed(record: Any) -> bool:
    return record.status == AssetCheckExecutionRecordStatus.SUCCEEDED


def sensor_ticks(instance: dg.DagsterInstance) -> dict[str, list[Any]]:
    """Sensor name -> its ticks (newest first), for every sensor the daemon has state for."""
    return {
        state.instigator_name: list(instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=500))
        for state in instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
    }


def failed_ticks(ticks: dict[str, list[Any]]) -> list[str]:
    """`<sensor>: <error>` for every failed tick."""
    return [
        f"{name}: {tick.error.to_string() if tick.error else 'no error recorded'}"
        for name, items in ticks.items()
        for tick in items
        if tick.status == TickStatus.FAILURE
    ]


def metadata_value(value: MetadataValue | Any) -> Any:
    """The plain value of a metadata entry."""
    return getattr(value, "value", value)
