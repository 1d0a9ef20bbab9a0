"""One worker slot's batch, for any orchestrator: start Spark, join as the slot's static member, run the batch on
exactly the partitions the assignor gave it, rejoin after a rebalance, report progress while Spark works.

Spark starts first (a local JVM, a cluster application, a Spark Connect session: seconds, more under load), so
the member joins only once it can work: the progress timeout (Kafka's max.poll.interval.ms) measures the batch,
never the start, and a start that fails or hangs holds no partition. Executors a cluster grants later count as
starting too: until the application has one, the member reports progress. The member then joins the group as
its worker slot, waits (bounded) for its assignment, heartbeats while Spark works, runs the batch with itself as
the fenced ledger, and stays in the group: the caller reports the batch (Dagster materializations, Airflow asset
events), then ends the membership (`SlotBatch.leave`), so a run killed before its report is noticed by its
session expiring.

Before each batch the slot compares Kafka's committed offsets of its partitions with the ledger's and warns when
they differ (`say_kafka_drift`: Kafka's own reset tool used on the group, or a mirror that failed): the batch reads
from the ledger all the same, and its mirror overwrites Kafka's offsets.

A rebalance during the batch (a heartbeat answered REBALANCE_IN_PROGRESS, a refused commit) makes the member
rejoin and run again on its new assignment, at most `MAX_ATTEMPTS` times; the refused attempt's output is withdrawn
by the sink and its offsets stay uncommitted, so nothing is counted twice. UNKNOWN_MEMBER_ID is not retried: the
member was removed (expired, evicted) and the orchestrator reruns its slot; rejoining here would fence that rerun.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pyspark.sql import SparkSession

from cohort.assignment.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    PartitionNotOwnedError,
    RebalanceInProgressError,
)
from cohort.assignment.member import GroupMember
from cohort.common.ledger import OffsetLedger, OffsetMirror
from cohort.common.types import TopicPartition
from cohort.pipelines.batch.results import BatchResult
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.kafka.drift import batch_drift_warning
from cohort.pipelines.kafka.mirror import kafka_committed
from cohort.pipelines.spark import is_connect
from cohort.pipelines.spec import PipelineSpec
from cohort.runtime.kafka_access import KafkaAccess

__all__ = [
    "MAX_ATTEMPTS",
    "BatchRunner",
    "SlotBatch",
    "SlotLog",
    "SlotRun",
    "awaiting_executors",
    "new_partitions",
    "progress_reporter",
    "run_slot_batch",
    "say_kafka_drift",
]

MAX_ATTEMPTS = 3
REBALANCED = (RebalanceInProgressError, IllegalGenerationError, PartitionNotOwnedError)
"""Refusals after which the member rejoins and runs again."""


class BatchRunner(Protocol):
    """What a slot calls to run one batch: `cohort.pipelines.batch.run.run_batch`'s signature (tests and fault
    scenarios pass a wrapper of it)."""

    def __call__(
        self,
        spark: SparkSession,
        spec: PipelineSpec,
        kafka_config: Mapping[str, Any],
        partitions: Sequence[TopicPartition],
        ledger: OffsetLedger,
        *,
        group: str | None = None,
        mirror: OffsetMirror | None = None,
        run_id: str | None = None,
        new_partitions: Collection[TopicPartition] = (),
    ) -> BatchResult: ...


class SlotLog(Protocol):
    """Where a slot's batch says what it does: a `logging.Logger`, Dagster's `context.log`, Airflow's `log`."""

    def info(self, msg: str, /) -> object: ...

    def warning(self, msg: str, /) -> object: ...

    def error(self, msg: str, /) -> object: ...


@dataclass(frozen=True)
class SlotBatch:
    """What one slot's member did: its identity in the group, its assignment and the batch (None if idle).

    `member` is still in the group: report the batch, then `leave()`.
    """

    slot: int
    member_id: str
    generation: int
    assignment: tuple[TopicPartition, ...]
    result: BatchResult | None
    attempts: int
    replayed: frozenset[TopicPartition] = frozenset()
    member: GroupMember | None = field(default=None, compare=False, repr=False)
    lag_after: Mapping[TopicPartition, int] = field(default_factory=dict)
    """Records left behind per consumed partition once the batch committed (0 when caught up)."""

    def leave(self, *, leave_group: bool = True) -> None:
        """End the membership: leave the group, or keep the static membership (`leave_group=False`)."""
        if self.member is not None:
            self.member.close(leave=leave_group)


