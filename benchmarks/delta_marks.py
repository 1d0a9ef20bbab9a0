"""Reading Cohort's partition marks from a Delta table on S3, as a batch reads them, at several table versions.

On the tests' S3 server (harness.s3_server): one Delta table through `DeltaTableStore`, grown by batch commits (one
small file per partition, the heads moved past it, the batch record); at each version asked for, a fresh store (as
a new batch has) reads the marks of all partitions three times, as a batch does (reconcile, before staging, at the
commit's compare-and-set), then makes one commit. Counted: the calls of delta-rs's `transaction_version` (each one
replays the log since the last checkpoint) and of the store's one-pass reading of the log; timed: the three reads
and the commit.

Usage:
    python -m benchmarks.delta_marks                       # 8 partitions at versions 1, 10, 30, 100
    python -m benchmarks.delta_marks --versions 1,10 --partitions 4

The last line printed is one JSON object: {"partitions", "rows": [{"version", "lookups", "log_reads",
"marks_s", "commit_s"}]}.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable

from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.tables.delta import store as delta_store
from cohort.pipelines.tables.delta.store import DeltaTableStore
from cohort.pipelines.tables.store import BatchRecord, NewFile, Owner, TableCommit, data_dir
from harness.s3_server import S3Server

GROUP = "bench"
KAFKA = pa.struct([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64())])
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("kafka", KAFKA)])
ROWS = 20


class _Counter:
    """Counts calls of a function it replaces on a module or class (put back by `restore`)."""

    def __init__(self, owner: Any, name: str) -> None:
        self.owner, self.name, self.calls = owner, name, 0
        self.original = getattr(owner, name, None)
        if self.original is not None:
            original = self.original

            def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls += 1
                return original(*args, **kwargs)

            setattr(owner, name, counted)

    def restore(self) -> None:
        if self.original is not None:
            setattr(self.owner, self.name, self.original)


def _file(root: str, tp: TopicPartition, lo: int) -> NewFile:
    """One range's small Parquet file written into the table's data directory, as a batch places it."""
    fs, base = pafs.FileSystem.from_uri(root)
    relative = f"{data_dir(tp, lo, lo + ROWS, 'a1')}/part-00000.parquet"
    offsets = list(range(lo, lo + ROWS))
    kafka = [{"topic": tp.topic, "partition": tp.partition, "offset": o} for o in offsets]
    pq.write_table(
        pa.Table.from_pydict({"id": offsets, "kafka": kafka}, schema=SCHEMA), f"{base}/{relative}", filesystem=fs
    )
    return NewFile(relative, fs.get_file_info(f"{base}/{relative}").size, ROWS, SCHEMA)


def _commit(store: DeltaTableStore, tps: list[TopicPartition], step: int) -> None:
    """One batch's commit: a file per partition (offsets [step * ROWS, + ROWS)), the heads moved past it, the batch
    record; the marks read first, as a batch reads them."""
    expected = store.marks(GROUP, tps)
    lo = step * ROWS
    adds = tuple(_file(store.root, tp, lo) for tp in tps)
    ranges = tuple(OffsetRange(tp.topic, tp.partition, lo, lo + ROWS, records=ROWS) for tp in tps)
    heads = {tp: lo + ROWS for tp in tps}
    store.commit(TableCommit(Owner(GROUP, 1), expected, heads, adds, (), BatchRecord(f"run-{step}", ranges)))


def _version(root: str) -> int:
    """The table's version, -1 before it exists."""
    return DeltaTable(root).version() if DeltaTable.is_deltatable(root) else -1


def _batch(root: str, tps: list[TopicPartition], head: int) -> dict[str, Any]:
    """A batch's reads of the marks and its commit, on a fresh store; the lookups counted and the time taken."""
    lookups = _Counter(DeltaTable, "transaction_version")
    log_reads = _Counter(delta_store, "read_transactions")
    try:
        store = DeltaTableStore(root)
        started = time.perf_counter()
        for _ in range(3):
            store.marks(GROUP, tps)
        marks_s = time.perf_counter() - started
        started = time.perf_counter()
        _commit(store, tps, head)
        commit_s = time.perf_counter() - started
    finally:
        lookups.restore()
        log_reads.restore()
    return {
        "lookups": lookups.calls,
        "log_reads": log_reads.calls,
        "marks_s": round(marks_s, 3),
        "commit_s": round(commit_s, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", default="1,10,30,100", help="table versions to measure at, ascending")
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args()
    versions = [int(v) for v in args.versions.split(",")]
    tps = [TopicPartition("orders", p) for p in range(args.partitions)]
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    rows: list[dict[str, Any]] = []
    with S3Server() as server:
        os.environ.update(server.environ())
        root = f"s3://{server.create_bucket('bench-marks')}/table"
        writer = DeltaTableStore(root)
        head = 0
        for version in versions:
            while _version(root) < version:
                head += 1
                _commit(writer, tps, head)
            head += 1
            row = {"version": DeltaTable(root).version(), **_batch(root, tps, head)}
            print(row, flush=True)
            rows.append(row)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    print(json.dumps({"partitions": args.partitions, "rows": rows}))


if __name__ == "__main__":
    main()
