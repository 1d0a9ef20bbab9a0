"""The DAG factory: one Airflow DAG per consumer group, one mapped task per worker slot.

`cohort_dag(config)` is the counterpart of Dagster's `build_cohort_definitions`. Each run of the DAG:

1. `slots`: which worker slots to run: every slot on the schedule (or a manual run); on a rerun signal (an
   event of the group's signal asset, emitted by `GroupWatchTrigger` in the triggerer when a member was lost or
   a subscribed topic grew), the slots the events name;
2. `run_slot`, mapped over those slots: each task instance is the slot's static member; it joins, gets its
   partitions from the sticky assignor, runs the Spark batch, commits through the fenced ledger, mirrors the
   commit to Kafka, emits one asset event per consumed topic partition on `kafka://<bootstrap>/<topic>`, and
   leaves (or keeps its static membership). A retry of a mapped task keeps its slot (Airflow keeps its map
   index); the ledger tells the tries apart.

One run at a time (`max_active_runs=1`): a rerun signal waits for the running batch, so two task instances never
hold one slot at once (the second would fence the first, whose commit would then be refused).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Asset, AssetOrTimeSchedule, AssetWatcher, CronTriggerTimetable, task

from cohort.airflow.connection import KafkaConnectionError, bootstrap_of, kafka_config
from cohort.airflow.lineage import group_alias, topic_asset
from cohort.airflow.slot import AirflowGroup, run_slot
from cohort.airflow.trigger import GroupWatchTrigger, group_settings
from cohort.assignment.worker_group import WorkerGroup
from cohort.common.names import safe_name
from cohort.runtime.slot_batch import BatchRunner

__all__ = ["cohort_dag", "signal_asset", "slots_for"]


def signal_asset(config: AirflowGroup, *, poll_interval_s: float = 10.0) -> Asset:
    """The group's signal asset, watched by its `GroupWatchTrigger`: its events schedule the group's DAG."""
    group = config.group
    trigger = GroupWatchTrigger(
        group_settings(group, store_url_env=config.store_url_env),
        config.kafka_conn_id,
        store_url_env=config.store_url_env,
        poll_interval_s=poll_interval_s,
    )
    name = f"cohort-{group.group}-signals"
    return Asset(
        name=name,
        uri=f"x-cohort://{group.group}/signals",
        group="cohort",
        watchers=[AssetWatcher(name=f"cohort_{safe_name(group.group)}_watch", trigger=trigger)],
    )


def slots_for(group: WorkerGroup, triggering_asset_events: Mapping[Any, Iterable[Any]] | None) -> list[int]:
    """The slots a run runs: those named by the rerun signals that triggered it (of this group, within its
    slots), or every slot when nothing named any (a scheduled or manual run)."""
    named: set[int] = set()
    for events in (triggering_asset_events or {}).values():
        for event in events:
            payload = (getattr(event, "extra", None) or {}).get("payload") or {}
            if payload.get("group") != group.group:
                continue
            named.update(s for s in payload.get("slots", ()) if isinstance(s, int) and 1 <= s <= group.worker_slots)
    return sorted(named) if named else group.slots()


def known_topic_assets(config: AirflowGroup) -> list[Asset]:
    """The assets of the group's explicitly subscribed topics, declared when the DAG is parsed so that Airflow
    creates them once, before any slot task emits events for them: two slot tasks registering the same new
    asset at once collide in Airflow's database and one of them fails. Empty when the Kafka connection cannot be
    read where the DAG is parsed (the slot tasks then create the assets as they first emit)."""
    if not config.group.topics:
        return []
    try:
        bootstrap = bootstrap_of(kafka_config(config.kafka_conn_id))
    except KafkaConnectionError:
        return []
    return [topic_asset(bootstrap, topic) for topic in config.group.topics]


def cohort_dag(
    config: AirflowGroup,
    *,
    dag_id: str | None = None,
    schedule: str | None = "*/15 * * * *",
    watch: bool = True,
    poll_interval_s: float = 10.0,
    retries: int = 2,
    retry_delay: timedelta = timedelta(seconds=30),
    start_date: datetime = datetime(2026, 1, 1, tzinfo=UTC),
    tags: Sequence[str] = ("cohort",),
    runner: BatchRunner | None = None,
) -> DAG:
    """The group's DAG: batches on `schedule` (a cron, UTC; None: only on signals and by hand), and, with
    `watch`, on the rerun signals of the group's trigger. `retries` apply to each slot's task (a retry keeps the
    slot). `runner` replaces the batch (tests)."""
    group = config.group
    signals = signal_asset(config, poll_interval_s=poll_interval_s) if watch else None
    timetable: Any = schedule
    if signals is not None:
        cron = CronTriggerTimetable(schedule, timezone="UTC") if schedule else None
        timetable = AssetOrTimeSchedule(timetable=cron, assets=[signals]) if cron else [signals]
    name = dag_id or f"cohort__{safe_name(group.group)}"
    with DAG(
        dag_id=name,
        schedule=timetable,
        start_date=start_date,
        catchup=False,
        max_active_runs=1,
        default_args={"retries": retries, "retry_delay": retry_delay},
        tags=list(tags),
        doc_md=f"Batches of consumer group `{group.group}`: one task per worker slot ({group.worker_slots}).",
    ) as dag:

        @task(task_id="slots", inlets=known_topic_assets(config))  # inlets: registered, never emitted to
        def slots(**context: Any) -> list[int]:
            return slots_for(group, context.get("triggering_asset_events"))

        @task(task_id="run_slot", outlets=[group_alias(group.group)], inlets=[group_alias(group.group)])
        def run_slot_task(slot: int, **context: Any) -> dict[str, Any]:
            ti = context["ti"]
            signalled = str(getattr(context["dag_run"], "run_type", "")).endswith("asset_triggered")
            report = run_slot(
                config,
                slot,
                dag_id=name,
                run_id=context["run_id"],
                try_number=ti.try_number,
                outlet_events=context["outlet_events"],
                inlet_events=context["inlet_events"],
                rerun_on_failure=ti.try_number > ti.max_tries and not signalled,
                runner=runner,
            )
            return report.as_xcom()

        run_slot_task.expand(slot=slots())
    return dag
