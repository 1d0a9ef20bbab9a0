"""The membership and topic sensors: typed cursors, a time budget, `SensorResult`.

Membership: per group, evict members whose Dagster run failed or was canceled, persist what the clock
made due (expired sessions and progress deadlines: the coordinator removes those members and starts the
rebalance), then request a rerun of every worker slot whose member was removed while its run had not
succeeded. The run key holds the group, the slot, the generation and the removed member, so a rerun is
never deduplicated away and never requested twice for one loss.

Topic: watch the subscribed topics' partition counts (and, for pattern subscriptions, which topics
match), add the new partitions to the topics' dynamic partition sets, report the change to the
coordinator (which starts a rebalance) and request one run per worker slot.

Both take the group resources (and the topic sensor the Kafka resource) from the Definitions, as the
workers do: whoever replaces a group resource in the Definitions moves the sensors with the workers. A
tick reads, decides with the pure functions of `cohort.assets.membership`, then applies. Both read time
through an injected `Clock` (tests advance a `ManualClock`; nothing sleeps) and stop early when their time
budget is spent, resuming at the next tick.
"""

import hashlib
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

import dagster as dg
from dagster._core.definitions.unresolved_asset_job_definition import (
    UnresolvedAssetJobDefinition as AssetJob,  # what dg.define_asset_job returns; not re-exported by dagster
)

from cohort.assets.busy_slots import busy_slots
from cohort.assets.cursors import GroupCursor, MembershipCursor, TopicCursor
from cohort.assets.membership import Rerun, RunState, RunView, decide_evictions, decide_reruns
from cohort.assets.slot_runs import is_batch_run, live_member_runs, runs_in_flight, slots_of_run
from cohort.assets.translator import CohortConfig, DagsterCohortTranslator
from cohort.assets.worker import GENERATION_TAG, GROUP_TAG, RERUN_TAG, SLOT_TAG, worker_run_config
from cohort.assignment.clock import Clock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import CoordinatorError, StoreError
from cohort.assignment.protocol.group_state import GroupRecord, subscribed_counts
from cohort.resources.group import CohortGroupResource
from cohort.resources.kafka import KafkaResource

__all__ = ["RERUN_TAG", "build_membership_sensor", "build_topic_sensor", "due"]


def instance_identity(instance: dg.DagsterInstance) -> str:
    """This Dagster instance as a rerun claim's holder: the host's name and the instance's home directory
    (two instances on one host differ by their home)."""
    return f"{socket.gethostname()}:{instance.root_directory}"[:200]


def due(record: GroupRecord, now: float) -> bool:
    """Whether the clock has made anything due in `record` (an expiry, a join phase, a pending id)."""
    deadlines = [record.rebalance_deadline, record.initial_delay_until, *record.pending.values()]
    for member in record.members.values():
        deadlines += [member.session_deadline, member.progress_deadline]
    return any(d is not None and d <= now for d in deadlines)


_DAGSTER_STATES = {
    dg.DagsterRunStatus.SUCCESS: RunState.SUCCESS,
    dg.DagsterRunStatus.FAILURE: RunState.FAILURE,
    dg.DagsterRunStatus.CANCELED: RunState.CANCELED,
}


def _view(run: dg.DagsterRun, group: str, worker_job: str, slots: tuple[int, ...]) -> RunView:
    return RunView(
        run.run_id,
        _DAGSTER_STATES.get(run.status, RunState.OTHER),
        slots=slots_of_run(run, slots) if is_batch_run(run, group, worker_job) else (),
        rerun_of=run.tags.get(RERUN_TAG) or None,
    )


def _read_runs(
    instance: dg.DagsterInstance,
    group: str,
    worker_job: str,
    slots: tuple[int, ...],
    run_ids: Sequence[str],
    dead_since: float,
) -> dict[str, RunView]:
    """The runs of the members seen, plus the group's batch runs that failed or were canceled since
    `dead_since` (0: none; the first tick watches from then on): its worker job's runs and any run tagged
    with the group (Materialize launches Dagster's implicit asset job)."""
    runs = list(instance.get_runs(filters=dg.RunsFilter(run_ids=list(run_ids)))) if run_ids else []
    if dead_since:
        dead = [dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]
        since = datetime.fromtimestamp(dead_since, UTC)
        for selection in ({"job_name": worker_job}, {"tags": {GROUP_TAG: group}}):
            runs += instance.get_runs(
                filters=dg.RunsFilter(statuses=dead, updated_after=since, **selection),
                limit=200,
            )
    return {run.run_id: _view(run, group, worker_job, slots) for run in runs}


