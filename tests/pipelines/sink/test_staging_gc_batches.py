"""The staging clean-up against batches killed at each commit boundary: the real broker, Spark, the SQLite
coordinator and run_batch.

A kill is modelled by `Killed`, a BaseException raised at the boundary, with the batch's own clean-up switched off:
like SIGKILL, nothing after the point runs (tests/assets/test_fault_matrix.py runs the same boundaries with real
SIGKILLs through Dagster, which takes minutes). After each kill the clean-up runs while the victim's run is a member,
after it was fenced, within and past the grace period (a clock moved forward, no sleeping); then a rescue batch of
the slot's next run completes what the victim committed, and the clean-up it runs leaves no staging area behind.
Every record must end up in the sink or the quarantine exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.member import GroupMember
from cohort.assignment.settings import MemberSettings
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.sink.layout import HadoopFs, SinkLayout, run_tag
from cohort.pipelines.sink.staging_collect import (
    StagingCollection,
    collect_after_batch,
    collect_staging,
    group_view,
    staging_roots,
    tree,
)
from cohort.pipelines.sink.staging_gc import STAGING_GRACE_S
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tasks.writer import ArrowFs
from tests.support.orders import ORDER_SCHEMA, order

PER_ROUND = 6
"""Records per partition and round; the last of each is not JSON (quarantined)."""


class Killed(BaseException):
    """The process died here: no handler runs (`except Exception` lets it through) and no clean-up either."""


class _KillingLedger:
    """The victim's member as its ledger, killed on entry to the commit of its ranges or right after it."""

    def __init__(self, member: GroupMember, *, after: bool) -> None:
        self._member, self._after = member, after

    def committed_offsets(self, partitions: Sequence[TopicPartition]) -> Any:
        return self._member.committed_offsets(partitions)

    def last_committed(self, partitions: Sequence[TopicPartition]) -> Any:
        return self._member.last_committed(partitions)

    def commit(self, ranges: Sequence[OffsetRange], *, run_id: str | None = None) -> None:
        if any(r.until_offset > r.from_offset for r in ranges) and not self._after:
            raise Killed("before the ledger commit")
        self._member.commit(ranges, run_id=run_id)
        if any(r.until_offset > r.from_offset for r in ranges):
            raise Killed("after the ledger commit")


POINTS = ("staged", "prepared", "committed", "half-published", "published")
"""Staged, before the markers; marked, before the ledger commit; committed, before the publish; the sink published,
the quarantine not; everything published, before the clean-up."""
WAITS = {"committed": {"sink", "quarantine"}, "half-published": {"quarantine"}}
"""The outputs whose staged ranges a kill at the point leaves committed and unpublished."""


def _kill(point: str, victim_run: str, quarantine_root: str, monkeypatch: pytest.MonkeyPatch) -> Callable[[Any], Any]:
    """Patch the boundary of `point` (and switch the batch's own clean-up off); the victim's ledger wrapper."""
    monkeypatch.setattr(SinkLayout, "discard_staging", lambda *args, **kwargs: None)
    if point == "staged":

        def prepare(*args: Any, **kwargs: Any) -> None:
            raise Killed("before the markers")

        monkeypatch.setattr(SinkLayout, "prepare", prepare)
    if point == "half-published":
        publish = SinkLayout.publish

        def half(self: SinkLayout, fs: Any, attempt: str, ranges: Any) -> Any:
            if self.root == quarantine_root and attempt.startswith(run_tag(victim_run)):  # not a step 0 completion
                raise Killed("between the two publishes")
            return publish(self, fs, attempt, ranges)

        monkeypatch.setattr(SinkLayout, "publish", half)
    if point == "prepared":
        return lambda member: _KillingLedger(member, after=False)
    if point == "committed":
        return lambda member: _KillingLedger(member, after=True)
    return lambda member: member


def _areas(root: Path) -> set[str]:
    """The staging areas under an output root, by path."""
    staging = root / "_staging"
    return {str(p) for p in staging.iterdir()} if staging.exists() else set()


def _offsets(root: Path) -> list[tuple[int, int]]:
    """(partition, offset) of every row in the range directories under an output root."""
    found = []
    for directory in sorted(root.glob("topic=*/partition=*/*.parquet")):
        table = pq.read_table(directory, columns=["kafka"])
        found += [(k["partition"], k["offset"]) for k in table.column("kafka").to_pylist()]
    return sorted(found)


def _reasons(collected: StagingCollection | str | None) -> dict[str, tuple[bool, str]]:
    assert isinstance(collected, StagingCollection), collected
    assert collected.failed == () and collected.foreign == ()
    return {v.path: (v.delete, v.reason) for v in collected.verdicts}


