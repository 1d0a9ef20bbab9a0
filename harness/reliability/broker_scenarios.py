"""Broker faults as end-to-end scenarios: the broker gone mid-batch and back, and a wrong bootstrap address.

Each scenario runs one worker slot of a real group through Dagster (in this process, on the caller's
Spark session) against a real broker, and returns a `BrokerFaultObservation`; the `run_*` functions
return its row of benchmarks/RELIABILITY.md (`FaultOutcome`).

- `broker_down_scenario`: a dedicated embedded broker behind a `FaultProxy` (harness/reliability/
  broker_proxy.py: Tansu is in memory only, so the proxy going down and up stands in for a restart). The
  proxy goes down on the batch's first Fetch (point "read") or first ListOffsets (point "plan"); the run
  must fail with a clear error (a ReadError naming the partition and offset, or the watermark lookup
  naming the partition), commit nothing to the ledger or Kafka and publish nothing. Then the proxy comes
  back, the membership sensor requests a rerun of the failed run, and the rerun consumes everything once.
- `wrong_bootstrap_scenario`: the run points at a closed port on 127.0.0.1; it must fail within a bounded
  time with an error naming that address, having joined nothing and committed nothing; the sensor's rerun
  with the right address consumes everything once.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg

from cohort.devtools.embedded_broker import free_port
from cohort.resources import KafkaResource
from harness.reliability.broker_harness import FaultGroup, GroupSnapshot, prepare_group, run_failure_text
from harness.reliability.broker_proxy import FETCH, LIST_OFFSETS, broker_behind_proxy
from harness.reliability.outcome import DeliveryAudit, FaultOutcome

__all__ = [
    "BROKER_DOWN_POINTS",
    "BrokerFaultObservation",
    "broker_down_scenario",
    "run_broker_down_scenario",
    "run_wrong_bootstrap_scenario",
    "wrong_bootstrap_scenario",
]

BROKER_DOWN_POINTS = {"read": FETCH, "plan": LIST_OFFSETS}
"""Where the broker goes away: at the batch's first Fetch (executor-side read) or first ListOffsets
(planning on the driver)."""

_POINT_NAMES = {
    "read": "mid-batch: at the first Fetch of the read",
    "plan": "mid-batch: at the first ListOffsets of the planning",
}
READ_TIMEOUT_S = 10.0
"""The pipeline's `read_timeout_s` in these scenarios: how long a reading task waits for a silent broker."""


@dataclass(frozen=True)
class BrokerFaultObservation:
    """What a broker-fault scenario saw: the failed run, what it left behind, and the recovery."""

    fault: str
    point: str
    assignor: str
    produced: int
    injected: bool
    failed_status: str
    error: str
    expected_error: str
    failure_s: float
    members_after_failure: int
    after_failure: GroupSnapshot
    rerun_requests: int
    rerun_success: bool
    recovered_s: float
    audit: DeliveryAudit

    @property
    def clear_error(self) -> bool:
        """Whether the run's error matches the expected, specific message."""
        return re.search(self.expected_error, self.error) is not None

    @property
    def left_nothing(self) -> bool:
        """No ledger range, no Kafka committed offset, no sink or quarantine directory after the failure."""
        snapshot = self.after_failure
        return (
            all(not ranges for ranges in snapshot.ledger.values())
            and all(offset is None for offset in snapshot.kafka_committed.values())
            and not snapshot.sink_dirs
        )

    def problems(self) -> tuple[str, ...]:
        """Every way the scenario missed its expected outcome (empty when all went as it should)."""
        found = list(self.audit.problems)
        if not self.injected:
            found.append("the fault was never injected")
        if self.failed_status != dg.DagsterRunStatus.FAILURE.value:
            found.append(f"the faulty run ended {self.failed_status}, not FAILURE")
        if not self.clear_error:
            found.append(f"the error does not match {self.expected_error!r}: {self.error[:300]!r}")
        if not self.left_nothing:
            found.append(f"the faulty run left something behind: {self.after_failure}")
        if self.rerun_requests != 1 or not self.rerun_success:
            found.append(f"{self.rerun_requests} rerun requests, success={self.rerun_success}")
        return tuple(found)

    @property
    def outcome(self) -> FaultOutcome:
        return FaultOutcome(
            fault=self.fault,
            point=self.point,
            assignor=self.assignor,
            produced=self.produced,
            lost=self.audit.lost,
            duplicated=self.audit.duplicated,
            recovered_s=self.recovered_s,
            problems=self.problems(),
        )


def _recover(
    group: FaultGroup, defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None, since: float
) -> tuple[int, bool, float]:
    """Tick the membership sensor after a failed run and execute the rerun it requests (if exactly one):
    (requests, rerun succeeded, seconds from `since` (monotonic) to the rerun's end)."""
    tick = group.tick_membership(defs, instance, cursor)
    success = False
    if len(tick.run_requests) == 1:
        success = group.run_slot(defs, instance, request=tick.run_requests[0]).success
    return len(tick.run_requests), success, time.monotonic() - since


def _release(bootstrap: str) -> None:
    """Drop this process's shared admin client for `bootstrap` (it would keep reconnecting to a gone port)."""
    kafka = KafkaResource(bootstrap_servers=bootstrap)
    kafka.get_admin()
    kafka.close()


