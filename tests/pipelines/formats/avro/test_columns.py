"""Property tests of the column-wise Avro decoder (`cohort.pipelines.formats.avro.columns.decode_avro`) against
fastavro.

`decode_avro` re-implements Avro's binary decoding and schema resolution in numpy: one cursor per record, each
field one vectorised read across the batch, unions/arrays/maps by masking and per-pass loops, and a varint
reader that reads one more byte per pass for the rows whose varint goes on. Here it is checked against the
reference implementation the project already ships with: payloads are written with `fastavro.schemaless_writer`
(or crafted byte by byte), read back with `fastavro.schemaless_reader` (with the reader schema for
evolution), and each decoded Arrow row must equal fastavro's value once both are put in one canonical Python
form (tests/support/avro_oracle.py, shared with tests/pipelines/formats/avro/test_unions.py). Where corrupted bytes can
leave Python's date range, both sides are compared as the underlying integers instead (days, microseconds;
fastavro reads the schema without its logical types).

Properties: (1) a rich schema with every type the decoder supports decodes exactly, with no reasons; (2)
writer/reader pairs resolve as fastavro resolves them, and a record fastavro cannot resolve is marked bad;
(3) corrupted payloads (truncated, extended, overwritten, random, and every payload of up to 2 bytes) never
raise, and each row is either marked bad with a reason or exactly what fastavro reads from the same bytes (all
of them), while the intact rows of the batch stay exact; (4) varints of every length 1..10, canonical or
zero-padded, decode; 11-byte ones are bad in every role (long, int, length, block count, union/enum index).

The decoder bugs these properties found are kept as minimal regression tests at the end of the file.
The file runs in about 10 s; for a deeper search raise the `max_examples` values (25x found nothing more).
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cohort.pipelines.formats.avro.columns import AvroResolutionError, arrow_of
from cohort.pipelines.formats.avro.schema import parse_avro
from tests.support.avro_oracle import (
    ENOUGH_DIGITS,
    EPOCH,
    UTC,
    Schema,
    amap,
    array,
    check_bad_or_exact,
    check_like_fastavro,
    decode,
    encode,
    enum,
    fastavro_read,
    fixed,
    fld,
    logical,
    record,
    unzigzag,
    varint,
    zigzag,
)

FAST = settings(
    deadline=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


SUIT = enum("Suit", "SPADES", "HEARTS", "DIAMONDS", "CLUBS")
POINT = record("Point", fld("x", "double"), fld("y", "double"))
ITEM = record("Item", fld("sku", "string"), fld("qty", "int"), fld("tags", array("string")))
OUTER = record(
    "Outer",
    fld("inner", record("Inner", fld("v", ["null", "double"]), fld("suit", "Suit"))),
    fld("m", amap(array("int"))),
)

RICH_FIELDS: list[Schema] = [
    fld("nothing", "null"),
    fld("flag", "boolean"),
    fld("i", "int"),
    fld("l", "long"),
    fld("f", "float"),
    fld("d", "double"),
    fld("raw", "bytes"),
    fld("text", "string"),
    fld("maybe", ["null", "string"]),
    fld("maybe_last", ["long", "null"]),
    fld("choice", ["null", "long", "string", POINT]),  # several types: a struct of members
    fld("suit", SUIT),
    fld("hash", fixed("Hash", 4)),
    fld("zero", fixed("Zero", 0)),
    fld("items", array(ITEM)),
    fld("counts", amap("long")),
    fld("nested", OUTER),
    fld("opt_items", ["null", array(["null", "long"])]),
    fld("price", logical("bytes", "decimal", precision=12, scale=2)),
    fld("big", fixed("Big", 16, logicalType="decimal", precision=38, scale=10)),
    fld("small_dec", fixed("Small", 8, logicalType="decimal", precision=18, scale=4)),
    fld("day", logical("int", "date")),
    fld("at_ms", logical("long", "timestamp-millis")),
    fld("at_us", logical("long", "timestamp-micros")),
    fld("local_ms", logical("long", "local-timestamp-millis")),
    fld("local_us", logical("long", "local-timestamp-micros")),
    fld("id", logical("string", "uuid")),
    fld("maybe_at", ["null", logical("long", "timestamp-micros")]),
]
RICH = {**record("Rich", *RICH_FIELDS), "namespace": "test.avro"}

CORRUPTIBLE = RICH


# ------------------------------------------------------------------------------------------ strategies

INT32_EDGES = [0, 1, -1, 63, -64, 64, -65, 8191, -8192, 2**31 - 1, -(2**31)]
INT64_EDGES = [*INT32_EDGES, 2**31, -(2**31) - 1, 2**53 + 1, -(2**53) - 1, 2**63 - 1, -(2**63)]
INTS = st.one_of(st.sampled_from(INT32_EDGES), st.integers(-(2**31), 2**31 - 1))
LONGS = st.one_of(st.sampled_from(INT64_EDGES), st.integers(-(2**63), 2**63 - 1))
# long -> float is checked on values a double holds exactly: fastavro hands back float(long), and rounding that
# to 32 bits is not always Java's (and Arrow's) single rounding of the integer
DOUBLE_EXACT_LONGS = st.one_of(st.sampled_from([2**63 - 1, -(2**63), 2**53, -(2**53)]), st.integers(-(2**53), 2**53))
DOUBLES = st.one_of(
    st.sampled_from([0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf, 5e-324, 1.7976931348623157e308]),
    st.floats(),
)
FLOATS = st.one_of(
    st.sampled_from([0.0, -0.0, math.nan, math.inf, -math.inf, 1.401298464324817e-45, 3.4028234663852886e38]),
    st.floats(width=32),
)
TEXT = st.one_of(st.sampled_from(["", "é", "日本語", "🦀", "\x00", "a\u2028b", "\U0010ffff"]), st.text(max_size=10))
BLOBS = st.binary(max_size=12)
DATETIMES = st.datetimes(min_value=datetime.datetime(1, 1, 2), max_value=datetime.datetime(9999, 12, 30))
AWARE = st.datetimes(
    min_value=datetime.datetime(1, 1, 2), max_value=datetime.datetime(9999, 12, 30), timezones=st.just(UTC)
)


def decimals(digits: int, scale: int) -> st.SearchStrategy[decimal.Decimal]:
    """Decimals of at most `digits` significant digits and exactly `scale` decimal places."""
    top = 10**digits - 1
    return st.integers(-top, top).map(lambda n: decimal.Decimal(n).scaleb(-scale, ENOUGH_DIGITS))


RICH_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "nothing": st.none(),
    "flag": st.booleans(),
    "i": INTS,
    "l": LONGS,
    "f": FLOATS,
    "d": DOUBLES,
    "raw": BLOBS,
    "text": TEXT,
    "maybe": st.none() | TEXT,
    "maybe_last": st.none() | LONGS,
    "choice": st.one_of(st.none(), LONGS, TEXT, st.fixed_dictionaries({"x": DOUBLES, "y": DOUBLES})),
    "suit": st.sampled_from(SUIT["symbols"]),
    "hash": st.binary(min_size=4, max_size=4),
    "zero": st.just(b""),
    "items": st.lists(
        st.fixed_dictionaries({"sku": TEXT, "qty": INTS, "tags": st.lists(TEXT, max_size=3)}), max_size=3
    ),
    "counts": st.dictionaries(TEXT, LONGS, max_size=4),
    "nested": st.fixed_dictionaries(
        {
            "inner": st.fixed_dictionaries({"v": st.none() | DOUBLES, "suit": st.sampled_from(SUIT["symbols"])}),
            "m": st.dictionaries(TEXT, st.lists(INTS, max_size=3), max_size=3),
        }
    ),
    "opt_items": st.none() | st.lists(st.none() | LONGS, max_size=4),
    "price": decimals(12, 2),
    "big": decimals(38, 10),
    "small_dec": decimals(18, 4),
    "day": st.dates(),
    "at_ms": AWARE,
    "at_us": AWARE,
    "local_ms": DATETIMES,
    "local_us": DATETIMES,
    "id": st.uuids(),
    "maybe_at": st.none() | AWARE,
}


def records_of(schema: Schema) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({f["name"]: RICH_VALUES[f["name"]] for f in schema["fields"]})


GAPS = st.one_of(st.just(b""), st.binary(min_size=1, max_size=3))


# ------------------------------------------------------------------------------ 1. a rich writer schema


@settings(FAST, max_examples=60)
@given(records=st.lists(records_of(RICH), min_size=1, max_size=8), gap=GAPS)
def test_rich_records_decode_like_fastavro(records: list[dict[str, Any]], gap: bytes) -> None:
    payloads = [encode(RICH, r) for r in records]
    batch = decode(RICH, RICH, payloads, gap)
    assert batch.reasons == {}
    check_like_fastavro(RICH, RICH, payloads, batch)


def test_rich_schema_arrow_types() -> None:
    """The Arrow layout the comparisons rely on (docs/formats.md, avro_schema's module doc)."""
    columns = arrow_of(parse_avro(json.dumps(RICH)))
    assert columns.field("nothing").type == pa.null()
    assert columns.field("suit").type == pa.string()
    assert columns.field("hash").type == pa.binary()
    assert columns.field("counts").type == pa.map_(pa.string(), pa.int64())
    assert columns.field("choice").type == pa.struct(
        [("member0", pa.int64()), ("member1", pa.string()), ("member2", arrow_of(parse_avro(json.dumps(POINT))))]
    )
    assert columns.field("price").type == pa.decimal128(12, 2)
    assert columns.field("big").type == pa.decimal128(38, 10)
    assert columns.field("day").type == pa.date32()
    for name in ("at_ms", "at_us", "local_ms", "local_us", "maybe_at"):
        assert columns.field(name).type == pa.timestamp("us", tz="UTC")
    assert columns.field("id").type == pa.string()


def test_empty_batch() -> None:
    batch = decode(RICH, RICH, [])
    assert batch.reasons == {}
    assert batch.values.to_pylist() == []


# ------------------------------------------------------------------------------------ 2. schema evolution


@dataclass(frozen=True)
class Evolution:
    name: str
    writer: Schema
    reader: Schema
    records: st.SearchStrategy[dict[str, Any]]


LEVEL = enum("Level", "LOW", "HIGH")
GONE = record("Gone", fld("x", "double"), fld("y", ["null", "bytes"]))
UTF8_OR_NOT = st.one_of(TEXT.map(str.encode), st.binary(max_size=6))  # bytes -> string: invalid UTF-8 is bad

EVOLUTIONS = [
    Evolution(
        "fields_added_with_defaults",
        record("R", fld("id", "long")),
        record(
            "R",
            fld("id", "long"),
            fld("count", "long", default=7),
            fld("label", "string", default="x"),
            fld("note", ["null", "string"], default=None),
            fld("tag", ["string", "null"], default="t"),
            fld("flag", "boolean", default=True),
            fld("ratio", "double", default=1.5),
            fld("small", "float", default=0.1),
            fld("level", LEVEL, default="HIGH"),
            fld("raw", "bytes", default="\u00ff\u0000a"),
            fld("sig", fixed("Sig", 2), default="\u00ab\u00cd"),
            fld("tags", array("string"), default=["a", "b"]),
            fld("attrs", amap("long"), default={"k": 1, "j": -2}),
            fld("point", POINT, default={"x": 1.0, "y": -2.5}),
            fld("day", logical("int", "date"), default=10),
            fld("when", logical("long", "timestamp-micros"), default=1_500_000),
        ),
        st.fixed_dictionaries({"id": LONGS}),
    ),
    Evolution(
        "fields_removed_and_reordered",
        record(
            "R",
            fld("a", "long"),
            fld("gone_items", array(ITEM)),
            fld("b", "string"),
            fld("gone_map", amap(array("long"))),
            fld("gone_union", ["null", "long", "string"]),
            fld("gone_fixed", fixed("GoneFixed", 3)),
            fld("gone_enum", LEVEL),
            fld("gone_record", GONE),
            fld("c", "double"),
            fld("gone_float", "float"),
            fld("gone_flag", "boolean"),
        ),
        record("R", fld("c", "double"), fld("a", "long"), fld("b", "string")),
        st.fixed_dictionaries(
            {
                "a": LONGS,
                "gone_items": RICH_VALUES["items"],
                "b": TEXT,
                "gone_map": st.dictionaries(TEXT, st.lists(LONGS, max_size=3), max_size=3),
                "gone_union": st.one_of(st.none(), LONGS, TEXT),
                "gone_fixed": st.binary(min_size=3, max_size=3),
                "gone_enum": st.sampled_from(["LOW", "HIGH"]),
                "gone_record": st.fixed_dictionaries({"x": DOUBLES, "y": st.none() | BLOBS}),
                "c": DOUBLES,
                "gone_float": FLOATS,
                "gone_flag": st.booleans(),
            }
        ),
    ),
    Evolution(
        "numeric_promotions",
        record(
            "R",
            fld("i2l", "int"),
            fld("i2f", "int"),
            fld("i2d", "int"),
            fld("l2f", "long"),
            fld("l2d", "long"),
            fld("f2d", "float"),
            fld("items", array("int")),
            fld("values", amap("float")),
        ),
        record(
            "R",
            fld("i2l", "long"),
            fld("i2f", "float"),
            fld("i2d", "double"),
            fld("l2f", "float"),
            fld("l2d", "double"),
            fld("f2d", "double"),
            fld("items", array("long")),
            fld("values", amap("double")),
        ),
        st.fixed_dictionaries(
            {
                "i2l": INTS,
                "i2f": INTS,
                "i2d": INTS,
                "l2f": DOUBLE_EXACT_LONGS,
                "l2d": LONGS,
                "f2d": FLOATS,
                "items": st.lists(INTS, max_size=4),
                "values": st.dictionaries(TEXT, FLOATS, max_size=3),
            }
        ),
    ),
    Evolution(
        "string_and_bytes_interchange",
        record("R", fld("s", "string"), fld("b", "bytes"), fld("ms", amap("string")), fld("ab", array("bytes"))),
        record("R", fld("s", "bytes"), fld("b", "string"), fld("ms", amap("bytes")), fld("ab", array("string"))),
        st.fixed_dictionaries(
            {
                "s": TEXT,
                "b": UTF8_OR_NOT,
                "ms": st.dictionaries(TEXT, TEXT, max_size=3),
                "ab": st.lists(UTF8_OR_NOT, max_size=3),
            }
        ),
    ),
    Evolution(
        "enum_new_symbol_with_reader_default",
        record("R", fld("e", enum("E", "A", "B", "C", "NEW")), fld("es", array("E"))),
        record("R", fld("e", enum("E", "C", "B", "A", "D", default="A")), fld("es", array("E"))),
        st.fixed_dictionaries(
            {"e": st.sampled_from(["A", "B", "C", "NEW"]), "es": st.lists(st.sampled_from(["A", "NEW"]), max_size=3)}
        ),
    ),
    Evolution(
        "enum_new_symbol_without_reader_default",
        record("R", fld("n", "long"), fld("e", enum("E", "A", "B", "NEW"))),
        record("R", fld("n", "long"), fld("e", enum("E", "B", "A"))),
        st.fixed_dictionaries({"n": LONGS, "e": st.sampled_from(["A", "B", "NEW"])}),
    ),
    Evolution(
        "fields_renamed_via_aliases",
        record("R", fld("old_id", "long"), fld("old_name", "string"), fld("keep", "int")),
        record(
            "R",
            fld("id", "long", aliases=["old_id"]),
            fld("name", "string", aliases=["other", "old_name"]),
            fld("keep", "long"),
        ),
        st.fixed_dictionaries({"old_id": LONGS, "old_name": TEXT, "keep": INTS}),
    ),
    Evolution(
        "union_promotions",
        record(
            "R",
            fld("a", ["null", "int"]),
            fld("b", ["null", "float"]),
            fld("c", "int"),
            fld("d", ["null", "string"]),
            fld("e", ["int", "string"]),  # a string cannot be read as long: only those records are bad
            fld("f", "null"),
            fld("g", ["string", "null"]),
            fld("h", POINT),
            fld("k", ["null", "long"]),
        ),
        record(
            "R",
            fld("a", ["null", "long"]),
            fld("b", ["null", "double"]),
            fld("c", ["null", "long"]),
            fld("d", ["null", "bytes"]),
            fld("e", ["null", "long"]),
            fld("f", ["null", "string"]),
            fld("g", ["null", "string"]),
            fld("h", ["null", POINT]),
            fld("k", ["null", "float"]),
        ),
        st.fixed_dictionaries(
            {
                "a": st.none() | INTS,
                "b": st.none() | FLOATS,
                "c": INTS,
                "d": st.none() | TEXT,
                "e": INTS | TEXT,
                "f": st.none(),
                "g": st.none() | TEXT,
                "h": st.fixed_dictionaries({"x": DOUBLES, "y": DOUBLES}),
                "k": st.none() | DOUBLE_EXACT_LONGS,
            }
        ),
    ),
    Evolution(
        "nested_records_evolve",
        record(
            "R",
            fld("p", record("P", fld("x", "int"), fld("gone", "string"))),
            fld("items", array(record("Line", fld("a", "int"), fld("b", "string")))),
            fld("by_key", amap(record("V", fld("v", "float")))),
        ),
        record(
            "R",
            fld("p", record("P", fld("y", "double", default=0.5), fld("x", "long"))),
            fld("items", array(record("Line", fld("b", "string"), fld("c", "long", default=3), fld("a", "double")))),
            fld("by_key", amap(record("V", fld("v", "double"), fld("w", ["null", "long"], default=None)))),
        ),
        st.fixed_dictionaries(
            {
                "p": st.fixed_dictionaries({"x": INTS, "gone": TEXT}),
                "items": st.lists(st.fixed_dictionaries({"a": INTS, "b": TEXT}), max_size=3),
                "by_key": st.dictionaries(TEXT, st.fixed_dictionaries({"v": FLOATS}), max_size=3),
            }
        ),
    ),
]


@pytest.mark.parametrize("case", EVOLUTIONS, ids=[c.name for c in EVOLUTIONS])
@settings(FAST, max_examples=25)
@given(data=st.data())
def test_schema_evolution_resolves_like_fastavro(case: Evolution, data: st.DataObject) -> None:
    records = data.draw(st.lists(case.records, min_size=1, max_size=8), label="records")
    gap = data.draw(GAPS, label="gap")
    payloads = [encode(case.writer, r) for r in records]
    batch = decode(case.writer, case.reader, payloads, gap)
    check_like_fastavro(case.writer, case.reader, payloads, batch)


UNRESOLVABLE = [
    ("string_to_int", "string", "int", "x"),
    ("long_to_int", "long", "int", 1),
    ("double_to_float", "double", "float", 1.0),
    ("bytes_to_long", "bytes", "long", b"x"),
    ("fixed_size_change", fixed("F", 4), fixed("F", 5), b"abcd"),
    ("array_to_map", array("long"), amap("long"), [1]),
    ("enum_to_long", enum("E", "A"), "long", "A"),
    ("boolean_to_string", "boolean", "string", True),
    ("record_to_string", POINT, "string", {"x": 1.0, "y": 2.0}),
]


@pytest.mark.parametrize(
    ("writer_type", "reader_type", "value"), [u[1:] for u in UNRESOLVABLE], ids=[u[0] for u in UNRESOLVABLE]
)
def test_unresolvable_writer_schema_is_refused(writer_type: Any, reader_type: Any, value: Any) -> None:
    writer, reader = record("R", fld("v", writer_type)), record("R", fld("v", reader_type))
    payload = encode(writer, {"v": value})
    assert fastavro_read(writer, reader, payload).error is not None
    with pytest.raises(AvroResolutionError, match=r"\$\.v"):
        decode(writer, reader, [payload])


def test_reader_field_without_default_missing_from_writer_is_refused() -> None:
    writer, reader = record("R", fld("a", "long")), record("R", fld("a", "long"), fld("b", "string"))
    payload = encode(writer, {"a": 1})
    assert fastavro_read(writer, reader, payload).error is not None
    with pytest.raises(AvroResolutionError, match=r"\$\.b"):
        decode(writer, reader, [payload])


# ------------------------------------------------------------------------------------- 3. corruption


MUTATIONS = ("intact", "intact", "truncate", "append", "overwrite", "overwrite", "overwrite", "random")


@st.composite
def corrupted(draw: st.DrawFn, schema: Schema) -> tuple[list[bytes], set[int]]:
    """Payloads of generated records, each intact or corrupted, and the rows left intact."""
    records = draw(st.lists(records_of(schema), min_size=1, max_size=10), label="records")
    payloads: list[bytes] = []
    intact: set[int] = set()
    for row, value in enumerate(records):
        payload = encode(schema, value)
        kind = draw(st.sampled_from(MUTATIONS), label=f"mutation of row {row}")
        if kind == "intact":
            intact.add(row)
        elif kind == "truncate":
            payload = payload[: draw(st.integers(0, len(payload) - 1))]
        elif kind == "append":
            payload += draw(st.binary(min_size=1, max_size=8))
        elif kind == "overwrite":
            at = draw(st.integers(0, len(payload) - 1))
            payload = payload[:at] + bytes([draw(st.integers(0, 255))]) + payload[at + 1 :]
        else:
            payload = draw(st.binary(max_size=48))
        payloads.append(payload)
    return payloads, intact


@settings(FAST, max_examples=60)
@given(batch=corrupted(CORRUPTIBLE), gap=GAPS)
def test_corrupted_payloads_are_bad_or_exact(batch: tuple[list[bytes], set[int]], gap: bytes) -> None:
    payloads, intact = batch
    decoded_batch = decode(CORRUPTIBLE, CORRUPTIBLE, payloads, gap)
    check_bad_or_exact(CORRUPTIBLE, payloads, decoded_batch, intact)


SMALL_SCHEMAS = {
    "long_and_string": record("S", fld("a", "long"), fld("s", "string")),
    "nullable_int_enum_boolean": record("S", fld("u", ["null", "int"]), fld("e", LEVEL), fld("b", "boolean")),
    "array_and_map": record("S", fld("xs", array("long")), fld("m", amap("string"))),
    "floats_and_fixed": record("S", fld("f", "float"), fld("d", "double"), fld("x", fixed("X", 3))),
    "logical_types": record(
        "S",
        fld("day", logical("int", "date")),
        fld("at", logical("long", "timestamp-micros")),
        fld("id", logical("string", "uuid")),
    ),
    "multi_branch_union": record("S", fld("c", ["null", "long", "string", array("int")])),
    "nested_arrays": record("S", fld("rows", array(array(["null", "int"])))),
}


# random payloads built from Avro-looking pieces, so that many of them decode: varints (small, any, or
# zero-padded), length-prefixed strings, single bytes and 4 or 8 random bytes (floats, fixed)
TOKENS = st.one_of(
    st.integers(-3, 3).map(lambda n: varint(zigzag(n))),
    LONGS.map(lambda n: varint(zigzag(n))),
    st.tuples(st.integers(-3, 3), st.integers(1, 11)).map(lambda t: varint(zigzag(t[0]), t[1])),
    TEXT.map(lambda t: varint(zigzag(len(t.encode()))) + t.encode()),
    st.binary(min_size=1, max_size=1),
    st.sampled_from([4, 8]).flatmap(lambda n: st.binary(min_size=n, max_size=n)),
)
RANDOM_PAYLOADS = st.one_of(st.binary(max_size=24), st.lists(TOKENS, max_size=8).map(b"".join))


@pytest.mark.parametrize("schema", list(SMALL_SCHEMAS.values()), ids=list(SMALL_SCHEMAS))
@settings(FAST, max_examples=40)
@given(payloads=st.lists(RANDOM_PAYLOADS, min_size=1, max_size=10), gap=GAPS)
def test_random_bytes_are_bad_or_exact(schema: Schema, payloads: list[bytes], gap: bytes) -> None:
    batch = decode(schema, schema, payloads, gap)
    check_bad_or_exact(schema, payloads, batch, intact=set())


SHORT_SCHEMAS = {
    "booleans": record("B", fld("b", "boolean"), fld("c", "boolean")),
    "enum_and_union": record("B", fld("e", LEVEL), fld("u", ["null", "boolean"])),
    "ints": record("B", fld("i", "int"), fld("n", ["null", "int"])),
    "string": record("B", fld("s", "string")),
    "array_of_unions": record("B", fld("xs", array(["null", "boolean"]))),
    "fixed": record("B", fld("f", fixed("One", 1)), fld("g", ["null", fixed("Two", 1)])),
    # no map or array of nulls here: test_items_of_type_null
}
EVERY_SHORT_PAYLOAD = [b""] + [bytes([a]) for a in range(256)] + [bytes([a, b]) for a in range(256) for b in range(256)]


@pytest.mark.parametrize("schema", list(SHORT_SCHEMAS.values()), ids=list(SHORT_SCHEMAS))
def test_every_payload_of_up_to_2_bytes_is_bad_or_exact(schema: Schema) -> None:
    """Exhaustively, in one batch (so every varint length, union and enum index meets every other)."""
    batch = decode(schema, schema, EVERY_SHORT_PAYLOAD)
    check_bad_or_exact(schema, EVERY_SHORT_PAYLOAD, batch, intact=set())
    assert len(batch.reasons) < len(EVERY_SHORT_PAYLOAD)


def test_boolean_byte_other_than_0_or_1_is_bad() -> None:
    """The specification allows only 0 and 1 (fastavro reads any other byte as true)."""
    schema = record("B", fld("b", "boolean"))
    payloads = [bytes([b]) for b in range(256)]
    batch = decode(schema, schema, payloads)
    assert set(batch.reasons) == set(range(2, 256))
    assert batch.values.to_pylist()[:2] == [{"b": False}, {"b": True}]


# ---------------------------------------------------------------------------------------- 4. varints

LONG_PAIR = record("V", fld("v", "long"), fld("w", "long"))
INT_FIELD = record("I", fld("i", "int"))


def _boundaries() -> list[tuple[int, int]]:
    """(long, bytes of its varint) at both ends of every varint length 1..10."""
    cases = []
    for length in range(1, 11):
        low = 0 if length == 1 else 2 ** (7 * (length - 1))
        high = min(2 ** (7 * length), 2**64) - 1
        cases += [(unzigzag(z), length) for z in (low, low + 1, high - 1, high)]
    return cases


VARINT_BOUNDARIES = _boundaries()


def test_varint_lengths_1_to_10_decode() -> None:
    values = [n for n, _ in VARINT_BOUNDARIES]
    assert -(2**63) in values and 2**63 - 1 in values
    records = [{"v": n, "w": values[-1 - k]} for k, n in enumerate(values)]  # every length mixed in one batch
    payloads = [encode(LONG_PAIR, r) for r in records]
    for (n, length), payload in zip(VARINT_BOUNDARIES, payloads, strict=True):
        assert payload.startswith(varint(zigzag(n))) and len(varint(zigzag(n))) == length
    batch = decode(LONG_PAIR, LONG_PAIR, payloads)
    assert batch.reasons == {}
    assert batch.values.to_pylist() == records
    check_like_fastavro(LONG_PAIR, LONG_PAIR, payloads, batch)


@settings(FAST, max_examples=100)
@given(
    pairs=st.lists(
        st.tuples(
            st.one_of(st.sampled_from([n for n, _ in VARINT_BOUNDARIES]), LONGS),
            st.integers(1, 10),
            st.one_of(st.sampled_from([n for n, _ in VARINT_BOUNDARIES]), LONGS),
            st.integers(1, 10),
        ),
        min_size=1,
        max_size=12,
    ),
    gap=GAPS,
)
def test_varints_of_any_length_decode_like_fastavro(pairs: list[tuple[int, int, int, int]], gap: bytes) -> None:
    """Canonical and zero-padded (non-minimal, at most 10 bytes) varints, of every length mixed in one batch."""
    payloads = [varint(zigzag(v), wv) + varint(zigzag(w), ww) for v, wv, w, ww in pairs]
    batch = decode(LONG_PAIR, LONG_PAIR, payloads, gap)
    assert batch.reasons == {}
    assert batch.values.to_pylist() == [{"v": v, "w": w} for v, _, w, _ in pairs]
    check_like_fastavro(LONG_PAIR, LONG_PAIR, payloads, batch)


OVERLONG_ZERO = b"\x80" * 10 + b"\x00"  # zero in 11 bytes: more than a 64-bit varint can take

# schemas where a varint plays each of its roles, and a payload whose varint there is OVERLONG_ZERO (read as
# zero, the rest of the payload would be a valid record)
VARINT_ROLES = {
    "long": (record("T", fld("a", "long"), fld("b", "long")), b"\x02" + OVERLONG_ZERO),
    "int": (record("T", fld("a", "int")), OVERLONG_ZERO),
    "string_length": (record("T", fld("s", "string"), fld("n", "long")), OVERLONG_ZERO + b"\x04"),
    "array_block_count": (record("T", fld("xs", array("long")), fld("n", "long")), OVERLONG_ZERO + b"\x04"),
    "map_block_count": (record("T", fld("m", amap("long"))), OVERLONG_ZERO),
    "union_index": (record("T", fld("u", ["null", "long"]), fld("n", "long")), OVERLONG_ZERO + b"\x04"),
    "enum_index": (record("T", fld("e", LEVEL)), OVERLONG_ZERO),
    "nested_item": (record("T", fld("xs", array("long"))), b"\x04\x02" + OVERLONG_ZERO + b"\x00"),
}


@pytest.mark.parametrize(("schema", "payload"), list(VARINT_ROLES.values()), ids=list(VARINT_ROLES))
def test_overlong_varint_is_bad(schema: Schema, payload: bytes) -> None:
    values: dict[str, Any] = {
        "a": 1,
        "b": -3,
        "s": "é",
        "n": 5,
        "xs": [1, -1],
        "m": {"k": 2},
        "u": None,
        "e": "HIGH",
    }
    good = encode(schema, {f["name"]: values[f["name"]] for f in schema["fields"]})
    payloads = [good, payload, good, b"\xff" * 11 + b"\x01", good, payload]  # the last one ends the buffer
    batch = decode(schema, schema, payloads)
    assert set(batch.reasons) == {1, 3, 5}
    check_bad_or_exact(schema, payloads, batch, intact={0, 2, 4})


@pytest.mark.parametrize("tail", [b"\x80", b"\xff" * 9, b"\x80" * 10, b"\x81" * 30], ids=["1", "9", "10", "30"])
def test_unterminated_varint_at_the_end_of_the_buffer_is_bad(tail: bytes) -> None:
    good = encode(LONG_PAIR, {"v": 2**63 - 1, "w": -(2**63)})
    payloads = [good, b"\x02" + tail, good, tail]
    batch = decode(LONG_PAIR, LONG_PAIR, payloads)
    assert set(batch.reasons) == {1, 3}
    assert batch.values.to_pylist() == [{"v": 2**63 - 1, "w": -(2**63)}, None] * 2


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1, 2**63 - 1, -(2**63)])
def test_int_beyond_32_bits_is_bad(value: int) -> None:
    payloads = [varint(zigzag(2**31 - 1)), varint(zigzag(value)), varint(zigzag(-(2**31)))]
    batch = decode(INT_FIELD, INT_FIELD, payloads)
    assert set(batch.reasons) == {1}
    assert "32-bit" in batch.reasons[1]
    assert batch.values.to_pylist() == [{"i": 2**31 - 1}, None, {"i": -(2**31)}]


