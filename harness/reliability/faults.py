"""The SIGKILL fault-injection scenario: one worker slot killed at a chosen point, recovered through the sensors.

One scenario, for a fault point and an assignor:

1. a fresh 4-partition topic with 100 JSON records (two malformed, so the quarantine path is part of it),
   a group of two worker slots on the shared SQLite store and Dagster instance;
2. the victim (slot 1, `harness.reliability.fault_worker`, its own process group) joins first; the survivor
   (slot 2, a real worker run in this process, on a thread) joins the same generation, so the assignor
   splits the partitions 2 + 2; the survivor's batch waits at a gate (a runner wrapper) until recovery;
3. the victim SIGKILLs its process group at the point; the harness snapshots what it left behind;
4. the membership sensor, with a ManualClock set just past the victim's session deadline (the survivor,
   which heartbeats, stays live), expires the victim, starts the rebalance and requests a rerun of slot 1;
   then the killed run is marked failed, as Dagster's run monitoring does for a dead run worker (there is
   no monitoring daemon under execute_in_process), and the sensor ticks again, adding nothing: a victim
   stays in the group until its events are logged, so its session expiring is enough;
5. the gate opens: the survivor finishes through the rebalance (eager: it commits before rejoining;
   cooperative: it rejoins on its heartbeat thread and commits in the new generation, or, killed before
   sync, it rejoins and gets every partition), then the requested rerun runs in-process;
6. the audit (`harness.reliability.outcome.audit_delivery`): records lost and duplicated in the sink and
   quarantine, ledger contiguous up to the produced count, Kafka's committed offsets = ledger, ledger =
   materializations; then `cohort audit` (`cohort.cli.audit.audit_group`, in-process, Kafka compared), whose
   findings the report keeps.

The sink is Parquet (range directories) or, with `table_format`, a Delta Lake or Iceberg table (Iceberg: the
default SQLite catalog under the sink path). A table scenario dies at one of `TABLE_POINTS` (its two table
commits, then the ledger and the mirror), and its outputs are read with the table format's own reader (and the
sink table again with DuckDB), never by globbing Parquet files.

`recovered_s` is wall time from the kill (the victim's marker) to the end of the last recovery run. The
ManualClock replaces the session-timeout wait and the sensor's interval, which a deployment adds on top.

Real components throughout: the embedded broker, Spark (the victim's own JVM; the session of the caller for
the survivor, the rerun and the audit), the SQLite coordinator store, Dagster's execution and instance.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg

from cohort.assets.factory import build_cohort_definitions
from cohort.assets.translator import CohortConfig, DagsterCohortTranslator
from cohort.assets.worker import SLOT_TAG, worker_run_config
from cohort.assignment.clock import ManualClock
from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.devtools.topics import create_topic, produce
from cohort.pipelines.spec import PipelineSpec
from cohort.resources import KafkaResource, SparkResource
from cohort.resources.group import CohortGroupResource
from harness.dagster_group import VALUE_SCHEMA, json_records, wait_for
from harness.reliability.fault_points import (
    ASSIGNORS,
    POINTS,
    SINK_FORMATS,
    SPARK_CONF,
    SPARK_MASTER,
    TABLE_FORMATS,
    TABLE_POINTS,
    FaultPoint,
    FaultScenario,
    fault_point,
    points_for,
)
from harness.reliability.outcome import DeliveryAudit, FaultOutcome, audit_delivery, sink_offsets, table_offsets

__all__ = [
    "ASSIGNORS",
    "PARTITIONS",
    "POINTS",
    "RECORDS",
    "SINK_FORMATS",
    "TABLE_FORMATS",
    "TABLE_POINTS",
    "FaultPoint",
    "FaultReport",
    "FaultScenario",
    "Leftovers",
    "cohort_audit",
    "points_for",
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


def scenario_config(scenario: FaultScenario, *, victim: bool) -> CohortConfig:
    """The group's configuration. Only the initial rebalance delay differs between the processes: the
    victim's first join waits for the survivor; the recovery runs, which join an emptied group, do not wait.
    The session timeout is long, so only the sensor's ManualClock expires anyone."""
    spec = PipelineSpec(
        sink_path=scenario.sink,
        value_format="json",
        value_schema=VALUE_SCHEMA,
        consume_batch_size=10,
        table_format=scenario.table_format,
        iceberg_catalog=scenario.iceberg_catalog if scenario.table_format == "iceberg" else None,
    )
    return CohortConfig(
        CohortGroupResource(
            group=scenario.group,
            topics=[scenario.topic],
            worker_slots=2,
            store_url=scenario.store_url,
            assignors=[scenario.assignor],
            **{
                "initial_rebalance_delay_s": VICTIM_DELAY_S if victim else 0.0,
                "session_timeout_s": 30.0,
                "heartbeat_interval_s": 0.5,
                "rebalance_timeout_s": 120.0,
                "progress_timeout_s": 120.0,
                "join_timeout_s": 90.0,
            },
        ),
        pipeline=spec,
        schedule=None,
    )