def new_partitions(
    ledger: OffsetLedger, assignment: Sequence[TopicPartition], counts: Mapping[str, int]
) -> list[TopicPartition]:
    """Assigned partitions that never had a commit while other partitions of their topic did: partitions added to
    the topic after the group started on it. They start at earliest whatever the reset policy
    (docs/guarantees.md), so records produced before this first batch are not skipped."""
    every = [TopicPartition(t, p) for t in sorted({tp.topic for tp in assignment}) for p in range(counts.get(t, 0))]
    committed = ledger.committed_offsets(every) if every else {}
    started = {tp.topic for tp, offset in committed.items() if offset is not None}
    return [tp for tp in assignment if tp.topic in started and committed.get(tp) is None]


_IN_DRIVER = re.compile(r"local(\[[^\]]*\])?")
"""Masters whose tasks run in the driver's JVM (`local`, `local[4]`, `local[*, 2]`): no executor to wait for."""


def _spark_fingerprint(session: Any) -> tuple[int, int] | None:
    """(newest active stage id, completed tasks of active stages), None when Spark cannot tell (Connect)."""
    try:
        tracker = session.sparkContext.statusTracker()
    except Exception:
        return None
    stages = [info for info in (tracker.getStageInfo(i) for i in tracker.getActiveStageIds()) if info is not None]
    return (max((s.stageId for s in stages), default=-1), sum(s.numCompletedTasks for s in stages))


def awaiting_executors(session: Any) -> bool:
    """Whether a cluster application has no executor yet (a standalone, YARN or Kubernetes master grants them after
    the session started, or, with dynamic allocation, once tasks wait): Spark is still starting. False for a local
    session (tasks run in the driver), for Spark Connect (the server's executors are its own) and when Spark cannot
    tell."""
    if is_connect(session):
        return False
    try:
        context = session.sparkContext
        if _IN_DRIVER.fullmatch(context.master):
            return False
        return int(context._jsc.sc().getExecutorMemoryStatus().size()) <= 1  # the driver is listed too
    except Exception:
        return False


