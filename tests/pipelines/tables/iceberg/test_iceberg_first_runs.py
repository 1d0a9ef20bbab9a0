"""A group's first run on a fresh Iceberg catalog, as Materialize starts it: several slots (here real processes)
open the catalog, create the namespace and both tables, fence their partitions and land a range at the same
moment. Every one of them lands, on SQLite and on PostgreSQL: the catalog's own tables, the namespace and the
tables are created once whoever comes first."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyiceberg")

import pyarrow as pa
import pyarrow.parquet as pq

from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.tables.iceberg.store import IcebergTableStore
from cohort.pipelines.tables.store import BatchRecord, NewFile, Owner, PartitionMark, TableCommit, data_dir

GROUP = "first-runs"
IDENTIFIER = "lake.orders"
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("kafka", pa.struct([pa.field("partition", pa.int32()), pa.field("offset", pa.int64())])),
    ]
)
PROCESSES = 6


def _rows(tp: TopicPartition, start: int, until: int) -> pa.Table:
    kafka = [{"partition": tp.partition, "offset": o} for o in range(start, until)]
    return pa.table({"id": list(range(start, until)), "kafka": kafka}, schema=SCHEMA)


def _slot(catalogs: list[tuple[str, str]], partition: int, barrier: Any, results: Any) -> None:
    """One slot's first moves on both tables of each fresh catalog in turn, started with the other slots: open
    the catalog, fence its partition, land offsets [0, 5)."""
    tp = TopicPartition("orders", partition)
    for root, url in catalogs:
        try:
            barrier.wait(timeout=120)
            for identifier, where in ((IDENTIFIER, root), (f"{IDENTIFIER}_quarantine", f"{root}/_quarantine")):
                store = IcebergTableStore(where, catalog_url=url, identifier=identifier)
                owner = Owner(GROUP, 3)
                store.commit(TableCommit(owner, {tp: store.marks(GROUP, [tp])[tp]}, schema=SCHEMA))  # the fence
                data = _rows(tp, 0, 5)
                relative = f"{data_dir(tp, 0, 5, f'a{partition}')}/part-0.parquet"
                path = Path(where) / relative
                path.parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(data, path)
                new = NewFile(relative, path.stat().st_size, data.num_rows, data.schema)
                record = BatchRecord(f"run-{partition}", (OffsetRange(tp.topic, partition, 0, 5, records=5),))
                expected = store.marks(GROUP, [tp])[tp]
                store.commit(TableCommit(owner, {tp: expected}, {tp: 5}, (new,), (), record))
            results.put((url, partition, "landed"))
        except Exception as error:  # reported, so the test names it instead of waiting
            results.put((url, partition, f"{type(error).__name__}: {error}"))


def _first_runs(catalogs: list[tuple[Path, str]]) -> dict[str, dict[int, str]]:
    """Each catalog's first run by PROCESSES slots (real processes, started once for every catalog in turn)."""
    context = multiprocessing.get_context("forkserver")  # fresh processes, forked from one that imported once
    context.set_forkserver_preload([__name__])
    barrier, results = context.Barrier(PROCESSES), context.Queue()
    plain = [(str(root), url) for root, url in catalogs]
    processes = [context.Process(target=_slot, args=(plain, p, barrier, results)) for p in range(PROCESSES)]
    for process in processes:
        process.start()
    outcomes: dict[str, dict[int, str]] = {url: {} for _, url in catalogs}
    for _ in range(PROCESSES * len(catalogs)):
        url, partition, outcome = results.get(timeout=180)
        outcomes[url][partition] = outcome
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    return outcomes


def _check_tables(root: Path, url: str) -> None:
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("cohort", type="sql", uri=url)
    for identifier in (IDENTIFIER, f"{IDENTIFIER}_quarantine"):
        kafka = catalog.load_table(identifier).scan().to_arrow().column("kafka").to_pylist()
        assert sorted((k["partition"], k["offset"]) for k in kafka) == [
            (p, o) for p in range(PROCESSES) for o in range(5)
        ]
    store = IcebergTableStore(str(root), catalog_url=url, identifier=IDENTIFIER)
    tps = [TopicPartition("orders", p) for p in range(PROCESSES)]
    assert set(store.marks(GROUP, tps).values()) == {PartitionMark(5, 3, 5)}


def test_slots_creating_fresh_sqlite_catalogs_at_once_all_land(tmp_path: Path) -> None:
    catalogs = [(tmp_path / f"round-{i}" / "table", f"sqlite:///{tmp_path}/catalog-{i}.db") for i in range(3)]
    outcomes = _first_runs(catalogs)
    for root, url in catalogs:
        assert outcomes[url] == dict.fromkeys(range(PROCESSES), "landed")
        _check_tables(root, url)


def test_slots_creating_a_fresh_postgresql_catalog_at_once_all_land(tmp_path: Path, pg_url: str) -> None:
    root = tmp_path / "table"
    assert _first_runs([(root, pg_url)])[pg_url] == dict.fromkeys(range(PROCESSES), "landed")
    _check_tables(root, pg_url)