def broker_down_scenario(
    spark: Any,
    workdir: Path,
    *,
    point: str = "read",
    assignor: str = "cooperative-sticky",
    partitions: int = 2,
    records: int = 40,
) -> BrokerFaultObservation:
    """Run the broker-down scenario (see the module doc) with its own broker and proxy in `workdir`."""
    api_key = BROKER_DOWN_POINTS[point]
    with broker_behind_proxy(workdir / "broker") as (_broker, proxy):
        bootstrap = proxy.bootstrap
        group = prepare_group(
            bootstrap, workdir, name="broker-down", partitions=partitions, records=records, assignor=assignor
        )
        defs = group.definitions(read_timeout_s=READ_TIMEOUT_S)
        kafka = KafkaResource(bootstrap_servers=bootstrap)
        coordinator = group.coordinator()
        try:
            with group.instance() as instance:
                baseline = group.tick_membership(defs, instance)
                proxy.arm(api_key)
                started = time.monotonic()
                failed = group.run_slot(defs, instance)
                failure_s = time.monotonic() - started
                injected = proxy.tripped.is_set()
                proxy.arm(None)
                proxy.up()  # the broker is back
                back = time.monotonic()
                # the next run is a new process in production: no client of the failed run's process is kept
                _release(bootstrap)
                members = len(coordinator.describe_group(group.group).members)
                after_failure = group.snapshot(coordinator, kafka)
                requests, success, recovered_s = _recover(group, defs, instance, baseline.cursor, back)
                audit = group.audit(spark, kafka, instance)
                status = instance.get_run_by_id(failed.run_id)
                error = run_failure_text(instance, failed.run_id)
        finally:
            coordinator.close()
            kafka.close()
            _release(bootstrap)
    topic = re.escape(group.topic)
    expected = {
        "read": rf"ReadError: (no data from|reading) {topic}-\d+ at offset \d+",
        "plan": rf"could not read the watermarks of {topic}-\d+",
    }[point]
    return BrokerFaultObservation(
        fault="broker down",
        point=_POINT_NAMES[point],
        assignor=assignor,
        produced=records,
        injected=injected,
        failed_status=status.status.value if status else "missing",
        error=error,
        expected_error=expected,
        failure_s=failure_s,
        members_after_failure=members,
        after_failure=after_failure,
        rerun_requests=requests,
        rerun_success=success,
        recovered_s=recovered_s,
        audit=audit,
    )


def wrong_bootstrap_scenario(
    spark: Any,
    bootstrap: str,
    workdir: Path,
    *,
    assignor: str = "cooperative-sticky",
    partitions: int = 2,
    records: int = 40,
) -> BrokerFaultObservation:
    """Run the wrong-bootstrap scenario (see the module doc) against the broker at `bootstrap`."""
    group = prepare_group(
        bootstrap, workdir, name="wrong-bootstrap", partitions=partitions, records=records, assignor=assignor
    )
    wrong = f"127.0.0.1:{free_port()}"  # nothing listens there
    defs = group.definitions()
    kafka = KafkaResource(bootstrap_servers=bootstrap)
    coordinator = group.coordinator()
    try:
        with group.instance() as instance:
            baseline = group.tick_membership(defs, instance)
            started = time.monotonic()
            failed = group.run_slot(group.definitions(wrong), instance)
            failure_s = time.monotonic() - started
            members = len(coordinator.describe_group(group.group).members)
            after_failure = group.snapshot(coordinator, kafka)
            requests, success, recovered_s = _recover(group, defs, instance, baseline.cursor, time.monotonic())
            audit = group.audit(spark, kafka, instance)
            status = instance.get_run_by_id(failed.run_id)
            error = run_failure_text(instance, failed.run_id)
    finally:
        coordinator.close()
        kafka.close()
        _release(wrong)
    return BrokerFaultObservation(
        fault="wrong bootstrap",
        point=f"run start (closed port {wrong})",
        assignor=assignor,
        produced=records,
        injected=True,
        failed_status=status.status.value if status else "missing",
        error=error,
        expected_error=rf"could not read topic metadata from {re.escape(wrong)}",
        failure_s=failure_s,
        members_after_failure=members,
        after_failure=after_failure,
        rerun_requests=requests,
        rerun_success=success,
        recovered_s=recovered_s,
        audit=audit,
    )


def run_broker_down_scenario(
    spark: Any, workdir: Path, *, point: str = "read", assignor: str = "cooperative-sticky"
) -> FaultOutcome:
    """The broker-down scenario as one row of the reliability matrix; `recovered_s` is the wall time from
    the broker's return to the end of the sensor's rerun."""
    return broker_down_scenario(spark, workdir, point=point, assignor=assignor).outcome


def run_wrong_bootstrap_scenario(
    spark: Any, bootstrap: str, workdir: Path, *, assignor: str = "cooperative-sticky"
) -> FaultOutcome:
    """The wrong-bootstrap scenario as one row of the reliability matrix; `recovered_s` is the wall time
    of the sensor's rerun with the right address."""
    return wrong_bootstrap_scenario(spark, bootstrap, workdir, assignor=assignor).outcome
