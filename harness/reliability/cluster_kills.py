"""A partition's leader SIGKILLed under a group's batches, on a three-node Kafka cluster (harness/kafka_cluster.py).

The SIGKILL matrix (harness/reliability/faults.py) kills the worker at a named point of its batch; here the worker
lives and a broker dies, at the same points, through the same kind of wrapper at the same boundary
(`fault_points.POINTS`, installed by harness/reliability/cluster_worker.py):

- `mid-read`: the executor-side `read_range`, after the first Arrow batch of a span with more left to read: the node
  leading that span's partition is SIGKILLed while the task waits, then the task reads the rest of the span (and the
  other tasks every partition that node led) while Kafka elects new leaders. The scenario's consumers keep little
  ahead of the reader (`BOUNDED_PREFETCH`), so the records after the kill do come from the new leader, not from a
  local queue;
- `after-commit`: the batch's Kafka mirror, on entry (the ledger has the commit): the node coordinating the group
  (leading the `__consumer_offsets` partition of the group id, and partitions of the topic too) is SIGKILLed, then
  the real mirror runs against the cluster that lost it.

One scenario (`run_cluster_kill_scenario`): a topic with replication factor 3 and `PARTITIONS` partitions; JSON
records (two malformed) produced with `acks=all` and librdkafka's default batching in several rounds (so each
partition holds many record batches), every delivery report kept; a group of two worker slots, each run through
`cohort.runtime.slot_batch.run_slot_batch` (the core of a Dagster worker run and of an Airflow slot task) on a
SQLite store. The first run, both slots on threads of a worker process of their own (`cluster_worker`, its own
Spark), meets the kill, which this process makes (it owns the cluster) when the worker claims it; the run may
complete, fail, or take its process down. The killed node is then restarted or left dead (the cluster tolerates
one loss: replication 3, min.insync.replicas 2); more records are produced (acks=all: two live replicas
acknowledge them); the next run of both slots, in this process on the caller's Spark, must complete. The report
compares the sink and the quarantine with every acknowledged record (lost, duplicated, unexpected), the ledger with
the log ends, and Kafka's committed offsets with the ledger.

Why a process of its own: librdkafka 2.16 aborts the process (`rd_kafka_enq_once_del_source_return: Assertion
eonce->refcnt > 0 failed`) when an admin request to a group coordinator fails because the coordinator's connection
went away, which is what the Kafka mirror's AlterConsumerGroupOffsets meets when the coordinator dies under it
(librdkafka issue 4605, fix proposed in pull request 5397). In the test process that would end the test run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cohort.assignment.worker_group import WorkerGroup
from cohort.common.types import TopicPartition
from cohort.pipelines.kafka.mirror import kafka_committed
from cohort.pipelines.spec import PipelineSpec
from cohort.resources import KafkaResource
from cohort.runtime.kafka_access import KafkaAccess
from cohort.runtime.slot_batch import SlotRun, run_slot_batch
from harness.dagster_group import VALUE_SCHEMA, json_records
from harness.kafka_cluster import KafkaCluster
from harness.reliability.fault_points import fault_point
from harness.reliability.outcome import DeliveryAudit, audit_delivery

__all__ = [
    "BOUNDED_PREFETCH",
    "KILL_POINTS",
    "MALFORMED",
    "MORE_RECORDS",
    "PARTITIONS",
    "RECORDS",
    "BrokerKill",
    "ClusterKillReport",
    "ClusterScenario",
    "LeaderKiller",
    "SlotOutcome",
    "WorkerExit",
    "coordinator_partition",
    "produce_acked",
    "run_cluster_kill_scenario",
]

LOG = logging.getLogger("harness.cluster_kills")
ROOT = Path(__file__).resolve().parents[2]
KILL_POINTS = ("mid-read", "after-commit")
"""The fault points (`fault_points.POINTS` keys) where a broker dies here."""
PARTITIONS = 6
SLOTS = 2
RECORDS = 1200
MORE_RECORDS = 300
ROUNDS = 20
MALFORMED = frozenset({7, 610})
BOUNDED_PREFETCH: dict[str, Any] = {"max.partition.fetch.bytes": 1024, "queued.min.messages": 20}
"""The reading consumers fetch one record batch at a time and keep about 20 records ahead: a span read when its
leader dies must fetch the rest from the new leader (librdkafka's defaults would have the whole partition queued)."""
CONSUME_BATCH = 20
WORKER_TIMEOUT_S = 480.0


def _java_hash(text: str) -> int:
    """Java's String.hashCode (as an int32) of a string of the Basic Multilingual Plane."""
    h = 0
    for char in text:
        h = (31 * h + ord(char)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(group: str, partitions: int) -> int:
    """The `__consumer_offsets` partition of `group` (Kafka's `Utils.abs(group.hashCode()) % partitions`): its leader
    is the group's coordinator, which takes the group's offset commits."""
    h = _java_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def produce_acked(
    config: Mapping[str, Any], topic: str, records: Sequence[tuple[int, bytes, bytes]], *, rounds: int = 1
) -> dict[tuple[int, int], bytes]:
    """Produce `records` with `acks=all` and librdkafka's default batching, in `rounds` flushes (each partition gets a
    record batch per round, as a producer writing over time does); returns every acknowledged record's (partition,
    offset) and value. A record not acknowledged within the flush is an AssertionError."""
    producer = Producer({**config, "acks": "all"})
    acked: dict[tuple[int, int], bytes] = {}
    failed: list[str] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            acked[(int(msg.partition()), int(msg.offset()))] = bytes(msg.value())

    size = max(1, -(-len(records) // rounds))
    for start in range(0, len(records), size):
        for partition, key, value in records[start : start + size]:
            producer.produce(topic, value=value, key=key, partition=partition, on_delivery=on_delivery)
        remaining = producer.flush(120.0)
        if remaining or failed:
            raise AssertionError(f"producing to {topic}: {remaining} undelivered, failed: {failed[:3]}")
    return acked


class _Lines:
    """A `SlotLog` keeping every line (and logging it)."""

    def __init__(self, slot: int) -> None:
        self.slot = slot
        self.lines: list[str] = []

    def _say(self, level: int, msg: str) -> None:
        self.lines.append(msg)
        LOG.log(level, f"slot {self.slot}: {msg}")

    def info(self, msg: str, /) -> None:
        self._say(logging.INFO, msg)

    def warning(self, msg: str, /) -> None:
        self._say(logging.WARNING, msg)

    def error(self, msg: str, /) -> None:
        self._say(logging.ERROR, msg)


@dataclass(frozen=True)
class SlotOutcome:
    """One slot's batch in one run: whether it completed, what it read and committed, how long it took."""

    slot: int
    ok: bool
    seconds: float
    error: str = ""
    assignment: tuple[int, ...] = ()
    records: int = 0
    quarantined: int = 0
    mirror_error: str | None = None
    attempts: int = 0
    lines: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> SlotOutcome:
        return cls(**{**raw, "assignment": tuple(raw["assignment"]), "lines": tuple(raw["lines"])})


@dataclass(frozen=True)
class ClusterScenario:
    """What both processes of a scenario need (serializable): the cluster's address, the topic, the group's name,
    the working folder (store, sink, the kill's marker files) and the fault point."""

    bootstrap: str
    topic: str
    group_name: str
    workdir: str
    point: str

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ClusterScenario:
        return cls(**json.loads(text))

    @property
    def claim(self) -> str:
        """The marker the worker creates to have the broker killed (JSON: which partition or group)."""
        return str(Path(self.workdir) / "kill" / "claim.json")

    @property
    def release(self) -> str:
        """The marker this process creates once the broker is dead."""
        return str(Path(self.workdir) / "kill" / "released")

    @property
    def result(self) -> str:
        return str(Path(self.workdir) / "first-run.json")

    @property
    def config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap}

    @property
    def tps(self) -> list[TopicPartition]:
        return [TopicPartition(self.topic, p) for p in range(PARTITIONS)]

    def group(self) -> WorkerGroup:
        return WorkerGroup(
            self.group_name,
            topics=(self.topic,),
            worker_slots=SLOTS,
            store_url=f"sqlite:///{Path(self.workdir) / 'cohort.db'}",
            initial_rebalance_delay_s=3.0,  # both slots join the first generation: 3 + 3 partitions
            session_timeout_s=30.0,
            heartbeat_interval_s=0.5,
            rebalance_timeout_s=120.0,
            progress_timeout_s=120.0,
            join_timeout_s=90.0,
        )

    def spec(self) -> PipelineSpec:
        return PipelineSpec(
            sink_path=str(Path(self.workdir) / "lake"),
            value_format="json",
            value_schema=VALUE_SCHEMA,
            consume_batch_size=CONSUME_BATCH,
            consumer_config=BOUNDED_PREFETCH,
        )

    def run_slot(self, spark: Any, slot: int, runner: Any) -> SlotOutcome:
        """Worker slot `slot`'s batch, as a face runs it: its member, `run_slot_batch`, then leaving the group."""
        group = self.group()
        kafka = KafkaAccess(self.config)
        coordinator = group.open_coordinator()
        log = _Lines(slot)
        began = time.monotonic()
        try:
            member = group.member(
                coordinator,
                slot,
                run_id=f"run-{uuid.uuid4().hex[:12]}",
                topic_metadata=lambda: kafka.subscribed_partition_counts(group.topics, group.topic_pattern),
                log_offsets=kafka.watermarks,
            )
            run = SlotRun(slot, member.client_id or "", self.spec(), kafka, lambda: spark, log, runner=runner)
            try:
                done = run_slot_batch(member, run)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"[:2000]
                return SlotOutcome(slot, False, time.monotonic() - began, error, lines=tuple(log.lines))
            done.leave()
            result = done.result
            return SlotOutcome(
                slot,
                True,
                round(time.monotonic() - began, 1),
                assignment=tuple(sorted(tp.partition for tp in done.assignment)),
                records=result.records if result else 0,
                quarantined=result.quarantined if result else 0,
                mirror_error=result.mirror_error if result else None,
                attempts=done.attempts,
                lines=tuple(log.lines),
            )
        finally:
            kafka.close()
            coordinator.close()

    def run_group(self, spark: Any, runner: Any = None) -> tuple[SlotOutcome, ...]:
        """Every slot's batch at once, on threads (they join one generation: the initial rebalance delay)."""
        with ThreadPoolExecutor(SLOTS, thread_name_prefix="slot") as pool:
            futures = [pool.submit(self.run_slot, spark, slot, runner) for slot in range(1, SLOTS + 1)]
            return tuple(f.result(timeout=WORKER_TIMEOUT_S) for f in futures)

    def write_result(self, outcomes: Sequence[SlotOutcome]) -> None:
        staging = Path(f"{self.result}.partial")
        staging.write_text(json.dumps([asdict(o) for o in outcomes]))
        staging.rename(self.result)

    def read_result(self) -> tuple[SlotOutcome, ...]:
        path = Path(self.result)
        return tuple(SlotOutcome.from_dict(o) for o in json.loads(path.read_text())) if path.exists() else ()


@dataclass(frozen=True)
class BrokerKill:
    """The node a scenario SIGKILLed: where, when (time.time()), why it was chosen, the topic's partitions it led."""

    point: str
    node: int
    at: float
    reason: str
    led: tuple[int, ...]
    restarted_s: float | None = None


class LeaderKiller:
    """This process's side of the kill: a thread that waits for the worker's claim, SIGKILLs the node it names (the
    leader of the partition being read, or the group's coordinator) and releases the worker."""

    def __init__(self, cluster: KafkaCluster, scenario: ClusterScenario) -> None:
        fault_point(scenario.point)
        if scenario.point not in KILL_POINTS:
            raise ValueError(f"no broker kill at {scenario.point!r}; known: {list(KILL_POINTS)}")
        self.cluster, self.scenario = cluster, scenario
        self.claim, self.release = Path(scenario.claim), Path(scenario.release)
        self.claim.parent.mkdir(parents=True, exist_ok=True)
        self.killed: BrokerKill | None = None
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="leader-killer", daemon=True)

    def _victim(self, claim: Mapping[str, Any]) -> tuple[int, str]:
        if "coordinator_of" in claim:
            offsets = self.cluster.leaders("__consumer_offsets")
            partition = coordinator_partition(claim["coordinator_of"], len(offsets))
            node = self.cluster.leader_of("__consumer_offsets", partition)
            return node, f"coordinator of group {claim['coordinator_of']} (leader of __consumer_offsets-{partition})"
        node = self.cluster.leader_of(claim["topic"], claim["partition"])
        return node, f"leader of {claim['topic']}-{claim['partition']}, being read (at offset {claim['offset']})"

    def _watch(self) -> None:
        try:
            while not self._stop.wait(0.05):
                with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
                    claim = json.loads(self.claim.read_text())
                    node, reason = self._victim(claim)
                    led = tuple(p for p, leader in self.cluster.leaders(self.scenario.topic).items() if leader == node)
                    at = self.cluster.kill(node)
                    self.killed = BrokerKill(self.scenario.point, node, at, reason, led)
                    LOG.warning(f"SIGKILLed Kafka node {node} ({reason}; it led partitions {list(led)})")
                    return
        except BaseException as exc:  # reported by the scenario
            self.error = exc
        finally:
            self.release.touch()

    def __enter__(self) -> LeaderKiller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def read_after_kill(self) -> dict[str, Any]:
        """mid-read: the claimed span and what its task read after the kill (empty if it never finished it)."""
        resumed = Path(f"{self.claim}.resumed")
        if not resumed.exists():
            return {}
        return {**json.loads(self.claim.read_text()), **json.loads(resumed.read_text())}


@dataclass(frozen=True)
class WorkerExit:
    """How the first run's worker process ended: its exit code (negative: the signal), and the line of its output
    that says why it died, if it died of a signal (an assertion, a fatal error)."""

    code: int | None
    seconds: float
    why: str = ""
    log: str = ""


@dataclass(frozen=True)
class ClusterKillReport:
    """A scenario's result: the kill, both runs per slot, the audit and the offsets compared, the timings."""

    point: str
    restarted: bool
    kill: BrokerKill | None
    worker: WorkerExit
    first_run: tuple[SlotOutcome, ...]
    next_run: tuple[SlotOutcome, ...]
    acked: int
    audit: DeliveryAudit
    unexpected: int
    end_offsets: Mapping[int, int]
    ledger: Mapping[int, int | None]
    kafka: Mapping[int, int | None]
    timings: Mapping[str, float] = field(default_factory=dict)
    killer_error: str | None = None
    ledger_after_first_run: Mapping[int, int | None] = field(default_factory=dict)
    kafka_after_first_run: Mapping[int, int | None] = field(default_factory=dict)
    """The ledger's and Kafka's committed offsets once the first run ended (Kafka's empty if it could not be read)."""
    read_after_kill: Mapping[str, Any] = field(default_factory=dict)
    """mid-read: the claimed span, its rows read after the kill and the longest wait for one of its batches."""


def _run_worker(scenario: ClusterScenario) -> WorkerExit:
    """The first run in its own process group (killed whole once it ends); bounded by WORKER_TIMEOUT_S."""
    log = Path(scenario.workdir) / "worker.log"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    began = time.monotonic()
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "harness.reliability.cluster_worker", scenario.to_json()],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        code: int | None = process.wait(timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=30)
    text = log.read_text(errors="replace")
    lines = [line for line in text.splitlines() if not line.startswith("%")]  # librdkafka's own log lines left out
    why = next((line for line in lines if "Assertion" in line or "Fatal Python error" in line), "")
    return WorkerExit(code, round(time.monotonic() - began, 1), why, "\n".join(lines[-40:]))


@dataclass
class _Run:
    """The driver's side of one scenario: the acknowledged records and the timings."""

    cluster: KafkaCluster
    spark: Any
    scenario: ClusterScenario
    acked: dict[tuple[int, int], bytes] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    started_at: float = field(default_factory=time.time)

    def mark(self, what: str) -> None:
        self.timings[what] = round(time.monotonic() - self.started, 1)

    def create_topic(self) -> None:
        admin = AdminClient(self.scenario.config)
        topic = self.scenario.topic
        for future in admin.create_topics([NewTopic(topic, PARTITIONS, 3)], operation_timeout=60).values():
            future.result(timeout=60)
        self.cluster.wait_in_sync([topic])

    def produce(self, first: int, count: int, rounds: int) -> None:
        records = json_records(first + count, PARTITIONS, malformed=set(MALFORMED))[first:]
        self.acked |= produce_acked(self.scenario.config, self.scenario.topic, records, rounds=rounds)

    def ledger(self) -> dict[int, int | None]:
        coordinator = self.scenario.group().open_coordinator()
        try:
            heads = coordinator.fetch_offsets(self.scenario.group_name, self.scenario.tps)
        finally:
            coordinator.close()
        return {tp.partition: offset for tp, offset in heads.items()}

    def kafka(self) -> dict[int, int | None]:
        """Kafka's committed offsets of the group (an OffsetFetch by a consumer that never joins it)."""
        in_kafka = kafka_committed(self.scenario.config, self.scenario.group_name, self.scenario.tps)
        return {tp.partition: offset for tp, (offset, _meta) in in_kafka.items()}

    def offsets(self) -> tuple[dict[int, int], dict[int, int | None], dict[int, int | None]]:
        """(end offsets, ledger heads, Kafka's committed offsets) per partition."""
        kafka = KafkaAccess(self.scenario.config)
        try:
            ends = {tp.partition: end for tp, end in kafka.end_offsets(self.scenario.tps).items()}
        finally:
            kafka.close()
        return ends, self.ledger(), self.kafka()

    def audit(self) -> tuple[DeliveryAudit, int]:
        """audit_delivery over the acknowledged records (offsets 0..n-1 of each partition: checked first), and how
        many distinct rows of the outputs are no acknowledged record."""
        counts: dict[int, int] = {}
        for partition, _offset in self.acked:
            counts[partition] = counts.get(partition, 0) + 1
        holes = {p: n for p, n in counts.items() if {o for q, o in self.acked if q == p} != set(range(n))}
        if holes:
            raise AssertionError(f"acknowledged offsets are not 0..n-1 (producer retries wrote twice?): {holes}")
        coordinator = self.scenario.group().open_coordinator()
        kafka = KafkaResource(bootstrap_servers=self.scenario.bootstrap)
        try:
            audit = audit_delivery(
                self.spark,
                sink=str(Path(self.scenario.workdir) / "lake"),
                produced={self.scenario.topic: counts},
                coordinator=coordinator,
                group=self.scenario.group_name,
                kafka=kafka,
            )
        finally:
            coordinator.close()
            kafka.close()
        distinct = audit.in_sink + audit.quarantined - audit.duplicated
        return audit, distinct - (len(self.acked) - audit.lost)


def run_cluster_kill_scenario(
    cluster: KafkaCluster, spark: Any, workdir: Path, *, point: str, restart: bool
) -> ClusterKillReport:
    """Run one scenario (see the module doc) on `cluster` in `workdir`: a leader SIGKILLed at `point` of the first
    run, restarted before the next run if `restart` (else left dead: the caller restarts it for the next scenario)."""
    name = f"kill-{point}-{uuid.uuid4().hex[:8]}"
    scenario = ClusterScenario(cluster.bootstrap_servers, name, name, str(workdir), point)
    run = _Run(cluster, spark, scenario)
    run.create_topic()
    run.produce(0, RECORDS, ROUNDS)
    run.mark("produced_s")
    with LeaderKiller(cluster, scenario) as killer:
        worker = _run_worker(scenario)
    run.mark("first_run_s")
    first_ledger, first_kafka = run.ledger(), {}
    with contextlib.suppress(Exception):  # what Kafka says here is for the report only
        first_kafka = run.kafka()
    kill = killer.killed
    if kill is not None:
        run.timings["killed_s"] = round(kill.at - run.started_at, 1)
        if restart:
            took = cluster.restart(kill.node)
            cluster.wait_in_sync([scenario.topic])
            kill = BrokerKill(kill.point, kill.node, kill.at, kill.reason, kill.led, round(took, 1))
            run.mark("restarted_s")
    run.produce(RECORDS, MORE_RECORDS, 3)
    run.mark("produced_more_s")
    following = scenario.run_group(spark)
    run.mark("next_run_s")
    ends, ledger, in_kafka = run.offsets()
    audit, unexpected = run.audit()
    run.mark("audited_s")
    return ClusterKillReport(
        point=point,
        restarted=restart,
        kill=kill,
        worker=worker,
        first_run=scenario.read_result(),
        next_run=following,
        acked=len(run.acked),
        audit=audit,
        unexpected=unexpected,
        end_offsets=ends,
        ledger=ledger,
        kafka=in_kafka,
        timings=run.timings,
        killer_error=repr(killer.error) if killer.error else None,
        ledger_after_first_run=first_ledger,
        kafka_after_first_run=first_kafka,
        read_after_kill=killer.read_after_kill(),
    )
