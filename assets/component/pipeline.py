"""The `pipeline` block of a dg component's YAML: a `PipelineSpec`'s settings, as text.

The block's schema is generated from `PipelineSpec`'s fields (names, types, defaults, and the descriptions of
its docstring); the settings that are Python objects there are text here (`cohort.pipelines.spec_settings`
reads them). The registry connection is the `schema_registry` resource, and a table's retention keeps its
default.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import dagster as dg
import pydantic

from cohort.assets.component.errors import FieldError
from cohort.common.docstrings import attribute_docs
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.spec_settings import SettingError, spec_from_settings

__all__ = ["PIPELINE_SETTINGS", "pipeline_spec"]

_AS_TEXT: dict[str, tuple[Any, str]] = {
    "value_schema": (
        str | None,
        "The value columns as Spark DDL (`id BIGINT NOT NULL, name STRING`); for 'avro' also an Avro schema "
        "(JSON). Left out for a registry format: the latest version of value_subject.",
    ),
    "key_schema": (str | None, "The key's schema, as value_schema."),
    "model": (str | None, "A pandera.pyspark DataFrameModel checked row by row, as 'package.module:Name'."),
    "transform": (str | None, "A function DataFrame -> DataFrame applied before the sink, as 'package.module:name'."),
    "arrow_transform": (
        str | None,
        "A function pyarrow Table -> Table the reading tasks apply before the sink (no JVM), as 'package.module:name'.",
    ),
    "reset": (str, "Where partitions without a committed offset start: earliest, latest or an ISO 8601 time."),
    "consumer_config": (dict[str, str], "Extra librdkafka settings of the executor-side consumers."),
}
_LEFT_OUT = frozenset({"iceberg_catalog", "table_retention", "registry", "value_reader", "key_reader"})
"""Settings the YAML does not hold: a secret (iceberg_catalog_env names its variable), objects with defaults,
the registry (the `schema_registry` resource) and what a batch fills in."""


def _settings_model() -> type[pydantic.BaseModel]:
    hints = typing.get_type_hints(PipelineSpec)
    docs = attribute_docs(PipelineSpec)
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(PipelineSpec):
        if field.name in _LEFT_OUT:
            continue
        described = docs.get(field.name)
        annotation, description = _AS_TEXT.get(field.name, (hints[field.name], described))
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = ...
        if field.name == "reset":
            default = str(default)
        annotation = annotation if annotation is str else annotation | str  # a template `{{ env.X }}` is text
        fields[field.name] = (annotation, pydantic.Field(default=default, description=description))
    return pydantic.create_model("PipelineSettings", __config__=pydantic.ConfigDict(extra="forbid"), **fields)


PIPELINE_SETTINGS = _settings_model()
"""The YAML schema of the `pipeline` block."""


def pipeline_spec(context: dg.ResolutionContext, settings: pydantic.BaseModel) -> PipelineSpec:
    """The `PipelineSpec` the block declares (templates rendered, then `spec_from_settings`); a `FieldError`
    naming the setting otherwise."""
    values = {name: context.at_path(name).resolve_value(getattr(settings, name)) for name in settings.model_fields_set}
    try:
        return spec_from_settings(values)
    except SettingError as exc:
        raise FieldError(("pipeline", *([exc.name] if exc.name else [])), exc.reason) from None