def test_staging_left_by_a_kill_at_each_commit_boundary_is_collected_and_nothing_else(
    spark: Any,
    kafka_config: dict[str, Any],
    topic_factory: Callable[..., str],
    produce_records: Callable[..., int],
    coordinator: Coordinator,
    group: str,
    lake: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One victim per boundary, each the slot's next run after the one before: it first publishes what the victim
    before it committed and left unpublished (the batch's step 0), then dies at its own boundary."""
    topic = topic_factory(2)
    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA)
    quarantine = Path(spec.quarantine_root)
    outputs = (("sink", lake), ("quarantine", quarantine))
    roots = staging_roots(spec.sink_path, spec.quarantine_root)
    fs, view = ArrowFs(), group_view(coordinator, group)
    assert view is not None
    settings = MemberSettings(topics=(topic,), session_timeout=30.0)
    past_grace = STAGING_GRACE_S + 60

    def member(run: str) -> GroupMember:
        joined = GroupMember(coordinator, group, settings, client_id=run, topic_metadata=lambda: {topic: 2})
        assert len(joined.join()) == 2
        return joined

    produced = 0
    waiting: set[str] = set()  # areas the victim before left, their committed ranges unpublished
    for point in POINTS:
        produce_records(
            topic,
            [
                (p, None, order(produced + i) if i < PER_ROUND - 1 else b"not json")
                for p in (0, 1)
                for i in range(PER_ROUND)
            ],
        )
        produced += PER_ROUND
        victim_run = f"victim-{point}"
        victim = member(victim_run)
        with monkeypatch.context() as patched:
            ledger = _kill(point, victim_run, str(quarantine), patched)(victim)
            if point == "published":
                run_batch(spark, spec, kafka_config, list(victim.assignment), ledger, run_id=victim_run)
            else:
                with pytest.raises(Killed):
                    run_batch(spark, spec, kafka_config, list(victim.assignment), ledger, run_id=victim_run)
        mine = {path: where for where, root in outputs for path in _areas(root) - waiting}
        assert sorted(mine.values()) == ["quarantine", "sink"]
        assert all(path.rsplit("/", 1)[1].startswith(run_tag(victim_run)) for path in mine)

        # its run is a member: kept, however old; the attempts the victim before left were published (step 0)
        far = time.time() + 100 * past_grace
        found = _reasons(collect_after_batch(fs, roots, victim, now=far))
        assert found == {**dict.fromkeys(mine, (False, "live")), **dict.fromkeys(waiting, (True, "dead"))}, point

        # fenced (its session expired), then the same run back under a new member id: still its run
        victim_id = victim.member_id
        victim.close(leave=False)
        coordinator.evict_member(group, victim_id or "", "killed")
        if point == "prepared":
            again = member(victim_run)
            assert again.member_id != victim_id
            assert set(_reasons(collect_after_batch(fs, roots, again, now=far)).values()) == {(False, "live")}
            again.close(leave=True)

        # outside the group: kept within the grace period, then only what waits to be published
        young = collect_staging(fs, roots, view, now=time.time())
        assert set(_reasons(young).values()) == {(False, "young")}
        old = _reasons(collect_staging(fs, roots, view, now=time.time() + past_grace))
        waits = WAITS.get(point, set())
        assert old == {a: (False, "to-publish") if w in waits else (True, "dead") for a, w in mine.items()}, point
        waiting = {a for a, w in mine.items() if w in waits}
        assert {path for _, root in outputs for path in _areas(root)} == waiting

    # the slot's next run: nothing new to read; what it collects leaves no staging area behind
    rescue = member("rescue")
    try:
        result = run_batch(spark, spec, kafka_config, list(rescue.assignment), rescue, run_id="rescue")
        assert result.committed == ()
        after = collect_after_batch(fs, roots, rescue, now=time.time() + past_grace)
        assert _reasons(after) == {}  # the last victim's staging areas went with the grace period
    finally:
        rescue.close(leave=True)
    assert _areas(lake) == _areas(quarantine) == set()

    every = [(p, o) for p in (0, 1) for o in range(produced)]
    quarantined = [(p, o) for p, o in every if o % PER_ROUND == PER_ROUND - 1]
    assert _offsets(lake) == sorted(set(every) - set(quarantined))
    assert _offsets(quarantine) == quarantined
    tps = [TopicPartition(topic, p) for p in (0, 1)]
    assert coordinator.fetch_offsets(group, tps) == dict.fromkeys(tps, produced)
    assert [(e.from_offset, e.until_offset, e.run_id) for e in coordinator.ledger_history(group, topic, 0)] == [
        (0, 3 * PER_ROUND, "victim-committed"),
        (3 * PER_ROUND, 4 * PER_ROUND, "victim-half-published"),
        (4 * PER_ROUND, 5 * PER_ROUND, "victim-published"),
    ]


def test_hadoops_file_system_lists_an_attempt_as_pyarrow_does(spark: Any, tmp_path: Path) -> None:
    """The tree the clean-up reads (paths, directories, modification times) is the same through both file systems."""
    staged = tmp_path / "_staging" / "a" / "topic=t" / "partition=0"
    staged.mkdir(parents=True)
    (staged / "part-0-5.parquet").write_bytes(b"x")
    (staged / "_cohort_range=0-5").touch()
    arrow = tree(ArrowFs(), str(tmp_path / "_staging" / "a"))
    hadoop = tree(HadoopFs(spark), f"file://{tmp_path}/_staging/a")
    assert (
        [(e.path, e.is_dir) for e in hadoop]
        == [(e.path, e.is_dir) for e in arrow]
        == [
            ("", True),
            ("topic=t", True),
            ("topic=t/partition=0", True),
            ("topic=t/partition=0/_cohort_range=0-5", False),
            ("topic=t/partition=0/part-0-5.parquet", False),
        ]
    )
    assert [round(e.mtime) for e in hadoop] == [round(e.mtime) for e in arrow]
    assert tree(ArrowFs(), str(tmp_path / "missing")) == tree(HadoopFs(spark), f"file://{tmp_path}/missing") == []
