"""The Arrow/msgspec value decoder: what each kind of value becomes, and the reason when it fails."""

from __future__ import annotations

import datetime
import json

import pyarrow as pa
import pyspark.sql.types as T
import pytest

from cohort.pipelines.formats.decode import ValueDecoder, value_columns_schema

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


# ------------------------------------------------------------------------------------ decoding rules

TIMES = T.StructType(
    [
        T.StructField("at", T.TimestampType()),
        T.StructField("inner", T.StructType([T.StructField("at", T.TimestampType())])),
        T.StructField("list", T.ArrayType(T.TimestampType())),
    ]
)


def _decode(values: list[bytes | None], schema: T.StructType = TIMES, **settings: str) -> tuple[list[dict], list]:
    decoder = ValueDecoder("json", value_columns_schema("json", schema), **settings)
    columns, reasons = decoder.decode(pa.array(values, pa.binary()))
    return pa.Table.from_arrays(columns, schema=decoder.arrow_schema).to_pylist(), reasons


def _utc(*args: int) -> datetime.datetime:
    return datetime.datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    ("policy", "text", "expected"),
    [
        ("utc", "2026-01-15T10:00:00", _utc(2026, 1, 15, 10)),
        ("Europe/Paris", "2026-01-15T10:00:00", _utc(2026, 1, 15, 9)),  # CET, +01:00
        ("Europe/Paris", "2026-07-15T10:00:00", _utc(2026, 7, 15, 8)),  # CEST, +02:00
        ("Europe/Paris", "2026-03-29T02:30:00", _utc(2026, 3, 29, 1, 30)),  # skipped by the clock: offset before
        ("Europe/Paris", "2026-10-25T02:30:00", _utc(2026, 10, 25, 0, 30)),  # repeated: the first (CEST)
        ("America/New_York", "2026-01-15T10:00:00.250000", _utc(2026, 1, 15, 15, 0, 0, 250000)),
        ("Europe/Paris", "2026-01-15T10:00:00+05:00", _utc(2026, 1, 15, 5)),  # an offset wins over the policy
        ("quarantine", "2026-01-15T10:00:00Z", _utc(2026, 1, 15, 10)),
    ],
)
def test_a_timestamp_without_an_offset_is_read_under_the_naive_policy(policy, text, expected):
    value = json.dumps({"at": text, "inner": {"at": text}, "list": [text, None]}).encode()
    rows, reasons = _decode([value], naive_timestamps=policy)
    assert reasons == [None]
    assert rows[0] == {"at": expected, "inner": {"at": expected}, "list": [expected, None]}


def test_offsets_are_applied_even_when_pyarrow_is_told_to_ignore_them(monkeypatch):
    """Importing pandera sets PYARROW_IGNORE_TIMEZONE, under which pyarrow drops a datetime's offset."""
    monkeypatch.setenv("PYARROW_IGNORE_TIMEZONE", "1")
    value = b'{"at": "2026-01-15T10:00:00+02:00", "inner": {"at": "2026-01-15T10:00:00-01:00"}}'
    rows, reasons = _decode([value], naive_timestamps="Europe/Paris")
    assert reasons == [None]
    assert (rows[0]["at"], rows[0]["inner"]["at"]) == (_utc(2026, 1, 15, 8), _utc(2026, 1, 15, 11))


@pytest.mark.parametrize(
    ("value", "path"),
    [
        (b'{"at": "2026-01-15T10:00:00"}', "$.at"),
        (b'{"inner": {"at": "2026-01-15 10:00:00"}}', "$.inner.at"),
        (b'{"list": ["2026-01-15T10:00:00Z", "2026-01-15T10:00:00"]}', "$.list[1]"),
        (b'{"at": "2026-01-15"}', "$.at"),  # a bare date has no zone either
    ],
)
def test_the_quarantine_policy_refuses_a_timestamp_without_an_offset_naming_it(value, path):
    _rows, reasons = _decode([value], naive_timestamps="quarantine")
    assert reasons[0] is not None and reasons[0].startswith(f"timestamp without a time zone at `{path}`"), reasons
    assert "naive_timestamps is 'quarantine'" in reasons[0]


