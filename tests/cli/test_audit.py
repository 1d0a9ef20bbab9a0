"""`cohort audit` run as the user runs it (the `cohort` command in a subprocess) on a sink a real batch wrote:
real broker, Spark, the coordinator's ledger on SQLite and the Kafka mirror. Divergences are made by hand the
way failures leave them, named by the audit without changing anything, then repaired where that is safe."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.protocol.messages import JoinRequest
from cohort.common.types import TopicPartition
from cohort.pipelines import KafkaOffsetMirror, PipelineSpec, run_batch
from cohort.pipelines.sink.layout import MARKER_PREFIX, STAGING, range_dir_name
from tests.support.audit_command import COHORT, cohort_audit, problems, tree
from tests.support.orders import ORDER_SCHEMA, order


@pytest.mark.slow
def test_audit_names_each_divergence_and_repairs_only_what_is_safe(
    spark: Any,
    kafka_config: dict[str, Any],
    topic_factory: Any,
    produce_records: Any,
    coordinator: Coordinator,
    sqlite_url: str,
    group: str,
    lake: Path,
) -> None:
    topic = topic_factory(3, suffix="audit")
    produce_records(topic, [(i % 3, None, order(i) if i != 4 else b"{") for i in range(30)])
    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA)
    tps = [TopicPartition(topic, p) for p in range(3)]
    ledger = coordinator.standalone_ledger(group)
    run_batch(spark, spec, kafka_config, tps, ledger, group=group, mirror=KafkaOffsetMirror(kafka_config))
    bootstrap = kafka_config["bootstrap.servers"]
    args = [group, "--store-url", sqlite_url, "--sink", str(lake), "--bootstrap-servers", bootstrap]

    code, report, _ = cohort_audit(*args)
    assert (code, report["ok"], len(report["partitions"])) == (0, True, 3), report
    assert [(p["ledger"], p["kafka"], p["sink_dirs"]) for p in report["partitions"]] == [(10, 10, 1)] * 3
    assert [p["quarantine_dirs"] for p in report["partitions"]] == [0, 1, 0]  # record 4 is malformed

    # partition 0: its run died between its commit and its publish (the range waits in its staging);
    # partition 1: Kafka behind the ledger (a mirror that never ran); partition 2: output no commit accounts for
    live = lake / f"topic={topic}" / "partition=0" / range_dir_name(topic, 0, 0, 10)
    attempt = next(p.name for p in live.iterdir() if p.name.startswith(MARKER_PREFIX)).removeprefix(MARKER_PREFIX)
    staged = lake / STAGING / attempt / f"topic={topic}" / "partition=0"
    staged.parent.mkdir(parents=True)
    live.rename(staged)
    consumer = Consumer({**kafka_config, "group.id": group, "enable.auto.commit": False})
    consumer.commit(offsets=[KafkaTopicPartition(topic, 1, 4)], asynchronous=False)
    consumer.close()
    quarantined = lake / "_quarantine" / f"topic={topic}" / "partition=1" / range_dir_name(topic, 1, 0, 10)
    aside = lake.parent / "aside"
    quarantined.rename(aside)  # and partition 1's quarantined record is gone, with nothing staged to publish
    partition_2 = lake / f"topic={topic}" / "partition=2"
    shutil.copytree(partition_2 / range_dir_name(topic, 2, 0, 10), partition_2 / range_dir_name(topic, 2, 10, 20))
    before = tree(lake)

    code, report, _ = cohort_audit(*args)
    assert (code, report["ok"]) == (1, False)
    assert problems(report) == {
        0: [("sink", "publish")],
        1: [("quarantine", "publish"), ("kafka", "mirror")],
        2: [("sink", None)],
    }
    assert tree(lake) == before  # the audit changed nothing

    request = JoinRequest(instance_id=f"{group}/worker-1", client_id="live", topics=[topic], session_timeout=60)
    member = coordinator.join(group, request)
    done = subprocess.run([COHORT, "audit", *args, "--repair"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "--repair needs it without members" in done.stderr, done.stderr
    assert tree(lake) == before
    coordinator.leave(group, member.member_id, instance_id=f"{group}/worker-1")

    code, report, _ = cohort_audit(*args, "--repair")
    assert code == 1 and problems(report) == {1: [("quarantine", "publish")], 2: [("sink", None)]}  # left
    repaired = {p["partition"]: p["repaired"] for p in report["partitions"]}
    assert repaired[0] == ["published [0, 10) in the sink"]
    run = coordinator.ledger_history(group, topic, 1)[0].run_id
    assert repaired[1] == [
        f"not repaired: no staged output of run {run} holds [0, 10) with 1 rows; replay the offsets to rebuild it "
        "(docs/replay.md)",
        "mirrored offset 10 to Kafka",
    ]
    aside.rename(quarantined)
    assert live.is_dir() and spark.read.parquet(str(lake)).count() == 29 + 10  # + the stray copy, still there

    shutil.rmtree(partition_2 / range_dir_name(topic, 2, 10, 20))
    code, report, _ = cohort_audit(*args)
    assert (code, report["ok"]) == (0, True)
    assert spark.read.parquet(str(lake)).count() == 29
