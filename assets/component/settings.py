"""The YAML schema of `CohortGroupComponent`'s attributes, generated from the classes that check them.

Top level: `CohortGroupResource`'s settings (group, topics, topic_pattern, assignors, worker_slots, store_url,
timeouts) and `CohortConfig`'s (schedule, lag_threshold, host_slots ...); then the `pipeline` block
(`PipelineSpec`) and the optional `kafka`, `spark` and `schema_registry` blocks (their resources' fields).
Descriptions and defaults are those classes' own; unknown attributes are refused.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import dagster as dg
import pydantic

from cohort.assets.component.pipeline import PIPELINE_SETTINGS
from cohort.assets.component.resources import settings_model
from cohort.assets.translator import CohortConfig
from cohort.common.docstrings import attribute_docs
from cohort.resources.group import CohortGroupResource
from cohort.resources.kafka import KafkaResource
from cohort.resources.schema_registry import SchemaRegistryResource
from cohort.resources.spark import SparkResource

__all__ = ["COMPONENT_SETTINGS", "CONFIG_FIELDS", "GROUP_SETTINGS", "SHARED_RESOURCES"]

GROUP_SETTINGS = settings_model(CohortGroupResource)
"""The group's settings (`CohortGroupResource`'s fields)."""

SHARED_RESOURCES: dict[str, type[dg.ConfigurableResource]] = {
    "kafka": KafkaResource,
    "spark": SparkResource,
    "schema_registry": SchemaRegistryResource,
}
"""The blocks naming a shared resource, by their key in the Definitions."""

CONFIG_FIELDS: dict[str, Any] = {
    "known_topics": list[str],
    "lag_threshold": int,
    "schedule": str | None,
    "audit_schedule": str | None,
    "freshness_s": float,
    "host_slots": list[int] | None,
}
"""`CohortConfig`'s settings besides the group and the pipeline, as YAML types."""


def _component_settings() -> type[pydantic.BaseModel]:
    fields: dict[str, Any] = {name: (info.annotation, info) for name, info in GROUP_SETTINGS.model_fields.items()}
    docs = attribute_docs(CohortConfig)
    defaults = {f.name: f.default for f in dataclasses.fields(CohortConfig)}
    for name, annotation in CONFIG_FIELDS.items():
        default: Any = defaults[name]
        if isinstance(default, tuple):
            default = list(default)
        fields[name] = (annotation | str, pydantic.Field(default=default, description=docs.get(name)))
    fields["pipeline"] = (PIPELINE_SETTINGS, pydantic.Field(description=docs.get("pipeline")))
    for name, resource in SHARED_RESOURCES.items():
        description = f"The project's {name} resource (left out: the project defines it)."
        fields[name] = (settings_model(resource) | None, pydantic.Field(default=None, description=description))
    return pydantic.create_model("CohortGroupSettings", __config__=pydantic.ConfigDict(extra="forbid"), **fields)


COMPONENT_SETTINGS = _component_settings()
"""The YAML schema of the component's attributes."""
