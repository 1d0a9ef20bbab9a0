"""Committing a batch: its ranges, the ledger's transaction, publishing what an earlier batch committed and left
staged, the Kafka mirror and each partition's result (cohort.pipelines.batch.run's steps)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from cohort.common.ledger import OffsetLedger, OffsetMirror
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.batch.results import PartitionResult
from cohort.pipelines.batch.stage import NOTHING, Stats
from cohort.pipelines.planning.plan import BatchPlan, PartitionPlan
from cohort.pipelines.planning.positions import RangeLedger
from cohort.pipelines.replay.check import OutputCheck
from cohort.pipelines.sink.counts import StagedCounts
from cohort.pipelines.sink.layout import SinkFs, SinkLayout


def commit_ranges(
    plan: BatchPlan,
    counts: Mapping[TopicPartition, StagedCounts],
    checks: Mapping[TopicPartition, OutputCheck] | None = None,
) -> list[OffsetRange]:
    ranges: list[OffsetRange] = []
    for p in plan.partitions:
        if not p.must_commit:
            continue
        if p.gap is not None:
            ranges.append(p.gap)
        ranges.append(
            OffsetRange(
                p.tp.topic,
                p.tp.partition,
                p.from_offset,
                p.until_offset,
                records=(counted := counts.get(p.tp, NOTHING)).written,
                quarantined=counted.quarantined,
                filtered=counted.filtered,
                expanded=counted.expanded,
                content_hash=check.content_hash if (check := (checks or {}).get(p.tp)) else None,
                note=check.note if check else None,
            )
        )
    return ranges


def commit_ranges_to(ledger: OffsetLedger, ranges: Sequence[OffsetRange], run_id: str) -> None:
    """Commit `ranges`, the fencing point of the batch. A commit that raised although the ledger holds it (its
    answer was lost with the connection) counts as done: its output must be published, not deleted."""
    try:
        ledger.commit(ranges, run_id=run_id)
    except Exception:
        if not _landed(ledger, ranges, run_id):
            raise


def _landed(ledger: OffsetLedger, ranges: Sequence[OffsetRange], run_id: str) -> bool:
    """Whether every partition's last committed range is this run's last range of it (needs a RangeLedger)."""
    if not isinstance(ledger, RangeLedger):
        return False
    ends = {r.topic_partition: r.until_offset for r in ranges}
    try:
        last = ledger.last_committed(sorted(ends))
    except Exception:
        return False
    return all(
        (entry := last.get(tp)) is not None and entry.run_id == run_id and entry.until_offset == until
        for tp, until in ends.items()
    )


def complete_committed(
    ledger: OffsetLedger, plan: BatchPlan, sink: SinkLayout, quarantine: SinkLayout, fs: SinkFs
) -> dict[TopicPartition, str]:
    """Publish each planned partition's last committed range if its run died between its commit and its
    publish (its output waits in that run's staging); a warning per partition whose committed output is
    neither in place nor staged. Runs before this batch commits, so only a partition's last range can ever
    be waiting: every commit follows the publish of the range before it."""
    if not isinstance(ledger, RangeLedger) or not plan.partitions:
        return {}
    warnings: dict[TopicPartition, str] = {}
    for tp, last in sorted(ledger.last_committed([p.tp for p in plan.partitions]).items()):
        if last is None or last.run_id is None:
            continue
        replay = getattr(last, "note", None) is not None  # on an object store, its deletions may be unfinished
        for layout, count in ((sink, last.records), (quarantine, last.quarantined)):
            if not (count or (replay and fs.object_store(layout.root))):
                continue
            if not layout.complete(fs, last.run_id, tp, last.from_offset, last.until_offset, count):
                warnings[tp] = (
                    f"{tp}: committed range [{last.from_offset}, {last.until_offset}) of run {last.run_id} has no "
                    f"directory under {layout.root} and no staged output left to publish"
                )
    return warnings


def _mirror_ranges(plan: BatchPlan, ranges: Sequence[OffsetRange], ledger: OffsetLedger) -> list[OffsetRange]:
    """What Kafka's committed offsets must become: this batch's ranges, plus the ledger's head of every other
    planned partition that has one. A run that died between its ledger commit and its mirror left Kafka
    behind the ledger; without new records no later batch would commit those partitions again."""
    done = {r.topic_partition for r in ranges}
    idle = [p.tp for p in plan.partitions if p.tp not in done]
    heads = ledger.committed_offsets(idle) if idle else {}
    return [
        *ranges,
        *(OffsetRange(tp.topic, tp.partition, at, at) for tp, at in sorted(heads.items()) if at is not None),
    ]


def mirror_commits(
    plan: BatchPlan,
    ranges: Sequence[OffsetRange],
    ledger: OffsetLedger,
    mirror: OffsetMirror | None,
    group: str | None,
    run_id: str,
) -> str | None:
    """Copy the ledger's heads to Kafka (`_mirror_ranges`); the error, if any: the ledger's commit stands, so a
    failed mirror is reported, not raised."""
    if mirror is None or group is None:
        return None
    try:
        heads = _mirror_ranges(plan, ranges, ledger)
        if heads:
            mirror.mirror(group, heads, run_id=run_id)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def partition_result(
    p: PartitionPlan,
    stats: Stats,
    counts: Mapping[TopicPartition, StagedCounts],
    warning: str | None = None,
    check: OutputCheck | None = None,
) -> PartitionResult:
    _, size, seconds = stats.get(p.tp, (0, 0, 0.0))
    warnings = [w for w in (p.warning, warning) if w]
    return PartitionResult(
        topic=p.tp.topic,
        partition=p.tp.partition,
        from_offset=p.from_offset,
        until_offset=p.until_offset,
        records=(counted := counts.get(p.tp, NOTHING)).written,
        quarantined=counted.quarantined,
        filtered=counted.filtered,
        expanded=counted.expanded,
        bytes=size,
        seconds=seconds,
        start=p.start,
        gap=p.gap,
        warning="; ".join(warnings) or None,
        content_hash=check.content_hash if check else None,
        replay_changed=check.changed if check else None,
    )
