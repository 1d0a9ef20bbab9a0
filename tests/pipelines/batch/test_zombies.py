"""Zombie fencing (issue 7): a worker left behind by the group must not commit, publish or delete anything.

Real broker, real Spark, real coordinator on SQLite and, end to end, a real Dagster instance shared with a
worker process paused with SIGSTOP. Time jumps through a ManualClock on the sensor's side; the only
real-time waits observe real processes (bounded `wait_for`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import FencedInstanceIdError
from cohort.assignment.member import GroupMember
from cohort.assignment.protocol.group_state import GroupConfig
from cohort.assignment.settings import MemberSettings
from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.spec import PipelineSpec
from harness.dagster_group import VALUE_SCHEMA, json_records
from harness.reliability.zombie_scenarios import zombie_scenario


def _offsets(spark: Any, path: Path) -> list[tuple[int, int]]:
    rows = spark.read.parquet(str(path)).select(F.col("kafka.partition"), F.col("kafka.offset")).collect()
    return sorted((int(p), int(o)) for p, o in rows)


def test_a_stale_batch_never_replaces_output_committed_after_it_was_planned(
    spark, kafka_config, topic_factory, produce_records, sqlite_url, tmp_path
):
    """Pipeline level, in one process: slot 1's batch has read its records when, inside its transform (on
    the driver, before the sink write), a new instance of slot 1 joins (static membership fences the old
    one), runs its own batch over the same partition and commits it. The old batch must be refused with
    FENCED_INSTANCE_ID before it publishes: publishing replaces overlapping range directories, so a stale
    batch that got that far would delete the new instance's committed output and then withdraw its own."""
    topic = topic_factory(1)
    produce_records(topic, json_records(12, 1))
    tp = TopicPartition(topic, 0)
    lake = tmp_path / "lake"
    coordinator = Coordinator.from_url(sqlite_url, config=GroupConfig(initial_rebalance_delay=0.0))
    group, instance_id = "zombie-pipeline", "zombie-pipeline/worker-1"

    def slot_member() -> GroupMember:
        return GroupMember(
            coordinator, group, MemberSettings(topics=(topic,), session_timeout=30.0), instance_id=instance_id,
            topic_metadata=lambda: {topic: 1},
        )  # fmt: skip

    successor: dict[str, Any] = {}

    def the_group_moves_on(frame: Any) -> Any:
        with slot_member() as replacement:  # same instance id: the old member is fenced
            successor["member_id"] = replacement.member_id
            successor["result"] = run_batch(
                spark, PipelineSpec(sink_path=str(lake), value_schema=VALUE_SCHEMA), kafka_config, [tp], replacement
            )
        return frame

    zombie = slot_member()
    try:
        assert zombie.join() == (tp,)
        stale = PipelineSpec(sink_path=str(lake), value_schema=VALUE_SCHEMA, transform=the_group_moves_on)
        with pytest.raises(FencedInstanceIdError, match="was fenced"):
            run_batch(spark, stale, kafka_config, [tp], zombie)
    finally:
        zombie.close(leave=False)
    assert successor["result"].records == 12
    history = coordinator.ledger_history(group, topic, 0)
    assert [(e.from_offset, e.until_offset, e.member_id) for e in history] == [(0, 12, successor["member_id"])]
    assert _offsets(spark, lake) == [(0, o) for o in range(12)]
    assert [d.name for d in (lake / f"topic={topic}" / "partition=0").iterdir()] == [f"{topic}-0-0-12.parquet"]
    coordinator.close()


@pytest.mark.slow
def test_a_worker_paused_past_its_session_is_fenced_when_it_resumes(spark, broker, tmp_path):
    """End to end (harness/reliability/zombie_scenarios.py): slot 1 is paused with SIGSTOP after reading its
    batch, the membership sensor (ManualClock past the session timeout) expires it and requests a rerun of
    the slot, the rerun consumes and commits everything, then the zombie resumes with its stale plan. Its
    commit is refused (UNKNOWN_MEMBER_ID: the rerun left the group when it finished), its run fails, and
    the ledger, Kafka's committed offsets and the sink stay exactly as the rerun left them."""
    seen = zombie_scenario(spark, broker.bootstrap_servers, tmp_path / "zombie", partitions=2, records=40)
    context = f"zombie log:\n{seen.log_tail}"
    assert seen.zombie_owned == (0, 1), context  # it held both partitions when it was paused
    assert seen.rerun_requests == 1 and seen.rerun_success, context
    # the rerun's work: one range per partition in the ledger, mirrored to Kafka, one directory each in the sink
    assert seen.before_resume.ledger == {0: ((0, 20, None),), 1: ((0, 20, None),)}
    assert seen.before_resume.kafka_committed == {0: 20, 1: 20}
    assert len([d for d in seen.before_resume.sink_dirs if d.startswith("lake/")]) == 2
    # the zombie: refused with the protocol's fencing error, its run failed, nothing of it is left
    assert seen.fencing_code == "UNKNOWN_MEMBER_ID", seen.zombie_error or context
    assert "UnknownMemberIdError" in seen.zombie_error and "is not in the group" in seen.zombie_error
    assert seen.zombie_exit == 1 and seen.zombie_status == "FAILURE", context
    assert seen.after_resume == seen.before_resume
    assert seen.later_requests == 0  # the zombie's failed run is not rerun a second time
    audit = seen.audit
    assert (audit.lost, audit.duplicated, audit.problems) == (0, 0, ())
    assert (audit.in_sink, audit.quarantined) == (39, 1)
    assert seen.outcome.problems == () and seen.outcome.fault == "SIGSTOP (zombie)"
