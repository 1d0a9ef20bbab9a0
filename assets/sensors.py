"""The membership and topic sensors: typed cursors, a time budget, `SensorResult`.

Membership: per group, evict members whose Dagster run failed or was canceled, persist what the clock
made due (expired sessions and progress deadlines: the coordinator removes those members and starts the
rebalance), then request a rerun of every worker slot whose member was removed while its run had not
succeeded. The run key holds the group, the slot, the generation and the removed member, so a rerun is
never deduplicated away and never requested twice for one loss.

Topic: watch the subscribed topics' partition counts (and, for pattern subscriptions, which topics
match), add the new partitions to the topics' dynamic partition sets, report the change to the
coordinator (which starts a rebalance) and request one run per worker slot.

Both read time through an injected `Clock` (tests advance a `ManualClock`; nothing sleeps) and stop early
when their time budget is spent, resuming at the next tick. They use the group resources built from the
configs once, not Dagster-initialized ones: a tick then initializes no resource (only the topic sensor's
Kafka resource, which may hold secrets) and reuses the process's coordinator and store caches.
"""

import hashlib
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from cohort.assets.cursors import GroupCursor, MembershipCursor, TopicCursor
from cohort.assets.translator import CohortConfig, DagsterCohortTranslator
from cohort.assets.worker import GENERATION_TAG, GROUP_TAG, RERUN_TAG, SLOT_TAG, worker_run_config
from cohort.assignment.clock import Clock
from cohort.assignment.errors import CoordinatorError
from cohort.assignment.group_state import EventKind, GroupRecord, subscribed_counts
from cohort.resources.group import CohortGroupResource
from cohort.resources.kafka import KafkaResource

__all__ = ["RERUN_TAG", "build_membership_sensor", "build_topic_sensor", "due"]

_DEAD_RUN = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)
_CLEAN_LEAVE = "left:"
_REMEMBERED_RERUNS = 200


def due(record: GroupRecord, now: float) -> bool:
    """Whether the clock has made anything due in `record` (an expiry, a join phase, a pending id)."""
    deadlines = [record.rebalance_deadline, record.initial_delay_until, *record.pending.values()]
    for member in record.members.values():
        deadlines += [member.session_deadline, member.progress_deadline]
    return any(d is not None and d <= now for d in deadlines)


def _runs(instance: dg.DagsterInstance, run_ids: Sequence[str]) -> dict[str, dg.DagsterRun]:
    if not run_ids:
        return {}
    return {run.run_id: run for run in instance.get_runs(filters=dg.RunsFilter(run_ids=list(run_ids)))}


def _slot_of_run(run: dg.DagsterRun) -> int | None:
    """The worker slot a run of a worker job was launched for (its op config), None if unknown."""
    ops = (run.run_config or {}).get("ops", {})
    for op in ops.values():
        slot = (op or {}).get("config", {}).get("slot")
        if isinstance(slot, int):
            return slot
    return None


def _rerun(
    config: CohortConfig,
    translator: DagsterCohortTranslator,
    slot: int,
    generation: int,
    key: str,
    reason: str,
    of: str,
) -> dg.RunRequest:
    return dg.RunRequest(
        run_key=f"{config.group}:slot-{slot}:gen-{generation}:{key}",
        job_name=translator.get_job_name(config.group),
        run_config=worker_run_config(config, slot),
        tags={
            GROUP_TAG: config.group,
            SLOT_TAG: str(slot),
            GENERATION_TAG: str(generation),
            RERUN_TAG: of,
            "cohort/reason": reason[:200],
        },
    )


