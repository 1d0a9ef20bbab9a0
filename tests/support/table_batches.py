"""Table-sink batches for the tests: the orders spec of a Delta or Iceberg sink, records with some the model
refuses and where they must land, and a batch dying at a table commit boundary (a store whose commit raises
`Died` before or after its real commit)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tables import batch as table_batch
from cohort.pipelines.tables.batch import TablePair
from cohort.pipelines.tables.store import TableCommit, TableStore
from cohort.pipelines.tables.target import TableTarget
from tests.support.orders import ORDER_SCHEMA, Order, order


class Died(Exception):
    """The stand-in for a process dying at a commit boundary."""


@dataclasses.dataclass
class Hooked:
    """A table store whose commit runs `before` first and `after` last (either may raise `Died`)."""

    store: TableStore
    before: Callable[[TableCommit], None] | None = None
    after: Callable[[TableCommit], None] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def commit(self, change: TableCommit) -> None:
        if self.before is not None and change.batch is not None:
            self.before(change)
        self.store.commit(change)
        if self.after is not None and change.batch is not None:
            self.after(change)


def hook(
    monkeypatch: pytest.MonkeyPatch, *, sink: dict[str, Any] | None = None, quarantine: dict[str, Any] | None = None
) -> None:
    """Open the tables of the next batches through `Hooked` stores (the hooks run once, then are dropped)."""
    real = table_batch.open_tables

    def opened(target: TableTarget) -> TablePair:
        pair = real(target)
        return TablePair(Hooked(pair.sink, **(sink or {})), Hooked(pair.quarantine, **(quarantine or {})))  # type: ignore[arg-type]

    monkeypatch.setattr(table_batch, "open_tables", opened)


def die(_: TableCommit) -> None:
    raise Died("killed at the boundary")


def forget_history(spec: PipelineSpec) -> None:
    """Expire every snapshot but the current one (Iceberg) / checkpoint the log (Delta): the commit history a
    sink could have kept its offsets in is gone, the marks must still fence."""
    if spec.table_format == "iceberg":
        from datetime import UTC, datetime

        from pyiceberg.catalog.sql import SqlCatalog

        catalog = SqlCatalog("cohort", uri=spec.iceberg_catalog_url)
        for identifier in spec.iceberg_identifiers:
            table = catalog.load_table(identifier)
            table.maintenance.expire_snapshots().older_than(datetime.now(UTC)).commit()
            assert len(catalog.load_table(identifier).snapshots()) == 1
    else:
        from deltalake import DeltaTable

        for root in (spec.sink_path, spec.quarantine_root):
            DeltaTable(root).create_checkpoint()


def spec_for(lake: Path, table_format: str, **kwargs: Any) -> PipelineSpec:
    return PipelineSpec(
        sink_path=str(lake / "orders"), table_format=table_format, value_schema=ORDER_SCHEMA, model=Order, **kwargs
    )


def records(first: int, count: int, *, bad_every: int = 7) -> list[tuple[int, None, bytes]]:
    """Orders for partitions 0 and 1 alternately; every `bad_every`-th has an amount the model refuses."""
    return [
        (i % 2, None, order(i, amount=5000.0) if i % bad_every == 3 else order(i)) for i in range(first, first + count)
    ]


def expected(produced: int, *, bad_every: int = 7) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(sink, quarantine) (partition, offset) lists for `produced` records from `records(0, produced)`."""
    sink, bad = [], []
    per = {0: 0, 1: 0}
    for i in range(produced):
        p = i % 2
        (bad if i % bad_every == 3 else sink).append((p, per[p]))
        per[p] += 1
    return sorted(sink), sorted(bad)
