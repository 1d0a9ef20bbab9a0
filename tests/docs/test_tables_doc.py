"""docs/tables.md's block that opens Cohort's Iceberg tables with pyiceberg's `load_catalog`, run as written on
tables the Iceberg sink created with the defaults the page describes (only the lake's root, `/lake/orders`,
points at a temporary directory)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

pytest.importorskip("pyiceberg")

import pyarrow as pa
import pyarrow.parquet as pq

from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tables.batch import open_tables
from cohort.pipelines.tables.iceberg.store import CATALOG_NAME
from cohort.pipelines.tables.store import BatchRecord, NewFile, Owner, PartitionMark, TableCommit, data_dir

PAGE = Path(__file__).resolve().parents[2] / "docs" / "tables.md"
BLOCK = re.compile(r'^```python title="open the Iceberg tables"\n(?P<body>.*?)^```$', re.MULTILINE | re.DOTALL)
SCHEMA = pa.schema([pa.field("id", pa.int64()), pa.field("kafka", pa.struct([pa.field("offset", pa.int64())]))])


def _land(store: object, rows: int) -> None:
    """One batch of `rows` rows of orders-0 into a table, as the sink commits it."""
    tp = TopicPartition("orders", 0)
    data = pa.table({"id": list(range(rows)), "kafka": [{"offset": o} for o in range(rows)]}, schema=SCHEMA)
    relative = f"{data_dir(tp, 0, rows, 'a')}/part-0.parquet"
    path = Path(store.root) / relative  # type: ignore[attr-defined]
    path.parent.mkdir(parents=True)
    pq.write_table(data, path)
    new = NewFile(relative, path.stat().st_size, rows, data.schema)
    record = BatchRecord("run-1", (OffsetRange("orders", 0, 0, rows, records=rows),))
    store.commit(TableCommit(Owner("g", 1), {tp: PartitionMark()}, {tp: rows}, (new,), (), record))  # type: ignore[attr-defined]


def test_the_page_names_the_catalog_and_its_block_opens_the_tables(tmp_path: Path) -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert f"catalog name **`{CATALOG_NAME}`**" in text
    match = BLOCK.search(text)
    assert match is not None, "docs/tables.md lost its block titled 'open the Iceberg tables'"
    lake = tmp_path / "lake" / "orders"
    spec = PipelineSpec(sink_path=str(lake), table_format="iceberg", value_format="bytes")
    tables = open_tables(spec.table_target)  # the defaults: <sink_path>/_catalog.sqlite, cohort.orders(_quarantine)
    _land(tables.sink, 7)
    _land(tables.quarantine, 2)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(match["body"].replace("/lake/orders", str(lake)), "tables.md", "exec"), {})
    assert printed.getvalue().strip() == "7 rows landed, 2 quarantined"
