"""Reader columns derived from JSON Schemas as generators write them: an optional field is `anyOf` (or `oneOf`)
with `{"type": "null"}`, a nested model a `$ref` into `$defs` (inside that `anyOf` when optional), an enum
`enum` with or without `type`. What cannot become a column is named, with where it is (pure: no registry)."""

from __future__ import annotations

import datetime
import enum
import json
from typing import Any, Literal

import pyarrow as pa
import pydantic
import pyspark.sql.types as T
import pytest

from cohort.pipelines.formats.json_schema import json_schema_columns


class Color(enum.StrEnum):
    RED = "red"
    GREEN = "green"


class Size(enum.IntEnum):
    SMALL = 1
    LARGE = 2


class Address(pydantic.BaseModel):
    city: str
    zip: str | None = None


class Order(pydantic.BaseModel):
    id: int
    note: str | None = None
    qty: int | None = None
    ratio: float | None = None
    home: Address
    shipping: Address | None = None
    tags: list[str] = []
    scores: list[int | None] | None = None
    color: Color
    size: Size | None = None
    kind: Literal["web", "shop"] = "web"
    at: datetime.datetime
    day: datetime.date | None = None
    paid: bool = False


def field(name: str, data_type: T.DataType, nullable: bool = True) -> T.StructField:
    return T.StructField(name, data_type, nullable)


ADDRESS = T.StructType([field("city", T.StringType(), False), field("zip", T.StringType())])


def test_a_pydantic_model_with_optional_fields_becomes_columns() -> None:
    columns = json_schema_columns(json.dumps(Order.model_json_schema()))

    assert columns == T.StructType(
        [
            field("id", T.LongType(), False),
            field("note", T.StringType()),
            field("qty", T.LongType()),
            field("ratio", T.DoubleType()),
            field("home", ADDRESS, False),
            field("shipping", ADDRESS),
            field("tags", T.ArrayType(T.StringType(), False)),
            field("scores", T.ArrayType(T.LongType(), True)),
            field("color", T.StringType(), False),
            field("size", T.LongType()),
            field("kind", T.StringType()),
            field("at", T.TimestampType(), False),
            field("day", T.DateType()),
            field("paid", T.BooleanType()),
        ]
    )


@pytest.mark.parametrize(
    ("node", "column"),
    [
        ({"oneOf": [{"type": "null"}, {"type": "string"}]}, (T.StringType(), True)),
        ({"anyOf": [{"type": "integer"}, {"type": "number"}]}, (T.DoubleType(), False)),  # int | float
        (
            {"allOf": [{"$ref": "#/definitions/A"}], "description": "pydantic v1"},
            (T.StructType([field("a", T.BooleanType())]), False),
        ),
        (
            {"anyOf": [{"$ref": "#/definitions/A"}, {"const": None}]},
            (T.StructType([field("a", T.BooleanType())]), True),
        ),
        ({"enum": ["a", "b", None]}, (T.StringType(), True)),
        ({"const": 3}, (T.LongType(), False)),
        ({"type": ["string", "null"], "format": "date-time"}, (T.TimestampType(), True)),
        # anyOf beside a type only constrains values: the type makes the column
        ({"type": "string", "anyOf": [{"minLength": 2}, {"pattern": "^x"}]}, (T.StringType(), False)),
    ],
)
def test_unions_with_null_and_untyped_enums(node: dict[str, Any], column: tuple[T.DataType, bool]) -> None:
    a = {"properties": {"a": {"type": "boolean"}}}
    schema = {"type": "object", "properties": {"x": node}, "required": ["x"], "definitions": {"A": a}}
    derived = json_schema_columns(json.dumps(schema))
    assert (derived["x"].dataType, derived["x"].nullable) == column


class Node(pydantic.BaseModel):
    children: list[Node] = []


class Loose(pydantic.BaseModel):
    anything: Any = None


class Counts(pydantic.BaseModel):
    by_name: dict[str, int]


class Mixed(pydantic.BaseModel):
    either: int | str


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        (Mixed.model_json_schema(), "`$.either`: anyOf of several types (bigint, string) cannot become one column"),
        (Counts.model_json_schema(), "`$.by_name`: an object without `properties` (free-form, or a map"),
        (Loose.model_json_schema(), "`$.anything`: a schema without a `type` (any JSON value)"),
        (Node.model_json_schema(), "`$.children[]`: $ref '#/$defs/Node' refers to itself (a recursive model)"),
        ({"properties": {"x": {"allOf": [{"type": "string"}, {"maxLength": 3}]}}}, "`$.x`: allOf of 2 schemas"),
        ({"properties": {"x": {"type": "array"}}}, "`$.x`: an array without `items`"),
        ({"properties": {"x": {"type": ["string", "integer"]}}}, "`$.x`: a column needs one JSON type besides null"),
        ({"properties": {"x": {"anyOf": [{"type": "null"}]}}}, "`$.x`: anyOf admits only null"),
        ({"properties": {"x": {"enum": [1, "a"]}}}, "`$.x`: a column needs one JSON type besides null"),
    ],
)
def test_what_cannot_become_a_column_is_named_with_where_it_is(schema: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError) as raised:
        json_schema_columns(json.dumps(schema))
    assert named in str(raised.value) and "None" not in str(raised.value)


def test_only_objects_with_fields_none_of_them_columns_are_refused() -> None:
    from cohort.pipelines.formats.json_schema import objects_without_columns

    payloads = pa.array([b'{"other": 1, "more": 2}', b"{}", b'{"id": null}', b"[1]", b"not json"])
    reasons = objects_without_columns(payloads, [0, 1, 2, 3, 4], ["id", "name"])
    assert list(reasons) == [0]
    assert "none of the reader columns (id, name), only fields the reader does not read (other, more)" in reasons[0]
