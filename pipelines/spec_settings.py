"""A `PipelineSpec` from its settings as text, the form a YAML file holds (a dg component's `pipeline` block).

The settings that are Python objects in a `PipelineSpec` are text here: the value and key schemas as Spark DDL
(`order_id BIGINT NOT NULL, customer STRING`) or, for `avro`, an Avro schema's JSON; the pandera model and the
transforms (Spark or Arrow) as references `package.module:Name`; `reset` as `earliest`, `latest` or an ISO 8601
time. The Dagster component and an Airflow DAG file read the same block through this function.

Example:
    >>> spec_from_settings({"sink_path": "/lake/orders", "value_schema": "id BIGINT NOT NULL"}).value_columns.names
    ['id']
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cohort.common.references import BadReference, import_reference
from cohort.pipelines.ddl import DdlError, parse_ddl_schema
from cohort.pipelines.spec import PipelineSpec

__all__ = ["SettingError", "spec_from_settings"]


class SettingError(ValueError):
    """A refused setting: its name (None when the message names no single one) and the reason."""

    def __init__(self, name: str | None, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"{name}: {reason}" if name else reason)


def _schema(value_format: str, text: str, name: str) -> Any:
    if value_format == "avro" and text.lstrip()[:1] in ("{", '"', "["):
        return text  # an Avro schema: PipelineSpec reads it
    try:
        return parse_ddl_schema(text)
    except DdlError as exc:
        raise SettingError(name, f"not a Spark DDL schema: {exc}") from None


def spec_from_settings(settings: Mapping[str, Any]) -> PipelineSpec:
    """The `PipelineSpec` `settings` declare (schemas parsed, references imported); a `SettingError` naming
    the setting otherwise."""
    values = dict(settings)
    for side, default in (("value", "json"), ("key", "bytes")):
        schema = values.get(f"{side}_schema")
        if isinstance(schema, str):
            values[f"{side}_schema"] = _schema(values.get(f"{side}_format", default), schema, f"{side}_schema")
    for name in ("model", "transform", "arrow_transform"):
        if isinstance(values.get(name), str):
            try:
                values[name] = import_reference(values[name])
            except BadReference as exc:
                raise SettingError(name, str(exc)) from None
    try:
        return PipelineSpec(**values)
    except (TypeError, ValueError) as exc:
        reason = str(exc)
        named = [name for name in values if reason.startswith(name) or f"({name})" in reason]
        raise SettingError(named[0] if named else None, reason) from None
