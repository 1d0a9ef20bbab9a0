"""What a reading task reports of the files it wrote for one span, so the driver need not read them back: each file's
place, size and Parquet footer, and the span's digest sides and sink shape (cohort.pipelines.sink.digest,
cohort.pipelines.sink.counts).

On an object store every read-back is round trips and bytes through the store; the task has the file's bytes at
hand when it finishes it. The driver uses a report where it describes a whole range (one span, nothing held to
compare with) and reads the files back otherwise: the figures are the same either way, computed from the same
Parquet bytes.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from cohort.pipelines.sink.counts import OutputShape
from cohort.pipelines.sink.digest import combine

__all__ = ["StagedFile", "WrittenSpan"]


@dataclass(frozen=True)
class StagedFile:
    """One Parquet file a task wrote: its directory (a sink URI), name, byte size and footer (rows, schema,
    statistics: what a table commit records)."""

    directory: str
    name: str
    size: int
    footer: pq.FileMetaData

    @property
    def rows(self) -> int:
        return int(self.footer.num_rows)

    @property
    def schema(self) -> pa.Schema:
        return self.footer.schema.to_arrow_schema()


@dataclass(frozen=True)
class WrittenSpan:
    """One span's outputs as its task wrote them: the sink and quarantine files (None: no row on that side), the
    digest side of each (`cohort.pipelines.sink.digest.side`) and the sink rows' shape by offset (each None when
    the task kept no copy of a file to read: the driver reads the files back)."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    sink: StagedFile | None
    quarantine: StagedFile | None
    sink_side: bytes | None
    quarantine_side: bytes | None
    shape: OutputShape | None

    def digest(self) -> str | None:
        """The span's digest (cohort.pipelines.sink.digest.combine of its sides), None when a side is unknown."""
        if self.sink_side is None or self.quarantine_side is None:
            return None
        return combine(self.sink_side, self.quarantine_side)

    @property
    def staged_rows(self) -> tuple[int, int]:
        """(sink rows, quarantine rows) the span's files hold."""
        return (0 if self.sink is None else self.sink.rows, 0 if self.quarantine is None else self.quarantine.rows)

    def to_bytes(self) -> bytes:
        """The report as the task hands it to Spark (a binary column of its stats frame)."""
        return pickle.dumps(self, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def from_bytes(data: bytes) -> WrittenSpan:
        """A report from `to_bytes` (written by this batch's own tasks)."""
        report = pickle.loads(data)
        if not isinstance(report, WrittenSpan):
            raise TypeError(f"not a span report: {type(report).__name__}")
        return report