def _membership_tick(
    context: dg.SensorEvaluationContext,
    config: CohortConfig,
    translator: DagsterCohortTranslator,
    group: CohortGroupResource,
    clock: Clock | None,
    seen: GroupCursor,
) -> tuple[GroupCursor, list[dg.RunRequest]]:
    """One group: evict members of dead runs, apply the clock, rerun slots that lost their work.

    Reruns: a member removed while its run had not finished (session or progress deadline) -> keyed by
    the member; a run that failed or was canceled (its member evicted here, or it left on its own, or it
    came and went between two ticks, or failed before the group existed) -> keyed by the run, so every
    path asks for the same rerun once. A failed or canceled run that was itself a rerun is not rerun
    again: it needs a person.
    """
    coordinator = group.get_coordinator(clock)
    record = coordinator.store.load(config.group)  # None until a member first joins: runs are watched anyway
    scan_from, scan_to = seen.runs_scanned_until, time.time()
    members = record.members if record is not None else {}
    live = {mid: (group.slot_of(m.instance_id), m.client_id) for mid, m in members.items()}
    known = {**seen.members, **live}
    runs = _runs(context.instance, sorted({rid for _s, rid in known.values() if rid}))
    if scan_from:  # failed or canceled worker runs since the last tick (first tick: from now on)
        recent = context.instance.get_runs(
            filters=dg.RunsFilter(
                job_name=translator.get_job_name(config.group),
                statuses=list(_DEAD_RUN),
                updated_after=datetime.fromtimestamp(scan_from, UTC),
            ),
            limit=200,
        )
        runs.update({run.run_id: run for run in recent})
    evicted = False
    for member_id, (_slot, run_id) in live.items():
        run = runs.get(run_id) if run_id else None
        if run is not None and run.status in _DEAD_RUN:
            try:
                coordinator.evict_member(config.group, member_id, f"run {run_id} {run.status.value.lower()}")
                evicted = True
            except CoordinatorError as exc:  # already gone: the events below tell what happened
                context.log.info(f"group {config.group!r}: eviction of {member_id} skipped: {exc}")
    if not evicted and record is not None and due(record, coordinator.clock.now()):
        coordinator.expire(config.group)
    requests: dict[str, dg.RunRequest] = {}
    rerun_runs = list(seen.rerun_runs)
    generation = record.generation if record is not None else 0
    removed: set[str] = set()
    last_event = seen.last_event
    for event_id, event in coordinator.group_events(config.group, after=seen.last_event):
        last_event = max(last_event, event_id)
        generation = max(generation, event.generation)
        if event.kind is not EventKind.MEMBER_REMOVED or event.member_id is None:
            continue
        removed.add(event.member_id)
        slot, run_id = known.get(event.member_id, (None, None))
        run = runs.get(run_id) if run_id else None
        if slot is None or (run is not None and run.status in _DEAD_RUN):
            continue  # dead runs are rerun below, keyed by the run
        if event.reason.startswith(_CLEAN_LEAVE) or (run is not None and run.status is dg.DagsterRunStatus.SUCCESS):
            continue  # a clean leave, or a finished static member whose session ran out: nothing orphaned
        context.log.info(f"group {config.group!r}: slot {slot} lost member {event.member_id} ({event.reason})")
        request = _rerun(config, translator, slot, event.generation, event.member_id[-12:], event.reason, run_id or "")
        requests[request.run_key or ""] = request
        if run_id:
            rerun_runs.append(run_id)
    slot_by_run = {rid: slot for slot, rid in known.values() if rid and slot is not None}
    worker_job = translator.get_job_name(config.group)
    for run in runs.values():
        slot = slot_by_run.get(run.run_id) or (_slot_of_run(run) if run.job_name == worker_job else None)
        if run.status not in _DEAD_RUN or slot is None:
            continue
        if run.run_id in rerun_runs:
            continue  # its slot was rerun when its member was removed at a deadline
        if run.tags.get(RERUN_TAG):
            context.log.warning(f"group {config.group!r}: rerun {run.run_id} of slot {slot} {run.status.value}")
            continue
        reason = f"run {run.run_id} {run.status.value.lower()}"
        request = _rerun(config, translator, slot, generation, f"rerun-{run.run_id[:8]}", reason, run.run_id)
        requests[request.run_key or ""] = request
    members = {mid: v for mid, v in known.items() if mid not in removed and mid in live}
    cursor = GroupCursor(last_event, members, scan_to, tuple(rerun_runs[-_REMEMBERED_RERUNS:]))
    return cursor, list(requests.values())