# ------------------------------------------------------------------ regressions (bugs these tests found)


DEC_BYTES = record("D", fld("d", logical("bytes", "decimal", precision=4, scale=2)))
DEC_FIXED = record("D", fld("d", fixed("F", 4, logicalType="decimal", precision=4, scale=2)))


@pytest.mark.parametrize(
    ("schema", "payload"),
    [(DEC_BYTES, varint(zigzag(3)) + (123456).to_bytes(3, "big")), (DEC_FIXED, (123456).to_bytes(4, "big"))],
    ids=["bytes", "fixed"],
)
def test_decimal_beyond_its_precision_is_bad_not_a_crash(schema: Schema, payload: bytes) -> None:
    # the unscaled 123456 is 1234.56, 6 digits where decimal(4, 2) holds 4 (fastavro rounds it to 1235 in a
    # 4-digit context): the record is bad, but decode_avro raises ArrowInvalid for the whole batch
    assert fastavro_read(schema, None, payload).error is None
    good = encode(schema, {"d": decimal.Decimal("12.34")})
    batch = decode(schema, schema, [good, payload])
    assert set(batch.reasons) == {1}
    assert batch.values.to_pylist()[0] == {"d": decimal.Decimal("12.34")}


@pytest.mark.parametrize("kind", ["string", "bytes"])
def test_length_near_2_pow_63_is_bad_not_a_crash(kind: str) -> None:
    # a length of 2**63 - 1 after the first byte of the buffer: start + length wraps negative, passes the check,
    # and the gather of 2**63 - 1 bytes raises ValueError (fastavro: EOFError)
    schema = record("S", fld("s", kind))
    payload = varint(zigzag(2**63 - 1))
    assert fastavro_read(schema, None, payload).error is not None
    batch = decode(schema, schema, [encode(schema, {"s": "ok" if kind == "string" else b"ok"}), payload])
    assert set(batch.reasons) == {1}


