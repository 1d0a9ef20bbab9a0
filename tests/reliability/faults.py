"""The SIGKILL fault-injection scenario: one worker slot killed at a chosen point, recovered through the sensors.

One scenario, for a fault point and an assignor:

1. a fresh 4-partition topic with 100 JSON records (two malformed, so the quarantine path is part of it),
   a group of two worker slots on the shared SQLite store and Dagster instance;
2. the victim (slot 1, `tests.reliability.fault_worker`, its own process group) joins first; the survivor
   (slot 2, a real worker run in this process, on a thread) joins the same generation, so the assignor
   splits the partitions 2 + 2; the survivor's batch waits at a gate (a runner wrapper) until recovery;
3. the victim SIGKILLs its process group at the point; the harness snapshots what it left behind;
4. the membership sensor, with a ManualClock set just past the victim's session deadline (the survivor,
   which heartbeats, stays live), expires the victim, starts the rebalance and requests a rerun of slot 1;
5. the gate opens: the survivor finishes through the rebalance (eager: it commits before rejoining;
   cooperative: it rejoins on its heartbeat thread and commits in the new generation, or, killed before
   sync, it rejoins and gets every partition), then the requested rerun runs in-process;
6. the audit (`tests.reliability.outcome.audit_delivery`): records lost and duplicated in the sink and
   quarantine, ledger contiguous up to the produced count, Kafka's committed offsets = ledger, ledger =
   materializations.

`recovered_s` is wall time from the kill (the victim's marker) to the end of the last recovery run. The
ManualClock replaces the session-timeout wait and the sensor's interval, which a deployment adds on top.

Real components throughout: the embedded broker, Spark (the victim's own JVM; the session of the caller for
the survivor, the rerun and the audit), the SQLite coordinator store, Dagster's execution and instance.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from assets.audit import materialized_ranges
from assets.factory import build_cohort_definitions
from assets.translator import CohortConfig, DagsterCohortTranslator
from assets.worker import SLOT_TAG, worker_run_config
from assignment.clock import ManualClock
from assignment.coordinator import Coordinator
from assignment.types import TopicPartition
from pipelines.kafka_client import create_topic, produce
from pipelines.spec import PipelineSpec
from resources import KafkaResource, SparkResource
from tests.dagster.support import VALUE_SCHEMA, json_records, wait_for
from tests.reliability.outcome import DeliveryAudit, FaultOutcome, audit_delivery, sink_offsets

__all__ = [
    "ASSIGNORS",
    "POINTS",
    "FaultPoint",
    "FaultReport",
    "FaultScenario",
    "Leftovers",
    "run_fault_scenario",
    "scenario_definitions",
]

ROOT = Path(__file__).resolve().parents[2]
T = DagsterCohortTranslator()
PARTITIONS = 4
RECORDS = 100
MALFORMED = frozenset({5, 58})
VICTIM_DELAY_S = 4.0
"""The victim's initial rebalance delay: the survivor joins the same (first) generation within it."""


@dataclass(frozen=True)
class FaultPoint:
    """Where the victim dies: `key` for the command line, `label` for the table."""

    key: str
    label: str


POINTS: tuple[FaultPoint, ...] = (
    FaultPoint("after-join", "after join, before sync"),
    FaultPoint("after-sync", "after sync, before reading"),
    FaultPoint("mid-read", "mid-read (executor, after the first batch)"),
    FaultPoint("after-write", "after the sink write, before the ledger commit"),
    FaultPoint("after-commit", "after the ledger commit, before the Kafka mirror"),
    FaultPoint("after-mirror", "after the Kafka mirror, before the materialization events"),
    FaultPoint("heartbeat", "while heartbeating (batch running)"),
)
ASSIGNORS: tuple[str, ...] = ("sticky", "cooperative-sticky")
"""The eager and the cooperative assignor."""


@dataclass(frozen=True)
class FaultScenario:
    """Everything the victim process needs (serializable), and the harness too."""

    bootstrap: str
    group: str
    topic: str
    sink: str
    store_url: str
    dagster_home: str
    assignor: str
    point: str
    marker: str
    victim_slot: int = 1
    survivor_slot: int = 2

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> FaultScenario:
        return cls(**json.loads(text))