SPARK = SparkResource(master=SPARK_MASTER, conf=SPARK_CONF)


def scenario_definitions(
    scenario: FaultScenario, *, victim: bool, runner: Callable[..., Any] | None = None, clock: Any = None
) -> tuple[dg.Definitions, CohortConfig]:
    """The group's Definitions (worker job, sensors) as the victim, the survivor or the sensor builds them."""
    config = scenario_config(scenario, victim=victim)
    defs = build_cohort_definitions(
        [config],
        kafka=KafkaResource(bootstrap_servers=scenario.bootstrap),
        spark=SPARK,
        runner=runner,
        clock=clock,
    )
    return defs, config


def open_instance(scenario: FaultScenario) -> dg.DagsterInstance:
    """The persistent Dagster instance the victim, the survivor and the sensor share."""
    return dg.DagsterInstance.local_temp(tempdir=scenario.dagster_home)


@dataclass(frozen=True)
class Leftovers:
    """What the killed victim left behind, before any recovery: proves where the kill hit.

    `in_sink` and `in_quarantine` are rows per partition (a table sink's read with its format's reader);
    `sink_heads` and `quarantine_heads` a table sink's per-partition head marks (None: never committed; empty
    for Parquet); `victim_assigned` the victim's partitions in the group's assignment when it died."""

    marker_point: str
    exit_code: int | None
    elected: tuple[str | None, str | None]
    victim_run_id: str
    victim_in_group: bool
    victim_synced: bool
    ledger: Mapping[TopicPartition, int | None]
    kafka: Mapping[TopicPartition, int | None]
    in_sink: Mapping[TopicPartition, int]
    victim_materializations: int
    in_quarantine: Mapping[TopicPartition, int] = field(default_factory=dict)
    sink_heads: Mapping[TopicPartition, int | None] = field(default_factory=dict)
    quarantine_heads: Mapping[TopicPartition, int | None] = field(default_factory=dict)
    victim_assigned: tuple[TopicPartition, ...] = ()

    @property
    def committed(self) -> dict[TopicPartition, int]:
        """Partitions with a ledger commit and their committed offsets."""
        return {tp: offset for tp, offset in self.ledger.items() if offset is not None}

    def in_table(self, quarantine: bool = False) -> dict[TopicPartition, int]:
        """A table sink's partitions with a head mark in the sink (or quarantine) table, and their heads."""
        heads = self.quarantine_heads if quarantine else self.sink_heads
        return {tp: head for tp, head in heads.items() if head is not None}


