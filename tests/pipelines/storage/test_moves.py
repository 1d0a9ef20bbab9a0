"""Placing staged files on an object store (cohort.pipelines.storage.moves): every data file of the staged
directories copied into its target with one listing, its rows and schema read from its footer on the way; hidden
and non-Parquet names left behind; a second run after a crash copies the same files to the same names."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from cohort.pipelines.storage.moves import copy_files, is_object_store
from cohort.pipelines.tasks.writer import arrow_filesystem
from tests.fixtures.s3 import S3Bucket


def _write(fs: pa.fs.FileSystem, path: str, rows: int) -> None:
    pq.write_table(pa.table({"offset": pa.array(range(rows), pa.int64()), "v": ["x"] * rows}), path, filesystem=fs)


def test_the_staged_files_of_every_directory_are_copied_with_their_footers(s3_env: S3Bucket) -> None:
    resolved = arrow_filesystem(f"{s3_env.root}/t")
    assert resolved is not None
    fs, root = resolved
    assert is_object_store(fs)
    staged = {f"{root}/_staging/a/topic=t/partition={p}": f"{root}/data/topic=t/partition={p}/0-9-a" for p in (0, 1)}
    sources = list(staged)
    _write(fs, f"{sources[0]}/part-0.parquet", 3)
    _write(fs, f"{sources[0]}/part-1.parquet", 4)
    _write(fs, f"{sources[1]}/part-0.parquet", 5)
    _write(fs, f"{sources[1]}/_hidden.parquet", 1)
    with fs.open_output_stream(f"{sources[1]}/notes.txt") as out:
        out.write(b"not data")
    _write(fs, f"{root}/_staging/a/topic=t/partition=2/part-0.parquet", 2)  # a directory not asked for

    placed = copy_files(fs, staged)
    again = copy_files(fs, staged)  # a rerun after a crash: the same copies

    assert [(f.source, f.target, f.name, f.rows) for f in placed] == [
        (sources[0], staged[sources[0]], "part-0.parquet", 3),
        (sources[0], staged[sources[0]], "part-1.parquet", 4),
        (sources[1], staged[sources[1]], "part-0.parquet", 5),
    ]
    assert again == placed
    for f in placed:
        target = f"{f.target}/{f.name}"
        assert fs.get_file_info(target).size == f.size
        assert pq.read_table(target, filesystem=fs).num_rows == f.rows
        assert f.schema.equals(pq.read_schema(target, filesystem=fs))
        assert fs.get_file_info(f"{f.source}/{f.name}").is_file  # the staged copy goes with the staging area
    keys = s3_env.object_keys("lake/t/data/")
    assert [k.rsplit("/", 2)[1:] for k in keys if k.endswith(".parquet")] == [
        ["0-9-a", "part-0.parquet"],
        ["0-9-a", "part-1.parquet"],
        ["0-9-a", "part-0.parquet"],
    ]
    assert copy_files(fs, {}) == []
