"""The zombie scenario: a worker paused (SIGSTOP) inside its batch past its session, resumed after the
group moved on without it.

`zombie_scenario` runs it end to end on a real broker, real Spark, a real SQLite store and a real Dagster
instance, and returns every observation; `run_zombie_scenario` returns the row of
benchmarks/RELIABILITY.md (`FaultOutcome`).

1. Slot `slot` runs in its own process (harness/reliability/zombie_worker.py): it joins, gets its partitions,
   reads them, and is held by its transform before the sink write.
2. The harness stops its whole process group (Spark JVM and Python workers too) with SIGSTOP, at a moment
   it holds no write lock on the SQLite store. Its heartbeat thread stops with it.
3. The membership sensor, reading a ManualClock moved past the session timeout, expires the member,
   rebalances, and requests a rerun of the slot; the rerun (this process) consumes and commits everything.
4. The harness opens the gate and resumes the zombie (SIGCONT). Its batch goes on with a plan made
   before the rerun's commit; the ledger must refuse it (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID or
   ILLEGAL_GENERATION), its run must fail, and the ledger, Kafka's committed offsets and the sink must
   be exactly as the rerun left them: nothing lost, nothing twice.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from cohort.assignment.clock import ManualClock
from cohort.resources import KafkaResource
from harness.dagster_group import ROOT, kill_process_group, wait_for
from harness.reliability.broker_harness import FaultGroup, GroupSnapshot, prepare_group, run_failure_text
from harness.reliability.outcome import DeliveryAudit, FaultOutcome
from harness.reliability.zombie_worker import ZombieArgs

__all__ = ["FENCING_CODES", "ZombieObservation", "run_zombie_scenario", "zombie_scenario"]

FENCING_CODES = ("UNKNOWN_MEMBER_ID", "FENCED_INSTANCE_ID", "ILLEGAL_GENERATION")
"""What the protocol may answer a member that was removed, replaced or left behind by a rebalance."""

POINT = "after read, before sink write; resumed after the rerun committed"


@dataclass(frozen=True)
class ZombieObservation:
    """Everything the zombie scenario saw, for the tests to assert on and the matrix to report."""

    assignor: str
    produced: int
    zombie_owned: tuple[int, ...]
    rerun_requests: int
    rerun_success: bool
    zombie_exit: int | None
    zombie_status: str | None
    zombie_error: str
    later_requests: int
    before_resume: GroupSnapshot
    after_resume: GroupSnapshot
    audit: DeliveryAudit
    recovered_s: float
    phases: Mapping[str, float]
    log_tail: str

    @property
    def fencing_code(self) -> str | None:
        """The fencing error the zombie's commit was refused with, if any."""
        return next((code for code in FENCING_CODES if code in self.zombie_error), None)

    def problems(self) -> tuple[str, ...]:
        """Every way this run missed the expected outcome (empty when the zombie was fenced cleanly)."""
        found = list(self.audit.problems)
        if not self.rerun_success:
            found.append("the rerun of the zombie's slot failed")
        if self.fencing_code is None:
            found.append(f"the zombie was not refused with a fencing error: {self.zombie_error[:300]!r}")
        if self.zombie_status != dg.DagsterRunStatus.FAILURE.value:
            found.append(f"the zombie's run ended {self.zombie_status}, not FAILURE")
        if self.after_resume != self.before_resume:
            found.append("the zombie changed the ledger, Kafka's committed offsets or the sink")
        return tuple(found)

    @property
    def outcome(self) -> FaultOutcome:
        return FaultOutcome(
            fault="SIGSTOP (zombie)",
            point=POINT,
            assignor=self.assignor,
            produced=self.produced,
            lost=self.audit.lost,
            duplicated=self.audit.duplicated,
            recovered_s=self.recovered_s,
            problems=self.problems(),
        )


