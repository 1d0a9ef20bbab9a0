"""Soak under the real daemon: `dagster dev` with the group's schedule on (a batch a minute, one run per worker
slot), a producer writing all the while with librdkafka's default batching, and faults: worker runs
SIGKILLed, the broker made unreachable, one store transaction made to fail.

Usage:
    python -m benchmarks.soak --minutes 30 --write    # the full soak; its figures go into benchmarks/RELIABILITY.md
    python -m benchmarks.soak --minutes 3             # the short version (tests/assets/test_soak.py runs it)

What runs, all on 127.0.0.1 under a temporary directory:
- PostgreSQL (the coordinator's store), the embedded broker behind a fault proxy (every client, the
  producer included, connects through it), and `dagster dev -f benchmarks/soak_location.py`: webserver,
  daemon and code server, the schedule and the membership and topic sensors running;
- a producer writing `--rate` JSON events a second over the topic's partitions, one malformed value in 500;
- one fault plan, minute by minute (minute 0 warms up): one store transaction fails once at minute 1 (a
  PostgreSQL trigger on the ledger's insert, fired once through a sequence, which no rollback undoes); a
  random running worker run is SIGKILLed at a random moment of the first 22 seconds of minutes 1, 4, 7, ...
  (the minute's runs take about 25 s: the kill lands before, during or after its join, its read or its
  commit); the proxy goes down for `--outage-s` seconds at a random moment of minutes 2, 8, 14, ...

Then the producer stops and the group drains: the soak waits until the ledger has committed every record
the log holds and no worker run is in flight, samples memory, stops `dagster dev` and audits: the sink and
the quarantine against every offset of the log (lost, duplicated), the ledger against Kafka's committed
offsets and the materializations. Killed runs stay STARTED in Dagster: `dagster dev`'s default run
launcher does not watch its processes; the membership sensor reruns their slots when the members' sessions
expire (a run killed before joining or after leaving held nothing, and the next run of its slot reports what
it committed).

Memory is the resident set (VmRSS) of the daemon and the code server processes, sampled at the start of
minute 1 (the first batch and the first sensor ticks done: imports and caches warm) and at the end.

The script prints a report and, last, one JSON object (`--json-out` writes it to a file too). It exits
non-zero when a record was lost or duplicated, the audit found a problem, a planned fault did not happen
or a kill was never recovered, or (30 minutes or more) memory grew by 10% or more.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import sqlalchemy as sa
from confluent_kafka import Producer

from benchmarks.soak_location import SOAK_GROUP, SOAK_TOPIC
from cohort.assets.worker import GROUP_TAG, RERUN_TAG, SLOT_TAG
from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.devtools.embedded_broker import free_port
from cohort.devtools.topics import create_topic
from cohort.devtools.ui import sample_event, stop_process_group
from cohort.pipelines.kafka.client import watermarks
from harness.postgres import PostgresServer
from harness.reliability.broker_proxy import FaultProxy, broker_behind_proxy

__all__ = ["SoakPlan", "SoakReport", "main", "run_soak"]

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "benchmarks" / "RELIABILITY.md"
SECTION = "<!-- soak: the section below is written by `python -m benchmarks.soak --write` -->"
LOCATION = ROOT / "benchmarks" / "soak_location.py"
MEMORY_LIMIT = 0.10
"""The largest memory growth (end over start) a soak of 30 minutes or more may show."""
SECOND_HALF_LIMIT = 0.05
"""The largest memory growth over the second half (end over halfway) a soak of 2 hours or more may show."""
ACTIVE = {
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
}


@dataclass(frozen=True)
class SoakPlan:
    """How long, how fast and which faults when; `faults_at(minute)` is the plan, decided ahead."""

    minutes: int = 30
    rate_per_s: int = 40
    partitions: int = 4
    slots: int = 2
    kill_every: int = 3
    outage_every: int = 6
    outage_s: float = 25.0
    store_fault_minute: int = 1
    seed: int = 7

    def faults_at(self, minute: int) -> tuple[str, ...]:
        """The faults of `minute` (0-based), in the order they are armed."""
        faults = []
        if minute == self.store_fault_minute:
            faults.append("store")
        if minute % self.kill_every == 1:
            faults.append("kill")
        if minute % self.outage_every == 2:
            faults.append("broker")
        return tuple(faults)


@dataclass(frozen=True)
class Kill:
    """One SIGKILLed worker run and what the group knew of it then."""

    run_id: str
    slot: int | None
    at: float
    minute: int
    was_member: bool
    held: tuple[str, ...]


@dataclass(frozen=True)
class Recovery:
    """How a kill was recovered: the rerun the sensor requested (if any) and the slot's next commit."""

    run_id: str
    minute: int
    was_member: bool
    held: tuple[str, ...]
    rerun: str | None
    rerun_commit_s: float | None
    slot_commit_s: float | None


