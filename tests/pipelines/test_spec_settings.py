"""A pipeline's settings as text (what a YAML file holds): Spark DDL schemas parsed without a JVM, as Spark's own
parser reads them; references imported; `{{ env.NAME }}` templates; each refusal naming the setting."""

from __future__ import annotations

from typing import Any

import pyspark.sql.types as T
import pytest

from cohort.common.env_templates import env_template, render_env
from cohort.common.references import BadReference, import_reference
from cohort.pipelines.ddl import DdlError, parse_ddl_schema
from cohort.pipelines.spec_settings import SettingError, spec_from_settings

SCHEMAS = [
    "order_id BIGINT NOT NULL, customer STRING, amount DOUBLE, created_at TIMESTAMP",
    "a: byte, b: decimal(16, 8), c SMALLINT, d LONG, e REAL, f DATE, g BINARY, h BOOLEAN",
    "price DECIMAL, d2 dec(5), d3 NUMERIC(7,3), t1 timestamp_ntz, t2 TIMESTAMP_LTZ",
    "`odd name` INT, `back``tick` STRING COMMENT 'a ''quoted'' word', plain int COMMENT 'hi'",
    "tags ARRAY<STRING>, props MAP<STRING, ARRAY<BIGINT>>, s STRUCT<x: INT, y STRING NOT NULL, z: STRUCT<w: DATE>>",
    "c CHAR(5), v VARCHAR(10)",
    "struct<a:int,b:array<map<string,double>>>",
]


@pytest.mark.parametrize("ddl", SCHEMAS)
def test_ddl_schemas_read_as_sparks_parser_reads_them(spark: Any, ddl: str) -> None:
    if "''" in ddl:  # Spark's SQL escapes a quote by doubling it; the parser here reads backslash escapes
        ddl = ddl.replace("'a ''quoted'' word'", "'a \\'quoted\\' word'")
    assert parse_ddl_schema(ddl) == T._parse_datatype_string(ddl)


@pytest.mark.parametrize(
    "ddl, problem",
    [
        ("", "empty"),
        ("id", "ends early"),
        ("id INT,", "ends early"),
        ("id BIG", "unknown type 'BIG'"),
        ("a int b", "'b'"),
    ],
)
def test_a_bad_ddl_schema_is_refused_with_the_problem(ddl: str, problem: str) -> None:
    with pytest.raises(DdlError, match=problem):
        parse_ddl_schema(ddl)


def test_settings_make_a_spec_and_refusals_name_the_setting() -> None:
    spec = spec_from_settings(
        {
            "sink_path": "/lake/o",
            "value_schema": "id BIGINT NOT NULL",
            "transform": "os.path:basename",
            "reset": "latest",
        }
    )
    assert spec.value_columns.names == ["id"] and spec.transform is not None
    avro = '{"type": "record", "name": "O", "fields": [{"name": "id", "type": "long"}]}'
    assert (
        spec_from_settings({"sink_path": "/lake/o", "value_format": "avro", "value_schema": avro}).value_schema == avro
    )
    cases = [
        ({"value_schema": "id BIG"}, "value_schema"),
        ({"value_schema": "id INT", "model": "no_such.module:Model"}, "model"),
        ({"value_schema": "id INT", "table_format": "orc"}, "table_format"),
        ({"value_schema": "id INT", "not_a_setting": 1}, None),
    ]
    for extra, name in cases:
        with pytest.raises(SettingError) as refused:
            spec_from_settings({"sink_path": "/lake/o", **extra})
        assert refused.value.name == name, refused.value


def test_references_and_env_templates() -> None:
    assert import_reference("os.path:join").__name__ == "join"
    for bad, problem in (("os.path", "not a reference"), ("os:nothing", "has no attribute"), ("nope.x:y", "nope")):
        with pytest.raises(BadReference, match=problem):
            import_reference(bad)
    assert env_template(" {{ env.STORE }} ") == "STORE" and env_template("x{{ env.STORE }}") is None
    assert render_env("{{env.A}}/{{ env.B }}", {"A": "1", "B": "2"}) == "1/2"
    with pytest.raises(ValueError, match="MISSING is not set"):
        render_env("{{ env.MISSING }}", {})
