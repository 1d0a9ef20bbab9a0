"""Kafka's own tools as the judge: after a Cohort group's batches run the way users run them (the group's Dagster
batch, each slot through `run_slot_batch` with the real broker, Spark, the SQLite store and a Dagster instance),
Kafka's consumer-group tool (`kafka-consumer-groups --describe`, its Java main class on the broker's jars) shows for
every partition the CURRENT-OFFSET, LOG-END-OFFSET and LAG that `cohort describe GROUP --json` shows, both as
subprocesses: after batches with records left behind, after `cohort reset-offsets --execute` and the batch that
replays it, after a slot lost mid-batch and rerun by the membership sensor, and after replays started from Dagster
(one pending, one done). Every record is landed exactly once in the end."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import dagster as dg
import pytest

from cohort.assets.translator import DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.pipelines.batch.results import BatchResult
from cohort.pipelines.batch.run import run_batch
from harness.dagster_group import Setup, config_for, definitions_for, json_records
from tests.support.audit_command import COHORT
from tests.support.kafka_tools import judge, require_kafka_tools

T = DagsterCohortTranslator()


def more_records(first_id: int, partitions: dict[int, int]) -> list[tuple[int, bytes, bytes]]:
    """More JSON events, `partitions` ({partition: count}) of them, ids from `first_id`."""
    records, next_id = [], first_id
    for partition, count in sorted(partitions.items()):
        for _ in range(count):
            records.append((partition, f"k{next_id}".encode(), json.dumps({"id": next_id, "kind": "late"}).encode()))
            next_id += 1
    return records


def landed_offsets(spark: Any, setup: Setup) -> list[tuple[int, int]]:
    """(partition, offset) of every row in the group's sink, duplicates kept."""
    rows = spark.read.parquet(setup.sink).select("kafka.partition", "kafka.offset").collect()
    return sorted((r.partition, r.offset) for r in rows)


def every_offset(ends: dict[int, int]) -> list[tuple[int, int]]:
    return sorted((p, o) for p, end in ends.items() for o in range(end))


def positions(rows: dict[tuple[str, int], Any]) -> list[tuple[int, Any, Any, Any]]:
    """(partition, current, log end, lag) of `cohort describe`'s rows (what the judge found Kafka agreeing with)."""
    return [(p, *row) for (_topic, p), row in sorted(rows.items())]