def test_decimal_with_more_than_28_digits_is_exact() -> None:
    schema = record("D", fld("d", fixed("Big", 16, logicalType="decimal", precision=38, scale=10)))
    value = decimal.Decimal("1000000000000000000000000000.0000012345")  # 38 digits
    batch = decode(schema, schema, [encode(schema, {"d": value})])
    assert batch.values.to_pylist() == [{"d": value}]  # got Decimal('1000000000000000000000000000.0000000000')


def test_block_count_minus_2_pow_63_is_bad() -> None:
    # a block count of -(2**63) (then its byte size) announces 2**63 items; the decoder ends the array there and
    # reads the next field, so the record decodes silently as {"xs": [], "n": 2}; fastavro fails (EOF)
    schema = record("A", fld("xs", array("long")), fld("n", "long"))
    payload = varint(zigzag(-(2**63))) + varint(zigzag(0)) + varint(zigzag(2))
    assert fastavro_read(schema, None, payload).error is not None
    batch = decode(schema, schema, [encode(schema, {"xs": [1], "n": 2}), payload])
    assert set(batch.reasons) == {1}


def test_null_branch_read_as_a_non_nullable_type_is_bad() -> None:
    # writer ["null", "int"], reader long: the specification (and fastavro) refuse a null where a long is
    # read; decode_avro gives a null in the non-nullable column and no reason
    writer, reader = record("R", fld("u", ["null", "int"])), record("R", fld("u", "long"))
    payloads = [encode(writer, {"u": 3}), encode(writer, {"u": None})]
    assert fastavro_read(writer, reader, payloads[1]).error is not None
    batch = decode(writer, reader, payloads)
    assert set(batch.reasons) == {1}