def _rerun_request(config: CohortConfig, translator: DagsterCohortTranslator, rerun: Rerun) -> dg.RunRequest:
    return dg.RunRequest(
        run_key=f"{config.group}:{rerun.run_key}",
        job_name=translator.get_job_name(config.group),
        run_config=worker_run_config(config, rerun.slot),
        tags={
            GROUP_TAG: config.group,
            SLOT_TAG: str(rerun.slot),
            GENERATION_TAG: str(rerun.generation),
            RERUN_TAG: rerun.of,
            "cohort/reason": rerun.reason[:200],
        },
    )


def _membership_tick(
    context: dg.SensorEvaluationContext,
    config: CohortConfig,
    translator: DagsterCohortTranslator,
    group: CohortGroupResource,
    clock: Clock | None,
    seen: GroupCursor,
    host: str,
) -> tuple[GroupCursor, list[dg.RunRequest]]:
    """One group: read, decide the evictions, apply them; read the new events, decide the reruns, claim each in
    the store for `host` (this Dagster instance) and request those it won."""
    coordinator = group.get_coordinator(clock)
    worker_job = translator.get_job_name(config.group)
    record = coordinator.store.load(config.group)  # None until a member first joins: runs are watched anyway
    scanned_until = time.time()
    members = record.members if record is not None else {}
    live = {mid: (group.slot_of(m.instance_id), m.client_id) for mid, m in members.items()}
    known = {**seen.members, **live}
    runs = _read_runs(
        context.instance,
        config.group,
        worker_job,
        config.launched_slots,
        sorted({rid for _s, rid in known.values() if rid}),
        seen.runs_scanned_until,
    )
    clock_due = record is not None and due(record, coordinator.clock.now())
    evictions = decide_evictions(live, runs, clock_due=clock_due)
    evicted = False
    for eviction in evictions.evict:
        try:
            coordinator.evict_member(config.group, eviction.member_id, eviction.reason)
            evicted = True
        except CoordinatorError as exc:  # already gone: the events below tell what happened
            if isinstance(exc, StoreError):
                raise
            context.log.info(f"group {config.group!r}: eviction of {eviction.member_id} skipped: {exc}")
    if evictions.expire and not evicted:
        coordinator.expire(config.group)
    events = coordinator.group_events(config.group, after=seen.last_event)
    decided = decide_reruns(
        seen,
        live,
        runs,
        events,
        generation=record.generation if record is not None else 0,
        scanned_until=scanned_until,
    )
    for note in decided.notes:
        (context.log.warning if note.level == "warning" else context.log.info)(f"group {config.group!r}: {note.text}")
    requests = []
    busy = _busy_after_losses(context.instance, config, worker_job, coordinator, known) if decided.reruns else None
    for rerun in decided.reruns:
        held = busy(rerun.of) if busy is not None else {}
        if rerun.slot in held:  # a run of the slot in flight resumes from the committed offsets: no second run
            context.log.info(
                f"group {config.group!r}: slot {rerun.slot} ({rerun.reason}) is left to its batch in flight "
                f"({held[rerun.slot]})"
            )
            continue
        # other Dagster instances on the same store see the same loss: the store answers which one reruns it
        holder = coordinator.claim_rerun(config.group, lost=rerun.loss, slot=rerun.slot, holder=host)
        if holder == host:
            requests.append(_rerun_request(config, translator, rerun))
        else:
            context.log.info(f"group {config.group!r}: slot {rerun.slot} ({rerun.reason}) is rerun by {holder}")
    return decided.cursor, requests