def _start_zombie(group: FaultGroup, slot: int, reached: Path, gate: Path, log: Path) -> subprocess.Popen[bytes]:
    """The held worker in its own process group (SIGSTOP and SIGCONT reach its JVM and Python workers)."""
    args = ZombieArgs(group.setup.to_json(), group.assignor, slot, str(reached), str(gate))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "harness.reliability.zombie_worker", args.to_json()],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _store_writable(database: Path) -> bool:
    """Whether a write transaction on the SQLite store can start now (no stopped process holds its lock)."""
    connection = sqlite3.connect(database, timeout=0.5, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        connection.close()


def _stopped(pid: int) -> bool:
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state == "T"


def pause_outside_store_lock(process: subprocess.Popen[bytes], database: Path, attempts: int = 20) -> None:
    """SIGSTOP the process group at a moment it holds no SQLite write lock (a store transaction takes
    milliseconds; a process stopped inside one would block every other member until it resumes)."""
    for _ in range(attempts):
        os.killpg(process.pid, signal.SIGSTOP)
        wait_for(lambda: _stopped(process.pid), timeout_s=5, what="the zombie to stop", interval_s=0.02)
        if _store_writable(database):
            return
        os.killpg(process.pid, signal.SIGCONT)
        time.sleep(0.1)
    raise AssertionError(f"the zombie held the store's write lock at each of {attempts} attempts")


def zombie_scenario(
    spark: Any,
    bootstrap: str,
    workdir: Path,
    *,
    assignor: str = "cooperative-sticky",
    partitions: int = 2,
    records: int = 40,
    slot: int = 1,
) -> ZombieObservation:
    """Run the zombie scenario (see the module doc) in `workdir` against the broker at `bootstrap`."""
    group = prepare_group(bootstrap, workdir, name="zombie", partitions=partitions, records=records, assignor=assignor)
    reached, gate, log = workdir / "reached", workdir / "gate", workdir / "zombie.log"
    kafka = KafkaResource(bootstrap_servers=bootstrap)
    coordinator = group.coordinator()
    phases: dict[str, float] = {}
    started = time.monotonic()

    def lap(name: str) -> None:
        phases[name] = round(time.monotonic() - started - sum(phases.values()), 2)

    zombie = _start_zombie(group, slot, reached, gate, log)
    try:
        with group.instance() as instance:
            wait_for(lambda: reached.exists() or zombie.poll() is not None, timeout_s=180, what="the zombie's batch")
            if not reached.exists():
                raise AssertionError(f"the zombie exited before its batch was held:\n{log.read_text()[-3000:]}")
            lap("zombie reads its batch")
            members = coordinator.describe_group(group.group).members
            owned = tuple(sorted(tp.partition for m in members for tp in m.owned))
            pause_outside_store_lock(zombie, workdir / "cohort.db")
            paused_at = time.monotonic()
            lap("pause")

            # the sensor, past the session timeout, expires the zombie and asks for a rerun of its slot
            clock = ManualClock(time.time() + 60)
            tick = group.tick_membership(group.definitions(clock=clock), instance)
            lap("sensor evicts")
            rerun_ok = False
            if len(tick.run_requests) == 1:
                rerun = group.run_slot(group.definitions(), instance, request=tick.run_requests[0])
                rerun_ok = rerun.success
            recovered_s = time.monotonic() - paused_at
            lap("rerun")
            before = group.snapshot(coordinator, kafka)

            # resume the zombie: its stale batch writes, tries to publish and commit
            gate.touch()
            os.killpg(zombie.pid, signal.SIGCONT)
            exit_code: int | None = None
            with contextlib.suppress(subprocess.TimeoutExpired):
                exit_code = zombie.wait(timeout=180)
            lap("zombie resumes and exits")
            after = group.snapshot(coordinator, kafka)
            zombie_runs = instance.get_runs(filters=dg.RunsFilter(tags={"cohort/zombie": "1"}))
            status = zombie_runs[0].status.value if zombie_runs else None
            error = run_failure_text(instance, zombie_runs[0].run_id) if zombie_runs else ""
            later = group.tick_membership(group.definitions(clock=clock), instance, tick.cursor)
            audit = group.audit(spark, kafka, instance)
            lap("audit")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(zombie.pid, signal.SIGCONT)
        if zombie.poll() is None:
            kill_process_group(zombie)
        coordinator.close()
        kafka.close()
    return ZombieObservation(
        assignor=assignor,
        produced=records,
        zombie_owned=owned,
        rerun_requests=len(tick.run_requests),
        rerun_success=rerun_ok,
        zombie_exit=exit_code,
        zombie_status=status,
        zombie_error=error,
        later_requests=len(later.run_requests),
        before_resume=before,
        after_resume=after,
        audit=audit,
        recovered_s=recovered_s,
        phases=phases,
        log_tail=log.read_text(errors="replace")[-4000:],
    )


def run_zombie_scenario(
    spark: Any, bootstrap: str, workdir: Path, *, assignor: str = "cooperative-sticky"
) -> FaultOutcome:
    """The zombie scenario as one row of the reliability matrix; `recovered_s` is the wall time from the
    pause to the rerun's success (the session timeout itself is skipped with a ManualClock)."""
    return zombie_scenario(spark, bootstrap, workdir, assignor=assignor).outcome