@dataclass(frozen=True)
class Outage:
    """The broker unreachable from `down` to `up` (epoch seconds)."""

    minute: int
    down: float
    up: float


@dataclass(frozen=True)
class Memory:
    """Resident memory (MiB) of one long-lived process of `dagster dev` at the start and the end."""

    role: str
    pid: int
    start_mib: float
    end_mib: float
    peak_mib: float
    half_mib: float = 0.0
    """At the start of the soak's second half (minute `minutes // 2`)."""

    @property
    def growth(self) -> float:
        return self.end_mib / self.start_mib - 1 if self.start_mib else 0.0

    @property
    def second_half_growth(self) -> float:
        return self.end_mib / self.half_mib - 1 if self.half_mib else 0.0


@dataclass(frozen=True)
class StartCost:
    """What batch runs spent at their start reporting earlier ranges (their audit-trail read), in ms: the
    median of the first and of the last `window` runs that logged it."""

    window: int
    first_ms: float
    last_ms: float
    runs: int

    @property
    def ratio(self) -> float:
        return self.last_ms / self.first_ms if self.first_ms else 0.0


@dataclass(frozen=True)
class RunCounts:
    """The group's Dagster runs, by how they were launched and how they ended."""

    launched: int
    scheduled: int
    reruns: int
    succeeded: int
    failed: int
    canceled: int
    killed: int
    failures: tuple[str, ...]


@dataclass
class SoakReport:
    """Everything the soak measured; `problems` lists what makes it fail."""

    plan: SoakPlan
    started: str
    seconds: float
    delivered: int
    producer_errors: int
    log_records: int
    in_sink: int
    quarantined: int
    lost: int
    duplicated: int
    runs: RunCounts
    kills: list[Recovery]
    outages: list[Outage]
    store_fault: str
    memory: list[Memory]
    drain_s: float
    start_cost: StartCost | None = None
    audit_problems: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def worst_rerun_commit_s(self) -> float | None:
        times = [k.rerun_commit_s for k in self.kills if k.rerun_commit_s is not None]
        return max(times) if times else None

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["worst_rerun_commit_s"] = self.worst_rerun_commit_s
        data["memory"] = [
            {**asdict(m), "growth": round(m.growth, 4), "second_half_growth": round(m.second_half_growth, 4)}
            for m in self.memory
        ]
        data["ok"] = self.ok
        return data


# --------------------------------------------------------------------------------------------- the producer


class SteadyProducer:
    """Writes `rate_per_s` demo events a second round-robin over the partitions with librdkafka's default
    batching (only `bootstrap.servers` set), one malformed value in `malformed_every`; counts deliveries."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate_per_s: int, malformed_every: int = 500):
        self.topic, self.partitions, self.rate, self.malformed_every = topic, partitions, rate_per_s, malformed_every
        self.delivered = 0
        self.errors: list[str] = []
        # log_level 2: librdkafka's connection errors while the broker is away would flood the report
        self._producer = Producer({"bootstrap.servers": bootstrap, "client.id": "soak-producer", "log_level": 2})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._write, name="soak-producer", daemon=True)

    def start(self) -> SteadyProducer:
        self._thread.start()
        return self

    def stop(self, flush_s: float = 300.0) -> None:
        """Stop writing and wait until every record written is delivered (or failed)."""
        self._stop.set()
        self._thread.join()
        left = self._producer.flush(flush_s)
        if left:
            self.errors.append(f"{left} records still undelivered after {flush_s:.0f} s")

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is None:
            self.delivered += 1
        else:
            self.errors.append(str(err))

    def _write(self) -> None:
        sequence, per_tick, due = 0, max(1, self.rate // 10), time.monotonic()
        while not self._stop.is_set():
            for _ in range(per_tick):
                value = b"{not json" if sequence % self.malformed_every == self.malformed_every - 1 else None
                self._producer.produce(
                    self.topic,
                    value=value or sample_event(sequence),
                    partition=sequence % self.partitions,
                    on_delivery=self._delivered,
                )
                sequence += 1
            self._producer.poll(0)
            due += 0.1
            self._stop.wait(max(0.0, due - time.monotonic()))


# ------------------------------------------------------------------------------------ dagster dev and its runs


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def dagster_dev(root: Path, env: Mapping[str, str], port: int, timeout_s: float = 240.0) -> Iterator[int]:
    """`dagster dev` on the soak location; yields its process (group) id."""
    dagster = str(Path(sys.executable).parent / "dagster")
    command = ["env", "--default-signal=INT", dagster, "dev", "-f", str(LOCATION), "-h", "127.0.0.1", "-p", str(port)]
    log = open(root / "dagster-dev.log", "wb")  # noqa: SIM115 - closed below, after the child
    process = subprocess.Popen(
        command, cwd=ROOT, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + timeout_s
        while not _ready(f"http://127.0.0.1:{port}/server_info"):
            if process.poll() is not None:
                raise RuntimeError(f"dagster dev exited with {process.returncode}; see {root / 'dagster-dev.log'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"dagster dev did not answer within {timeout_s:.0f} s")
            time.sleep(1)
        yield process.pid
    finally:
        stop_process_group(process)
        log.close()


def _session_processes(session: int) -> dict[int, str]:
    """pid -> command line of every process in the session `session` (dagster dev and its children)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == session:  # after the command: state, ppid, pgrp, session
            found[int(entry.name)] = command
    return found


