"""A worker slot's batch (`cohort.runtime.slot_batch.run_slot_batch`) on a three-node Apache Kafka cluster whose
partition leader is SIGKILLed under it (harness/kafka_cluster.py, harness/reliability/cluster_kills.py).

A topic of replication factor 3 (min.insync.replicas 2) with 6 partitions, records produced with `acks=all` and
librdkafka's default batching, a group of two worker slots on a SQLite store. A broker dies at a fault point of the
SIGKILL matrix (harness/reliability/fault_points.py) of the first run, whose slots run in a worker process of their
own (harness/reliability/cluster_worker.py):

- mid-read: a reading task, after its first Arrow batch of a partition, waits while the node leading that partition
  is SIGKILLed, then reads the rest of the partition from the leader Kafka elects next;
- after-commit: the node coordinating the group (and leading partitions of the topic) is SIGKILLed as a batch enters
  its Kafka mirror, right after the ledger's commit.

The first run may complete, fail, or lose its process (librdkafka aborts a process whose admin request meets a
coordinator going away: cluster_kills' module doc); the killed node is restarted, or left dead (the cluster
tolerates one loss); more records are produced (acks=all); the next run of both slots, in this process, completes.
Then: no acknowledged record lost, none twice, nothing else in the sink or the quarantine; the ledger at each
partition's log end; Kafka's committed offsets equal to the ledger's.

The module starts its own cluster (not the `broker` fixture): marked `kafka` as that fixture would mark it (and
`spark` comes with the `spark` fixture). One scenario runs in CI (the cheapest); the others are slow (`make
test-all`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.kafka_cluster import KafkaCluster
from harness.reliability.cluster_kills import MALFORMED, MORE_RECORDS, PARTITIONS, RECORDS, ClusterKillReport
from harness.reliability.cluster_kills import run_cluster_kill_scenario as run_scenario
from tests.fixtures.kafka import broker_choice

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(900)]

CI = ("after-commit", False)
"""The scenario `make test` runs (the cheapest: its next run reads only the records produced after the kill); the
rest are slow."""
SCENARIOS = [
    pytest.param(
        point,
        restart,
        id=f"{point}-{'restarted' if restart else 'left-dead'}",
        marks=() if (point, restart) == CI else (pytest.mark.slow,),
    )
    for point, restart in (("after-commit", False), ("mid-read", False), ("after-commit", True), ("mid-read", True))
]


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """Three KRaft nodes (broker and controller each) for the module; their folders are kept when a test failed."""
    if broker_choice() != "kafka":
        pytest.skip("the cluster is Apache Kafka started from the pinned jars: not with an external Kafka or Tansu")
    running = KafkaCluster().start()
    print(f"\nKafka cluster of {running.size} nodes up in {running.started_s:.1f} s: {running.bootstrap_servers}")
    failed_before = request.session.testsfailed
    try:
        yield running
    finally:
        failed = request.session.testsfailed > failed_before
        folder = running.log_dir
        running.stop(keep_log_dir=failed)
        if failed:
            print(f"Kafka cluster's folder kept: {folder}")


@pytest.fixture
def whole_cluster(cluster: KafkaCluster) -> KafkaCluster:
    """The cluster with every node up and every partition in sync: a node an earlier test left dead is restarted
    first (here rather than after that test, so the last test of a run does not wait for a restart)."""
    for node in cluster.node_ids:
        if not cluster.running(node):
            print(f"node {node} restarted in {cluster.restart(node):.1f} s")
    cluster.wait_in_sync(cluster.topics(internal=True), timeout_s=180)
    return cluster


def _say(report: ClusterKillReport) -> None:
    """What a scenario did, for the log (-s) and for a failure's report."""
    print(f"\n{report.point} (restarted: {report.restarted}): kill {report.kill}; timings {report.timings}")
    worker = report.worker
    print(f"  first run's worker process: exit {worker.code} after {worker.seconds} s {worker.why}")
    print(f"  after the first run: ledger {report.ledger_after_first_run}, Kafka {report.kafka_after_first_run}")
    if report.read_after_kill:
        print(f"  the span being read when its leader died, afterwards: {report.read_after_kill}")
    for name, run in (("first run", report.first_run), ("next run", report.next_run)):
        for slot in run:
            did = f"partitions {slot.assignment}: {slot.records} + {slot.quarantined} quarantined" if slot.ok else ""
            print(
                f"  {name} slot {slot.slot} ({slot.seconds:.1f} s): {did}{slot.error[:300]} mirror {slot.mirror_error}"
            )
            if name == "first run":
                print("".join(f"    | {line[:300]}\n" for line in slot.lines), end="")


@pytest.mark.parametrize(("point", "restart"), SCENARIOS)
def test_a_partition_leader_killed_under_a_batch_loses_and_duplicates_nothing(
    whole_cluster: KafkaCluster, spark: Any, tmp_path: Path, point: str, restart: bool
) -> None:
    report = run_scenario(whole_cluster, spark, tmp_path, point=point, restart=restart)
    _say(report)
    kill = report.kill
    assert kill is not None and report.killer_error is None, (kill, report.killer_error, report.worker)
    assert kill.led, f"node {kill.node} led no partition of the topic when it died"
    if point == "after-commit":  # a batch had committed its partitions to the ledger when their mirror began
        assert kill.reason.startswith("coordinator of group")
        assert sum(offset == RECORDS // PARTITIONS for offset in report.ledger_after_first_run.values()) >= 3
    else:
        assert kill.reason.startswith("leader of") and "being read" in kill.reason
    read = report.read_after_kill
    if point == "mid-read" and read and any(read["partition"] in s.assignment and s.ok for s in report.first_run):
        assert read["rows"] == read["until"] - read["offset"], read  # the rest of the span, read after the kill
    assert whole_cluster.running(kill.node) is restart, "the killed node is down through the next run unless restarted"
    # the first run completed or failed (either is fine); the next one completed, for both slots
    assert all(slot.ok for slot in report.next_run), report.next_run
    assert sorted(p for slot in report.next_run for p in slot.assignment) == list(range(PARTITIONS))
    acked = RECORDS + MORE_RECORDS
    audit = report.audit
    assert report.acked == audit.produced == acked
    assert (audit.lost, audit.duplicated, report.unexpected, audit.problems) == (0, 0, 0, ()), audit
    assert (audit.in_sink, audit.quarantined) == (acked - len(MALFORMED), len(MALFORMED))
    assert sum(report.end_offsets.values()) == acked
    assert report.ledger == report.end_offsets, "the ledger is at each partition's log end"
    assert report.kafka == report.ledger, "Kafka's committed offsets equal the ledger's"
