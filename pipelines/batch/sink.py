"""The sink behind a batch, `BatchSink`: the steps where the Parquet sink (cohort.pipelines.batch.parquet_sink) and
the table sinks (Delta Lake, Iceberg: cohort.pipelines.batch.table_sink) differ; run_batch (cohort.pipelines.batch.run)
is the one flow around them.

A sink is opened for one batch attempt and remembers how far its commit got, because that decides what its
clean-up may delete: never output the ledger may hold a commit of.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from cohort.common.ledger import OffsetLedger
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.batch.results import AdoptedRange
from cohort.pipelines.planning.plan import BatchPlan
from cohort.pipelines.replay.check import HeldOutput
from cohort.pipelines.sink.counts import StagedCounts
from cohort.pipelines.sink.layout import SinkFs, StagedDirs
from cohort.pipelines.tasks.checked import RecordChecker
from cohort.pipelines.tasks.written import StagedFile

__all__ = ["BatchSink", "OutputDirs", "StagedRows"]

OutputDirs = tuple[tuple[str, ...], tuple[str, ...]]
"""The directories a batch made visible: the sink's, then the quarantine's."""


@dataclass(frozen=True)
class StagedRows:
    """What the batch's staged rows are, for a sink that records their schemas (a table's commit): the reading
    tasks' checker, got on first use (a batch that read nothing may never need it), whether a transform
    reshaped the sink's rows (their schema is then the transform's own), and the files the reading tasks reported
    by staged directory (with their sizes and footers: a table commit need not read them again)."""

    checker: Callable[[], RecordChecker]
    reshapes: bool
    files: Mapping[str, tuple[StagedFile, ...]] = field(default_factory=dict)

    def schemas(self) -> tuple[pa.Schema | None, pa.Schema]:
        """The Arrow schemas of the sink's rows (None after a transform) and of the quarantine's."""
        checker = self.checker()
        return None if self.reshapes else checker.sink_schema, checker.quarantine_schema


class BatchSink(Protocol):
    """One batch attempt's sink, its steps in the order run_batch calls them."""

    @property
    def fs(self) -> SinkFs:
        """The file operations the outputs are staged, digested, counted and moved with."""
        ...

    def reconcile(self, ledger: OffsetLedger, partitions: Sequence[TopicPartition]) -> tuple[AdoptedRange, ...]:
        """Before planning: bring the sink and the ledger together; the ranges it adopted into the ledger."""
        ...

    def complete(self, ledger: OffsetLedger, plan: BatchPlan) -> Mapping[TopicPartition, str]:
        """Make visible what an earlier batch committed and never published; a warning per partition it could not."""
        ...

    def staging(self, plan: BatchPlan, *, tasks_write: bool) -> tuple[StagedDirs, StagedDirs]:
        """Where the attempt writes the sink's, then the quarantine's output (`tasks_write`: the reading tasks write
        both themselves, so a sink may have them write where it places them)."""
        ...

    def held(self, plan: BatchPlan, staging: tuple[StagedDirs, StagedDirs]) -> tuple[HeldOutput, HeldOutput]:
        """Where the attempt stages (`staging`) and what the sink, then the quarantine, hold already (the replay
        digest's view)."""
        ...

    def commit(
        self,
        ledger: OffsetLedger,
        plan: BatchPlan,
        ranges: Sequence[OffsetRange],
        counts: Mapping[TopicPartition, StagedCounts],
        rows: StagedRows,
        run_id: str,
    ) -> OutputDirs:
        """Commit `ranges` to the ledger (the fencing point) and make the staged output (`counts`, `rows`) visible.
        A refused commit raises, and nothing is visible."""
        ...

    def clean_up(self, plan: BatchPlan, *, failed: bool) -> None:
        """After the batch, `failed` or not: delete what the attempt left that no commit may reference."""
        ...
