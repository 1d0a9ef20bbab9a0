"""Kafka's own reset tool on a Cohort group (`kafka-consumer-groups --reset-offsets --execute`, its Java main class
on the broker's jars) while no run is active: Cohort does not adopt the moved offsets (the ledger is the source of
truth, Kafka's committed offsets its mirror). `cohort audit` (the command in a subprocess) names each partition's
disagreement, behind and ahead, with what the next batch does and `cohort reset-offsets` as the tool to move a
group; the next batch (a worker slot's, `run_slot_batch` as the worker runs it) warns, reads from the ledger (nothing
read twice, nothing skipped) and its mirror overwrites Kafka's offsets, idle partitions included; `cohort audit
--repair` re-mirrors at once. Real broker, Spark and the SQLite ledger."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.member import GroupMember
from cohort.assignment.settings import MemberSettings
from cohort.common.types import TopicPartition
from cohort.pipelines.kafka.mirror import kafka_committed
from cohort.pipelines.spec import PipelineSpec
from cohort.runtime.kafka_access import KafkaAccess
from cohort.runtime.slot_batch import SlotBatch, SlotRun, run_slot_batch
from tests.support.audit_command import COHORT, cohort_audit, problems
from tests.support.kafka_tools import cohort_describe, judge, kafka_describe, kafka_reset, require_kafka_tools
from tests.support.orders import ORDER_SCHEMA, order

LOG = logging.getLogger("tests.outside_reset")


def test_an_outside_reset_is_reported_by_the_audit_and_overwritten_by_the_next_batch_without_loss_or_duplicate(
    spark: Any,
    kafka_config: dict[str, Any],
    topic_factory: Any,
    produce_records: Any,
    coordinator: Coordinator,
    sqlite_url: str,
    group: str,
    lake: Path,
    sink_rows: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    require_kafka_tools()
    topic = topic_factory(2, suffix="outside")
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    bootstrap = kafka_config["bootstrap.servers"]
    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA)
    coordinator.report_topic_metadata(group, {topic: 2})
    settings = MemberSettings(topics=(topic,), session_timeout=60.0, heartbeat_interval=0.5)

    def slot_batch(run_id: str) -> SlotBatch:
        """Worker slot 1's batch as a worker runs it; its member leaves afterwards (no run is active)."""
        member = GroupMember(coordinator, group, settings, instance_id=f"{group}/worker-1", client_id=run_id)
        done = run_slot_batch(member, SlotRun(1, run_id, spec, KafkaAccess(kafka_config), lambda: spark, LOG))
        done.leave()
        return done

    def in_kafka() -> dict[TopicPartition, int | None]:
        return {tp: offset for tp, (offset, _) in kafka_committed(kafka_config, group, [tp0, tp1]).items()}

    produce_records(topic, [(i % 2, None, order(i)) for i in range(40)])
    first = slot_batch("run-first")
    assert first.result is not None and first.result.records == 40
    assert in_kafka() == {tp0: 20, tp1: 20}
    produce_records(topic, [(1, None, order(i)) for i in range(40, 50)])  # partition 1 only: 0 stays idle

    # Kafka's own tool moves the group's committed offsets: partition 0 back to the start, partition 1 forward
    assert kafka_reset(bootstrap, group, "--topic", f"{topic}:0", "--to-earliest") == {(topic, 0): 0}
    assert kafka_reset(bootstrap, group, "--topic", f"{topic}:1", "--to-offset", "25") == {(topic, 1): 25}
    assert kafka_describe(bootstrap, group) == {(topic, 0): (0, 20, 20), (topic, 1): (25, 30, 5)}

    # Cohort keeps the ledger's offsets (no reset entry), and the audit names both disagreements
    described = cohort_describe(sqlite_url, bootstrap, group)
    assert [(p["current_offset"], p["lag"]) for p in described["partitions"]] == [(20, 0), (20, 10)]
    assert described["resets"] == []
    args = [group, "--store-url", sqlite_url, "--sink", str(lake), "--bootstrap-servers", bootstrap]
    code, report, _ = cohort_audit(*args)
    assert (code, report["ok"]) == (1, False), report
    assert problems(report) == {0: [("kafka", "mirror")], 1: [("kafka", "mirror")]}
    assert [(p["ledger"], p["kafka"]) for p in report["partitions"]] == [(20, 0), (20, 25)]
    said = {p["partition"]: p["problems"][0]["problem"] for p in report["partitions"]}
    assert said[0].startswith("Kafka's committed offset 0 is behind the ledger's 20: moved outside Cohort")
    assert "the next batch starts at 20 (it does not read [0, 20) again)" in said[0]
    assert said[1].startswith("Kafka's committed offset 25 is ahead of the ledger's 20: moved outside Cohort")
    assert "the next batch starts at 20 (it does not skip [20, 25))" in said[1]
    for text in said.values():
        assert "kafka-consumer-groups --reset-offsets" in text and "use `cohort reset-offsets`" in text
    table = subprocess.run([COHORT, "audit", *args], capture_output=True, text=True, timeout=120)
    assert table.returncode == 1 and "Traceback" not in table.stderr, table.stderr
    assert f"{tp1} kafka: Kafka's committed offset 25 is ahead of the ledger's 20" in table.stdout, table.stdout
    assert "(`cohort audit --repair` re-mirrors it)" in table.stdout

    # the next batch warns, reads from the ledger (partition 1 from 20: nothing skipped; partition 0 nothing:
    # nothing read twice) and mirrors the ledger's heads over Kafka's offsets, the idle partition's too
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        nxt = slot_batch("run-next")
    assert nxt.result is not None
    assert {
        (p.partition, p.from_offset, p.until_offset) for p in nxt.result.partitions if p.until_offset > p.from_offset
    } == {(1, 20, 30)}
    [warning] = [r.getMessage() for r in caplog.records if r.name == LOG.name and r.levelno == logging.WARNING]
    assert f"{tp0}: Kafka's committed offset 0 is behind the ledger's 20" in warning, warning
    assert f"{tp1}: Kafka's committed offset 25 is ahead of the ledger's 20" in warning
    assert "This batch reads from the ledger" in warning and "use `cohort reset-offsets`" in warning
    assert in_kafka() == {tp0: 20, tp1: 30}
    code, report, _ = cohort_audit(*args)
    assert (code, report["ok"]) == (0, True), report
    landed = [(r.kafka.partition, r.kafka.offset) for r in sink_rows(lake)]
    assert landed == [(0, o) for o in range(20)] + [(1, o) for o in range(30)]  # each record once, none missing

    # an outside reset again, and `cohort audit --repair` puts the ledger's offsets back into Kafka at once
    assert kafka_reset(bootstrap, group, "--topic", topic, "--to-earliest") == {(topic, 0): 0, (topic, 1): 0}
    code, report, _ = cohort_audit(*args, "--repair")
    assert (code, report["ok"]) == (0, True), report
    assert [p["repaired"] for p in report["partitions"]] == [
        ["mirrored offset 20 to Kafka"],
        ["mirrored offset 30 to Kafka"],
    ]
    assert judge(sqlite_url, bootstrap, group) == {(topic, 0): (20, 20, 0), (topic, 1): (30, 30, 0)}