def test_timestamp_millis_beyond_int64_micros_is_bad() -> None:
    # 2**62 ms is 2**65 * 125 us: it wraps to 0 and decodes silently as 1970-01-01
    schema = record("T", fld("t", logical("long", "timestamp-millis")))
    batch = decode(schema, schema, [varint(zigzag(2**62))])
    assert set(batch.reasons) == {0}


def _default_of(field: Schema) -> Any:
    """The value decode_avro gives a reader field the writer lacks."""
    writer = record("R", fld("a", "long"))
    batch = decode(writer, record("R", fld("a", "long"), field), [encode(writer, {"a": 1})])
    assert batch.reasons == {}
    return batch.values.to_pylist()[0][field["name"]]


def test_timestamp_millis_default_counts_milliseconds() -> None:
    field = fld("t", logical("long", "timestamp-millis"), default=1000)
    assert _default_of(field) == EPOCH + datetime.timedelta(seconds=1)  # got 1970-01-01 00:00:00.001


@pytest.mark.parametrize(
    ("field", "want"),
    [
        (fld("r", record("B", fld("x", "bytes")), default={"x": "\u00ff"}), {"x": b"\xff"}),
        (fld("xs", array("bytes"), default=["\u00ff"]), [b"\xff"]),
    ],
    ids=["record", "array"],
)
def test_nested_bytes_default_is_latin1(field: Schema, want: Any) -> None:
    assert _default_of(field) == want  # got b"\xc3\xbf" (UTF-8)


