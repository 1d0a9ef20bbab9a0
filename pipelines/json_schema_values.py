"""JSON Schema records from the Schema Registry: validation against the writer's schema, and reader columns
derived from a registered schema.

Each payload is validated against the JSON Schema its record names (the `jsonschema` package, the draft the
schema declares, formats not asserted); a payload that is not JSON or breaks its schema is quarantined with
the first error and the path where it occurs. Valid payloads are then decoded into the reader columns by the
JSON decoder (the same rules as the `json` format). Derived columns map `integer` to long, `number` to double,
`string` to string (`format: date-time` a timestamp, `format: date` a date), `boolean`, `array` and `object`
with `properties` to arrays and structs; local `$ref`s (`#/definitions/...`, `#/$defs/...`) are followed.
"""

from __future__ import annotations

import json
from typing import Any, cast

import pyarrow as pa

__all__ = ["json_schema_columns", "validation_errors", "validator_for"]


def validator_for(text: str) -> Any:
    """A validator for a registered JSON Schema; ValueError when it is not a valid schema."""
    try:
        from jsonschema import validators
        from jsonschema.exceptions import SchemaError
    except ImportError as exc:
        raise ValueError(f"the jsonschema package is missing ({exc}): pip install 'cohort[registry]'") from None
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the registered JSON Schema is not JSON: {exc}") from None
    cls = validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"the registered JSON Schema is invalid: {exc.message}") from None
    return cls(schema)


def validation_errors(validator: Any, payloads: pa.Array, schema_id: int) -> dict[int, str]:
    """Reasons, by position, for payloads that are not JSON or do not validate against the writer schema."""
    reasons: dict[int, str] = {}
    for i, raw in enumerate(payloads.to_pylist()):
        try:
            document = json.loads(cast(bytes, raw))
        except (UnicodeDecodeError, json.JSONDecodeError, TypeError) as exc:
            reasons[i] = f"value is not valid JSON: {exc}"
            continue
        except RecursionError:
            reasons[i] = "value is not valid JSON for this schema: it is nested too deeply to decode"
            continue
        error = next(iter(validator.iter_errors(document)), None)
        if error is not None:
            where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
            reasons[i] = f"JSON does not match its writer schema (id {schema_id}) at `{where}`: {error.message}"
    return reasons


def json_schema_columns(text: str) -> Any:
    """The Spark columns of an object JSON Schema (see the module doc); ValueError for what has none."""
    from pyspark.sql.types import StructType

    schema = json.loads(text)
    derived = _spark(schema, schema, "$")
    if not isinstance(derived[0], StructType):
        raise ValueError("a JSON Schema reader schema must describe an object with properties")
    return derived[0]


def _spark(node: Any, root: Any, path: str, depth: int = 0) -> tuple[Any, bool]:
    """(Spark type, nullable) of a JSON Schema node."""
    from pyspark.sql import types as T

    if depth > 32:
        raise ValueError(f"`{path}`: the JSON Schema nests too deeply (a recursive $ref?)")
    if not isinstance(node, dict):
        raise ValueError(f"`{path}`: not a JSON Schema object")
    if "$ref" in node:
        return _spark(_resolve(node["$ref"], root, path), root, path, depth + 1)
    kinds = node.get("type")
    if kinds is None and "properties" in node:
        kinds = "object"
    names = kinds if isinstance(kinds, list) else [kinds]
    null = "null" in names
    names = [n for n in names if n != "null"]
    if len(names) != 1:
        raise ValueError(f"`{path}`: a column needs exactly one JSON type besides null, got {kinds!r}")
    kind = names[0]
    if kind == "object":
        required = set(node.get("required", ()))
        fields = []
        for name, sub in (node.get("properties") or {}).items():
            data_type, nullable = _spark(sub, root, f"{path}.{name}", depth + 1)
            fields.append(T.StructField(name, data_type, nullable or name not in required))
        if not fields:
            raise ValueError(f"`{path}`: an object needs properties to become a struct")
        return T.StructType(fields), null
    if kind == "array":
        items, nullable = _spark(node.get("items") or {}, root, f"{path}[]", depth + 1)
        return T.ArrayType(items, nullable), null
    if kind == "string":
        fmt = node.get("format")
        return (T.TimestampType() if fmt == "date-time" else T.DateType() if fmt == "date" else T.StringType()), null
    simple = {"integer": T.LongType(), "number": T.DoubleType(), "boolean": T.BooleanType()}
    if kind not in simple:
        raise ValueError(f"`{path}`: JSON type {kind!r} cannot become a column")
    return simple[kind], null


def _resolve(ref: str, root: Any, path: str) -> Any:
    if not isinstance(ref, str) or not ref.startswith("#/"):
        raise ValueError(f"`{path}`: only local $refs (#/...) can be followed, got {ref!r}")
    node = root
    for part in ref[2:].split("/"):
        node = node.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(node, dict) else None
    if node is None:
        raise ValueError(f"`{path}`: $ref {ref!r} points nowhere")
    return node
