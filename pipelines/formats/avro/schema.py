"""Avro schemas as immutable trees, and the Spark and Arrow types they decode into.

`parse_avro` turns an Avro schema (JSON text or the parsed JSON) into nodes with named types resolved in
place, so the decoder and the writer-to-reader resolution walk plain values. Spark (and Arrow) types follow
what Spark's own `from_avro` produces: a record is a struct, `["null", T]` a nullable T, a union of several
types a struct `member0, member1, ...`, an enum a string, fixed and bytes binary, a map a string-keyed map;
the logical types `date`, `timestamp-millis`/`-micros` (local ones too, read as UTC) and `decimal` become
dates, timestamps and decimals.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = [
    "AvroArray",
    "AvroEnum",
    "AvroField",
    "AvroFixed",
    "AvroMap",
    "AvroNode",
    "AvroPrimitive",
    "AvroRecord",
    "AvroSchemaError",
    "AvroUnion",
    "avro_from_spark",
    "non_null_branch",
    "parse_avro",
    "spark_type",
    "value_columns",
]

PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
TIMESTAMPS = ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros")


class AvroSchemaError(ValueError):
    """An Avro schema Cohort cannot read (malformed, recursive, or with a type it does not map)."""


@dataclass(frozen=True)
class AvroPrimitive:
    kind: str
    logical: str | None = None
    precision: int = 0
    scale: int = 0


@dataclass(frozen=True)
class AvroEnum:
    name: str
    symbols: tuple[str, ...]
    default: str | None = None
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class AvroFixed:
    name: str
    size: int
    logical: str | None = None
    precision: int = 0
    scale: int = 0
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class AvroField:
    name: str
    type: AvroNode
    has_default: bool = False
    default: Any = None
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class AvroRecord:
    name: str
    fields: tuple[AvroField, ...]
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class AvroArray:
    items: AvroNode


@dataclass(frozen=True)
class AvroMap:
    values: AvroNode


@dataclass(frozen=True)
class AvroUnion:
    branches: tuple[AvroNode, ...]


AvroNode = AvroPrimitive | AvroEnum | AvroFixed | AvroRecord | AvroArray | AvroMap | AvroUnion


def parse_avro(schema: str | Mapping[str, Any] | list[Any], named: Sequence[str] = ()) -> AvroNode:
    """The tree of an Avro schema; AvroSchemaError naming the problem for a schema it cannot read. `named` are
    the schemas it references (a registry's schema references), dependencies first: their named types are
    known to the schema."""
    parser = _Parser()
    for text in named:
        parser.node(_json(text), namespace="", stack=())
    return parser.node(_json(schema), namespace="", stack=())


def _json(schema: str | Mapping[str, Any] | list[Any]) -> Any:
    if isinstance(schema, str):
        try:
            return json.loads(schema)
        except json.JSONDecodeError:
            return schema.strip()  # a bare primitive name such as `string`
    return schema


class _Parser:
    def __init__(self) -> None:
        self.named: dict[str, AvroNode] = {}

    def node(self, schema: Any, *, namespace: str, stack: tuple[str, ...]) -> AvroNode:
        if isinstance(schema, str):
            if schema in PRIMITIVES:
                return AvroPrimitive(schema)
            full = schema if "." in schema or not namespace else f"{namespace}.{schema}"
            for name in (full, schema):
                if name in stack:
                    raise AvroSchemaError(f"recursive Avro type {name!r} cannot be read into columns")
                if name in self.named:
                    return self.named[name]
            raise AvroSchemaError(f"unknown Avro type {schema!r}")
        if isinstance(schema, list):
            branches = tuple(self.node(s, namespace=namespace, stack=stack) for s in schema)
            if not branches:
                raise AvroSchemaError("an Avro union needs at least one type")
            return AvroUnion(branches)
        if not isinstance(schema, Mapping) or "type" not in schema:
            raise AvroSchemaError(f"not an Avro schema: {schema!r}")
        kind = schema["type"]
        logical = schema.get("logicalType")
        if kind in PRIMITIVES:
            precision, scale = _decimal(schema) if logical == "decimal" else (0, 0)
            return AvroPrimitive(kind, logical if isinstance(logical, str) else None, precision, scale)
        if kind in ("record", "error", "enum", "fixed"):
            name = str(schema.get("name") or "")
            if not name:
                raise AvroSchemaError(f"an Avro {kind} needs a name: {schema!r}")
            space = str(schema.get("namespace") or namespace)
            full = name if "." in name or not space else f"{space}.{name}"
            inner = full.rsplit(".", 1)[0] if "." in full else ""
            aliases = tuple(str(a) for a in schema.get("aliases") or ())
            if kind == "enum":
                symbols = schema.get("symbols")
                if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
                    raise AvroSchemaError(f"enum {full!r} needs a list of symbols")
                node: AvroNode = AvroEnum(full, tuple(symbols), schema.get("default"), aliases)
            elif kind == "fixed":
                precision, scale = _decimal(schema) if logical == "decimal" else (0, 0)
                node = AvroFixed(full, int(schema.get("size", -1)), logical, precision, scale, aliases)
                if node.size < 0:
                    raise AvroSchemaError(f"fixed {full!r} needs a size")
            else:
                fields = tuple(self.field(f, inner, (*stack, full)) for f in schema.get("fields", ()))
                node = AvroRecord(full, fields, aliases)
            self.named[full] = node
            return node
        if kind == "array":
            return AvroArray(self.node(schema.get("items"), namespace=namespace, stack=stack))
        if kind == "map":
            return AvroMap(self.node(schema.get("values"), namespace=namespace, stack=stack))
        if isinstance(kind, (str, list, dict)):
            return self.node(kind, namespace=namespace, stack=stack)
        raise AvroSchemaError(f"not an Avro schema: {schema!r}")

    def field(self, spec: Any, namespace: str, stack: tuple[str, ...]) -> AvroField:
        if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str) or "type" not in spec:
            raise AvroSchemaError(f"an Avro record field needs a name and a type: {spec!r}")
        return AvroField(
            spec["name"],
            self.node(spec["type"], namespace=namespace, stack=stack),
            "default" in spec,
            spec.get("default"),
            tuple(spec.get("aliases") or ()),
        )


def _decimal(schema: Mapping[str, Any]) -> tuple[int, int]:
    precision, scale = int(schema.get("precision", 0)), int(schema.get("scale", 0))
    if not 0 < precision <= 38 or not 0 <= scale <= precision:
        raise AvroSchemaError(f"decimal precision {precision} and scale {scale} cannot be read (precision 1..38)")
    return precision, scale


def non_null_branch(node: AvroUnion) -> AvroNode | None:
    """T for a union of null and one type T (either order); None for any other union."""
    others = [b for b in node.branches if not (isinstance(b, AvroPrimitive) and b.kind == "null")]
    return others[0] if len(others) == 1 and len(node.branches) == 2 else None


def nullable(node: AvroNode) -> bool:
    """Whether a value of this type may be null."""
    if isinstance(node, AvroPrimitive):
        return node.kind == "null"
    return isinstance(node, AvroUnion) and any(isinstance(b, AvroPrimitive) and b.kind == "null" for b in node.branches)


def spark_type(node: AvroNode) -> DataType:
    """The Spark type of the values of an Avro type (the module doc gives the mapping)."""
    if isinstance(node, AvroPrimitive):
        if node.logical == "date" and node.kind == "int":
            return DateType()
        if node.logical in TIMESTAMPS and node.kind == "long":
            return TimestampType()
        if node.logical == "decimal" and node.kind == "bytes":
            return DecimalType(node.precision, node.scale)
        return {
            "null": NullType(),
            "boolean": BooleanType(),
            "int": IntegerType(),
            "long": LongType(),
            "float": FloatType(),
            "double": DoubleType(),
            "bytes": BinaryType(),
            "string": StringType(),
        }[node.kind]
    if isinstance(node, AvroEnum):
        return StringType()
    if isinstance(node, AvroFixed):
        return DecimalType(node.precision, node.scale) if node.logical == "decimal" else BinaryType()
    if isinstance(node, AvroRecord):
        return StructType([StructField(f.name, spark_type(f.type), nullable(f.type)) for f in node.fields])
    if isinstance(node, AvroArray):
        return ArrayType(spark_type(node.items), nullable(node.items))
    if isinstance(node, AvroMap):
        return MapType(StringType(), spark_type(node.values), nullable(node.values))
    single = non_null_branch(node)
    if single is not None:
        return spark_type(single)
    members = [b for b in node.branches if not (isinstance(b, AvroPrimitive) and b.kind == "null")]
    return StructType([StructField(f"member{i}", spark_type(b), True) for i, b in enumerate(members)])


def value_columns(node: AvroNode) -> StructType:
    """The value columns of a reader schema: a record's fields, or one `value` column for any other type."""
    if isinstance(node, AvroRecord):
        return cast_struct(spark_type(node))
    return StructType([StructField("value", spark_type(node), nullable(node))])


def avro_from_spark(columns: StructType, name: str = "Value") -> str:
    """An Avro reader schema (JSON text) for Spark columns: nullable fields are `["null", T]` with a null
    default, so records written without them read as null; non-nullable fields must be in every writer."""
    counter = iter(range(1, 1_000_000))

    def convert(data_type: DataType) -> Any:
        if isinstance(data_type, StructType):
            return {
                "type": "record",
                "name": f"{name}{next(counter)}",
                "fields": [field(f) for f in data_type.fields],
            }
        if isinstance(data_type, ArrayType):
            items = convert(data_type.elementType)
            return {"type": "array", "items": ["null", items] if data_type.containsNull else items}
        if isinstance(data_type, MapType):
            values = convert(data_type.valueType)
            return {"type": "map", "values": ["null", values] if data_type.valueContainsNull else values}
        if isinstance(data_type, TimestampType):
            return {"type": "long", "logicalType": "timestamp-micros"}
        if isinstance(data_type, DateType):
            return {"type": "int", "logicalType": "date"}
        if isinstance(data_type, DecimalType):
            return {
                "type": "bytes",
                "logicalType": "decimal",
                "precision": data_type.precision,
                "scale": data_type.scale,
            }
        simple = {
            BooleanType: "boolean",
            IntegerType: "int",
            LongType: "long",
            FloatType: "float",
            DoubleType: "double",
            StringType: "string",
            BinaryType: "bytes",
        }
        for spark, avro in simple.items():
            if isinstance(data_type, spark):
                return avro
        if isinstance(data_type, (ByteType, ShortType)):
            return "int"
        raise AvroSchemaError(f"Spark type {data_type.simpleString()} has no Avro counterpart to read into")

    def field(f: StructField) -> dict[str, Any]:
        avro = convert(f.dataType)
        if f.nullable:
            return {"name": f.name, "type": ["null", avro], "default": None}
        return {"name": f.name, "type": avro}

    return json.dumps(convert(columns))


def cast_struct(data_type: DataType) -> StructType:
    assert isinstance(data_type, StructType)
    return data_type