def test_multi_branch_union_default() -> None:
    field = fld("u", ["long", "string"], default=5)
    assert _default_of(field) == {"member0": 5, "member1": None}  # raises ArrowTypeError


def test_decimal_default() -> None:
    field = fld("d", logical("bytes", "decimal", precision=5, scale=2), default="\u0001")
    assert _default_of(field) == decimal.Decimal("0.01")  # raises ArrowTypeError


def test_truncated_fixed_longer_than_the_padding_is_bad() -> None:
    schema = record("F", fld("n", "long"), fld("f", fixed("F40", 40)))
    good = encode(schema, {"n": 1, "f": bytes(range(40))})
    batch = decode(schema, schema, [good, good[:1]])  # raises IndexError
    assert set(batch.reasons) == {1}


NULL_ITEMS = {
    "array_of_nulls": (array("null"), [None, None]),
    "map_of_nulls": (amap("null"), {"a": None, "b": None}),
    "array_of_records_with_a_null_field": (array(record("N", fld("n", "null"))), [{"n": None}, {"n": None}]),
    "nullable_array_of_nulls": (["null", array("null")], [None, None]),
}


@pytest.mark.parametrize(("avro_type", "value"), list(NULL_ITEMS.values()), ids=list(NULL_ITEMS))
def test_items_of_type_null(avro_type: Any, value: Any) -> None:
    # valid records; a batch with more such items than rows raises ArrowInvalid / ArrowIndexError
    schema = record("R", fld("v", avro_type))
    payloads = [encode(schema, {"v": value})]
    batch = decode(schema, schema, payloads)
    check_like_fastavro(schema, schema, payloads, batch)


def test_a_block_of_items_that_take_no_bytes_is_read_at_once() -> None:
    # 2**20 nulls in one row (the most a block of zero-byte items may hold) beside ordinary rows: one read per
    # block, not one pass per item (which took seconds a row)
    schema = record("R", fld("xs", array("null")), fld("n", "long"))
    counts = [2**20, 3, 0, 5]
    payloads = [encode(schema, {"xs": [None] * c, "n": c}) for c in counts]
    batch = decode(schema, schema, payloads)
    assert batch.reasons == {}
    assert [(len(row["xs"]), row["n"]) for row in batch.values.to_pylist()] == [(c, c) for c in counts]
    too_many = varint(zigzag(2**20 + 1)) + b"\x00" + varint(zigzag(1))
    assert set(decode(schema, schema, [too_many, payloads[1]]).reasons) == {0}
