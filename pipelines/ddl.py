"""Spark DDL schema text (`order_id BIGINT NOT NULL, customer STRING`) to a `StructType`, without a JVM.

PySpark parses DDL through a running Spark session; a configuration file (a dg component's YAML) is read
where none runs (`dg check defs`, a code server), so this parser covers the schema grammar itself: columns
`name type [NOT NULL] [COMMENT 'text']` (or `name: type`), backquoted names, the primitive types with their
aliases, `decimal(p, s)`, `char(n)`, `varchar(n)`, `array<...>`, `map<..., ...>` and `struct<...>`.
tests/pipelines/test_spec_settings.py checks it against Spark's own parser.

Example:
    >>> parse_ddl_schema("id BIGINT NOT NULL, tags ARRAY<STRING>").simpleString()
    'struct<id:bigint,tags:array<string>>'
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pyspark.sql.types as T

__all__ = ["DdlError", "parse_ddl_schema"]

_TOKEN = re.compile(
    r"\s*(?:(?P<quoted>`(?:[^`]|``)*`)|(?P<string>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<word>[A-Za-z0-9_]+)|(?P<punct>[<>(),:]))"
)
_PRIMITIVES: dict[str, Callable[[], T.DataType]] = {
    "boolean": T.BooleanType,
    "tinyint": T.ByteType,
    "byte": T.ByteType,
    "smallint": T.ShortType,
    "short": T.ShortType,
    "int": T.IntegerType,
    "integer": T.IntegerType,
    "bigint": T.LongType,
    "long": T.LongType,
    "float": T.FloatType,
    "real": T.FloatType,
    "double": T.DoubleType,
    "string": T.StringType,
    "binary": T.BinaryType,
    "date": T.DateType,
    "timestamp": T.TimestampType,
    "timestamp_ltz": T.TimestampType,
    "timestamp_ntz": T.TimestampNTZType,
}
_DECIMALS = frozenset({"decimal", "dec", "numeric"})


class DdlError(ValueError):
    """Schema text that is not a Spark DDL column list (the message says where)."""


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[tuple[str, str, int]] = []
        position = 0
        while position < len(text):
            if not text[position:].strip():
                break
            match = _TOKEN.match(text, position)
            if match is None or match.end() == position:
                raise DdlError(f"unexpected character {text[position:].lstrip()[:1]!r} at {position}")
            kind = match.lastgroup or ""
            self.tokens.append((kind, match[kind], match.start(kind)))
            position = match.end()
        self.index = 0

    def peek(self, value: str | None = None) -> bool:
        if self.index >= len(self.tokens):
            return False
        return value is None or self.tokens[self.index][1].lower() == value

    def take(self, expected: str | None = None) -> tuple[str, str]:
        if self.index >= len(self.tokens):
            raise DdlError(f"the schema ends early: expected {expected or 'more'}")
        kind, value, at = self.tokens[self.index]
        if expected is not None and value.lower() != expected:
            raise DdlError(f"expected {expected!r} at {at}, got {value!r}")
        self.index += 1
        return kind, value

    def name(self) -> str:
        kind, value = self.take()
        if kind == "quoted":
            return value[1:-1].replace("``", "`")
        if kind != "word":
            raise DdlError(f"expected a column name, got {value!r}")
        return value

    def number(self) -> int:
        kind, value = self.take()
        if kind != "word" or not value.isdigit():
            raise DdlError(f"expected a number, got {value!r}")
        return int(value)

    def fields(self, end: str | None) -> T.StructType:
        fields = []
        while True:
            name = self.name()
            if self.peek(":"):
                self.take(":")
            data_type = self.data_type()
            nullable = True
            metadata: dict[str, str] = {}
            while self.peek("not") or self.peek("comment"):
                if self.take()[1].lower() == "not":
                    self.take("null")
                    nullable = False
                else:
                    kind, text = self.take()
                    if kind != "string":
                        raise DdlError(f"COMMENT takes a quoted text, got {text!r}")
                    metadata["comment"] = re.sub(r"\\(.)", r"\1", text[1:-1])
            fields.append(T.StructField(name, data_type, nullable, metadata or None))
            if not self.peek(","):
                break
            self.take(",")
        if end is not None:
            self.take(end)
        return T.StructType(fields)

    def data_type(self) -> T.DataType:
        kind, word = self.take()
        lowered = word.lower()
        if kind != "word":
            raise DdlError(f"expected a type, got {word!r}")
        if lowered in _PRIMITIVES:
            return _PRIMITIVES[lowered]()
        if lowered in _DECIMALS:
            precision, scale = 10, 0
            if self.peek("("):
                self.take("(")
                precision = self.number()
                if self.peek(","):
                    self.take(",")
                    scale = self.number()
                self.take(")")
            return T.DecimalType(precision, scale)
        if lowered in ("char", "varchar"):
            self.take("(")
            length = self.number()
            self.take(")")
            return T.CharType(length) if lowered == "char" else T.VarcharType(length)
        if lowered == "array":
            self.take("<")
            element = self.data_type()
            self.take(">")
            return T.ArrayType(element, True)
        if lowered == "map":
            self.take("<")
            key = self.data_type()
            self.take(",")
            value = self.data_type()
            self.take(">")
            return T.MapType(key, value, True)
        if lowered == "struct":
            self.take("<")
            if self.peek(">"):
                self.take(">")
                return T.StructType([])
            return self.fields(">")
        raise DdlError(f"unknown type {word!r}")


def parse_ddl_schema(text: str) -> T.StructType:
    """The `StructType` of a DDL column list (a `struct<...>` type is taken as its columns); `DdlError`
    naming the problem otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise DdlError("the schema is empty: give columns such as `id BIGINT NOT NULL, name STRING`")
    parser = _Parser(text)
    if parser.peek("struct") and len(parser.tokens) > 1 and parser.tokens[1][1] == "<":
        parsed = parser.data_type()
        assert isinstance(parsed, T.StructType)
    else:
        parsed = parser.fields(None)
    if parser.index < len(parser.tokens):
        _kind, value, at = parser.tokens[parser.index]
        raise DdlError(f"unexpected {value!r} at {at}")
    return parsed