@pytest.mark.parametrize(
    ("policy", "midnight"),
    [("utc", _utc(2026, 11, 23)), ("Europe/Paris", _utc(2026, 11, 22, 23)), ("Asia/Tokyo", _utc(2026, 11, 22, 15))],
)
def test_a_bare_date_for_a_timestamp_is_midnight_under_the_naive_policy(policy, midnight):
    value = b'{"at": "2026-11-23", "inner": {"at": "2026-11-23"}, "list": ["2026-11-23", "2026-11-23T00:00:00Z"]}'
    rows, reasons = _decode([value], naive_timestamps=policy)
    assert reasons == [None]
    assert rows[0] == {"at": midnight, "inner": {"at": midnight}, "list": [midnight, _utc(2026, 11, 23)]}


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b'{"at": "2026-13-45"}', "Invalid RFC3339 encoded datetime - at `$.at`"),
        (b'{"at": "23/11/2026"}', "Invalid RFC3339 encoded datetime - at `$.at`"),
        (b'{"at": "2026-11-23T10:00"}', "Invalid RFC3339 encoded datetime - at `$.at`"),  # seconds are required
        (b'{"at": "2026-11-23", "list": ["x"]}', "Invalid RFC3339 encoded datetime - at `$.list[0]`"),
        (b'{"at": "2026-11-23", "inner": 5}', "Expected `object | null`, got `int` - at `$.inner`"),
    ],
)
def test_a_bare_date_does_not_excuse_another_problem(value, reason):
    _rows, reasons = _decode([value])
    assert reasons[0] is not None and reasons[0].startswith("JSON does not match the value schema"), reasons
    assert reasons[0].endswith(reason), reasons


def test_an_unknown_naive_policy_is_refused_up_front():
    for bad in ("Mars/Olympus", "local", "", "../etc/passwd", "Europe"):
        with pytest.raises(ValueError, match="naive_timestamps must be 'utc', 'quarantine' or an IANA time zone"):
            ValueDecoder("json", TIMES, naive_timestamps=bad)


LEDGER = T.StructType(
    [
        T.StructField("id", T.LongType(), nullable=False),
        T.StructField("name", T.StringType()),
        T.StructField("geo", T.StructType([T.StructField("lat", T.DoubleType())])),
        T.StructField("lines", T.ArrayType(T.StructType([T.StructField("sku", T.StringType())]))),
    ]
)


@pytest.mark.parametrize(
    ("value", "key", "path"),
    [
        (b'{"id": 1, "id": 2}', "id", "$"),
        (b'{"id": 1, "name": null, "name": "b"}', "name", "$"),  # a null first: the last must not win silently
        (b'{"id": 1, "name": "a", "name": "a"}', "name", "$"),  # even with equal values
        (b'{"id": 1, "extra": 1, "extra": 2}', "extra", "$"),  # a field the schema does not declare
        (b'{"id": 1, "geo": {"lat": 1.5, "lat": 2.5}}', "lat", "$.geo"),
        (b'{"id": 1, "lines": [{"sku": "a"}, {"sku": "b", "sku": "c"}]}', "sku", "$.lines[1]"),
        (b'{"id": 1, "other": {"deep": [{"k": 1, "k": 1}]}}', "k", "$.other.deep[0]"),
        (b'{"id": 1, "\\u0069d": 2}', "id", "$"),  # the same key spelled with an escape
        (b'{"id": 1, "name": "say \\"hi\\"", "name": "x"}', "name", "$"),
        (b'{"id": 1, "q\\u0022": 1, "q\\"": 2}', 'q"', "$"),
        (b'\xef\xbb\xbf{"id": 1, "id": 1}', "id", "$"),
    ],
)
def test_a_repeated_key_is_quarantined_naming_it(value, key, path):
    _rows, reasons = _decode([b'{"id": 0}', value, b'{"id": 9}'], LEDGER)
    assert reasons[0] is None and reasons[2] is None
    assert reasons[1] == f"duplicate JSON key {key!r} in the object at `{path}`: a key may appear only once"


