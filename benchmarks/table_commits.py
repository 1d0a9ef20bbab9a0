"""Table commit latency over many commits, with and without retention (cohort.pipelines.tables.retention).

No broker, no Spark: what grows with a table's history is the table commit, so this drives the stores directly.
Each commit is one small batch as Cohort's sink makes it: a 20-row Parquet file in its range directory, the
partition's marks moved by the compare-and-set, the batch record in the commit metadata. Partitions are used
round-robin (8). Timed: `store.commit` alone, wall and CPU (the clean-up and compaction, when due, run inside it).

With retention the run uses the default `TableRetention` (clean-up every 50 commits, runs of 10 small files merged
by Cohort's compaction) with time compressed: `keep_s=0`, `history_s=0` (versions, Delta's log and the small files
are due at once instead of an hour later) and `min_versions=60` (the hour of versions the default keeps of a table
committing once a minute), so a few minutes of commits stand for the steady state of such a table for years.

`--fast-forward N` measures commit N without making the N commits one by one: it builds the table a long-lived
table has in that steady state (per partition one compacted file holding every offset below the last few ranges,
the marks and heads of N commits, and on Delta the tombstones of a day of removed small files, which the table
keeps `keep_s` + 24 h), in a few bulk commits through the same store, then makes the last `--warm` commits for real
(at least two clean-ups with compaction). The last 30 of them are timed alternately with the first 10 commits of
each of 3 fresh tables (the peer, under the same load): the figure at commit N is the median of those 30, the one at
commit 10 the median of the fresh tables' 30.

Usage:
    python -m benchmarks.table_commits --commits 1000
    python -m benchmarks.table_commits --fast-forward 10000 --commits 100
    python -m benchmarks.tables --commits 1000          # the same, through the tables benchmark

The last line printed is one JSON object: per format and mode, the median commit latency (ms, and CPU ms) of the 10
commits ending at each checkpoint (10, 100, 1000, ...), its ratio to commit 10, the table's versions and files at
the end.
"""

from __future__ import annotations

import argparse
import dataclasses
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
from cohort.pipelines.tables.compaction import compaction_attempt
from cohort.pipelines.tables.retention import DEFAULT_RETENTION, TableRetention
from cohort.pipelines.tables.store import BatchRecord, DataFile, NewFile, Owner, PartitionMark, TableCommit, data_dir

__all__ = ["main", "run"]

ROWS = 20
PARTITIONS = 8
BENCH_RETENTION = dataclasses.replace(DEFAULT_RETENTION, keep_s=0.0, history_s=0.0, min_versions=60)
"""The default retention with time compressed: versions, log entries and small files are due at once, and the
newest 60 versions are kept, what the default's hour (`keep_s`) keeps of a table committing once a minute."""
PEERS = 3
"""Fresh tables whose first 10 commits are timed alternately with the fast-forwarded table's last 30."""
TOMBSTONES = 24 * 60
"""Small files removed in the last 24 h at one commit a minute: what a Delta table's checkpoints keep as tombstones
(`delta.deletedFileRetentionDuration` is `keep_s` plus 24 h)."""


def _store(fmt: str, root: Path, retention: TableRetention | None) -> Any:
    if fmt == "delta":
        from cohort.pipelines.tables.delta.store import DeltaTableStore

        return DeltaTableStore(str(root), retention=retention)
    from cohort.pipelines.tables.iceberg.store import IcebergTableStore

    return IcebergTableStore(
        str(root), catalog_url=f"sqlite:///{root.parent}/catalog.sqlite", identifier="bench.t", retention=retention
    )


def _rows(tp: TopicPartition, low: int, high: int) -> pa.Table:
    offsets = list(range(low, high))
    return pa.table(
        {
            "kafka": pa.array(
                [{"partition": tp.partition, "offset": o} for o in offsets],
                pa.struct([pa.field("partition", pa.int32()), pa.field("offset", pa.int64())]),
            ),
            "value": pa.array([f"v{o}" for o in offsets]),
        }
    )


def _file(root: Path, tp: TopicPartition, low: int, attempt: str, high: int | None = None) -> NewFile:
    high = low + ROWS if high is None else high
    directory = data_dir(tp, low, high, attempt)
    (root / directory).mkdir(parents=True)
    table = _rows(tp, low, high)
    path = f"{directory}/part-0.parquet"
    pq.write_table(table, root / path)
    return NewFile(path, os.path.getsize(root / path), high - low, table.schema)