@dataclass(frozen=True)
class FaultReport:
    """A scenario's result: the table row, the audit, the leftovers and how recovery went."""

    outcome: FaultOutcome
    audit: DeliveryAudit
    leftovers: Leftovers
    rerun_requests: tuple[Mapping[str, str], ...]
    reruns_before_run_marked_failed: int
    survivor_ok: bool
    rerun_ok: bool
    final_state: str
    timings: Mapping[str, float] = field(default_factory=dict)
    cohort_audit_ok: bool | None = None
    """What `cohort audit GROUP --json` (Kafka compared) said after recovery: True when it found nothing."""
    cohort_audit: Mapping[str, Any] = field(default_factory=dict)
    """Its JSON answer (per partition: ledger, Kafka, sink and quarantine directories, problems)."""


def _start_victim(scenario: FaultScenario, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "harness.reliability.fault_worker", scenario.to_json()],
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
        from cohort.pipelines.batch.run import run_batch

        if not gate.wait(timeout_s):
            raise TimeoutError(f"the survivor's gate stayed closed for {timeout_s} s")
        return run_batch(*args, **kwargs)

    return runner


class _Survivor(threading.Thread):
    """Slot 2 as a real worker run (`execute_in_process`) on a thread of this process."""

    def __init__(self, scenario: FaultScenario, gate: threading.Event) -> None:
        super().__init__(name="fault-survivor", daemon=True)
        self.scenario = scenario
        defs, self.config = scenario_definitions(scenario, victim=False, runner=_gated(gate, 240.0))
        self.job = defs.resolve_job_def(T.get_job_name(self.config.group))  # built ahead: it joins in time
        self.success: bool | None = None
        self.error: BaseException | None = None
        self.run_id: str | None = None

    def run(self) -> None:
        try:
            with open_instance(self.scenario) as instance:
                result = self.job.execute_in_process(
                    run_config=worker_run_config(self.config, self.scenario.survivor_slot),
                    instance=instance,
                    tags={SLOT_TAG: str(self.scenario.survivor_slot)},
                    raise_on_error=False,
                )
            self.run_id, self.success = result.run_id, result.success
        except BaseException as exc:  # reported by the harness
            self.error, self.success = exc, False


def _members_by_slot(coordinator: Coordinator, config: CohortConfig) -> dict[int, Any]:
    group = config.group_resource
    return {
        slot: m
        for m in coordinator.describe_group(config.group).members
        if (slot := group.slot_of(m.instance_id)) is not None
    }


def _counts(rows: list[tuple[str, int, int]]) -> dict[TopicPartition, int]:
    counts: dict[TopicPartition, int] = {}
    for topic, partition, _offset in rows:
        tp = TopicPartition(topic, partition)
        counts[tp] = counts.get(tp, 0) + 1
    return counts


def _output_counts(spark: Any, spec: PipelineSpec) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Rows per partition in the sink and in the quarantine: Parquet read with Spark, a table with its reader."""
    if spec.table_format == "parquet":
        return _counts(sink_offsets(spark, spec.sink_path)), _counts(sink_offsets(spark, spec.quarantine_root))
    return _counts(table_offsets(spec)), _counts(table_offsets(spec, quarantine=True))


def _table_heads(
    spec: PipelineSpec, group: str, tps: list[TopicPartition]
) -> tuple[dict[TopicPartition, int | None], dict[TopicPartition, int | None]]:
    """A table sink's head marks per partition in the sink and the quarantine table (the store's API)."""
    if spec.table_format == "parquet":
        return {}, {}
    from cohort.pipelines.tables.batch import open_tables

    tables = open_tables(spec.table_target)
    sink, quarantine = (
        {tp: mark.head for tp, mark in table.marks(group, tps).items()} for table in (tables.sink, tables.quarantine)
    )
    return sink, quarantine


def _audit_findings(answer: Mapping[str, Any]) -> tuple[str, ...]:
    """`cohort audit`'s findings, one line each."""
    return tuple(
        f"cohort audit: {part['topic']}-{part['partition']} {found['where']}: {found['problem']}"
        for part in answer.get("partitions", [])
        for found in part.get("problems", [])
    )


