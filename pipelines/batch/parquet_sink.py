"""The Parquet sink behind a batch, `ParquetSink` (a cohort.pipelines.batch.sink.BatchSink): range directories
staged by the tasks, marked, committed to the ledger, then moved into place by renames (cohort.pipelines.sink.layout;
on an object store, one copy of one object per range: cohort.pipelines.sink.object_publish).

Its commit is a small state machine (`Step`) because the ledger commit comes before the publish: the staged output
is kept only while the ledger may hold its commit and it is not in place yet (a commit under way, or one that
landed and whose publish failed). The next batch of the partition publishes it first (`complete`). Anything else
(staging only, a refused commit, a publish done) deletes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from cohort.common.ledger import OffsetLedger
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.batch.commit import commit_ranges_to, complete_committed
from cohort.pipelines.batch.results import AdoptedRange
from cohort.pipelines.batch.sink import OutputDirs, StagedRows
from cohort.pipelines.batch.stage import sink_file_system, timed
from cohort.pipelines.planning.plan import BatchPlan
from cohort.pipelines.sink.counts import StagedCounts
from cohort.pipelines.sink.layout import SinkFs, SinkLayout, SinkTarget, StagedDirs
from cohort.pipelines.storage.preflight import probe_root

__all__ = ["ParquetSink", "Step"]

Step = Literal["staging", "committing", "refused", "committed", "published"]
"""How far an attempt's commit got: `committing` (the ledger's answer pending) and `committed` (not published) keep
the staged output for the next batch; the others delete it."""

_DISCARDS: tuple[Step, ...] = ("staging", "refused", "published")
"""The steps after which the ledger holds no commit of the staged output, or it is in place: it is deleted."""


@dataclass
class _Progress:
    """The attempt's `Step`: the one thing the sink changes while the batch runs."""

    step: Step = "staging"


@dataclass(frozen=True)
class ParquetSink:
    """One batch attempt's Parquet sink: the sink's and the quarantine's layouts, the file operations reaching both,
    the attempt, and the seconds of its steps (`stages`, the batch's). Made by `open`, for one attempt only."""

    sink: SinkLayout
    quarantine: SinkLayout
    fs: SinkFs
    attempt: str
    stages: dict[str, float]
    progress: _Progress = field(default_factory=_Progress)

    @classmethod
    def open(cls, spark: Any, target: SinkTarget, attempt: str, stages: dict[str, float]) -> ParquetSink:
        """The target's sink and quarantine roots, moved with pyarrow when it reaches both, else Hadoop's
        FileSystem; an object-store root is probed first (cohort.pipelines.storage.preflight: ObjectStoreError)."""
        sink, quarantine = SinkLayout(target.sink_root), SinkLayout(target.quarantine_root)
        with timed(stages, "preflight"):
            for layout in (sink, quarantine):  # an object store's root answers, or the batch fails here
                probe_root(layout.root, write=True)
        return cls(sink, quarantine, sink_file_system(spark, sink, quarantine), attempt, stages)

    def reconcile(self, ledger: OffsetLedger, partitions: Sequence[TopicPartition]) -> tuple[AdoptedRange, ...]:
        """Nothing: directories hold no commits of their own, the ledger's are the only ones."""
        return ()

    def complete(self, ledger: OffsetLedger, plan: BatchPlan) -> dict[TopicPartition, str]:
        """Publish each planned partition's last committed range its run left staged
        (cohort.pipelines.batch.commit.complete_committed); a warning per partition whose output is neither."""
        with timed(self.stages, "publish"):
            return complete_committed(ledger, plan, self.sink, self.quarantine, self.fs)

    def staging(self, plan: BatchPlan, *, tasks_write: bool) -> tuple[SinkLayout, SinkLayout]:
        """The two layouts' staging areas, whoever writes."""
        return self.sink, self.quarantine

    def held(self, plan: BatchPlan, staging: tuple[StagedDirs, StagedDirs]) -> tuple[SinkLayout, SinkLayout]:
        """The two layouts: where the attempt stages, and the range directories a replay replaces."""
        return self.sink, self.quarantine

    def commit(
        self,
        ledger: OffsetLedger,
        plan: BatchPlan,
        ranges: Sequence[OffsetRange],
        counts: Mapping[TopicPartition, StagedCounts],
        rows: StagedRows,
        run_id: str,
    ) -> OutputDirs:
        """Mark the staged ranges, commit them to the ledger, then publish them by renames (see the module doc);
        the directories in place. Directories record no schema: `rows` goes unread."""
        to_publish = {p.tp: (p.from_offset, p.until_offset) for p in plan.partitions if p.must_commit}
        if ranges:
            with timed(self.stages, "commit"):
                self.sink.prepare(self.fs, self.attempt, to_publish)
                self.quarantine.prepare(self.fs, self.attempt, to_publish)
                self.progress.step = "committing"
                try:
                    commit_ranges_to(ledger, ranges, run_id)
                except Exception:
                    self.progress.step = "refused"  # the ledger does not hold it (as far as it can tell)
                    raise
            self.progress.step = "committed"
        with timed(self.stages, "publish"):
            sink_dirs = tuple(self.sink.publish(self.fs, self.attempt, to_publish))
            quarantine_dirs = tuple(self.quarantine.publish(self.fs, self.attempt, to_publish))
        self.progress.step = "published"
        return sink_dirs, quarantine_dirs

    def clean_up(self, plan: BatchPlan, *, failed: bool) -> None:
        """Delete the staged output unless the ledger may hold its commit and it is not published: then it waits
        for the next batch (`failed` or not, the step alone decides)."""
        if self.progress.step in _DISCARDS:
            self.sink.discard_staging(self.fs, self.attempt)
            self.quarantine.discard_staging(self.fs, self.attempt)