@dataclasses.dataclass
class _Run:
    """A table being committed to: its store, the marks the next commit expects, the latencies so far."""

    store: Any
    root: Path
    marks: dict[TopicPartition, PartitionMark]
    wall: list[float] = dataclasses.field(default_factory=list)
    cpu: list[float] = dataclasses.field(default_factory=list)
    owner: Owner = dataclasses.field(default_factory=lambda: Owner("bench", 1))

    def commit(self, i: int, *, timed: bool = True) -> None:
        """Commit number `i` (0-based): one 20-row file of partition i mod 8."""
        tp = TopicPartition("t", i % PARTITIONS)
        low = self.marks[tp].head or 0
        new = _file(self.root, tp, low, f"a{i}")
        record = BatchRecord(f"run{i}", (OffsetRange(tp.topic, tp.partition, low, low + ROWS, records=ROWS),))
        change = TableCommit(self.owner, {tp: self.marks[tp]}, {tp: low + ROWS}, (new,), (), record)
        wall, cpu = time.perf_counter(), time.process_time()
        self.store.commit(change)
        if timed:
            self.wall.append((time.perf_counter() - wall) * 1000)
            self.cpu.append((time.process_time() - cpu) * 1000)
        self.marks.update(change.marks())


def _open(fmt: str, where: Path, retention: TableRetention | None) -> _Run:
    root = where / "table"
    root.mkdir(parents=True)
    return _Run(
        _store(fmt, root, retention), root, {TopicPartition("t", p): PartitionMark() for p in range(PARTITIONS)}
    )


def run(fmt: str, commits: int, retention: TableRetention | None, where: Path) -> dict[str, Any]:
    """`commits` one-file commits into a fresh table of `fmt`; latencies (ms) in commit order and the end state."""
    table = _open(fmt, where, retention)
    for i in range(commits):
        table.commit(i)
    return {"latencies": table.wall, "cpu": table.cpu, **_state(fmt, table.root, table.store)}


