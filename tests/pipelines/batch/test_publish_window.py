"""The window between a batch's fencing and its sink changes, forced open: a zombie fenced at its last moment,
while the live member commits the same offsets, must leave the live member's output alone; and a commit whose
publish never happened is published by the next batch of the partition."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.errors import FencedInstanceIdError
from cohort.assignment.member import GroupMember
from cohort.assignment.settings import MemberSettings
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.sink.layout import SinkLayout
from cohort.pipelines.spec import PipelineSpec
from tests.support.orders import ORDER_SCHEMA, order, range_dirs


def _spec(lake: Path) -> PipelineSpec:
    return PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA)


class _FencedAtTheLastMoment:
    """The zombie's ledger: `fence` runs at the last moment before the zombie may change the sink, that is right
    after a commit that records nothing (a check a batch makes before it publishes), else right before the
    batch's commit."""

    def __init__(self, ledger: Any, fence: Callable[[], None]) -> None:
        self._ledger, self._fence, self.fenced = ledger, fence, False

    def committed_offsets(self, partitions: Sequence[TopicPartition]) -> Any:
        return self._ledger.committed_offsets(partitions)

    def last_committed(self, partitions: Sequence[TopicPartition]) -> Any:
        return self._ledger.last_committed(partitions)

    def _fence_once(self) -> None:
        if not self.fenced:
            self.fenced = True
            self._fence()

    def commit(self, ranges: Sequence[OffsetRange], *, run_id: str | None = None) -> None:
        check = all(r.until_offset == r.from_offset for r in ranges)
        if not check:
            self._fence_once()
        self._ledger.commit(ranges, run_id=run_id)
        if check:
            self._fence_once()


def test_a_zombie_fenced_at_its_last_moment_leaves_the_live_members_commit_intact(
    spark, kafka_config, topic, produce_records, coordinator, group, lake, sink_rows
):
    produce_records(topic, [(0, None, order(i)) for i in range(20)], one_per_batch=False)
    tp = TopicPartition(topic, 0)
    settings = MemberSettings(topics=(topic,), session_timeout=30.0)
    slot = f"{group}/worker-1"

    def member(run: str) -> GroupMember:
        return GroupMember(
            coordinator, group, settings, instance_id=slot, client_id=run, topic_metadata=lambda: {topic: 1}
        )

    zombie, live = member("zombie-run"), member("live-run")
    lives: list[Any] = []

    def rerun_of_the_slot_commits_the_same_offsets() -> None:
        live.join()  # the slot's next run replaces the zombie (FENCED_INSTANCE_ID for the zombie from now on)
        lives.append(run_batch(spark, _spec(lake), kafka_config, live.assignment, live, run_id="liverun"))

    try:
        assert zombie.join() == (tp,)
        ledger = _FencedAtTheLastMoment(zombie, rerun_of_the_slot_commits_the_same_offsets)
        with pytest.raises(FencedInstanceIdError):
            run_batch(spark, _spec(lake), kafka_config, [tp], ledger, run_id="zombierun")
        assert ledger.fenced
    finally:
        zombie.close()
        live.close()

    (result,) = lives
    assert (result.records, result.committed) == (20, (OffsetRange(topic, 0, 0, 20, records=20),))
    assert range_dirs(lake) == [f"topic={topic}/partition=0/{topic}-0-0-20.parquet"]
    assert [r.kafka.offset for r in sink_rows(lake)] == list(range(20))
    history = coordinator.ledger_history(group, topic, 0)
    assert [(e.from_offset, e.until_offset, e.run_id) for e in history] == [(0, 20, "liverun")]
    assert not any(p.is_file() for p in (lake / "_staging").rglob("*"))  # the zombie kept nothing either


def test_a_commit_whose_publish_never_happened_is_published_by_the_next_batch(
    spark, kafka_config, topic, produce_records, ledger, lake, sink_rows, monkeypatch
):
    produce_records(topic, [(0, None, order(i)) for i in range(10)], one_per_batch=False)
    tp = TopicPartition(topic, 0)
    publish = SinkLayout.publish

    def crash(self: SinkLayout, *args: Any, **kwargs: Any) -> Any:
        raise OSError("the process died between its ledger commit and its publish")

    monkeypatch.setattr(SinkLayout, "publish", crash)
    with pytest.raises(OSError, match="died"):
        run_batch(spark, _spec(lake), kafka_config, [tp], ledger, run_id="crashed")
    assert ledger.committed_offsets([tp]) == {tp: 10}
    assert range_dirs(lake) == []  # committed, not visible yet: its staged output waits for the next batch

    monkeypatch.setattr(SinkLayout, "publish", publish)
    produce_records(topic, [(0, None, order(i)) for i in range(10, 13)], one_per_batch=False)
    result = run_batch(spark, _spec(lake), kafka_config, [tp], ledger, run_id="next")
    assert [(p.from_offset, p.until_offset, p.records) for p in result.partitions] == [(10, 13, 3)]
    assert range_dirs(lake) == [
        f"topic={topic}/partition=0/{topic}-0-0-10.parquet",
        f"topic={topic}/partition=0/{topic}-0-10-13.parquet",
    ]
    assert [r.kafka.offset for r in sink_rows(lake)] == list(range(13))


class _LandsThenFails:
    """A ledger whose commit is recorded but whose answer is lost (the connection dropped after the commit)."""

    def __init__(self, ledger: Any) -> None:
        self._ledger = ledger

    def committed_offsets(self, partitions: Sequence[TopicPartition]) -> Any:
        return self._ledger.committed_offsets(partitions)

    def last_committed(self, partitions: Sequence[TopicPartition]) -> Any:
        return self._ledger.last_committed(partitions)

    def commit(self, ranges: Sequence[OffsetRange], *, run_id: str | None = None) -> None:
        self._ledger.commit(ranges, run_id=run_id)
        raise ConnectionError("connection lost before the commit's answer")


def test_a_commit_that_landed_although_its_answer_was_lost_is_published(
    spark, kafka_config, topic, produce_records, coordinator: Coordinator, group, lake, sink_rows
):
    produce_records(topic, [(0, None, order(i)) for i in range(6)], one_per_batch=False)
    tp = TopicPartition(topic, 0)
    result = run_batch(spark, _spec(lake), kafka_config, [tp], _LandsThenFails(coordinator.standalone_ledger(group)))
    assert result.records == 6 and coordinator.fetch_offsets(group, [tp]) == {tp: 6}
    assert [r.kafka.offset for r in sink_rows(lake)] == list(range(6))