def long_lived_processes(session: int) -> dict[str, int]:
    """role -> pid of the daemon and the code server(s) of a `dagster dev` session (run workers excluded)."""
    roles: dict[str, int] = {}
    for pid, command in sorted(_session_processes(session).items()):
        if "execute_run" in command or "java" in command.split(" ")[0]:
            continue
        if ("dagster._daemon run" in command) or ("dagster-daemon run" in command):
            roles["daemon"] = pid
        elif "api grpc" in command:  # loads the definitions, evaluates the sensors and the schedule
            roles[f"code server (gRPC, pid {pid})" if "code server" in roles else "code server"] = pid
        elif "code-server start" in command:  # the proxy dagster dev keeps in front of it
            roles["code server proxy"] = pid
        elif "dagster_webserver" in command or "dagster-webserver" in command:
            roles["webserver"] = pid
    return roles


def rss_mib(pid: int) -> float:
    """The resident set of `pid` in MiB (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _children() -> dict[int, list[int]]:
    """ppid -> pids of every process."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            tree.setdefault(int(stat[stat.rindex(")") + 2 :].split()[1]), []).append(int(entry.name))
    return tree


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants (a run worker: its step processes, their Spark JVM and Python workers)."""
    tree, found, todo = _children(), [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(tree.get(current, ()))
    return found


def run_pid(instance: dg.DagsterInstance, run_id: str) -> int | None:
    """The pid of a run's process, from its engine event "Started process for run (pid: N)"."""
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        event = record.dagster_event
        metadata = event.engine_event_data.metadata if event and event.engine_event_data else {}
        if "pid" in metadata:
            return int(metadata["pid"].value)  # type: ignore[union-attr]
    return None


