"""Broker faults (issue 7): the broker gone mid-batch and back, and a wrong bootstrap address.

Each fault must give a clear error, commit nothing (ledger, Kafka) and publish nothing, and the next run
(the membership sensor's rerun of the failed run) must consume everything once. Real broker (a dedicated
one behind a TCP proxy for the outage: Tansu keeps its log in memory, so the proxy going down and up
stands in for a stop and restart), real Spark, real SQLite store, real Dagster instance.
"""

from __future__ import annotations

import re

import pytest

from harness.reliability.broker_scenarios import (
    READ_TIMEOUT_S,
    BrokerFaultObservation,
    broker_down_scenario,
    wrong_bootstrap_scenario,
)


def _assert_failed_cleanly_then_recovered(seen: BrokerFaultObservation) -> None:
    assert seen.injected, "the fault never hit"
    assert seen.failed_status == "FAILURE"
    assert seen.clear_error, f"expected {seen.expected_error!r} in:\n{seen.error}"
    assert seen.members_after_failure == 0  # the failed run left the group
    assert seen.after_failure.ledger == {0: (), 1: ()}
    assert seen.after_failure.kafka_committed == {0: None, 1: None}
    assert seen.after_failure.sink_dirs == ()
    assert seen.rerun_requests == 1 and seen.rerun_success
    audit = seen.audit
    assert (audit.lost, audit.duplicated, audit.problems) == (0, 0, ())
    assert (audit.in_sink, audit.quarantined) == (39, 1)
    assert seen.outcome.problems == ()


@pytest.mark.parametrize("point", ["read", "plan"])
@pytest.mark.slow
def test_broker_down_mid_batch_fails_cleanly_and_the_rerun_consumes_everything_once(spark, tmp_path, point):
    """The broker becomes unreachable at the batch's first Fetch (its executor-side read) or first
    ListOffsets (its planning) and comes back after the run failed. Reading: every reading task waits
    `read_timeout_s` for a record, then a ReadError names the partition and offset; planning: the watermark
    lookup fails naming the partition. Then the sensor's rerun consumes everything once."""
    seen = broker_down_scenario(spark, tmp_path / point, point=point, partitions=2, records=40)
    _assert_failed_cleanly_then_recovered(seen)
    if point == "read":
        # the plan's end-offset fetch meets the same outage: it keeps the broker's watermark (never beyond
        # what exists), so the planned end is Tansu's watermark of a batching producer, not 20
        assert re.search(rf"\(reading until \d+\) for {READ_TIMEOUT_S:.0f} s: the broker is unreachable", seen.error)
    assert seen.outcome.fault == "broker down"


def test_a_wrong_bootstrap_address_fails_fast_naming_it_and_the_rerun_consumes_everything_once(spark, broker, tmp_path):
    """The run points at a closed port on 127.0.0.1: it fails before joining, within the Kafka resource's
    request timeout (10 s) plus the run's own overhead, with an error naming the address; the sensor's rerun
    (with the right address) consumes everything once."""
    seen = wrong_bootstrap_scenario(spark, broker.bootstrap_servers, tmp_path / "wrong", partitions=2, records=40)
    _assert_failed_cleanly_then_recovered(seen)
    assert seen.failure_s < 45.0, seen.failure_s  # bounded: the metadata lookup gives up after 10 s
    assert seen.outcome.fault == "wrong bootstrap"