def _busy_after_losses(
    instance: dg.DagsterInstance,
    config: CohortConfig,
    worker_job: str,
    coordinator: Coordinator,
    known: Mapping[str, tuple[int | None, str | None]],
) -> Callable[[str], dict[int, str]]:
    """The slots a run in flight still holds once this tick's evictions and expiries applied, as a function of
    the lost run being rerun: runs of removed members hold nothing (they were lost, not starting)."""
    record = coordinator.store.load(config.group)
    members = record.members if record is not None else {}
    now = coordinator.clock.now()
    live = live_member_runs(record, now)
    removed = {rid for mid, (_slot, rid) in known.items() if rid and mid not in members}
    in_flight = runs_in_flight(instance, config.group, worker_job, config.launched_slots)
    return lambda lost: busy_slots(in_flight, live, now, ignore={*removed, lost})


def build_membership_sensor(
    configs: Sequence[CohortConfig],
    jobs: Sequence[dg.JobDefinition | AssetJob],
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

    @dg.sensor(
        name=name,
        jobs=list(jobs),
        minimum_interval_seconds=minimum_interval_seconds,
        required_resource_keys={c.resource_key for c in configs},
        default_status=default_status,
        description="Evicts members whose session, progress deadline or run ended; reruns their slots.",
    )
    def membership_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        started = time.monotonic()
        host = instance_identity(context.instance)
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
            group: CohortGroupResource = getattr(context.resources, config.resource_key)
            seen = groups.get(config.group, GroupCursor())
            groups[config.group], made = _membership_tick(context, config, translator, group, clock, seen, host)
            requests += made
        if not requests:
            context.log.info(f"{len(order)} group(s) checked: no member lost work")
        return dg.SensorResult(
            run_requests=requests,
            cursor=MembershipCursor(groups, next_group).to_json(),
            skip_reason=None if requests else "no member lost work",
        )

    return membership_sensor


def _missing_keys(instance: dg.DagsterInstance, name: str, count: int) -> list[str]:
    existing = set(instance.get_dynamic_partitions(name))
    return [str(p) for p in range(count) if str(p) not in existing]


def build_topic_sensor(
    configs: Sequence[CohortConfig],
    jobs: Sequence[dg.JobDefinition | AssetJob],
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

    @dg.sensor(
        name=name,
        jobs=list(jobs),
        minimum_interval_seconds=minimum_interval_seconds,
        required_resource_keys={"kafka", *(c.resource_key for c in configs)},
        default_status=default_status,
        description="Adds partitions of grown or new subscribed topics, rebalances, requests runs.",
    )
    def topic_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        started = time.monotonic()
        cursor = TopicCursor.from_json(context.cursor)
        seen: dict[str, Mapping[str, int]] = dict(cursor.counts)
        kafka: KafkaResource = context.resources.kafka
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
            name_ = translator.get_partitions_def_name(config.group)
            missing = _missing_keys(context.instance, name_, max(now.values(), default=0))
            if missing:
                additions.append(dg.AddDynamicPartitionsRequest(name_, missing))
            group: CohortGroupResource = getattr(context.resources, config.resource_key)
            report = everything if config.topic_pattern else now
            rebalanced = group.get_coordinator(clock).report_topic_metadata(config.group, report)
            seen[config.group] = now
            if before is None and not rebalanced:
                continue  # first sight: partitions registered, the schedule starts the group
            digest = hashlib.sha1(repr(sorted(now.items())).encode()).hexdigest()[:10]
            generation = group.get_coordinator(clock).describe_group(config.group).generation
            context.log.info(f"group {config.group!r}: subscribed topics changed to {now}; rebalance={rebalanced}")
            for slot in config.launched_slots:
                requests.append(
                    dg.RunRequest(
                        run_key=f"{config.group}:slot-{slot}:gen-{generation}:topics-{digest}",
                        job_name=translator.get_job_name(config.group),
                        run_config=worker_run_config(config, slot),
                        tags={GROUP_TAG: config.group, SLOT_TAG: str(slot), GENERATION_TAG: str(generation)},
                    )
                )
        if not requests and not additions:
            context.log.info(f"{len(configs)} group(s): subscribed partition counts unchanged")
        return dg.SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=additions,
            cursor=TopicCursor(seen).to_json(),
            skip_reason=None if requests or additions else "no subscribed topic grew or appeared",
        )

    return topic_sensor
