"""docs/transforms.md's blocks, run as written (the page's `schema` and `Orders` are the tests' orders) on rows
shaped as the sink's (tests/pipelines/tasks/test_arrow_transform.py runs Arrow transforms through real batches)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from tests.support.orders import ORDER_SCHEMA, Order

PAGE = Path(__file__).resolve().parents[2] / "docs" / "transforms.md"


def _block(title: str, **names: Any) -> dict[str, Any]:
    text = PAGE.read_text()
    match = re.search(rf'^```python title="{title}"\n(?P<body>.*?)^```$', text, re.MULTILINE | re.DOTALL)
    assert match, f"no block titled {title!r} in {PAGE.name}"
    namespace: dict[str, Any] = {"schema": ORDER_SCHEMA, "Orders": Order, **names}
    exec(compile(match["body"], f"{PAGE.name}:{title}", "exec"), namespace)
    return namespace


def _rows(users: list[str | None], amounts: list[float], countries: list[str] | None = None) -> pa.Table:
    kafka = [{"topic": "orders", "partition": 0, "offset": i} for i in range(len(users))]
    columns: dict[str, Any] = {"kafka": kafka, "id": list(range(1, len(users) + 1)), "user": users, "amount": amounts}
    if countries is not None:
        columns["country"] = countries
    return pa.table(columns)


def test_the_arrow_transform_drops_test_events_and_adds_cents():
    page = _block("an Arrow transform")
    out = page["enrich"](_rows(["u1", "healthcheck", None], [1.5, 2.0, 0.25]))
    assert out.column("user").to_pylist() == ["u1", None]
    assert out.column("amount_cents").to_pylist() == [150, 25]
    assert page["spec"].arrow_transform is page["enrich"]


def test_the_lookup_adds_each_country_name():
    page = _block("a lookup")
    out = page["with_country_name"](_rows(["a", "b", "c"], [1, 2, 3], ["DE", "XX", "FR"]))
    assert out.column("country_name").to_pylist() == ["Germany", None, "France"]


def test_the_spark_transform_block_builds_its_spec():
    page = _block("a Spark transform")
    assert page["spec"].transform is page["enrich"]
