"""A record produced without a key (a null Kafka key, normal for producers that set none) lands with a null
`key` column whatever the key format; a key that is there and does not decode still quarantines its record
(pure: the reading task's checker on an Arrow batch)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyspark.sql.types as T
import pytest

from cohort.pipelines.formats.decode import REASON_COLUMN
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tasks.reader import RECORD_SCHEMA

VALUE = T.StructType([T.StructField("id", T.LongType())])


def raw_batch(keys: list[bytes | None]) -> pa.RecordBatch:
    n = len(keys)
    values = [json.dumps({"id": i}).encode() for i in range(n)]
    return pa.RecordBatch.from_arrays(
        [
            pa.array(["t"] * n),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([0] * n, pa.int64()),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.nulls(n, RECORD_SCHEMA.field("headers").type),
            pa.nulls(n, pa.string()),
        ],
        schema=RECORD_SCHEMA,
    )


@pytest.mark.parametrize(
    ("key_format", "key_schema", "key", "read"),
    [
        (
            "json",
            T.StructType([T.StructField("customer", T.StringType(), False)]),
            b'{"customer": "ann"}',
            {"customer": "ann"},
        ),
        ("json", T.StructType([T.StructField("value", T.LongType())]), b'{"value": 5}', 5),  # a scalar key
        ("utf8", None, b"ann", "ann"),
    ],
)
def test_a_null_key_is_a_null_key_column(
    key_format: str, key_schema: T.StructType | None, key: bytes, read: object
) -> None:
    spec = PipelineSpec(
        sink_path="/tmp/unused", value_format="json", value_schema=VALUE, key_format=key_format, key_schema=key_schema
    )
    checked = spec.checker.check(raw_batch([key, None, b"\xff not json"]))

    reasons = checked.column(REASON_COLUMN).to_pylist()
    assert reasons[:2] == [None, None] and reasons[2].startswith("key: ")
    rows = spec.checker.sink_rows(checked).to_pylist()
    assert [(r["key"], r["id"]) for r in rows] == [(read, 0), (None, 1)]
