"""The tests' orders: a Spark schema, a pandera model of valid orders, a valid order's JSON value, and the range
directories of a Parquet sink."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandera.pyspark as pa
import pyspark.sql.types as T

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


def range_dirs(root: Path) -> list[str]:
    """Relative paths of the range directories under a sink root."""
    return sorted(str(p.relative_to(root)) for p in root.glob("topic=*/partition=*/*.parquet"))