def scenario_config(scenario: FaultScenario, *, victim: bool) -> CohortConfig:
    """The group's configuration. Only the initial rebalance delay differs between the processes: the
    victim's first join waits for the survivor; the recovery runs, which join an emptied group, do not wait.
    The session timeout is long, so only the sensor's ManualClock expires anyone."""
    spec = PipelineSpec(sink_path=scenario.sink, value_format="json", value_schema=VALUE_SCHEMA, consume_batch_size=10)
    return CohortConfig(
        group=scenario.group,
        topics=(scenario.topic,),
        pipeline=spec,
        worker_slots=2,
        schedule=None,
        store_url=scenario.store_url,
        assignors=(scenario.assignor,),
        group_settings={
            "initial_rebalance_delay_s": VICTIM_DELAY_S if victim else 0.0,
            "session_timeout_s": 30.0,
            "heartbeat_interval_s": 0.5,
            "rebalance_timeout_s": 30.0,
            "progress_timeout_s": 120.0,
            "join_timeout_s": 90.0,
        },
    )


def scenario_definitions(
    scenario: FaultScenario, *, victim: bool, runner: Callable[..., Any] | None = None, clock: Any = None
) -> tuple[dg.Definitions, CohortConfig]:
    """The group's Definitions (worker job, sensors) as the victim, the survivor or the sensor builds them."""
    config = scenario_config(scenario, victim=victim)
    defs = build_cohort_definitions(
        [config],
        kafka=KafkaResource(bootstrap_servers=scenario.bootstrap),
        spark=SparkResource(master="local[2]", conf={"spark.sql.shuffle.partitions": "2"}),
        runner=runner,
        clock=clock,
    )
    return defs, config


def open_instance(scenario: FaultScenario) -> dg.DagsterInstance:
    """The persistent Dagster instance the victim, the survivor and the sensor share."""
    return dg.DagsterInstance.local_temp(tempdir=scenario.dagster_home)


@dataclass(frozen=True)
class Leftovers:
    """What the killed victim left behind, before any recovery (proves where the kill hit)."""

    marker_point: str
    exit_code: int | None
    victim_run_id: str
    victim_synced: bool
    victim_assignment: tuple[TopicPartition, ...]
    survivor_assignment: tuple[TopicPartition, ...]
    ledger: Mapping[TopicPartition, int | None]
    kafka: Mapping[TopicPartition, int | None]
    in_sink: Mapping[TopicPartition, int]
    victim_materializations: int


@dataclass(frozen=True)
class FaultReport:
    """A scenario's result: the table row, the audit, the leftovers and how recovery went."""

    outcome: FaultOutcome
    audit: DeliveryAudit
    leftovers: Leftovers
    rerun_requests: tuple[Mapping[str, str], ...]
    survivor_ok: bool
    rerun_ok: bool
    final_state: str
    timings: Mapping[str, float] = field(default_factory=dict)


