"""The group's batch runs as Dagster records them: which slots a run hosts, which runs are still in flight,
and which of them are live members of the group (the reads behind `cohort.assets.busy_slots`)."""

from __future__ import annotations

import dagster as dg

from cohort.assets.busy_slots import InFlight
from cohort.assets.worker import ALL_SLOTS, GROUP_TAG, SLOT_TAG
from cohort.assignment.protocol.group_state import GroupRecord

__all__ = ["IN_FLIGHT", "is_batch_run", "live_member_runs", "runs_in_flight", "slots_of_run"]

IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]
"""The statuses of a run that may still join its group and commit."""

MAX_IN_FLIGHT = 500
"""How many unfinished runs of one group a tick reads (a group has a few per slot at most)."""


def slots_of_run(run: dg.DagsterRun, slots: tuple[int, ...]) -> tuple[int, ...]:
    """The worker slots a batch run of the group hosts: its `cohort/slot` tag (every batch run sets it), or
    its op config (one slot, or `all`: this host's `slots`) for a run that ended before tagging itself."""
    tagged = run.tags.get(SLOT_TAG, "")
    if tagged and all(part.isdigit() for part in tagged.split(",")):
        return tuple(int(part) for part in tagged.split(","))
    ops = (run.run_config or {}).get("ops")
    for op in ops.values() if isinstance(ops, dict) else ():
        config = op.get("config") if isinstance(op, dict) else None
        slot = config.get("slot") if isinstance(config, dict) else None
        if slot == ALL_SLOTS:
            return slots
        if isinstance(slot, str) and slot.isdigit():
            return (int(slot),)
        if isinstance(slot, int) and not isinstance(slot, bool):
            return (slot,)
    return slots  # no config: the default hosts every slot of this host


def is_batch_run(run: dg.DagsterRun, group: str, worker_job: str) -> bool:
    """A run of the group's worker job, or one Materialize launched (Dagster's implicit asset job, tagged
    with the group by the batch op)."""
    return run.job_name == worker_job or run.tags.get(GROUP_TAG) == group


def runs_in_flight(instance: dg.DagsterInstance, group: str, worker_job: str, slots: tuple[int, ...]) -> list[InFlight]:
    """The group's unfinished batch runs (its worker job's, and any run tagged with the group: Materialize
    launches Dagster's implicit asset job), with the slots each hosts and when it started running."""
    records = {}
    for selection in ({"job_name": worker_job}, {"tags": {GROUP_TAG: group}}):
        for record in instance.get_run_records(
            filters=dg.RunsFilter(statuses=IN_FLIGHT, **selection), limit=MAX_IN_FLIGHT
        ):
            records[record.dagster_run.run_id] = record
    return [
        InFlight(
            run_id,
            slots_of_run(record.dagster_run, slots),
            _started_at(record),
        )
        for run_id, record in records.items()
        if is_batch_run(record.dagster_run, group, worker_job)
    ]


def _started_at(record: dg.RunRecord) -> float | None:
    """When a running run started (its record's creation if Dagster has no start time); None if not running."""
    if record.dagster_run.status is not dg.DagsterRunStatus.STARTED:
        return None
    return record.start_time if record.start_time is not None else record.create_timestamp.timestamp()


def live_member_runs(record: GroupRecord | None, now: float) -> set[str]:
    """The run ids of the group's members whose sessions have not expired at `now`."""
    if record is None:
        return set()
    return {m.client_id for m in record.members.values() if m.client_id and m.session_deadline > now}
