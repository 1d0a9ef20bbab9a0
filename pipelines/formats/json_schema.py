"""JSON Schema records from the Schema Registry: validation against the writer's schema, and reader columns
derived from a registered schema.

Each payload is validated against the JSON Schema its record names (the `jsonschema` package, the draft the
schema declares, formats not asserted); a payload that is not JSON or breaks its schema is quarantined with
the first error and the path where it occurs. Valid payloads are then decoded into the reader columns by the
JSON decoder (the same rules as the `json` format). Derived columns map `integer` to long, `number` to double,
`string` to string (`format: date-time` a timestamp, `format: date` a date), `boolean`, `array` and `object`
with `properties` to arrays and structs; local `$ref`s (`#/definitions/...`, `#/$defs/...`) are followed. An
`anyOf` / `oneOf` of one schema and `{"type": "null"}` (an optional field, as generators write it) is that
schema's column, nullable; what no column can hold (a union of several types, a map, an untyped or recursive
schema) is refused naming where it is, so the batch fails at its start rather than mid-read.
"""

from __future__ import annotations

import json
from typing import Any, cast

import pyarrow as pa

__all__ = ["json_schema_columns", "objects_without_columns", "validation_errors", "validator_for"]


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


def objects_without_columns(payloads: pa.Array, rows: list[int], names: list[str]) -> dict[int, str]:
    """Reasons, by position, for the payloads among `rows` (decoded into nulls only) whose object has fields but
    none of the reader columns: they would land as rows of nulls. An empty object, or one whose reader fields
    are null, is a row of nulls by its own account and keeps no reason."""
    reasons: dict[int, str] = {}
    wanted = set(names)
    for i in rows:
        try:
            document = json.loads(cast(bytes, payloads[i].as_py()))
        except (UnicodeDecodeError, json.JSONDecodeError, TypeError, RecursionError):
            continue  # not this check's to name
        if isinstance(document, dict) and document and not wanted & document.keys():
            reasons[i] = (
                f"the JSON object has none of the reader columns ({_listed(names)}), only fields the reader does not "
                f"read ({_listed(list(document))}): it would land as a row of nulls"
            )
    return reasons


def _listed(names: list[str]) -> str:
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


def json_schema_columns(text: str) -> Any:
    """The Spark columns of an object JSON Schema (see the module doc); ValueError naming the construct (and
    where it is) for what cannot become a column."""
    from pyspark.sql.types import StructType

    schema = json.loads(text)
    derived = _spark(schema, schema, "$", ())
    if not isinstance(derived[0], StructType):
        raise ValueError("a JSON Schema reader schema must describe an object with properties")
    return derived[0]


_MAX_DEPTH = 32
_COMBINATORS = ("anyOf", "oneOf", "allOf")


def _spark(node: Any, root: Any, path: str, refs: tuple[str, ...], depth: int = 0) -> tuple[Any, bool]:
    """(Spark type, nullable) of a JSON Schema node; `refs` are the `$ref`s being followed (a cycle is refused)."""
    if depth > _MAX_DEPTH:
        raise ValueError(f"`{path}`: the JSON Schema nests deeper than {_MAX_DEPTH} levels")
    if node is True or node == {}:
        raise ValueError(f"`{path}`: a schema that allows any JSON value (no `type`) cannot become a column")
    if not isinstance(node, dict):
        raise ValueError(f"`{path}`: not a JSON Schema object")
    if "$ref" in node:
        ref = node["$ref"]
        if ref in refs:
            raise ValueError(f"`{path}`: $ref {ref!r} refers to itself (a recursive model), which columns cannot hold")
        return _spark(_resolve(ref, root, path), root, path, (*refs, ref), depth + 1)
    kinds = _declared_types(node)
    if kinds is None:  # the type comes from `anyOf` / `oneOf` / `allOf` (otherwise they only constrain values)
        for keyword in _COMBINATORS:
            if keyword in node:
                return _combined(keyword, node[keyword], root, path, refs, depth)
        raise ValueError(f"`{path}`: a schema without a `type` (any JSON value) cannot become a column")
    null = "null" in kinds
    kinds = [k for k in kinds if k != "null"]
    if len(kinds) != 1:
        raise ValueError(
            f"`{path}`: a column needs one JSON type besides null, got {kinds or ['null']!r}"
            + (" (a union)" if kinds else "")
        )
    return _typed(kinds[0], node, root, path, refs, depth), null


