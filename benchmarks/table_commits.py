"""Table commit latency over many commits, with and without retention (cohort.pipelines.table_retention).

No broker, no Spark: what grows with a table's history is the table commit, so this drives the stores directly.
Each commit is one small batch as Cohort's sink makes it: a 20-row Parquet file in its range directory, the
partition's marks moved by the compare-and-set, the batch record in the commit metadata. Partitions are used
round-robin (8). Timed: `store.commit` alone (the clean-up, when due, runs inside it and is counted).

With retention the run uses `keep_s=0`, `history_s=0` (versions and Delta's log expire as soon as they are not
among the newest `min_versions`): a few minutes of commits then stand for the steady state of a table committing
every minute for years, whose kept history is `keep_s` of commits plus `min_versions`.

Usage:
    python -m benchmarks.table_commits --commits 1000
    python -m benchmarks.tables --commits 1000          # the same, through the tables benchmark

The last line printed is one JSON object: per format and mode, the median commit latency (ms) of the 10 commits
around each checkpoint (10, 100, 1000, ...), the table's versions and metadata size at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.table_retention import TableRetention
from cohort.pipelines.table_store import BatchRecord, NewFile, Owner, PartitionMark, TableCommit, data_dir

__all__ = ["main", "run"]

ROWS = 20
PARTITIONS = 8
BENCH_RETENTION = TableRetention(keep_s=0.0, min_versions=10, history_s=0.0, every_commits=50)


def _store(fmt: str, root: Path, retention: TableRetention | None) -> Any:
    if fmt == "delta":
        from cohort.pipelines.delta_store import DeltaTableStore

        return DeltaTableStore(str(root), retention=retention)
    from cohort.pipelines.iceberg_store import IcebergTableStore

    return IcebergTableStore(
        str(root), catalog_url=f"sqlite:///{root.parent}/catalog.sqlite", identifier="bench.t", retention=retention
    )


def _file(root: Path, tp: TopicPartition, low: int, attempt: str) -> NewFile:
    directory = data_dir(tp, low, low + ROWS, attempt)
    (root / directory).mkdir(parents=True)
    offsets = list(range(low, low + ROWS))
    table = pa.table(
        {
            "kafka": pa.array(
                [{"partition": tp.partition, "offset": o} for o in offsets],
                pa.struct([pa.field("partition", pa.int32()), pa.field("offset", pa.int64())]),
            ),
            "value": pa.array([f"v{o}" for o in offsets]),
        }
    )
    path = f"{directory}/part-0.parquet"
    pq.write_table(table, root / path)
    return NewFile(path, os.path.getsize(root / path), ROWS, table.schema)


def run(fmt: str, commits: int, retention: TableRetention | None, where: Path) -> dict[str, Any]:
    """`commits` one-file commits into a fresh table of `fmt`; latencies (ms) in commit order and the end state."""
    root = where / "table"
    root.mkdir(parents=True)
    store = _store(fmt, root, retention)
    owner = Owner("bench", 1)
    marks = {TopicPartition("t", p): PartitionMark() for p in range(PARTITIONS)}
    latencies = []
    for i in range(commits):
        tp = TopicPartition("t", i % PARTITIONS)
        low = marks[tp].head or 0
        new = _file(root, tp, low, f"a{i}")
        record = BatchRecord(f"run{i}", (OffsetRange(tp.topic, tp.partition, low, low + ROWS, records=ROWS),))
        change = TableCommit(owner, {tp: marks[tp]}, {tp: low + ROWS}, (new,), (), record)
        started = time.perf_counter()
        store.commit(change)
        latencies.append((time.perf_counter() - started) * 1000)
        marks.update(change.marks())
    return {"latencies": latencies, **_state(fmt, root, store)}


def _state(fmt: str, root: Path, store: Any) -> dict[str, Any]:
    if fmt == "delta":
        log = list((root / "_delta_log").iterdir())
        return {"versions_kept": sum(1 for f in log if f.suffix == ".json"), "log_files": len(log)}
    table = store._load()
    return {
        "versions_kept": len(table.metadata.snapshots),
        "metadata_bytes": os.path.getsize(table.metadata_location.removeprefix("file://")),
        "metadata_files": sum(1 for f in (root / "metadata").iterdir() if f.name.endswith(".metadata.json")),
    }


def around(latencies: Sequence[float], k: int) -> float:
    """The median latency of the 10 commits ending at commit `k` (1-based)."""
    window = latencies[max(0, k - 10) : k]
    return round(statistics.median(window), 1)


def checkpoints(commits: int) -> list[int]:
    points, k = [], 10
    while k <= commits:
        points.append(k)
        k *= 10
    return points if not points or points[-1] == commits else [*points, commits]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--formats", default="delta,iceberg")
    parser.add_argument("--no-retention-commits", type=int, default=None, help="commits without retention")
    args = parser.parse_args(argv)
    out: dict[str, Any] = {}
    for fmt in args.formats.split(","):
        for label, retention, count in (
            ("retention", BENCH_RETENTION, args.commits),
            ("none", None, args.no_retention_commits or args.commits),
        ):
            with tempfile.TemporaryDirectory() as where:
                started = time.perf_counter()
                result = run(fmt, count, retention, Path(where))
            lat = result.pop("latencies")
            figures = {f"at_{k}": around(lat, k) for k in checkpoints(count)}
            summary = {**figures, "max": round(max(lat), 1), "wall_s": round(time.perf_counter() - started, 1)}
            out[f"{fmt}_{label}"] = {**summary, **result}
            print(f"{fmt:8} {label:10} {json.dumps(out[f'{fmt}_{label}'])}", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