def fast_forward(fmt: str, commits: int, warm: int, where: Path) -> dict[str, Any]:
    """The table of `commits` commits in the steady state of `BENCH_RETENTION`, its last `warm` commits made for
    real; the last `10 * PEERS` of them are timed, alternately with the first 10 commits of `PEERS` fresh tables
    (the peer: commit 10 under the same load); see the module doc."""
    table = _open(fmt, where, BENCH_RETENTION)
    first = commits - warm
    per = first // PARTITIONS  # ranges each partition got before the real commits
    compacted = max(0, per - BENCH_RETENTION.compact_files // 2)  # the rest stay small: the last clean-up left them
    attempt = compaction_attempt()
    adds: list[NewFile] = []
    heads: dict[TopicPartition, int] = {}
    ranges: list[OffsetRange] = []
    for tp in sorted(table.marks):
        if compacted:
            adds.append(_file(table.root, tp, 0, attempt, compacted * ROWS))
        for k in range(compacted, per):
            adds.append(_file(table.root, tp, k * ROWS, f"f{k}"))
        heads[tp] = per * ROWS
        ranges.append(OffsetRange(tp.topic, tp.partition, 0, per * ROWS, records=per * ROWS))
    expected = dict(table.marks)
    change = TableCommit(table.owner, expected, heads, tuple(adds), (), BatchRecord("forward", tuple(ranges)))
    table.store.commit(change)
    table.marks.update(change.marks())
    if fmt == "delta":  # a day of removed small files: added, then removed, as compactions removed them
        tp = TopicPartition("t", 0)
        doomed = tuple(_file(table.root, tp, 10**9 + k, f"t{k}", 10**9 + k + 1) for k in range(TOMBSTONES))
        for adds_, removes in ((doomed, ()), ((), doomed)):
            files = tuple(
                DataFile(tp.topic, tp.partition, 0, 0, "x", f.path, f.records) for f in removes
            )  # the store removes by path
            step = TableCommit(Owner("bench", None), {tp: table.marks[tp]}, {}, adds_, files)
            table.store.commit(step)
    peers = [_open(fmt, where / f"fresh{k}", BENCH_RETENTION) for k in range(PEERS)]
    for i in range(first, commits - 10 * PEERS):
        table.commit(i, timed=False)
    for k, peer in enumerate(peers):  # alternately: a fresh table's first 10 commits, the long-lived one's
        for j in range(10):
            peer.commit(j)
            table.commit(commits - 10 * (PEERS - k) + j)
    fresh = {"latencies": [x for p in peers for x in p.wall], "cpu": [x for p in peers for x in p.cpu]}
    return {"latencies": table.wall, "cpu": table.cpu, "fresh": fresh, **_state(fmt, table.root, table.store)}


def _state(fmt: str, root: Path, store: Any) -> dict[str, Any]:
    files = {"active_files": len(store.all_files())}
    if fmt == "delta":
        log = list((root / "_delta_log").iterdir())
        return {"versions_kept": sum(1 for f in log if f.suffix == ".json"), "log_files": len(log), **files}
    table = store._load()
    return {
        "versions_kept": len(table.metadata.snapshots),
        "metadata_bytes": os.path.getsize(table.metadata_location.removeprefix("file://")),
        "metadata_files": sum(1 for f in (root / "metadata").iterdir() if f.name.endswith(".metadata.json")),
        **files,
    }


def around(latencies: Sequence[float], k: int, *, offset: int = 0) -> float:
    """The median latency of the 10 commits ending at commit `k` (1-based), `latencies` starting at commit
    `offset + 1`."""
    window = latencies[max(0, k - offset - 10) : k - offset]
    return round(statistics.median(window), 1)


def checkpoints(commits: int) -> list[int]:
    points, k = [], 10
    while k <= commits:
        points.append(k)
        k *= 10
    return points if not points or points[-1] == commits else [*points, commits]


def _figures(result: dict[str, Any], points: Sequence[int], offset: int = 0) -> dict[str, Any]:
    wall, cpu = result.pop("latencies"), result.pop("cpu")
    return {
        **{f"at_{k}": around(wall, k, offset=offset) for k in points},
        **{f"cpu_at_{k}": around(cpu, k, offset=offset) for k in points},
        "max": round(max(wall), 1),
    }


def _median(values: Sequence[float]) -> float:
    return round(statistics.median(values), 1)


def _ratios(figures: dict[str, Any], base: dict[str, Any], last: int) -> dict[str, float]:
    return {
        "ratio": round(figures[f"at_{last}"] / base["at_10"], 2),
        "cpu_ratio": round(figures[f"cpu_at_{last}"] / base["cpu_at_10"], 2),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--commits", type=int, default=1000, help="commits made one by one from a fresh table")
    parser.add_argument("--formats", default="delta,iceberg")
    parser.add_argument("--no-retention-commits", type=int, default=None, help="commits without retention (0: none)")
    parser.add_argument(
        "--fast-forward", type=int, default=None, help="also measure commit N of a fast-forwarded table"
    )
    parser.add_argument("--warm", type=int, default=120, help="real commits made after the fast-forward")
    args = parser.parse_args(argv)
    out: dict[str, Any] = {}
    for fmt in args.formats.split(","):
        none = args.commits if args.no_retention_commits is None else args.no_retention_commits
        for label, retention, count in (("retention", BENCH_RETENTION, args.commits), ("none", None, none)):
            if count <= 0:
                continue
            with tempfile.TemporaryDirectory() as where:
                started = time.perf_counter()
                result = run(fmt, count, retention, Path(where))
                figures = _figures(result, checkpoints(count))
                summary = {
                    **figures,
                    **_ratios(figures, figures, count),
                    "wall_s": round(time.perf_counter() - started, 1),
                }
            out[f"{fmt}_{label}"] = {**summary, **result}
            print(f"{fmt:8} {label:10} {json.dumps(out[f'{fmt}_{label}'])}", flush=True)
        if args.fast_forward:
            n = args.fast_forward
            with tempfile.TemporaryDirectory() as where:
                started = time.perf_counter()
                result = fast_forward(fmt, n, args.warm, Path(where))
                fresh = result.pop("fresh")
                base = {"at_10": _median(fresh["latencies"]), "cpu_at_10": _median(fresh["cpu"])}
                figures = {
                    f"at_{n}": _median(result.pop("latencies")),
                    f"cpu_at_{n}": _median(result.pop("cpu")),
                    "commits_timed": 10 * PEERS,
                }
                summary = {
                    **base,
                    **figures,
                    **_ratios(figures, base, n),
                    "wall_s": round(time.perf_counter() - started, 1),
                }
            out[f"{fmt}_forward_{n}"] = {**summary, **result}
            print(f"{fmt:8} {'forward':10} {json.dumps(out[f'{fmt}_forward_{n}'])}", flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
