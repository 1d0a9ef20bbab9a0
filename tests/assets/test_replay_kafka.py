"""A replay started from Dagster moves Kafka's committed offsets and writes its ledger entry exactly as
`cohort reset-offsets --execute` does (real broker, Spark, store, instance; `cohort audit` as a subprocess): while
the replay is pending Kafka shows the reset position (what `kafka-consumer-groups --describe` reads) and the audit
finds Kafka in line with the ledger; once the replay batch committed, the audit is clean."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cohort.assets.replay import REPLAY_TAG
from cohort.assets.translator import DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.common.types import TopicPartition
from cohort.pipelines.batch.results import BatchResult
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.kafka.mirror import kafka_committed
from harness.dagster_group import Setup, config_for, definitions_for, json_records

T = DagsterCohortTranslator()
COHORT = str(Path(sys.executable).with_name("cohort"))


class Batches:
    """The worker's batch runner: Kafka's committed offsets of the group when each batch starts (after a replay's
    reset), then the real batch, or a failure when `fail_next` is set (a batch that dies after the reset)."""

    def __init__(self, kafka_config: dict[str, Any], group: str, tps: list[TopicPartition]) -> None:
        self.kafka_config, self.group, self.tps = kafka_config, group, tps
        self.seen: list[dict[TopicPartition, int | None]] = []
        self.fail_next = False

    def __call__(
        self, spark: Any, spec: Any, kafka_config: Any, partitions: Any, ledger: Any, **kw: Any
    ) -> BatchResult:
        self.seen.append(kafka_offsets(self.kafka_config, self.group, self.tps))
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("the batch died after the replay's reset")
        return run_batch(spark, spec, kafka_config, partitions, ledger, **kw)


def kafka_offsets(
    kafka_config: dict[str, Any], group: str, tps: list[TopicPartition]
) -> dict[TopicPartition, int | None]:
    return {tp: offset for tp, (offset, _metadata) in kafka_committed(kafka_config, group, tps).items()}


def audit(setup: Setup, group: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [COHORT, "audit", group, "--store-url", setup.store_url, "--sink", setup.sink,
         "--bootstrap-servers", setup.bootstrap, "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


@pytest.mark.slow  # several worker-job runs on Spark (minutes on two cores): `make test-all`
def test_a_dagster_replay_moves_kafka_and_records_its_reset_as_the_cli_does(
    make_setup, topic_factory, produce_records, instance, kafka_config, spark
):
    # `spark`: the session's Spark, which the runs share (a run stops only a session it started)
    topic = topic_factory(2, suffix="replaykafka")
    produce_records(topic, json_records(20, 2))
    setup = make_setup((topic,), slots=1, settings={"initial_rebalance_delay_s": 0.5})
    config = config_for(setup)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    batches = Batches(kafka_config, config.group, [tp0, tp1])
    job = definitions_for(setup, runner=batches).resolve_job_def(T.get_job_name(config.group))
    assert job.execute_in_process(instance=instance).success
    assert kafka_offsets(kafka_config, config.group, [tp0, tp1]) == {tp0: 10, tp1: 10}

    # a replay of partition 0 whose batch dies after the reset: the replay is pending
    batches.fail_next = True
    pending = job.execute_in_process(
        run_config=worker_run_config(config, replay_from="earliest"),
        instance=instance,
        tags={"dagster/partition": "0"},
        raise_on_error=False,
    )
    assert not pending.success
    assert batches.seen[-1] == {tp0: 0, tp1: 10}  # Kafka moved with the ledger's reset, before the batch read
    assert kafka_offsets(kafka_config, config.group, [tp0, tp1]) == {tp0: 0, tp1: 10}
    coordinator = config.group_resource.get_coordinator()
    [*_, reset] = coordinator.ledger_history(config.group, topic, 0)
    assert (reset.kind, reset.from_offset, reset.until_offset, reset.run_id) == ("reset", 10, 0, pending.run_id)
    # who, what and why, as `cohort reset-offsets` writes them: user@host: target: reason
    assert reset.note is not None and re.fullmatch(rf"\S+@\S+: earliest: replay run {pending.run_id}", reset.note)
    _code, report = audit(setup, config.group)
    assert [(p["partition"], p["ledger"], p["kafka"]) for p in report["partitions"]] == [(0, 0, 0), (1, 10, 10)]
    assert not [x for p in report["partitions"] for x in p["problems"] if x["where"] == "kafka"], report

    # the group's next batch finishes the replay; then a replay that succeeds at once, started by the run tag
    assert job.execute_in_process(instance=instance).success
    by_tag = job.execute_in_process(instance=instance, tags={"dagster/partition": "1", REPLAY_TAG: "offset 4"})
    assert by_tag.success
    assert batches.seen[-1] == {tp0: 10, tp1: 4}
    assert kafka_offsets(kafka_config, config.group, [tp0, tp1]) == {tp0: 10, tp1: 10}
    code, report = audit(setup, config.group)
    assert (code, report["ok"]) == (0, True), report
    assert [(p["partition"], p["ledger"], p["kafka"]) for p in report["partitions"]] == [(0, 10, 10), (1, 10, 10)]
