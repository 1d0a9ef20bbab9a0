"""What the reading tasks may write themselves: codecs Spark reads back, and the sink roots pyarrow reaches."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from cohort.pipelines.tasks.writer import arrow_compression, arrow_filesystem


@pytest.mark.parametrize("codec", ["snappy", "gzip", "zstd", "lz4", "none", "uncompressed"])
def test_every_codec_the_tasks_write_is_read_back_by_spark(spark, tmp_path, codec):
    table = pa.table({"n": list(range(500)), "s": [f"v{i}" for i in range(500)]})
    pq.write_table(table, tmp_path / "part.parquet", compression=arrow_compression(codec))
    rows = spark.read.parquet(str(tmp_path)).collect()
    assert sorted((r.n, r.s) for r in rows) == list(zip(table["n"].to_pylist(), table["s"].to_pylist(), strict=True))


def test_codecs_spark_cannot_read_or_pyarrow_lacks_leave_the_write_to_spark():
    assert arrow_compression("brotli") is None
    assert arrow_compression("lzo") is None


def test_sink_roots_pyarrow_reaches(tmp_path):
    local = arrow_filesystem(str(tmp_path / "lake"))
    assert local is not None and isinstance(local[0], pafs.LocalFileSystem) and local[1] == str(tmp_path / "lake")
    relative = arrow_filesystem("lake")
    assert relative is not None and relative[1] == os.path.abspath("lake")
    assert arrow_filesystem(f"file://{tmp_path}") is not None
    assert arrow_filesystem(f"file:{tmp_path}") is None  # Hadoop's form: written through Spark
    assert arrow_filesystem("s3a://bucket/lake") is None
