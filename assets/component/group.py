"""`CohortGroupComponent`: one consumer group declared in a dg project's YAML (`defs.yaml`).

Its attributes are the group's settings (those of `CohortGroupResource`: name, topics or pattern, worker slots,
assignors, store URL, timeouts), what its Dagster objects need (those of `CohortConfig`: schedule, lag
threshold, host slots ...), the `pipeline` block (a `PipelineSpec`, `cohort.assets.component.pipeline`), and
optionally the shared `kafka`, `spark` and `schema_registry` resources; left out, the project defines them
(a resources file under `defs/`). The schema is generated from those classes, and the checks are theirs: a
refused setting fails the load with one line naming the file, the line and the attribute.

It builds what `build_cohort_definitions` builds for one group (assets, worker and checks jobs, schedules,
checks, the group's resource) with the membership and topic sensors named after the group
(`sensors_per_group`), so several components load into one project side by side.

Example (defs/orders_ingest/defs.yaml):

    type: cohort.assets.component.CohortGroupComponent
    attributes:
      group: orders-ingest
      topics: [orders]
      store_url: "{{ env.COHORT_STORE_URL }}"
      pipeline:
        sink_path: /data/lake/orders
        value_schema: "order_id BIGINT NOT NULL, amount DOUBLE"
      kafka:
        bootstrap_servers: "{{ env.COHORT_BOOTSTRAP_SERVERS }}"
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import dagster as dg
import pydantic

from cohort.assets.component.errors import FieldError, located, validation_messages
from cohort.assets.component.pipeline import pipeline_spec
from cohort.assets.component.resources import resolve_resource
from cohort.assets.component.scaffold import CohortGroupScaffolder
from cohort.assets.component.settings import COMPONENT_SETTINGS, CONFIG_FIELDS, GROUP_SETTINGS, SHARED_RESOURCES
from cohort.assets.factory import build_group_definitions
from cohort.assets.group_batch import REGISTRY_RESOURCE_KEY
from cohort.assets.translator import CohortConfig
from cohort.assignment.worker_group import check_store_url
from cohort.common.env_templates import env_template
from cohort.resources.group import CohortGroupResource
from cohort.resources.kafka import KafkaResource
from cohort.resources.schema_registry import SchemaRegistryResource
from cohort.resources.spark import SparkResource

__all__ = ["CohortGroupComponent"]

R = TypeVar("R", bound=dg.ConfigurableResource)


def _group_resource(context: dg.ResolutionContext, model: pydantic.BaseModel) -> CohortGroupResource:
    """The group's resource; a store URL given as `{{ env.NAME }}` is checked now and stays `dg.EnvVar(NAME)`."""
    values = {name: getattr(model, name) for name in model.model_fields_set if name in GROUP_SETTINGS.model_fields}
    variable = env_template(values.get("store_url"))
    if variable is not None:
        url = os.environ.get(variable)
        if not url:
            raise FieldError(("store_url",), f"the environment variable {variable} is not set")
        try:
            check_store_url(url)
        except ValueError as exc:
            raise FieldError(("store_url",), f"{exc} (from the environment variable {variable})") from None
    settings = GROUP_SETTINGS(**values)
    return resolve_resource(context, settings, CohortGroupResource, (), secrets=frozenset({"store_url"}))


def _config(context: dg.ResolutionContext, model: pydantic.BaseModel) -> CohortConfig:
    group = _group_resource(context, model)
    given = dict(model)
    pipeline = pipeline_spec(context.at_path("pipeline"), given["pipeline"])
    names = [name for name in model.model_fields_set if name in CONFIG_FIELDS]
    values = {name: context.at_path(name).resolve_value(given[name]) for name in names}
    try:
        return CohortConfig(group, pipeline=pipeline, **values)
    except (TypeError, ValueError) as exc:
        reason = str(exc)
        named = [name for name in values if name in reason]
        raise FieldError(tuple(named[:1]), reason) from None


def _shared(context: dg.ResolutionContext, model: pydantic.BaseModel, name: str, resource: type[R]) -> R | None:
    """The shared resource the `name` block declares, None when the YAML leaves it to the project."""
    assert SHARED_RESOURCES[name] is resource
    settings = dict(model)[name]
    return None if settings is None else resolve_resource(context.at_path(name), settings, resource, (name,))


@dg.scaffold_with(CohortGroupScaffolder)
@dataclass(frozen=True)
class CohortGroupComponent(dg.Component, dg.Resolvable):
    """A Cohort consumer group: its assets (topic and landed data per topic), worker job, schedules, sensors
    and offset checks, from the group's settings and its pipeline."""

    config: CohortConfig
    kafka: KafkaResource | None = None
    spark: SparkResource | None = None
    schema_registry: SchemaRegistryResource | None = None

    @classmethod
    def model(cls) -> type[pydantic.BaseModel]:
        return COMPONENT_SETTINGS

    @classmethod
    def resolve_from_model(cls, context: dg.ResolutionContext, model: pydantic.BaseModel) -> Self:
        """The component the YAML declares; a refused setting raises one line naming file, line and attribute."""
        try:
            return cls(
                config=_config(context, model),
                kafka=_shared(context, model, "kafka", KafkaResource),
                spark=_shared(context, model, "spark", SparkResource),
                schema_registry=_shared(context, model, "schema_registry", SchemaRegistryResource),
            )
        except FieldError as exc:
            raise located(context, exc) from None
        except pydantic.ValidationError as exc:
            where, reason = validation_messages(exc)[0]
            raise located(context, FieldError(where, reason)) from None

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """The group's Definitions, with the shared resources its YAML declares."""
        defs = build_group_definitions([self.config], sensors_per_group=True)
        shared: dict[str, Any] = {"kafka": self.kafka, "spark": self.spark, REGISTRY_RESOURCE_KEY: self.schema_registry}
        return defs.with_resources({key: value for key, value in shared.items() if value is not None})
