"""Reader-side values: the Arrow type a reader type decodes into, and the value a reader field the writer
lacks takes (its default, as its column's Python value)."""

from __future__ import annotations

import decimal
from typing import Any

import pyarrow as pa

from cohort.pipelines.formats.avro.match import AvroResolutionError
from cohort.pipelines.formats.avro.schema import (
    AvroArray,
    AvroEnum,
    AvroField,
    AvroFixed,
    AvroMap,
    AvroNode,
    AvroPrimitive,
    AvroRecord,
    AvroUnion,
    non_null_branch,
    nullable,
    spark_type,
)
from cohort.pipelines.formats.decode import arrow_type

__all__ = ["MILLIS", "arrow_of", "constant", "exact_decimal"]

MILLIS = ("timestamp-millis", "local-timestamp-millis")
_EXACT = decimal.Context(prec=100)  # more digits than any Arrow decimal holds


def arrow_of(node: AvroNode) -> pa.DataType:
    """The Arrow type a reader type decodes into."""
    return arrow_type(spark_type(node), where="avro")


def exact_decimal(unscaled: int, scale: int) -> decimal.Decimal:
    """An unscaled integer as a Decimal, exactly (scaleb in the default context rounds to 28 digits)."""
    return decimal.Decimal(unscaled).scaleb(-scale, _EXACT)


def constant(f: AvroField, size: int) -> pa.Array:
    """A reader field's default, repeated."""
    return pa.array([_default_value(f.type, f.default, f.name)] * size, arrow_of(f.type))


def _default_value(node: AvroNode, value: Any, path: str) -> Any:
    """A default as given in an Avro schema (its JSON encoding: bytes are code points 0-255, a union's default
    belongs to its first branch that takes it) as the Python value of the node's Arrow type."""
    if value is None:
        return None
    if isinstance(node, AvroUnion):
        single = non_null_branch(node)
        if single is not None:
            return _default_value(single, value, path)
        members = [b for b in node.branches if not nullable(b)]
        for k, branch in enumerate(members):
            if _json_fits(branch, value):
                chosen = {f"member{i}": None for i in range(len(members))}
                chosen[f"member{k}"] = _default_value(branch, value, path)
                return chosen
        raise AvroResolutionError(f"`{path}`: the default {value!r} fits no branch of its union")
    if isinstance(node, AvroRecord):
        given = value if isinstance(value, dict) else {}
        return {f.name: _default_value(f.type, given.get(f.name, f.default), f"{path}.{f.name}") for f in node.fields}
    if isinstance(node, AvroArray):
        return [_default_value(node.items, item, f"{path}[]") for item in value]
    if isinstance(node, AvroMap):
        return [(key, _default_value(node.values, item, f"{path}{{}}")) for key, item in value.items()]
    if isinstance(node, AvroFixed) or (isinstance(node, AvroPrimitive) and node.kind == "bytes"):
        raw = str(value).encode("latin-1")
        return exact_decimal(int.from_bytes(raw, "big", signed=True), node.scale) if node.logical == "decimal" else raw
    if isinstance(node, AvroPrimitive) and node.logical in MILLIS:
        return int(value) * 1000  # the column holds microseconds
    return value


def _json_fits(node: AvroNode, value: Any) -> bool:
    """Whether a JSON default value can be of this (non-union) type."""
    if isinstance(node, AvroPrimitive):
        kinds: dict[str, tuple[type, ...]] = {
            "boolean": (bool,),
            "int": (int,),
            "long": (int,),
            "float": (int, float),
            "double": (int, float),
            "bytes": (str,),
            "string": (str,),
        }
        return isinstance(value, kinds.get(node.kind, ())) and not (isinstance(value, bool) and node.kind != "boolean")
    if isinstance(node, AvroEnum | AvroFixed):
        return isinstance(value, str)
    if isinstance(node, AvroArray):
        return isinstance(value, list)
    return isinstance(value, dict)
