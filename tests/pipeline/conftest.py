"""Fixtures of the pipeline tests: the real coordinator on SQLite, a sink per test, a JSON schema and model.

The broker, Spark and SQLite come from tests/conftest.py; nothing here fakes the ledger.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandera.pyspark as pa
import pyspark.sql.types as T
import pytest

from cohort.assignment.coordinator import Coordinator, StandaloneLedger
from cohort.assignment.protocol.group_state import GroupConfig

_groups = itertools.count()

ORDER_SCHEMA = T.StructType(
    [
        T.StructField("id", T.LongType(), nullable=False),
        T.StructField("user", T.StringType()),
        T.StructField("amount", T.DoubleType()),
    ]
)


class Order(pa.DataFrameModel):
    """Orders have a positive id, a user name starting with 'u' and an amount in [0, 1000)."""

    id: T.LongType() = pa.Field(gt=0)  # type: ignore[valid-type]
    user: T.StringType() = pa.Field(str_startswith="u", nullable=True)  # type: ignore[valid-type]
    amount: T.DoubleType() = pa.Field(ge=0, lt=1000)  # type: ignore[valid-type]


def order(i: int, **overrides: Any) -> bytes:
    """A valid order's JSON value for record number i (ids start at 1)."""
    return json.dumps({"id": i + 1, "user": f"u{i}", "amount": float(i % 100), **overrides}).encode()


@pytest.fixture
def coordinator(sqlite_url: str) -> Iterator[Coordinator]:
    """The real coordinator on a fresh SQLite file; joins complete at once (no initial rebalance delay)."""
    made = Coordinator.from_url(sqlite_url, config=GroupConfig(initial_rebalance_delay=0.0))
    yield made
    made.close()


@pytest.fixture
def group() -> str:
    return f"ingest-{next(_groups)}"


@pytest.fixture
def ledger(coordinator: Coordinator, group: str) -> StandaloneLedger:
    """The group's standalone (Empty group) ledger."""
    return coordinator.standalone_ledger(group)


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    return tmp_path / "lake"


@pytest.fixture
def sink_rows(spark: Any) -> Callable[[Path], list[Any]]:
    """Every row under a sink root (as Spark reads it: `_staging` and `_quarantine` ignored), by offset."""

    def read(root: Path) -> list[Any]:
        if not root.exists() or not any(root.glob("topic=*/partition=*/*.parquet")):
            return []
        return sorted(spark.read.parquet(str(root)).collect(), key=lambda r: (r.kafka.partition, r.kafka.offset))

    return read


def range_dirs(root: Path) -> list[str]:
    """Relative paths of the range directories under a sink root."""
    return sorted(str(p.relative_to(root)) for p in root.glob("topic=*/partition=*/*.parquet"))
