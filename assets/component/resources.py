"""The shared resources (`kafka`, `spark`, `schema_registry`) as a dg component's YAML declares them.

Each block's schema is the resource's own fields (no second copy of them); a secret field (one the resource
hides from `repr`) written as `{{ env.NAME }}` stays an environment variable, read when a run starts, so
its value is in no loaded configuration. Components declaring the same settings get the same resource
object: Dagster merges the Definitions of several components only when a shared key holds one object.
"""

from __future__ import annotations

import json
import threading
from typing import Any, TypeVar

import dagster as dg
import pydantic

from cohort.assets.component.errors import FieldError, validation_messages
from cohort.common.env_templates import env_template

__all__ = ["resolve_resource", "settings_model"]

R = TypeVar("R", bound=dg.ConfigurableResource)

_shared: dict[tuple[type, str], dg.ConfigurableResource] = {}
_lock = threading.Lock()


def settings_model(resource: type[dg.ConfigurableResource]) -> type[pydantic.BaseModel]:
    """A YAML schema of `resource`'s fields: the same names, types, defaults and descriptions; unknown keys
    refused; every field also takes a template string (`{{ env.NAME }}`)."""
    fields: dict[str, Any] = {}
    for name, info in resource.model_fields.items():
        annotation: Any = info.annotation if info.annotation is str else info.annotation | str
        default = ... if info.is_required() else info.get_default(call_default_factory=True)
        description = info.description
        if info.repr is False:
            description = f"{description or ''} In YAML, `{{{{ env.NAME }}}}` keeps it an environment variable.".strip()
        fields[name] = (annotation, pydantic.Field(default=default, description=description))
    return pydantic.create_model(
        f"{resource.__name__}Settings",
        __config__=pydantic.ConfigDict(extra="forbid"),
        **fields,
    )


def resolve_resource(
    context: dg.ResolutionContext,
    settings: pydantic.BaseModel,
    resource: type[R],
    path: tuple[str, ...],
    *,
    secrets: frozenset[str] = frozenset(),
) -> R:
    """The resource `settings` declare (templates rendered; `secrets` and the fields hidden from `repr` kept as
    `dg.EnvVar` when written `{{ env.NAME }}`), shared with every other component declaring the same; a
    `FieldError` at `path` when the resource refuses a setting."""
    values: dict[str, Any] = {}
    for name in settings.model_fields_set:
        raw = getattr(settings, name)
        variable = env_template(raw)
        if variable is not None and (name in secrets or resource.model_fields[name].repr is False):
            values[name] = dg.EnvVar(variable)
        else:
            values[name] = context.at_path(name).resolve_value(raw)
    try:
        built = resource(**values)
    except pydantic.ValidationError as exc:
        where, reason = validation_messages(exc)[0]
        raise FieldError((*path, *(str(p) for p in where)), reason) from None
    key = (resource, _settings_key(built))
    with _lock:
        shared = _shared.setdefault(key, built)
    assert isinstance(shared, resource)
    return shared


def _settings_key(resource: dg.ConfigurableResource) -> str:
    """The resource's settings as text, an environment variable told apart from a value of the same text."""
    values = {}
    for name in type(resource).model_fields:
        value = getattr(resource, name)
        values[name] = {"env": value.env_var_name} if isinstance(value, dg.EnvVar) else value
    return json.dumps(values, sort_keys=True, default=repr)
