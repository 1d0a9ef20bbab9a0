"""The Arrow/msgspec value decoder: what each kind of value becomes, and the reason when it fails."""

from __future__ import annotations

import datetime
import json

import pyarrow as pa
import pyspark.sql.types as T
import pytest

from cohort.pipelines.decode import ValueDecoder, value_columns_schema

SCHEMA = T.StructType(
    [
        T.StructField("id", T.LongType(), nullable=False),
        T.StructField("user", T.StringType()),
        T.StructField("small", T.ByteType()),
        T.StructField("at", T.TimestampType()),
        T.StructField("day", T.DateType()),
        T.StructField("tags", T.ArrayType(T.StringType())),
        T.StructField("geo", T.StructType([T.StructField("lat", T.DoubleType())])),
        T.StructField("odd name", T.BooleanType()),
    ]
)
UTC = datetime.UTC

CASES: list[tuple[bytes | None, dict | None, str | None]] = [
    (b'{"id": 1, "user": "u"}', {"id": 1, "user": "u"}, None),
    (
        b'{"id": 2, "at": "2024-01-02T03:04:05+02:00", "day": "2024-01-02", "tags": ["a", null], '
        b'"geo": {"lat": 1.5, "x": 0}, "odd name": true, "unknown": [1]}',
        {
            "id": 2,
            "at": datetime.datetime(2024, 1, 2, 1, 4, 5, tzinfo=UTC),
            "day": datetime.date(2024, 1, 2),
            "tags": ["a", None],
            "geo": {"lat": 1.5},
            "odd name": True,
        },
        None,
    ),
    (
        b'{"id": 3, "at": "2024-01-02T03:04:05"}',
        {"id": 3, "at": datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)},
        None,
    ),
    (b'{\n  "id": 4\n}\n', {"id": 4}, None),
    (None, None, "null value (tombstone)"),
    (b"", None, "value is not valid JSON"),
    (b"   ", None, "value is not valid JSON"),
    (b"not json", None, "value is not valid JSON"),
    (b'{"id": 1} trailing', None, "value is not valid JSON: JSON is malformed: trailing characters"),
    (b'{"id": 1}{"id": 2}', None, "value is not valid JSON"),
    (b"[1, 2]", None, "value is not a JSON object"),
    (b"42", None, "value is not a JSON object"),
    (b'{"id": "5"}', None, "JSON does not match the value schema"),
    (b'{"id": 1.5}', None, "JSON does not match the value schema"),
    (b'{"id": 99999999999999999999}', None, "JSON does not match the value schema"),
    (b'{"id": 1, "small": 300}', None, "JSON does not match the value schema"),
    (b'{"id": 1, "user": 5}', None, "JSON does not match the value schema"),
    (b'{"id": 1, "geo": {"lat": "north"}}', None, "`$.geo.lat`"),
    (b'{"id": NaN}', None, "value is not valid JSON"),
    (b'{"user": "no id"}', None, "field 'id' is missing or null but the schema requires it"),
    (b'{"id": null}', None, "field 'id' is missing or null"),
    (b'{"id": 1, "user": "\xff"}', None, "value is not valid UTF-8"),
    (b'{"id": 1, "user": "a\x00b"}', None, "value is not valid JSON"),  # raw control character in a string
    (b'{"id": 1, "user": "a\\u0000b \xf0\x9f\x98\x80"}', {"id": 1, "user": "a\x00b \U0001f600"}, None),
]


def test_each_value_decodes_or_names_its_problem():
    decoder = ValueDecoder("json", value_columns_schema("json", SCHEMA))
    columns, reasons = decoder.decode(pa.array([raw for raw, _, _ in CASES], pa.binary()))
    rows = pa.Table.from_arrays(columns, schema=decoder.arrow_schema).to_pylist()
    for (raw, expected, reason), row, got in zip(CASES, rows, reasons, strict=True):
        if reason is None:
            assert got is None, (raw, got)
            assert {k: v for k, v in row.items() if v is not None} == expected, raw
        else:
            assert got is not None and reason in got, (raw, got)


def test_a_large_batch_with_scattered_failures_keeps_every_row_in_place():
    decoder = ValueDecoder("json", SCHEMA)
    values = [json.dumps({"id": i}).encode() if i % 97 else b"{broken" for i in range(5000)]
    columns, reasons = decoder.decode(pa.array(values, pa.binary()))
    ids = columns[0].to_pylist()
    assert [i for i, r in enumerate(reasons) if r is not None] == list(range(0, 5000, 97))
    assert all(ids[i] == (None if i % 97 == 0 else i) for i in range(5000))


@pytest.mark.parametrize(("value_format", "expected"), [("utf8", ["a", None, None]), ("bytes", [b"a", b"\xff", None])])
def test_text_and_bytes(value_format, expected):
    decoder = ValueDecoder(value_format, value_columns_schema(value_format, None))
    columns, reasons = decoder.decode(pa.array([b"a", b"\xff", None], pa.binary()))
    assert columns[0].to_pylist() == expected
    assert reasons == [None, "value is not valid UTF-8" if value_format == "utf8" else None, None]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (T.StructType([T.StructField("m", T.MapType(T.StringType(), T.LongType()))]), "field 'm' has type map"),
        (T.StructType([T.StructField("b", T.BinaryType())]), "binary fields cannot be decoded from JSON"),
        (T.StructType([T.StructField("d", T.DecimalType(10, 2))]), "does not support"),
    ],
)
def test_types_the_decoder_cannot_produce_are_refused_up_front(schema, message):
    with pytest.raises(ValueError, match=message):
        value_columns_schema("json", schema)