def cohort_audit(coordinator: Coordinator, scenario: FaultScenario) -> tuple[bool, dict[str, Any]]:
    """`cohort audit GROUP --sink SINK --bootstrap-servers ... --json`, in-process (`audit_group`, the sink's
    format detected as the command does): whether it found nothing, and its JSON answer."""
    from cohort.cli.audit import SinkTarget, audit_group

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        clean = audit_group(
            coordinator,
            scenario.group,
            SinkTarget(scenario.sink, iceberg_catalog=scenario.iceberg_catalog),
            scenario.bootstrap,
            repair=False,
            as_json=True,
        )
    return clean, json.loads(out.getvalue())


class _ScenarioRun:
    """One scenario's processes, clients and steps (see the module doc); `close()` cleans everything up."""

    def __init__(self, scenario: FaultScenario, workdir: Path) -> None:
        self.scenario = scenario
        self.config = scenario_config(scenario, victim=False)
        assert self.config.pipeline is not None
        self.spec: PipelineSpec = self.config.pipeline
        self.coordinator = Coordinator.from_url(scenario.store_url)
        self.kafka = KafkaResource(bootstrap_servers=scenario.bootstrap)
        self.instance = open_instance(scenario)
        self.gate = threading.Event()
        self.survivor = _Survivor(scenario, self.gate)
        self.log = workdir / "victim.log"
        self.victim: subprocess.Popen[bytes] | None = None
        self.victim_run_id = ""
        self.first_tick_reruns = 0
        self.started = time.monotonic()
        self.timings: dict[str, float] = {}

    def _mark(self, name: str) -> None:
        self.timings[name] = round(time.monotonic() - self.started, 2)

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""

    def start(self) -> None:
        """Start the victim; once it has joined, start the survivor (it joins the same generation)."""
        self.victim = victim = _start_victim(self.scenario, self.log)

        def joined() -> Any:
            if victim.poll() is not None:
                raise AssertionError(f"the victim exited ({victim.returncode}) before joining:\n{self._tail()}")
            return _members_by_slot(self.coordinator, self.config).get(self.scenario.victim_slot)

        member = wait_for(joined, timeout_s=120, what="the victim to join", interval_s=0.05)
        self.victim_run_id = member.client_id or ""
        self._mark("victim_joined_s")
        self.survivor.start()

        def survivor_joined() -> Any:
            if not self.survivor.is_alive():
                raise AssertionError(f"the survivor run ended before joining: {self.survivor.error!r}")
            group = self.coordinator.describe_group(self.scenario.group)
            slots = {self.config.group_resource.slot_of(m.instance_id) for m in group.members}
            return group if self.scenario.survivor_slot in slots else None

        group = wait_for(survivor_joined, timeout_s=60, what="the survivor to join", interval_s=0.05)
        self._mark("survivor_joined_s")
        if group.generation != 0:
            raise AssertionError(
                f"the survivor joined after the first join phase had completed (generation {group.generation}): "
                f"the victim's initial rebalance delay ({VICTIM_DELAY_S} s) was too short on this machine"
            )

    def wait_for_kill(self, spark: Any) -> tuple[float, Leftovers]:
        """Wait for the victim's SIGKILL at its point; return the kill time (its marker) and the leftovers."""
        assert self.victim is not None
        point = self.scenario.point
        try:
            exit_code = self.victim.wait(timeout=180)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the victim was not killed at {point!r} within 180 s:\n{self._tail()}") from None
        marker = Path(self.scenario.marker)
        if exit_code != -signal.SIGKILL or not marker.exists():
            raise AssertionError(
                f"the victim ended with {exit_code} without dying at {point!r} (marker: {marker.exists()}):\n"
                f"{self._tail()}"
            )
        killed = json.loads(marker.read_text())
        wait_for(lambda: not _group_alive(self.victim.pid), timeout_s=30, what="the victim's process group to die")
        self._mark("killed_s")
        group = self.coordinator.describe_group(self.scenario.group)
        victim = _members_by_slot(self.coordinator, self.config).get(self.scenario.victim_slot)
        tps = [TopicPartition(self.scenario.topic, p) for p in range(PARTITIONS)]
        records = self.instance.get_records_for_run(
            self.victim_run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
        ).records
        in_sink, in_quarantine = _output_counts(spark, self.spec)
        sink_heads, quarantine_heads = _table_heads(self.spec, self.scenario.group, tps)
        return float(killed["at"]), Leftovers(
            marker_point=str(killed["point"]),
            exit_code=exit_code,
            elected=(group.assignor, group.rebalance_protocol),
            victim_run_id=self.victim_run_id,
            victim_in_group=victim is not None,
            victim_synced=bool(victim is not None and victim.synced),
            ledger=self.coordinator.fetch_offsets(self.scenario.group, tps),
            kafka=self.kafka.committed_offsets(self.scenario.group, tps),
            in_sink=in_sink,
            victim_materializations=len(records),
            in_quarantine=in_quarantine,
            sink_heads=sink_heads,
            quarantine_heads=quarantine_heads,
            victim_assigned=tuple(sorted(victim.assigned)) if victim is not None else (),
        )

    def recover_through_sensor(self) -> list[dg.RunRequest]:
        """Tick the membership sensor twice: just past the victim's session deadline (a ManualClock: the
        survivor, which heartbeats, stays live), then after marking the victim's run failed as Dagster's run
        monitoring does for a dead run worker (execute_in_process has no monitoring daemon). A victim is in the
        group until its events are logged, so the first tick already requests its rerun (no dependence on run
        monitoring, which `dagster dev`'s run launcher cannot do for a dead process); the second must add none."""
        members = _members_by_slot(self.coordinator, self.config)
        dead = members.get(self.scenario.victim_slot)
        if dead is not None:
            slot = self.scenario.survivor_slot
            wait_for(
                lambda: (
                    _members_by_slot(self.coordinator, self.config)[slot].session_deadline
                    > dead.session_deadline + 0.05
                ),
                timeout_s=30,
                what="the survivor to heartbeat after the victim's death",
                interval_s=0.05,
            )
        clock = ManualClock(dead.session_deadline + 0.01 if dead is not None else time.time())
        defs, _ = scenario_definitions(self.scenario, victim=False, clock=clock)
        sensor = defs.resolve_sensor_def("cohort_membership_sensor")
        with dg.build_sensor_context(instance=self.instance, resources=defs.resources) as context:
            first = sensor.evaluate_tick(context)
        self.first_tick_reruns = len(first.run_requests or [])
        run = self.instance.get_run_by_id(self.victim_run_id)
        assert run is not None, f"the victim's run {self.victim_run_id} is not in the instance"
        self.instance.report_run_failed(run, "run worker process died (SIGKILL); marked as run monitoring would")
        with dg.build_sensor_context(instance=self.instance, resources=defs.resources, cursor=first.cursor) as context:
            second = sensor.evaluate_tick(context)
        self._mark("sensor_s")
        return [*(first.run_requests or []), *(second.run_requests or [])]

    def finish(self, requests: list[dg.RunRequest]) -> tuple[bool, bool]:
        """Open the survivor's gate and let it finish, then run the requested reruns in-process."""
        self.gate.set()
        self.survivor.join(timeout=240)
        if self.survivor.is_alive():
            raise AssertionError("the survivor run did not finish within 240 s")
        self._mark("survivor_done_s")
        defs, _ = scenario_definitions(self.scenario, victim=False)
        job = defs.resolve_job_def(T.get_job_name(self.config.group))
        rerun_ok = True
        for request in requests:
            result = job.execute_in_process(
                run_config=request.run_config, tags=request.tags, instance=self.instance, raise_on_error=False
            )
            rerun_ok = rerun_ok and result.success
        self._mark("reruns_done_s")
        return bool(self.survivor.success), rerun_ok

    def audit(self, spark: Any) -> DeliveryAudit:
        """Lost, duplicated, ledger contiguous to the produced count, Kafka = ledger = materializations."""
        return audit_delivery(
            spark,
            sink=self.scenario.sink,
            produced={self.scenario.topic: dict.fromkeys(range(PARTITIONS), RECORDS // PARTITIONS)},
            coordinator=self.coordinator,
            group=self.scenario.group,
            kafka=self.kafka,
            instance=self.instance,
            spec=self.spec,
        )

    def close(self) -> None:
        self.gate.set()
        if self.victim is not None:
            _kill_group(self.victim)
        if self.survivor.is_alive():
            self.survivor.join(timeout=60)
        self.instance.dispose()
        self.coordinator.close()
        self.kafka.close()
        self.config.group_resource.close()


def run_fault_scenario(
    point: str,
    assignor: str,
    *,
    bootstrap: str,
    spark: Any,
    workdir: Path,
    name: str | None = None,
    table_format: str = "parquet",
    sink_root: str | None = None,
) -> FaultReport:
    """Run one scenario (see the module doc) in `workdir` with a `table_format` sink ("parquet", "delta" or
    "iceberg"; `point` one of `points_for(table_format)`) at `sink_root` (default `<workdir>/lake`; an `s3://`
    root: the AWS variables of this process reach it, an Iceberg catalog is a SQLite file in `workdir`); raises
    AssertionError if the fault never hit."""
    label = fault_point(point, table_format).label
    kind = "coop" if assignor.startswith("cooperative") else "eager"
    sink = "" if table_format == "parquet" else f"{table_format}-"
    name = name or f"{sink}{point}-{kind}-{time.monotonic_ns() % 10**8}"
    (workdir / "dagster").mkdir(parents=True, exist_ok=True)
    config = {"bootstrap.servers": bootstrap}
    topic = f"fault-{name}"
    create_topic(config, topic, PARTITIONS)
    produce(config, topic, json_records(RECORDS, PARTITIONS, malformed=set(MALFORMED)), one_per_batch=True)
    scenario = FaultScenario(
        bootstrap=bootstrap,
        group=f"fault-{name}",
        topic=topic,
        sink=sink_root or str(workdir / "lake"),
        store_url=f"sqlite:///{workdir / 'cohort.db'}",
        dagster_home=str(workdir / "dagster"),
        assignor=assignor,
        point=point,
        marker=str(workdir / "killed.json"),
        table_format=table_format,
        iceberg_catalog=f"sqlite:///{workdir / 'catalog.sqlite'}" if sink_root and table_format == "iceberg" else None,
    )
    run = _ScenarioRun(scenario, workdir)
    try:
        run.start()
        killed_at, leftovers = run.wait_for_kill(spark)
        requests = run.recover_through_sensor()
        survivor_ok, rerun_ok = run.finish(requests)
        recovered_at = time.time()
        audit = run.audit(spark)
        final_state = run.coordinator.describe_group(scenario.group).state.value
        audit_clean, audit_answer = cohort_audit(run.coordinator, scenario)
    finally:
        run.close()
    outcome = FaultOutcome(
        fault="SIGKILL",
        point=label,
        assignor=assignor,
        produced=audit.produced,
        lost=audit.lost,
        duplicated=audit.duplicated,
        recovered_s=recovered_at - killed_at,
        problems=audit.problems + _audit_findings(audit_answer),
        sink=table_format,
    )
    return FaultReport(
        outcome=outcome,
        audit=audit,
        leftovers=leftovers,
        rerun_requests=tuple(dict(r.tags) for r in requests),
        reruns_before_run_marked_failed=run.first_tick_reruns,
        survivor_ok=survivor_ok,
        rerun_ok=rerun_ok,
        final_state=final_state,
        timings=run.timings,
        cohort_audit_ok=audit_clean,
        cohort_audit=audit_answer,
    )
