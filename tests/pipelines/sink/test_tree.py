"""What Parquet readers read under a sink root (cohort.pipelines.sink.tree), checked against pyarrow and DuckDB
themselves on a real tree (Spark is checked the same way in tests/cli/test_audit_readers.py), and which of
it Cohort's layout accounts for."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from cohort.common.types import TopicPartition
from cohort.pipelines.sink.tree import DUCKDB_GLOB, Entry, OutputTree, readers_of, strays

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
RANGE = "topic=t/partition=0/t-0-0-10.parquet"

ODD_FILES = [
    f"{RANGE}/part-0-10.parquet",  # Cohort's own data file
    f"{RANGE}/.hidden.parquet",  # hidden from Spark and pyarrow, not from DuckDB
    f"{RANGE}/_under.parquet",
    f"{RANGE}/_x=1.parquet",  # `_` with `=`: Spark reads it
    f"{RANGE}/noext",  # any extension: Spark and pyarrow read it
    f"{RANGE}/sub/deep.parquet",  # recursive listing: Spark and pyarrow read it
    "topic=t/partition=0/t-0-0-10-copy.parquet/part-0-10.parquet",
    "topic=t/partition=1/t-0-0-10.parquet/part-0-10.parquet",
    "_staging/a1/topic=t/partition=0/part-0-10.parquet",
    "_quarantine/topic=t/partition=0/t-0-0-10.parquet/part-0-10.parquet",
    ".snapshot/topic=t/partition=0/t-0-0-10.parquet/part-0-10.parquet",
    "stray.parquet",
]
EMPTY_FILES = [f"{RANGE}/_cohort_attempt=a1", f"{RANGE}/_cohort_range=0-10"]  # Cohort's markers


def _tree(root: Path) -> None:
    for relative in ODD_FILES:
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"v": [1]}), root / relative)
    for relative in EMPTY_FILES:
        (root / relative).touch()


def test_the_reader_rules_are_what_pyarrow_and_duckdb_read(tmp_path: Path) -> None:
    _tree(tmp_path)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    ruled = {
        reader: {
            str(p.relative_to(tmp_path))
            for p in files
            if reader in readers_of(p.relative_to(tmp_path).parts, p.stat().st_size)
        }
        for reader in ("pyarrow", "DuckDB")
    }
    read_by_pyarrow = {str(Path(f).relative_to(tmp_path)) for f in ds.dataset(str(tmp_path), format="parquet").files}
    globbed = duckdb.sql(f"select file from glob('{tmp_path}/{DUCKDB_GLOB}')").fetchall()
    read_by_duckdb = {str(Path(f).relative_to(tmp_path)) for (f,) in globbed}
    assert ruled == {"pyarrow": read_by_pyarrow, "DuckDB": read_by_duckdb}
    assert f"{RANGE}/noext" in read_by_pyarrow and f"{RANGE}/.hidden.parquet" in read_by_duckdb
    assert not any(p.startswith(("_staging", "_quarantine", ".snapshot")) for p in read_by_pyarrow | read_by_duckdb)


def test_what_the_layout_does_not_account_for_is_named_once_per_path(tmp_path: Path) -> None:
    _tree(tmp_path)
    tree = OutputTree(str(tmp_path))
    found = {"/".join(s.parts): s for tp in (TP0, TP1) for s in strays(tree.partition(tp), [TP0, TP1])}
    found |= {"/".join(s.parts): s for s in strays(tree.outside([TP0, TP1]), [TP0, TP1])}
    assert sorted(found) == sorted(
        [
            f"{RANGE}/.hidden.parquet",
            f"{RANGE}/_under.parquet",
            f"{RANGE}/_x=1.parquet",
            f"{RANGE}/noext",
            f"{RANGE}/sub",
            "stray.parquet",
            "topic=t/partition=0/t-0-0-10-copy.parquet",
            "topic=t/partition=1/t-0-0-10.parquet",
        ]
    )
    assert found["topic=t/partition=1/t-0-0-10.parquet"].tp == TP1
    assert (
        "range directory of partition 0 of 't' in the folder of partition 1"
        in found["topic=t/partition=1/t-0-0-10.parquet"].reason
    )
    assert found["topic=t/partition=0/t-0-0-10-copy.parquet"].readers == ("Spark", "pyarrow", "DuckDB")
    assert found[f"{RANGE}/.hidden.parquet"].readers == ("DuckDB",)
    assert found[f"{RANGE}/_x=1.parquet"].readers == ("Spark", "DuckDB")
    assert found["stray.parquet"].tp is None and "root" in found["stray.parquet"].reason
    message = found[f"{RANGE}/sub"].describe(str(tmp_path))
    assert message.startswith(f"{tmp_path}/{RANGE}/sub (1 file read by Spark and pyarrow): a subdirectory")


def test_partitions_and_topics_the_ledger_does_not_hold_are_strays_as_a_whole() -> None:
    entries = [
        Entry(("topic=t", "partition=7", "t-7-0-5.parquet", "part-0-5.parquet"), size=10),
        Entry(("topic=t", "partition=7", "t-7-5-9.parquet", "part-5-9.parquet"), size=10),
        Entry(("topic=other", "partition=0", "other-0-0-5.parquet", "part-0-5.parquet"), size=10),
        Entry(("topic=t", "partition=0", "t-0-0-10.parquet", "part-0-10.parquet"), size=10),
        Entry(("topic=t", "partition=0", "t-0-0-10.parquet", "_cohort_attempt=a1"), size=0),
    ]
    found = strays(entries, [TP0])
    assert [("/".join(s.parts), s.files, s.tp) for s in found] == [
        ("topic=other", 1, None),
        ("topic=t/partition=7", 2, None),
    ]
    assert "no offset of partition 7 of 't'" in found[1].reason


def test_an_empty_file_is_read_by_no_reader_that_skips_it() -> None:
    assert readers_of(("topic=t", "partition=0", "d", "_cohort_attempt=a"), 0) == ()
    assert readers_of(("topic=t", "partition=0", "d", "_cohort_attempt=a"), 5) == ("Spark",)  # `=`: Spark reads it
    assert readers_of(("topic=t", "partition=0", "d", "x.parquet._COPYING_"), 5) == ("pyarrow",)