def group_runs(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    return list(instance.get_runs(filters=dg.RunsFilter(tags={GROUP_TAG: SOAK_GROUP})))


def _failure_line(instance: dg.DagsterInstance, run_id: str) -> str:
    """The root cause of a failed run's first step (or run) failure, on one line."""
    failures = {dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE}
    for entry in instance.all_logs(run_id):
        event = entry.dagster_event
        if event is not None and event.event_type in failures:
            error = getattr(event.event_specific_data, "error", None)
            while error is not None and (error.cause or error.context) is not None:
                error = error.cause or error.context
            text = error.message if error is not None else entry.message
            return " ".join(str(text).split())[:240]
    return "no failure event"


def start_costs(instance: dg.DagsterInstance, window: int = 10) -> StartCost | None:
    """The audit-trail read time the group's batch runs logged, first `window` runs against the last."""
    from statistics import median

    from cohort.assets.group_batch import TRAIL_READ_LOG

    found: list[tuple[float, float]] = []
    for run in group_runs(instance):
        for entry in instance.all_logs(run.run_id):
            if entry.dagster_event is None and entry.user_message.startswith(TRAIL_READ_LOG):
                found.append((entry.timestamp, float(entry.user_message[len(TRAIL_READ_LOG) :].split()[0])))
                break
    if len(found) < 2 * window:
        return None
    found.sort()
    return StartCost(
        window=window,
        first_ms=round(median(ms for _at, ms in found[:window]), 1),
        last_ms=round(median(ms for _at, ms in found[-window:]), 1),
        runs=len(found),
    )


def count_runs(instance: dg.DagsterInstance, killed: set[str]) -> RunCounts:
    runs = group_runs(instance)
    status = [r.status for r in runs]
    failed = [r for r in runs if r.status == dg.DagsterRunStatus.FAILURE and r.run_id not in killed]
    return RunCounts(
        launched=len(runs),
        scheduled=sum("dagster/schedule_name" in r.tags for r in runs),
        reruns=sum(RERUN_TAG in r.tags for r in runs),
        succeeded=status.count(dg.DagsterRunStatus.SUCCESS),
        failed=len(failed),
        canceled=status.count(dg.DagsterRunStatus.CANCELED),
        killed=len(killed),
        failures=tuple(
            f"{r.run_id[:8]} slot {r.tags.get(SLOT_TAG)}: {_failure_line(instance, r.run_id)}" for r in failed
        ),
    )


# -------------------------------------------------------------------------------------------------- faults


STORE_FAULT = """
CREATE SEQUENCE IF NOT EXISTS soak_store_fault;
CREATE OR REPLACE FUNCTION soak_fail_once() RETURNS trigger AS $$
BEGIN
  IF nextval('soak_store_fault') = 1 THEN
    RAISE EXCEPTION 'soak: one store transaction made to fail';
  END IF;
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER soak_fail_once BEFORE INSERT ON cohort_offset_ranges FOR EACH ROW EXECUTE FUNCTION soak_fail_once();
"""
"""The first ledger insert after arming fails; the sequence (not transactional) keeps every later one passing."""


def arm_store_fault(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(STORE_FAULT)


def store_fault_fired(engine: sa.Engine) -> bool:
    with engine.connect() as conn:
        row = conn.exec_driver_sql("SELECT is_called FROM soak_store_fault").first()
    return bool(row and row[0])


def kill_a_run(
    instance: dg.DagsterInstance, coordinator: Coordinator, rng: random.Random, killed: set[str], minute: int
) -> Kill | None:
    """SIGKILL one running worker run of the group, chosen at random; None if none is running."""
    running = [r for r in group_runs(instance) if r.status == dg.DagsterRunStatus.STARTED and r.run_id not in killed]
    rng.shuffle(running)
    for run in running:
        pid = run_pid(instance, run.run_id)
        if pid is None:
            continue
        if not Path(f"/proc/{pid}").exists():
            continue  # it has just ended
        members = {m.client_id: m for m in coordinator.describe_group(SOAK_GROUP).members}
        for victim in process_tree(pid):  # the whole run at once, as when its host or container dies
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        member = members.get(run.run_id)
        slot = run.tags.get(SLOT_TAG, "")
        return Kill(
            run_id=run.run_id,
            slot=int(slot) if slot.isdigit() else None,
            at=time.time(),
            minute=minute,
            was_member=member is not None,
            held=tuple(str(tp) for tp in member.assigned) if member is not None else (),
        )
    return None


def recoveries(instance: dg.DagsterInstance, coordinator: Coordinator, kills: list[Kill]) -> list[Recovery]:
    """For each kill: the rerun the membership sensor requested and its first commit, and the first commit
    of the killed run's slot after the kill (whichever run of the slot made it)."""
    runs = group_runs(instance)
    history = [
        entry
        for p in range(coordinator.describe_group(SOAK_GROUP).partitions_per_topic.get(SOAK_TOPIC, 0))
        for entry in coordinator.ledger_history(SOAK_GROUP, SOAK_TOPIC, p)
    ]
    found = []
    for kill in kills:
        rerun = next((r.run_id for r in runs if r.tags.get(RERUN_TAG) == kill.run_id), None)
        rerun_commits = [e.committed_at for e in history if rerun and e.run_id == rerun]
        slot_id = f"{SOAK_GROUP}/worker-{kill.slot}"
        slot_commits = [e.committed_at for e in history if e.instance_id == slot_id and e.committed_at > kill.at]
        found.append(
            Recovery(
                run_id=kill.run_id,
                minute=kill.minute,
                was_member=kill.was_member,
                held=kill.held,
                rerun=rerun,
                rerun_commit_s=round(min(rerun_commits) - kill.at, 1) if rerun_commits else None,
                slot_commit_s=round(min(slot_commits) - kill.at, 1) if slot_commits else None,
            )
        )
    return found


# ------------------------------------------------------------------------------------------------ the soak


def _log(message: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


def _ends(bootstrap: str, partitions: int) -> dict[TopicPartition, int]:
    tps = [TopicPartition(SOAK_TOPIC, p) for p in range(partitions)]
    return {tp: end for tp, (_low, end) in watermarks({"bootstrap.servers": bootstrap}, tps).items()}


def _committed_all(bootstrap: str, coordinator: Coordinator, partitions: int) -> bool:
    """Every record in the log committed by the ledger."""
    ends = _ends(bootstrap, partitions)
    committed = coordinator.fetch_offsets(SOAK_GROUP, list(ends))
    return all(committed.get(tp) == end for tp, end in ends.items())


def _in_flight(instance: dg.DagsterInstance, killed: set[str]) -> bool:
    return any(r.status in ACTIVE and r.run_id not in killed for r in group_runs(instance))


def run_soak(plan: SoakPlan, workdir: Path) -> SoakReport:
    """Run the whole soak under `workdir` and return its report."""
    from cohort.pipelines.spark import build_session
    from cohort.resources.kafka import KafkaResource
    from harness.reliability.outcome import audit_delivery

    rng = random.Random(plan.seed)
    started = datetime.now(UTC)
    began = time.monotonic()
    (workdir / "postgres").mkdir()
    postgres = PostgresServer(workdir / "postgres")
    postgres.start()
    kills: list[Kill] = []
    outages: list[Outage] = []
    memory_start: dict[str, tuple[int, float]] = {}
    memory_half: dict[str, float] = {}
    peaks: dict[str, float] = {}
    memory: list[Memory] = []
    try:
        store_url = postgres.url()
        coordinator = Coordinator.from_url(store_url)  # creates the schema the fault trigger attaches to
        engine = sa.create_engine(store_url)
        with broker_behind_proxy(workdir / "broker") as (_broker, proxy):
            bootstrap = proxy.bootstrap
            create_topic({"bootstrap.servers": bootstrap}, SOAK_TOPIC, plan.partitions)
            env = {
                "COHORT_BOOTSTRAP_SERVERS": bootstrap,
                "COHORT_STORE_URL": store_url,
                "COHORT_SINK": str(workdir / "lake"),
                "COHORT_SOAK_SLOTS": str(plan.slots),
                "DAGSTER_HOME": str(workdir / "dagster"),
                "PYSPARK_PYTHON": sys.executable,
                "PYSPARK_DRIVER_PYTHON": sys.executable,
            }
            Path(env["DAGSTER_HOME"]).mkdir(parents=True)
            producer = SteadyProducer(bootstrap, SOAK_TOPIC, plan.partitions, plan.rate_per_s).start()
            with dagster_dev(workdir, env, free_port()) as session:
                instance = dg.DagsterInstance.from_config(env["DAGSTER_HOME"])
                _log(f"dagster dev up (session {session}); {plan.minutes} minutes of batches and faults")
                first = ((int(time.time()) + 20) // 60 + 1) * 60  # the daemon's first tick: a full minute ahead
                for minute in range(plan.minutes):
                    start = first + 60 * minute
                    _wait_until(start, session, peaks)
                    if minute == 1:
                        roles = long_lived_processes(session)
                        memory_start = {role: (pid, rss_mib(pid)) for role, pid in roles.items()}
                        _log(f"memory at start: { {r: round(m, 1) for r, (_p, m) in memory_start.items()} } MiB")
                    if minute == plan.minutes // 2 and minute > 1:
                        memory_half = {role: rss_mib(pid) for role, (pid, _m) in memory_start.items()}
                        _log(f"memory halfway: { {r: round(m, 1) for r, m in memory_half.items()} } MiB")
                    faults = plan.faults_at(minute)
                    _log(f"minute {minute}: faults {list(faults) or 'none'}")
                    _minute(plan, faults, minute, start, rng, instance, coordinator, engine, proxy, kills, outages)
                _wait_until(first + 60 * plan.minutes, session, peaks)
                producer.stop()
                _log(f"producer stopped: {producer.delivered} delivered, {len(producer.errors)} errors; draining")
                drain_start = time.monotonic()
                killed = {k.run_id for k in kills}
                settled = 0  # checks in a row that found everything committed
                while True:  # drained: everything committed and no run in flight, or committed for 30 s (on a
                    # loaded machine a batch may outlast the schedule's minute: a run is always in flight)
                    settled = settled + 1 if _committed_all(bootstrap, coordinator, plan.partitions) else 0
                    if (settled and not _in_flight(instance, killed)) or settled > 3:
                        break
                    if time.monotonic() - drain_start > 600:
                        break
                    _wait_until(time.time() + 10, session, peaks)
                drain_s = time.monotonic() - drain_start
                for role, (pid, start_mib) in memory_start.items():
                    memory.append(
                        Memory(
                            role,
                            pid,
                            round(start_mib, 1),
                            round(rss_mib(pid), 1),
                            peaks.get(role, 0.0),
                            round(memory_half.get(role, 0.0), 1),
                        )
                    )
            _log("dagster dev stopped; auditing")
            runs = count_runs(instance, killed)
            start_cost = start_costs(instance)
            recovered = recoveries(instance, coordinator, kills)
            ends = _ends(bootstrap, plan.partitions)
            spark = build_session(master="local[1]", conf={"spark.ui.enabled": "false"})
            try:
                audit = audit_delivery(
                    spark,
                    sink=env["COHORT_SINK"],
                    produced={SOAK_TOPIC: {tp.partition: end for tp, end in ends.items()}},
                    coordinator=coordinator,
                    group=SOAK_GROUP,
                    kafka=KafkaResource(bootstrap_servers=bootstrap),
                    instance=instance,
                )
            finally:
                spark.stop()
            fired = store_fault_fired(engine) if plan.store_fault_minute < plan.minutes else False
    finally:
        postgres.stop()
    report = SoakReport(
        plan=plan,
        started=f"{started:%Y-%m-%d %H:%M} UTC",
        seconds=round(time.monotonic() - began, 1),
        delivered=producer.delivered,
        producer_errors=len(producer.errors),
        log_records=sum(ends.values()),
        in_sink=audit.in_sink,
        quarantined=audit.quarantined,
        lost=audit.lost,
        duplicated=audit.duplicated,
        runs=runs,
        kills=recovered,
        outages=outages,
        store_fault=_store_fault_outcome(fired, runs),
        memory=memory,
        drain_s=round(drain_s, 1),
        audit_problems=list(audit.problems),
        start_cost=start_cost,
    )
    report.problems = judge(report, drained=drain_s <= 600)
    return report


def _store_fault_outcome(fired: bool, runs: RunCounts) -> str:
    if not fired:
        return "not fired"
    failed = [f for f in runs.failures if "made to fail" in f]
    return f"fired; failed run {failed[0]}" if failed else "fired; absorbed by a retry (no run failed of it)"


def _wait_until(when: float, session: int, peaks: dict[str, float]) -> None:
    """Sleep until `when` (epoch seconds), sampling the long-lived processes' memory every 5 s."""
    while (left := when - time.time()) > 0:
        for role, pid in long_lived_processes(session).items():
            peaks[role] = round(max(peaks.get(role, 0.0), rss_mib(pid)), 1)
        time.sleep(min(5.0, left))


def _minute(
    plan: SoakPlan,
    faults: tuple[str, ...],
    minute: int,
    start: float,
    rng: random.Random,
    instance: dg.DagsterInstance,
    coordinator: Coordinator,
    engine: sa.Engine,
    proxy: FaultProxy,
    kills: list[Kill],
    outages: list[Outage],
) -> None:
    """Apply one minute's faults at random moments of it (each decided when the minute starts)."""
    agenda: list[tuple[float, str]] = []
    if "store" in faults:
        agenda.append((start + 1, "store"))
    if "kill" in faults:
        agenda.append((start + rng.uniform(4, 22), "kill"))  # the minute's runs last about 25 s
    if "broker" in faults:
        agenda.append((start + rng.uniform(5, 30), "broker"))
    for when, fault in sorted(agenda):
        time.sleep(max(0.0, when - time.time()))
        if fault == "store":
            arm_store_fault(engine)
            _log("store: the next ledger insert fails")
        elif fault == "kill":
            kill = None
            while kill is None and time.time() < start + 58:
                kill = kill_a_run(instance, coordinator, rng, {k.run_id for k in kills}, minute)
                if kill is None:
                    time.sleep(2)
            if kill is not None:
                kills.append(kill)
                _log(f"SIGKILL run {kill.run_id[:8]} (slot {kill.slot}, member: {kill.was_member}, held {kill.held})")
            else:
                _log("no worker run was running to kill this minute")
        elif fault == "broker":
            proxy.down()
            down = time.time()
            _log(f"broker unreachable for {plan.outage_s:.0f} s")
            time.sleep(plan.outage_s)
            proxy.up()
            outages.append(Outage(minute, down, time.time()))
            _log("broker reachable again")


def judge(report: SoakReport, *, drained: bool) -> list[str]:
    """What makes the soak fail."""
    plan, problems = report.plan, []
    if report.lost or report.duplicated:
        problems.append(f"{report.lost} records lost, {report.duplicated} duplicated")
    problems.extend(report.audit_problems)
    if not drained:
        problems.append("the group did not drain within 10 minutes after the producer stopped")
    if report.producer_errors:
        problems.append(f"the producer reported {report.producer_errors} delivery errors")
    planned_kills = sum("kill" in plan.faults_at(m) for m in range(plan.minutes))
    if len(report.kills) < planned_kills:
        problems.append(f"{len(report.kills)} of {planned_kills} planned kills happened")
    problems.extend(
        f"killed run {k.run_id[:8]}: its slot never committed again" for k in report.kills if k.slot_commit_s is None
    )
    holders = [k for k in report.kills if k.held]
    if holders and all(k.rerun is None for k in holders):
        # a lost slot is rerun by the membership sensor, unless a batch of the slot is already in flight (it
        # resumes from the committed offsets): at least one kill of a member must have been rerun
        problems.append(f"none of the {len(holders)} killed runs that held partitions was rerun")
    planned_outages = sum("broker" in plan.faults_at(m) for m in range(plan.minutes))
    if len(report.outages) < planned_outages:
        problems.append(f"{len(report.outages)} of {planned_outages} planned broker outages happened")
    if plan.store_fault_minute < plan.minutes and report.store_fault == "not fired":
        problems.append("the store fault never fired")
    if not report.memory:
        problems.append("the daemon and code server processes were not found")
    if plan.minutes >= 30:
        problems.extend(
            f"{m.role} memory grew {m.growth:.1%} ({m.start_mib} -> {m.end_mib} MiB)"
            for m in report.memory
            if m.growth >= MEMORY_LIMIT
        )
    if plan.minutes >= 120:
        problems.extend(
            f"{m.role} memory grew {m.second_half_growth:.1%} over the second half ({m.half_mib} -> {m.end_mib} MiB)"
            for m in report.memory
            if m.second_half_growth >= SECOND_HALF_LIMIT
        )
    return problems


# ------------------------------------------------------------------------------------------------- output


def render(report: SoakReport, command: str) -> str:
    """The RELIABILITY.md section of a soak."""
    plan, runs = report.plan, report.runs
    worst = report.worst_rerun_commit_s
    lines = [
        SECTION,
        "## Soak under the real daemon",
        "",
        f"Produced by `benchmarks/soak.py` on {report.started}: {plan.minutes} minutes of batches and faults, then "
        f"the drain ({report.drain_s:.0f} s), {report.seconds / 60:.1f} minutes in all, on the 2-core machine, "
        "from the repository root with the project's venv:",
        "",
        "```",
        command,
        "```",
        "",
        f"`dagster dev` (webserver, daemon, code server) on one group of {plan.slots} worker slots over a topic of "
        f"{plan.partitions} partitions, a batch a minute (the schedule launches a run per slot), the membership and "
        f"topic sensors running, PostgreSQL as the store. A producer wrote {plan.rate_per_s} records a second "
        "with librdkafka's default batching throughout, one malformed value in 500.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| records delivered to the producer / in the log | {report.delivered} / {report.log_records} |",
        f"| in the sink / quarantined | {report.in_sink} / {report.quarantined} |",
        f"| lost / duplicated | {report.lost} / {report.duplicated} |",
        f"| ledger = Kafka's committed offsets = materializations | "
        f"{'yes' if not report.audit_problems else '; '.join(report.audit_problems[:3])} |",
        f"| runs launched (scheduled / reruns) | {runs.launched} ({runs.scheduled} / {runs.reruns}) |",
        f"| runs succeeded / failed / canceled / SIGKILLed | {runs.succeeded} / {runs.failed} / {runs.canceled} / "
        f"{runs.killed} |",
        f"| kills / broker outages ({plan.outage_s:.0f} s) / failed store transactions | {len(report.kills)} / "
        f"{len(report.outages)} / {0 if report.store_fault == 'not fired' else 1} |",
        f"| worst kill -> rerun's commit | {'n/a' if worst is None else f'{worst:.0f} s'} |",
    ]
    for m in report.memory:
        lines.append(
            f"| {m.role} RSS start -> halfway -> end (peak) | {m.start_mib:.0f} -> {m.half_mib:.0f} -> "
            f"{m.end_mib:.0f} MiB ({m.peak_mib:.0f}), {m.growth:+.1%} in all, {m.second_half_growth:+.1%} over "
            "the second half |"
        )
    cost = report.start_cost
    if cost is not None:
        lines.append(
            f"| run start: audit-trail read, median of the first / last {cost.window} of {cost.runs} runs | "
            f"{cost.first_ms:.0f} / {cost.last_ms:.0f} ms ({cost.ratio:.2f}x) |"
        )
    lines += [
        "",
        "Kills:",
        "",
        "| minute | member then | partitions held | rerun | kill -> rerun's commit | kill -> slot's next commit |",
        "|---|---|---|---|---|---|",
    ]
    for k in report.kills:
        lines.append(
            f"| {k.minute} | {'yes' if k.was_member else 'no'} | {', '.join(k.held) or '-'} | "
            f"{k.rerun[:8] if k.rerun else 'none'} | {_seconds(k.rerun_commit_s)} | {_seconds(k.slot_commit_s)} |"
        )
    lines += ["", f"The store fault: {report.store_fault}.", ""]
    if runs.failures:
        lines += ["Failed runs (first line of their failure):", ""]
        lines += [f"- {f}" for f in runs.failures]
        lines.append("")
    lines += [
        "How to read it: a killed run stays STARTED in Dagster (`dagster dev`'s default run launcher does not "
        "watch its processes); the membership sensor sees its member's session expire and requests a rerun of "
        "its slot. A run killed before it joined or after it left held no partitions and needs no rerun: the "
        "next run of its slot reports what it committed. Runs failed by the broker outage or the store fault "
        "are rerun by the sensor (a failed rerun is left to the next scheduled batch). Memory is the resident "
        "set at the start of minute 1, halfway and after the drain; the targets are growth under 10% over 30 "
        "minutes or more and, for 2 hours or more, under 5% over the second half. The run start is what each "
        "batch run spends before its batch reporting ranges no run reported (it reads only what changed since "
        "each partition's trail mark, so it stays level as the history grows).",
        "",
    ]
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f} s"


def write_section(text: str) -> None:
    """Replace the soak section of RELIABILITY.md (everything from its marker on), or append it."""
    current = OUTPUT.read_text() if OUTPUT.exists() else ""
    head = current.split(SECTION)[0].rstrip("\n")
    OUTPUT.write_text(f"{head}\n\n{text}" if head else text)


def _stop(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt("SIGTERM")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=int, default=30, help="minutes of batches and faults (default 30)")
    parser.add_argument("--rate", type=int, default=40, help="records produced a second (default 40)")
    parser.add_argument("--outage-s", type=float, default=25.0, help="seconds the broker is unreachable")
    parser.add_argument("--seed", type=int, default=7, help="seed of the random choices (which run, when)")
    parser.add_argument("--json-out", type=Path, help="also write the JSON report to this file")
    parser.add_argument("--write", action="store_true", help=f"write the figures into {OUTPUT.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    if args.minutes < 3:
        parser.error("--minutes must be 3 or more (minute 0 warms up, 1 and 2 carry the faults)")
    plan = SoakPlan(minutes=args.minutes, rate_per_s=args.rate, outage_s=args.outage_s, seed=args.seed)
    signal.signal(signal.SIGTERM, _stop)  # stopped from outside: clean up dagster dev, the broker, PostgreSQL
    with tempfile.TemporaryDirectory(prefix="cohort-soak-", dir="/tmp") as workdir:
        report = run_soak(plan, Path(workdir))
    data = report.as_json()
    command = "python -m benchmarks.soak " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    text = render(report, command.strip())
    print(text)
    if args.write:
        write_section(text)
    if args.json_out:
        args.json_out.write_text(json.dumps(data, indent=1))
    print(json.dumps(data))
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