def test_keys_repeated_across_different_objects_are_not_repeats():
    values = [
        b'{"id": 1, "lines": [{"sku": "a"}, {"sku": "b"}], "geo": {"lat": 1.0}}',
        b'{"id": 2, "x": {"id": 3, "name": "n"}, "name": "id"}',  # an undeclared object; a value equal to a key
        b'{"id": 3, "name": null, "extra": "\\"quoted\\"", "geo": null, "lines": [null, {"sku": null}]}',
    ]
    rows, reasons = _decode(values, LEDGER)
    assert reasons == [None, None, None]
    assert [r["id"] for r in rows] == [1, 2, 3]


def test_repeats_are_found_among_many_records_of_every_shape():
    """The cheap checks that clear most records must never clear a repeat: compare with a full parse."""
    import random

    rng = random.Random(7)
    values, expected = [], []
    for i in range(3000):
        record: list[tuple[str, object]] = [("id", i)]
        for key, value in (("name", rng.choice(["n", None, 'q"q', "ü"])), ("geo", {"lat": 1.0}), ("x", [1, "s"])):
            if rng.random() < 0.6:
                record.append((key, value))
        lines = [[("sku", rng.choice(["a", None]))] for _ in range(rng.randrange(3))]
        repeat = rng.random() < 0.3
        if repeat:
            target = rng.choice(["top", "line"] if lines else ["top"])
            pairs = record if target == "top" else lines[0]
            pairs.append(rng.choice(pairs))
        if lines:
            record.append(("lines", lines))
        values.append(_encode(record).encode())
        expected.append(repeat)
    _rows, reasons = _decode(values, LEDGER)
    assert [r is not None and r.startswith("duplicate JSON key") for r in reasons] == expected
    assert all(r is None or r.startswith("duplicate JSON key") for r in reasons)
    decoder = ValueDecoder("json", value_columns_schema("json", LEDGER))  # a slice of a batch, as readers pass
    assert decoder.decode(pa.array(values, pa.binary()).slice(1001, 1500))[1] == reasons[1001:2501]


def _encode(pairs: object) -> str:
    """JSON text of nested lists of (key, value) pairs, keeping repeated keys (json.dumps cannot)."""
    if isinstance(pairs, list) and all(isinstance(p, tuple) for p in pairs) and pairs:
        return "{" + ", ".join(f"{json.dumps(k)}: {_encode(v)}" for k, v in pairs) + "}"
    if isinstance(pairs, list):
        return "[" + ", ".join(_encode(v) for v in pairs) + "]"
    if isinstance(pairs, dict):
        return _encode(list(pairs.items()))
    return json.dumps(pairs)


@pytest.mark.parametrize(
    ("value", "expected", "reason"),
    [
        (b'\xef\xbb\xbf{"id": 1, "name": "bom"}', {"id": 1, "name": "bom"}, None),
        (b'\xef\xbb\xbf  {"id": 2}\n', {"id": 2}, None),
        (b"\xef\xbb\xbf", None, "value is not valid JSON: it is empty or blank"),
        (b"\xef\xbb\xbf\xef\xbb\xbf{}", None, "value is not valid JSON"),  # only one mark is skipped
        (b' \xef\xbb\xbf{"id": 3}', None, "value is not valid JSON"),  # a mark must come first
    ],
)
def test_a_byte_order_mark_before_the_value_is_skipped(value, expected, reason):
    rows, reasons = _decode([value], LEDGER)
    if reason is None:
        assert reasons == [None]
        assert {k: v for k, v in rows[0].items() if v is not None} == expected
    else:
        assert reasons[0] is not None and reasons[0].startswith(reason), reasons


def test_the_pipeline_spec_hands_its_naive_policy_to_the_decoder():
    from cohort.pipelines.spec import PipelineSpec

    spec = PipelineSpec(sink_path="/tmp/lake", value_schema=TIMES, naive_timestamps="Europe/Paris")
    assert spec.checker.decoder.naive_timestamps == "Europe/Paris"
    assert PipelineSpec(sink_path="/tmp/lake", value_schema=TIMES).checker.decoder.naive_timestamps == "utc"
    with pytest.raises(ValueError, match="naive_timestamps must be"):
        PipelineSpec(sink_path="/tmp/lake", value_schema=TIMES, naive_timestamps="Paris")
