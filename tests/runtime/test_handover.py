"""A member joins while another member's batch reads every partition (cooperative-sticky, real broker, real Spark,
the SQLite store): the partitions that move to the joiner stay with the busy member until its batch has committed,
so no offset is read by two members, no commit is refused, and the joiner's next batch continues from the
committed offsets."""

from __future__ import annotations

import itertools
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cohort.assignment.member import GroupMember
from cohort.assignment.settings import MemberSettings
from cohort.common.types import TopicPartition
from cohort.pipelines.batch.results import BatchResult
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.spec import PipelineSpec
from cohort.runtime.kafka_access import KafkaAccess
from cohort.runtime.slot_batch import SlotRun, run_slot_batch
from tests.support.orders import ORDER_SCHEMA, order

LOG = logging.getLogger("tests.handover")


def test_a_member_joining_mid_batch_gets_the_busy_members_partitions_only_after_its_commit(
    spark, kafka_config, topic_factory, produce_records, coordinator, group, lake
):
    topic = topic_factory(4)
    produce_records(topic, [(i % 4, None, order(i)) for i in range(200)], one_per_batch=False)
    coordinator.report_topic_metadata(group, {topic: 4})
    settings = MemberSettings(
        topics=(topic,), assignors=("cooperative-sticky",), session_timeout=60.0, heartbeat_interval=0.2
    )

    def member(slot: int, run_id: str) -> GroupMember:
        return GroupMember(coordinator, group, settings, instance_id=f"{group}/worker-{slot}", client_id=run_id)

    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA)
    reads: list[tuple[str, int, int, int]] = []  # (run, partition, from, until) of every range a batch read
    reading, joined = threading.Event(), threading.Event()

    def runner(name: str, pause: bool) -> Any:
        def run(session: Any, pipeline: PipelineSpec, config: Any, partitions: Any, ledger: Any, **kw: Any) -> Any:
            if pause:  # the batch has its partitions: hold it until the second member joined
                reading.set()
                assert joined.wait(120)
            if kw.get("mirror") is None:
                kw.pop("group", None)  # no Kafka mirror in this test: the ledger is the only record
            result: BatchResult = run_batch(session, pipeline, config, partitions, ledger, **kw)
            reads.extend((name, p.partition, p.from_offset, p.until_offset) for p in result.partitions)
            return result

        return run

    def slot_batch(slot_member: GroupMember, slot: int, name: str, pause: bool) -> Any:
        run = SlotRun(slot, name, spec, KafkaAccess(kafka_config), lambda: spark, LOG, False, runner(name, pause))
        return run_slot_batch(slot_member, run)

    busy, joiner = member(1, "run-a"), member(2, "run-b")
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(slot_batch, busy, 1, "run-a", True)
        while not reading.wait(1.0):
            assert not first.done(), f"the first batch ended before reading: {first.result()}"
        assert joiner.join() == ()  # everything the busy batch reads stays with it
        joined.set()
        done = first.result(timeout=300)  # its commit of all four partitions is accepted
    assert len(done.assignment) == 4 and done.result is not None and done.result.records == 200
    moved = set(joiner.assignment)
    deadline = threading.Event()
    for _ in range(600):  # the follow-up round after the batch released the two that move
        moved = set(joiner.assignment)
        if len(moved) == 2:
            break
        deadline.wait(0.1)
    assert len(moved) == 2 and moved.isdisjoint(busy.assignment)
    busy.close(leave=False)
    joiner.close(leave=False)

    produce_records(topic, [(i % 4, None, order(i)) for i in range(200, 240)], one_per_batch=False)
    second = slot_batch(member(2, "run-b2"), 2, "run-b2", False)
    assert {TopicPartition(topic, p.partition) for p in second.result.partitions} == moved

    by_partition: dict[int, list[tuple[int, int]]] = {}
    for _run, partition, lo, hi in reads:
        if hi > lo:
            by_partition.setdefault(partition, []).append((lo, hi))
    for partition, ranges in by_partition.items():  # every offset read once: no two ranges overlap
        ranges.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges)), (partition, ranges)
    assert sum(hi - lo for ranges in by_partition.values() for lo, hi in ranges) == 200 + 20
    history = [e for p in range(4) for e in coordinator.ledger_history(group, topic, p)]
    assert sorted({e.run_id for e in history}) == ["run-a", "run-b2"]  # no other commit, none refused