@pytest.mark.slow  # two worker runs on Spark, four CLI and Kafka tool processes (over a minute on two cores);
# tests/cli/test_outside_reset.py keeps Kafka's tool judging real batches in `make test`
def test_kafka_describes_batches_a_cli_reset_and_its_replay_as_cohort_describe_does(
    make_setup: Any, topic_factory: Any, produce_records: Any, instance: dg.DagsterInstance, spark: Any
) -> None:
    # `spark`: the session's Spark, which the runs share (a run stops only a session it started)
    require_kafka_tools()
    topic = topic_factory(4, suffix="judge")
    produce_records(topic, json_records(40, 4))
    setup = make_setup((topic,), slots=2, settings={"initial_rebalance_delay_s": 1.0})
    config = config_for(setup)
    job = definitions_for(setup).resolve_job_def(T.get_job_name(config.group))
    group, store, bootstrap = config.group, setup.store_url, setup.bootstrap

    # the group's batch (Materialize: every slot in one run), then records it has not read yet on two partitions
    assert job.execute_in_process(instance=instance).success
    produce_records(topic, more_records(1000, {0: 4, 1: 4}))
    assert positions(judge(store, bootstrap, group)) == [(0, 10, 14, 4), (1, 10, 14, 4), (2, 10, 10, 0), (3, 10, 10, 0)]

    # `cohort reset-offsets --execute` moves Kafka's committed offsets with the ledger's
    reset = subprocess.run(
        [COHORT, "reset-offsets", group, "--store-url", store, "--bootstrap-servers", bootstrap,
         "--topic", f"{topic}:0,2", "--shift-by", "-4", "--execute", "--reason", "judge"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert reset.returncode == 0, reset.stdout + reset.stderr
    assert positions(judge(store, bootstrap, group)) == [(0, 6, 14, 8), (1, 10, 14, 4), (2, 6, 10, 4), (3, 10, 10, 0)]

    # the next batch replays [6, 10) of partitions 0 and 2 and reads on: caught up, in Kafka's view too
    assert job.execute_in_process(instance=instance).success
    assert positions(judge(store, bootstrap, group)) == [(0, 14, 14, 0), (1, 14, 14, 0), (2, 10, 10, 0), (3, 10, 10, 0)]
    assert landed_offsets(spark, setup) == every_offset({0: 14, 1: 14, 2: 10, 3: 10})  # each once


class LoseSlotTwo:
    """The worker's batch runner: worker slot 2's first batch waits until slot 1 has committed the partitions it
    does not own, then dies before reading (a run lost mid-batch); every other batch is the real one."""

    def __init__(self, coordinator: Coordinator, topic: str, partitions: int) -> None:
        self.coordinator, self.topic, self.partitions = coordinator, topic, partitions
        self.lost: list[tuple[int, ...]] = []

    def __call__(
        self, spark: Any, spec: Any, kafka_config: Any, partitions: Any, ledger: Any, **kw: Any
    ) -> BatchResult:
        if not self.lost and str(getattr(ledger, "instance_id", "")).endswith("/worker-2"):
            self.lost.append(tuple(sorted(tp.partition for tp in partitions)))
            others = [TopicPartition(self.topic, p) for p in range(self.partitions) if p not in self.lost[0]]
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                if all(o is not None for o in self.coordinator.fetch_offsets(ledger.group, others).values()):
                    break
                time.sleep(0.2)
            raise RuntimeError("worker slot 2 lost mid-batch")
        return run_batch(spark, spec, kafka_config, partitions, ledger, **kw)


@pytest.mark.slow  # three worker runs on Spark and a sensor tick (minutes on two loaded cores): `make test-all`
def test_kafka_describes_a_group_after_a_lost_slot_is_rerun_as_cohort_describe_does(
    make_setup: Any, topic_factory: Any, produce_records: Any, instance: dg.DagsterInstance, spark: Any
) -> None:
    require_kafka_tools()
    topic = topic_factory(4, suffix="lost")
    produce_records(topic, json_records(40, 4))
    setup = make_setup((topic,), slots=2, settings={"initial_rebalance_delay_s": 2.0})
    config = config_for(setup)
    coordinator = Coordinator.from_url(setup.store_url)
    lose = LoseSlotTwo(coordinator, topic, 4)
    defs = definitions_for(setup, runner=lose)
    job = defs.resolve_job_def(T.get_job_name(config.group))
    group, store, bootstrap = config.group, setup.store_url, setup.bootstrap

    sensor = defs.resolve_sensor_def("cohort_membership_sensor")
    with dg.build_sensor_context(instance=instance, resources=defs.resources) as context:
        watching = sensor.evaluate_tick(context)  # the daemon's ticks watch the group's runs from the first one on

    failed = job.execute_in_process(instance=instance, raise_on_error=False)
    assert not failed.success and len(lose.lost) == 1 and lose.lost[0], lose.lost
    orphaned = lose.lost[0]
    # slot 1's partitions are committed and mirrored; slot 2's have no committed offset, in Kafka either
    rows = judge(store, bootstrap, group)
    assert {p for (_t, p), row in rows.items() if row[0] is None} == set(orphaned), rows

    # the membership sensor asks for the lost run's slots again; the reruns read the orphaned partitions
    with dg.build_sensor_context(instance=instance, resources=defs.resources, cursor=watching.cursor) as context:
        tick = sensor.evaluate_tick(context)
    requests = tick.run_requests or []
    assert {r.tags["cohort/slot"] for r in requests} >= {"2"}, requests
    assert all(r.tags["cohort/rerun_of"] == failed.run_id for r in requests)
    for request in requests:
        assert job.execute_in_process(run_config=request.run_config, tags=request.tags, instance=instance).success
    assert positions(judge(store, bootstrap, group)) == [(p, 10, 10, 0) for p in range(4)]
    assert landed_offsets(spark, setup) == every_offset(dict.fromkeys(range(4), 10))
    coordinator.close()


class DiesOnce:
    """The worker's batch runner: the real batch, or a failure when `fail_next` is set (a replay's batch that dies
    after its reset)."""

    def __init__(self) -> None:
        self.fail_next = False

    def __call__(
        self, spark: Any, spec: Any, kafka_config: Any, partitions: Any, ledger: Any, **kw: Any
    ) -> BatchResult:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("the replay's batch died after its reset")
        return run_batch(spark, spec, kafka_config, partitions, ledger, **kw)


@pytest.mark.slow  # four worker runs on Spark (minutes on two loaded cores): `make test-all`
def test_kafka_describes_a_group_during_and_after_dagster_replays_as_cohort_describe_does(
    make_setup: Any, topic_factory: Any, produce_records: Any, instance: dg.DagsterInstance, spark: Any
) -> None:
    require_kafka_tools()
    topic = topic_factory(2, suffix="replays")
    produce_records(topic, json_records(20, 2))
    setup = make_setup((topic,), slots=1, settings={"initial_rebalance_delay_s": 0.5})
    config = config_for(setup)
    dies = DiesOnce()
    job = definitions_for(setup, runner=dies).resolve_job_def(T.get_job_name(config.group))
    group, store, bootstrap = config.group, setup.store_url, setup.bootstrap
    assert job.execute_in_process(instance=instance).success
    assert positions(judge(store, bootstrap, group)) == [(0, 10, 10, 0), (1, 10, 10, 0)]

    # a replay of partition 0 from the earliest offset whose batch dies after the reset: pending, in Kafka too
    dies.fail_next = True
    pending = job.execute_in_process(
        run_config=worker_run_config(config, replay_from="earliest"),
        instance=instance,
        tags={"dagster/partition": "0"},
        raise_on_error=False,
    )
    assert not pending.success
    assert positions(judge(store, bootstrap, group)) == [(0, 0, 10, 10), (1, 10, 10, 0)]

    # the group's next batch finishes it; a replay of partition 1 from offset 4 then succeeds at once
    assert job.execute_in_process(instance=instance).success
    assert positions(judge(store, bootstrap, group)) == [(0, 10, 10, 0), (1, 10, 10, 0)]
    produce_records(topic, more_records(1000, {1: 3}))
    replay = job.execute_in_process(
        run_config=worker_run_config(config, replay_from="4"), instance=instance, tags={"dagster/partition": "1"}
    )
    assert replay.success
    assert positions(judge(store, bootstrap, group)) == [(0, 10, 10, 0), (1, 13, 13, 0)]
    assert landed_offsets(spark, setup) == every_offset({0: 10, 1: 13})