def build_membership_sensor(
    configs: Sequence[CohortConfig],
    jobs: Sequence[dg.JobDefinition],
    *,
    translator: DagsterCohortTranslator | None = None,
    clock: Clock | None = None,
    name: str = "cohort_membership_sensor",
    minimum_interval_seconds: int = 15,
    time_budget_s: float = 20.0,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING,
) -> dg.SensorDefinition:
    """A sensor evicting lost members of `configs`' groups and requesting reruns of their worker slots.

    Example:
        >>> sensor = build_membership_sensor([config], [worker_job])  # doctest: +SKIP
    """
    translator = translator or DagsterCohortTranslator()
    groups_by_name = {c.group: c.group_resource() for c in configs}

    @dg.sensor(
        name=name,
        jobs=list(jobs),
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status,
        description="Evicts members whose session, progress deadline or run ended; reruns their slots.",
    )
    def membership_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        started = time.monotonic()
        cursor = MembershipCursor.from_json(context.cursor)
        groups = dict(cursor.groups)
        requests: list[dg.RunRequest] = []
        order = list(configs)
        start = cursor.next_group % len(order) if order else 0
        next_group = 0
        for index in range(len(order)):
            position = (start + index) % len(order)
            if index and time.monotonic() - started > time_budget_s:
                next_group = position  # resume here next tick
                break
            config = order[position]
            group = groups_by_name[config.group]
            seen = groups.get(config.group, GroupCursor())
            groups[config.group], made = _membership_tick(context, config, translator, group, clock, seen)
            requests += made
        return dg.SensorResult(run_requests=requests, cursor=MembershipCursor(groups, next_group).to_json())

    return membership_sensor


def _missing_keys(instance: dg.DagsterInstance, name: str, count: int) -> list[str]:
    existing = set(instance.get_dynamic_partitions(name))
    return [str(p) for p in range(count) if str(p) not in existing]


def build_topic_sensor(
    configs: Sequence[CohortConfig],
    jobs: Sequence[dg.JobDefinition],
    *,
    translator: DagsterCohortTranslator | None = None,
    clock: Clock | None = None,
    name: str = "cohort_topic_sensor",
    minimum_interval_seconds: int = 30,
    time_budget_s: float = 20.0,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.RUNNING,
) -> dg.SensorDefinition:
    """A sensor following partition counts and pattern matches of `configs`' subscriptions.

    Example:
        >>> sensor = build_topic_sensor([config], [worker_job])  # doctest: +SKIP
    """
    translator = translator or DagsterCohortTranslator()
    groups_by_name = {c.group: c.group_resource() for c in configs}

    @dg.sensor(
        name=name,
        jobs=list(jobs),
        minimum_interval_seconds=minimum_interval_seconds,
        required_resource_keys={"kafka"},
        default_status=default_status,
        description="Adds partitions of grown or new subscribed topics, rebalances, requests runs.",
    )
    def topic_sensor(context: dg.SensorEvaluationContext, **resources: Any) -> dg.SensorResult:
        started = time.monotonic()
        cursor = TopicCursor.from_json(context.cursor)
        seen: dict[str, Mapping[str, int]] = dict(cursor.counts)
        kafka: KafkaResource = resources["kafka"]
        everything = kafka.partition_counts()
        requests: list[dg.RunRequest] = []
        additions: list[dg.AddDynamicPartitionsRequest] = []
        for config in configs:
            if time.monotonic() - started > time_budget_s:
                break  # the cursor keeps the old counts of the rest: they are looked at next tick
            now = subscribed_counts(everything, config.topics, config.topic_pattern)
            before = seen.get(config.group)
            if now == before:
                continue
            for topic, count in now.items():
                if (before or {}).get(topic) == count:
                    continue
                name_ = translator.get_partitions_def_name(config.group, topic)
                missing = _missing_keys(context.instance, name_, count)
                if missing:
                    additions.append(dg.AddDynamicPartitionsRequest(name_, missing))
            group = groups_by_name[config.group]
            report = everything if config.topic_pattern else now
            rebalanced = group.get_coordinator(clock).report_topic_metadata(config.group, report)
            seen[config.group] = now
            if before is None and not rebalanced:
                continue  # first sight: partitions registered, the schedule starts the group
            digest = hashlib.sha1(repr(sorted(now.items())).encode()).hexdigest()[:10]
            generation = group.get_coordinator(clock).describe_group(config.group).generation
            context.log.info(f"group {config.group!r}: subscribed topics changed to {now}; rebalance={rebalanced}")
            for slot in group.slots():
                requests.append(
                    dg.RunRequest(
                        run_key=f"{config.group}:slot-{slot}:gen-{generation}:topics-{digest}",
                        job_name=translator.get_job_name(config.group),
                        run_config=worker_run_config(config, slot),
                        tags={GROUP_TAG: config.group, SLOT_TAG: str(slot), GENERATION_TAG: str(generation)},
                    )
                )
        return dg.SensorResult(
            run_requests=requests, dynamic_partitions_requests=additions, cursor=TopicCursor(seen).to_json()
        )

    return topic_sensor