def _start_victim(scenario: FaultScenario, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.fault_worker", scenario.to_json()],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=30)


def _gated(gate: threading.Event, timeout_s: float) -> Callable[..., Any]:
    """The real `run_batch`, entered only once the gate opens (the survivor holds its partitions till then)."""

    def runner(*args: Any, **kwargs: Any) -> Any:
        from pipelines.batch import run_batch

        if not gate.wait(timeout_s):
            raise TimeoutError(f"the survivor's gate stayed closed for {timeout_s} s")
        return run_batch(*args, **kwargs)

    return runner


class _Survivor(threading.Thread):
    """Slot 2 as a real worker run (`execute_in_process`) on a thread of this process."""

    def __init__(self, scenario: FaultScenario, gate: threading.Event) -> None:
        super().__init__(name="fault-survivor", daemon=True)
        self.scenario, self.gate = scenario, gate
        self.success: bool | None = None
        self.error: BaseException | None = None
        self.run_id: str | None = None

    def run(self) -> None:
        defs, config = scenario_definitions(self.scenario, victim=False, runner=_gated(self.gate, 240.0))
        try:
            with open_instance(self.scenario) as instance:
                result = defs.resolve_job_def(T.get_job_name(config.group)).execute_in_process(
                    run_config=worker_run_config(config, self.scenario.survivor_slot),
                    instance=instance,
                    tags={SLOT_TAG: str(self.scenario.survivor_slot)},
                    raise_on_error=False,
                )
            self.run_id, self.success = result.run_id, result.success
        except BaseException as exc:  # reported by the harness
            self.error, self.success = exc, False


def _members_by_slot(coordinator: Coordinator, config: CohortConfig) -> dict[int, Any]:
    group = config.group_resource()
    return {
        slot: m
        for m in coordinator.describe_group(config.group).members
        if (slot := group.slot_of(m.instance_id)) is not None
    }


def _leftovers(
    scenario: FaultScenario,
    spark: Any,
    coordinator: Coordinator,
    kafka: KafkaResource,
    instance: dg.DagsterInstance,
    marker: Mapping[str, Any],
    exit_code: int | None,
    victim: Any,
    survivor: Any,
) -> Leftovers:
    tps = [TopicPartition(scenario.topic, p) for p in range(PARTITIONS)]
    in_sink: dict[TopicPartition, int] = {}
    for topic, partition, _offset in sink_offsets(spark, scenario.sink):
        tp = TopicPartition(topic, partition)
        in_sink[tp] = in_sink.get(tp, 0) + 1
    run_id = victim.client_id or ""
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
    return Leftovers(
        marker_point=str(marker.get("point")),
        exit_code=exit_code,
        victim_run_id=run_id,
        victim_synced=bool(victim.synced),
        victim_assignment=tuple(victim.assigned),
        survivor_assignment=tuple(survivor.assigned) if survivor is not None else (),
        ledger=coordinator.fetch_offsets(scenario.group, tps),
        kafka=kafka.committed_offsets(scenario.group, tps),
        in_sink=in_sink,
        victim_materializations=len(records),
    )


def run_fault_scenario(
    point: str,
    assignor: str,
    *,
    bootstrap: str,
    spark: Any,
    workdir: Path,
    name: str | None = None,
) -> FaultReport:
    """Run one scenario (see the module doc) in `workdir`; raises AssertionError if the fault never hit."""
    if point not in {p.key for p in POINTS}:
        raise ValueError(f"unknown fault point {point!r}")
    name = name or f"{point}-{'coop' if assignor.startswith('cooperative') else 'eager'}-{time.monotonic_ns() % 10**8}"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "dagster").mkdir(exist_ok=True)
    config = {"bootstrap.servers": bootstrap}
    topic = f"fault-{name}"
    create_topic(config, topic, PARTITIONS)
    produce(config, topic, json_records(RECORDS, PARTITIONS, malformed=set(MALFORMED)), one_per_batch=True)
    scenario = FaultScenario(
        bootstrap=bootstrap,
        group=f"fault-{name}",
        topic=topic,
        sink=str(workdir / "lake"),
        store_url=f"sqlite:///{workdir / 'cohort.db'}",
        dagster_home=str(workdir / "dagster"),
        assignor=assignor,
        point=point,
        marker=str(workdir / "killed.json"),
    )
    victim_config = scenario_config(scenario, victim=True)
    coordinator = Coordinator.from_url(scenario.store_url)
    kafka = KafkaResource(bootstrap_servers=bootstrap)
    gate = threading.Event()
    survivor = _Survivor(scenario, gate)
    log = workdir / "victim.log"
    timings: dict[str, float] = {}
    started = time.monotonic()
    victim = _start_victim(scenario, log)

    def victim_tail() -> str:
        return log.read_text(errors="replace")[-3000:] if log.exists() else ""

    try:
        with open_instance(scenario) as instance:
            # 2. the victim joins first; the survivor joins the same generation
            def victim_joined() -> bool:
                if victim.poll() is not None:
                    raise AssertionError(f"the victim exited ({victim.returncode}) before joining:\n{victim_tail()}")
                return scenario.victim_slot in _members_by_slot(coordinator, victim_config)

            wait_for(victim_joined, timeout_s=120, what="the victim to join", interval_s=0.05)
            timings["victim_joined_s"] = time.monotonic() - started
            survivor.start()
            # 3. the victim kills its process group at the point
            try:
                exit_code = victim.wait(timeout=180)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"the victim was not killed at {point!r} within 180 s:\n{victim_tail()}") from None
            marker_path = Path(scenario.marker)
            if exit_code != -signal.SIGKILL or not marker_path.exists():
                raise AssertionError(
                    f"the victim ended with {exit_code} without dying at {point!r} (marker: {marker_path.exists()}):\n"
                    f"{victim_tail()}"
                )
            marker = json.loads(marker_path.read_text())
            wait_for(lambda: not _group_alive(victim.pid), timeout_s=30, what="the victim's process group to die")
            timings["killed_s"] = time.monotonic() - started
            members = _members_by_slot(coordinator, victim_config)
            if scenario.victim_slot not in members:
                raise AssertionError(f"the dead victim is no longer a member before the sensor ran: {members}")
            dead = members[scenario.victim_slot]
            leftovers = _leftovers(
                scenario,
                spark,
                coordinator,
                kafka,
                instance,
                marker,
                exit_code,
                dead,
                members.get(scenario.survivor_slot),
            )
            # 4. the membership sensor, just past the victim's session deadline (the survivor's is later)
            wait_for(
                lambda: (
                    _members_by_slot(coordinator, victim_config)[scenario.survivor_slot].session_deadline
                    > dead.session_deadline + 0.05
                ),
                timeout_s=30,
                what="the survivor to heartbeat after the victim's death",
                interval_s=0.05,
            )
            clock = ManualClock(dead.session_deadline + 0.01)
            sensor_defs, _ = scenario_definitions(scenario, victim=False, clock=clock)
            sensor = sensor_defs.resolve_sensor_def("cohort_membership_sensor")
            with dg.build_sensor_context(instance=instance, resources=sensor_defs.resources) as context:
                tick = sensor(context)
            requests = list(tick.run_requests or [])
            timings["sensor_s"] = time.monotonic() - started
            # 5. the survivor finishes through the rebalance, then the requested reruns run
            gate.set()
            survivor.join(timeout=240)
            if survivor.is_alive():
                raise AssertionError("the survivor run did not finish within 240 s")
            timings["survivor_done_s"] = time.monotonic() - started
            rerun_defs, _ = scenario_definitions(scenario, victim=False)
            job = rerun_defs.resolve_job_def(T.get_job_name(victim_config.group))
            rerun_ok = True
            for request in requests:
                result = job.execute_in_process(
                    run_config=request.run_config, tags=request.tags, instance=instance, raise_on_error=False
                )
                rerun_ok = rerun_ok and result.success
            recovered_at = time.time()
            timings["reruns_done_s"] = time.monotonic() - started
            # 6. the audit
            audit = audit_delivery(
                spark,
                sink=scenario.sink,
                produced={scenario.topic: dict.fromkeys(range(PARTITIONS), RECORDS // PARTITIONS)},
                coordinator=coordinator,
                group=scenario.group,
                kafka=kafka,
                instance=instance,
            )
            final_state = coordinator.describe_group(scenario.group).state.value
    finally:
        gate.set()
        _kill_group(victim)
        survivor.join(timeout=60)
        coordinator.close()
        kafka.close()
        scenario_config(scenario, victim=False).group_resource().close()
    outcome = FaultOutcome(
        fault="SIGKILL",
        point=next(p.label for p in POINTS if p.key == point),
        assignor=assignor,
        produced=audit.produced,
        lost=audit.lost,
        duplicated=audit.duplicated,
        recovered_s=recovered_at - float(marker["at"]),
        problems=audit.problems,
    )
    return FaultReport(
        outcome=outcome,
        audit=audit,
        leftovers=leftovers,
        rerun_requests=tuple(dict(r.tags) for r in requests),
        survivor_ok=bool(survivor.success),
        rerun_ok=rerun_ok,
        final_state=final_state,
        timings=timings,
    )


def materializations_of(instance: dg.DagsterInstance, scenario: FaultScenario) -> Iterator[tuple[int, int, int]]:
    """(partition, from, until) of every materialization of the scenario's topic asset."""
    key = T.get_asset_key(scenario.group, scenario.topic)
    for p in range(PARTITIONS):
        for start, until in sorted(materialized_ranges(instance, key, p)):
            yield p, start, until
