"""Starting Spark does not count against a member's progress timeout (`cohort.runtime.slot_batch`, the batch of
one worker slot both faces run): a slot whose Spark takes longer to start than the progress timeout is not
evicted, and its batch commits on the first try. Real broker, Spark and SQLite store; the coordinator's time is
a ManualClock the test moves past the progress timeout while Spark is starting (nothing sleeps to time out)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from cohort.assignment.clock import ManualClock
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.member import GroupMember
from cohort.assignment.protocol.group_state import GroupConfig
from cohort.assignment.settings import MemberSettings
from cohort.common.types import TopicPartition
from cohort.pipelines.spec import PipelineSpec
from cohort.runtime.kafka_access import KafkaAccess
from cohort.runtime.slot_batch import SlotBatch, SlotRun, awaiting_executors, run_slot_batch
from tests.support.orders import ORDER_SCHEMA, order

PROGRESS_TIMEOUT_S = 5.0
log = logging.getLogger(__name__)


def test_a_slow_spark_start_is_not_counted_against_the_progress_timeout(
    spark: Any, kafka_config: dict[str, Any], topic_factory: Any, produce_records: Any, sqlite_url: str, lake: Any
) -> None:
    topic = topic_factory(2, suffix="slowstart")
    produce_records(topic, [(i % 2, None, order(i)) for i in range(20)])
    clock = ManualClock(1_000.0)
    coordinator = Coordinator.from_url(sqlite_url, clock=clock, config=GroupConfig(initial_rebalance_delay=0))
    settings = MemberSettings(
        topics=(topic,), session_timeout=60.0, progress_timeout=PROGRESS_TIMEOUT_S, heartbeat_interval=0.05
    )
    member = GroupMember(
        coordinator,
        "slow-start",
        settings,
        instance_id="slow-start/worker-1",
        client_id="run-1",
        topic_metadata=lambda: {topic: 2},
        poll_interval=0.01,
    )
    starting, started = threading.Event(), threading.Event()

    def slow_spark() -> Any:
        """A Spark start that ends when the test says so (a JVM or a cluster taking its time under load)."""
        starting.set()
        assert started.wait(120)
        return spark

    outcome: dict[str, Any] = {}

    def slot() -> None:
        try:
            pipeline = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA)
            run = SlotRun(1, "run-1", pipeline, KafkaAccess(kafka_config), slow_spark, log)
            outcome["done"] = run_slot_batch(member, run)
        except BaseException as exc:  # reported below
            outcome["error"] = exc

    worker = threading.Thread(target=slot, name="slot-1")
    worker.start()
    try:
        assert starting.wait(60)
        clock.advance(3 * PROGRESS_TIMEOUT_S)  # Spark takes three progress timeouts to start
        events = coordinator.expire("slow-start")  # what the membership sensor's tick does
        assert not [e for e in events if "progress" in str(e)], events
    finally:
        started.set()
        worker.join(timeout=300)
    assert "error" not in outcome, outcome.get("error")
    done: SlotBatch = outcome["done"]
    try:
        assert done.attempts == 1 and done.result is not None and done.result.records == 20
        tps = [TopicPartition(topic, p) for p in range(2)]
        assert coordinator.fetch_offsets("slow-start", tps) == dict.fromkeys(tps, 10)
    finally:
        done.leave()
        coordinator.close()


class _Memory:
    def __init__(self, executors: int) -> None:
        self.executors = executors

    def size(self) -> int:
        return self.executors + 1  # the driver is listed too


class _Context:
    """What `awaiting_executors` reads of a classic SparkContext (a double: no cluster in a unit test)."""

    def __init__(self, master: str, executors: int) -> None:
        self.master = master
        self._executors = executors
        context = self

        class _Jsc:
            def sc(self) -> Any:
                class _Sc:
                    def getExecutorMemoryStatus(self) -> _Memory:  # Spark's name
                        return _Memory(context._executors)

                return _Sc()

        self._jsc = _Jsc()


class _Session:
    def __init__(self, master: str, executors: int) -> None:
        self.sparkContext = _Context(master, executors)


def test_a_cluster_without_executors_yet_is_still_starting() -> None:
    assert awaiting_executors(_Session("spark://master:7077", 0))
    assert not awaiting_executors(_Session("spark://master:7077", 2))
    assert awaiting_executors(_Session("yarn", 0)) and awaiting_executors(_Session("local-cluster[2,1,1024]", 0))
    assert not awaiting_executors(_Session("local[2]", 0)) and not awaiting_executors(_Session("local", 0))
    assert not awaiting_executors(_Session("local[*, 3]", 0))


def test_the_real_local_session_is_not_awaiting_executors(spark: Any) -> None:
    assert not awaiting_executors(spark)