def _declared_types(node: dict[str, Any]) -> list[str] | None:
    """The JSON types a node declares: `type`, or what `properties`, `items`, `enum` or `const` imply."""
    kinds = node.get("type")
    if kinds is not None:
        return [str(k) for k in kinds] if isinstance(kinds, list) else [str(kinds)]
    if "properties" in node:
        return ["object"]
    if "items" in node:
        return ["array"]
    literals = node["enum"] if isinstance(node.get("enum"), list) else [node["const"]] if "const" in node else None
    if literals is None:
        return None
    return sorted({_literal_type(v) for v in literals})


def _literal_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _is_null(node: Any) -> bool:
    """A branch that admits only null (`{"type": "null"}`, `{"const": null}`, ...)."""
    return isinstance(node, dict) and "$ref" not in node and _declared_types(node) == ["null"]


def _combined(keyword: str, branches: Any, root: Any, path: str, refs: tuple[str, ...], depth: int) -> tuple[Any, bool]:
    """The column of an `anyOf` / `oneOf` (one type, or one type or null: the common optional field) or of an
    `allOf` of one schema; ValueError for a union of several types or a merged model."""
    from pyspark.sql import types as T

    if not isinstance(branches, list) or not branches:
        raise ValueError(f"`{path}`: {keyword} must be a non-empty list of schemas")
    if keyword == "allOf":
        if len(branches) != 1:
            raise ValueError(f"`{path}`: allOf of {len(branches)} schemas (a merged model) cannot become a column")
        return _spark(branches[0], root, path, refs, depth + 1)
    null = any(_is_null(b) for b in branches)
    typed = [_spark(b, root, path, refs, depth + 1) for b in branches if not _is_null(b)]
    if not typed:
        raise ValueError(f"`{path}`: {keyword} admits only null, which cannot become a column")
    kinds = {t for t, _ in typed}
    if len(kinds) == 1:
        return typed[0][0], null or any(n for _, n in typed)
    if kinds <= {T.LongType(), T.DoubleType()}:  # integer or number: a number
        return T.DoubleType(), null or any(n for _, n in typed)
    names = ", ".join(sorted({t.simpleString() for t in kinds}))
    raise ValueError(f"`{path}`: {keyword} of several types ({names}) cannot become one column")


def _typed(kind: str, node: dict[str, Any], root: Any, path: str, refs: tuple[str, ...], depth: int) -> Any:
    """The Spark type of a node of one JSON type."""
    from pyspark.sql import types as T

    if kind == "object":
        properties = node.get("properties")
        if not isinstance(properties, dict) or not properties:
            raise ValueError(
                f"`{path}`: an object without `properties` (free-form, or a map given by `additionalProperties`) "
                "cannot become a struct column"
            )
        required = set(node.get("required", ()))
        fields = []
        for name, sub in properties.items():
            data_type, nullable = _spark(sub, root, f"{path}.{name}", refs, depth + 1)
            fields.append(T.StructField(name, data_type, nullable or name not in required))
        return T.StructType(fields)
    if kind == "array":
        if "items" not in node:
            raise ValueError(f"`{path}`: an array without `items` (any elements) cannot become a column")
        items, nullable = _spark(node["items"], root, f"{path}[]", refs, depth + 1)
        return T.ArrayType(items, nullable)
    if kind == "string":
        fmt = node.get("format")
        return T.TimestampType() if fmt == "date-time" else T.DateType() if fmt == "date" else T.StringType()
    simple = {"integer": T.LongType(), "number": T.DoubleType(), "boolean": T.BooleanType()}
    if kind not in simple:
        raise ValueError(f"`{path}`: JSON type {kind!r} cannot become a column")
    return simple[kind]


def _resolve(ref: str, root: Any, path: str) -> Any:
    if not isinstance(ref, str) or not ref.startswith("#/"):
        raise ValueError(f"`{path}`: only local $refs (#/...) can be followed, got {ref!r}")
    node = root
    for part in ref[2:].split("/"):
        node = node.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(node, dict) else None
    if node is None:
        raise ValueError(f"`{path}`: $ref {ref!r} points nowhere")
    return node