@contextlib.contextmanager
def progress_reporter(member: GroupMember, session: Any, interval_s: float) -> Iterator[None]:
    """Report progress (reset the progress deadline) whenever Spark completes tasks or starts stages, and while a
    cluster has granted no executor yet (`awaiting_executors`).

    A batch stuck in one task (or a driver stuck outside Spark) reports nothing, so the coordinator evicts it at
    the progress deadline, like Kafka's max.poll.interval.ms. With Spark Connect, where task progress is not
    visible, every interval counts as progress.
    """
    stop = threading.Event()

    def loop() -> None:
        last: tuple[int, int] | None = None
        while not stop.wait(interval_s):
            current = _spark_fingerprint(session)
            if current is None or current != last or awaiting_executors(session):
                with contextlib.suppress(Exception):  # a lost membership surfaces at commit
                    member.report_progress()
            last = current

    thread = threading.Thread(target=loop, name="cohort-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@dataclass(frozen=True)
class SlotRun:
    """What one worker slot's batch needs, built once per run by its face (Dagster's op, Airflow's task).

    `spark` gives the session (started on first use: called before the member joins, so the start does not count
    against the progress timeout); `on_assignment` sees each assignment with its topics' partition counts before
    its batch (Dagster registers partition keys); `before_batch` runs first on each assignment and answers the
    partitions it reset for a replay; `leave_group` says whether a member that fails leaves the group (the slot's
    `leave_on_finish`); `runner` replaces `run_batch` (tests, fault scenarios)."""

    slot: int
    run_id: str
    pipeline: PipelineSpec
    kafka: KafkaAccess
    spark: Callable[[], SparkSession]
    log: SlotLog
    leave_group: bool = True
    runner: BatchRunner | None = None
    on_assignment: Callable[[Sequence[TopicPartition], Mapping[str, int]], None] | None = None
    before_batch: Callable[[GroupMember, Sequence[TopicPartition]], Collection[TopicPartition]] | None = None


def say_kafka_drift(
    member: GroupMember, kafka: KafkaAccess, assignment: Sequence[TopicPartition], log: SlotLog
) -> None:
    """Warn when Kafka's committed offsets of `assignment` differ from the ledger's, before the batch reads: they
    were moved outside Cohort (Kafka's own reset tool) or a mirror failed. The batch reads from the ledger whatever
    Kafka holds, and its mirror overwrites Kafka's offsets (cohort.pipelines.kafka.drift); a Kafka that does not
    answer here is said and left to the batch, which needs it anyway."""
    group, tps = member.group, list(assignment)
    if not tps:
        return
    try:
        in_kafka = kafka_committed(kafka.config, group, tps, timeout_s=kafka.request_timeout_s)
    except Exception as exc:
        log.info(
            f"group {group!r}: Kafka's committed offsets not compared with the ledger: {type(exc).__name__}: {exc}"
        )
        return
    heads = member.committed_offsets(tps)
    drifts = {tp: (in_kafka.get(tp, (None, None))[0], heads.get(tp)) for tp in tps}
    differ = {tp: pair for tp, pair in drifts.items() if pair[0] != pair[1]}
    if differ:
        log.warning(batch_drift_warning(group, differ))


def run_slot_batch(member: GroupMember, run: SlotRun) -> SlotBatch:
    """Start Spark, join as worker slot `run.slot` (`member` is its static member, not yet joined), run the batch on
    the assignment (rejoining after a rebalance), and return with the member still in the group.

    On an error the member is closed when this raises: it left the group if `run.leave_group`, and never when a
    newer instance of the slot fenced it (the membership is that instance's now).
    """
    group, slot, log = member.group, run.slot, run.log
    try:
        done = _join_and_run(member, run)
        result = done.result
        lag = result.lag_after(run.kafka.end_offsets([p.topic_partition for p in result.partitions])) if result else {}
    except FencedInstanceIdError:
        log.error(f"group {group!r} slot {slot} was fenced: another live run holds {member.instance_id}")
        member.close(leave=False)
        raise
    except BaseException:
        member.close(leave=run.leave_group)
        raise
    return replace(done, lag_after=lag)


def _join_and_run(member: GroupMember, run: SlotRun) -> SlotBatch:
    """`run_slot_batch`'s steps: Spark, the join, then the batch on each assignment until one is not rebalanced."""
    batch = run.runner if run.runner is not None else run_batch
    group, slot, log = member.group, run.slot, run.log
    started = time.monotonic()
    attempts = 0
    replayed: set[TopicPartition] = set()
    session = run.spark()  # before joining: a member holds partitions only once it can work on them
    log.info(f"group {group!r} slot {slot}: Spark ready after {time.monotonic() - started:.1f} s; joining")
    assignment = member.join()
    result: BatchResult | None = None
    while True:
        attempts += 1
        log.info(
            f"group {group!r} slot {slot}: member {member.member_id} generation {member.generation}, "
            f"assigned {[str(tp) for tp in assignment]} after {time.monotonic() - started:.1f} s"
        )
        if not assignment:
            break
        counts = run.kafka.partition_counts({tp.topic for tp in assignment})
        if run.on_assignment is not None:
            run.on_assignment(assignment, counts)
        try:
            if run.before_batch is not None:
                replayed |= set(run.before_batch(member, assignment))
            say_kafka_drift(member, run.kafka, assignment, log)
            # a cooperative rebalance meanwhile keeps the partitions it moves away until the batch ends
            with member.processing(assignment), progress_reporter(member, session, member.heartbeat_interval):
                result = batch(
                    session,
                    run.pipeline,
                    run.kafka.config,
                    list(assignment),
                    member,
                    mirror=run.kafka.mirror(),
                    run_id=run.run_id,
                    group=group,
                    new_partitions=new_partitions(member, assignment, counts),
                )
        except REBALANCED as exc:
            if attempts >= MAX_ATTEMPTS:
                raise
            log.warning(f"group {group!r} slot {slot}: {exc.code}; rejoining ({attempts})")
            assignment = member.ensure_active()
            continue
        if result.mirror_error:
            log.warning(f"Kafka mirror of the commit failed (the ledger's commit stands): {result.mirror_error}")
        break
    return SlotBatch(
        slot=slot,
        member_id=member.member_id or "",
        generation=member.generation,
        assignment=tuple(assignment),
        result=result,
        attempts=attempts,
        replayed=frozenset(replayed & set(assignment)),
        member=member,
    )
