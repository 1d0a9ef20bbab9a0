"""`dg scaffold defs cohort.assets.component.CohortGroupComponent <path>`: a defs.yaml that loads as written.

Every attribute is written with its description as a comment; the few a group needs (its name, a topic, the
store URL, the sink path and value schema, the Kafka and Spark resources) are set, reading the store URL, the
sink and the broker from `COHORT_STORE_URL`, `COHORT_SINK` and `COHORT_BOOTSTRAP_SERVERS`; the others are
commented out at their defaults.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

import dagster as dg
import pydantic
from dagster.components.scaffold.scaffold import NoParams

__all__ = ["CohortGroupScaffolder", "scaffolded_yaml"]

_SET: dict[str, Any] = {
    "topics": ["{name}"],
    "store_url": "{{{{ env.COHORT_STORE_URL }}}}",
    "pipeline": {
        "sink_path": "{{{{ env.COHORT_SINK }}}}/{name}",
        "value_format": "json",
        "value_schema": "id BIGINT NOT NULL, payload STRING",
    },
    "kafka": {"bootstrap_servers": "{{{{ env.COHORT_BOOTSTRAP_SERVERS }}}}"},
    "spark": {"master": "local[2]"},
}
"""The attributes the scaffold sets (the group is named after the scaffold's directory); `{name}` is that name."""


def _value(value: Any, name: str) -> str:
    if isinstance(value, str):
        return json.dumps(value.format(name=name))
    if isinstance(value, list):
        return "[" + ", ".join(_value(v, name) for v in value) + "]"
    return json.dumps(value)


def _comment(text: str | None, indent: str) -> list[str]:
    if not text:
        return []
    return [f"{indent}# {line}" for line in textwrap.wrap(text, 110 - len(indent))]


def _block(model: type[pydantic.BaseModel], chosen: dict[str, Any] | None, name: str, depth: int) -> list[str]:
    """The lines of `model`'s fields at `depth`: those in `chosen` set, the others commented out at their
    defaults (`chosen` None: the whole block is commented out, each key once)."""
    indent = "  " * depth
    lines: list[str] = []
    for field, info in model.model_fields.items():
        lines += _comment(info.description, indent)
        nested = _nested_model(info.annotation)
        if chosen is not None and field in chosen and isinstance(chosen[field], dict) and nested is not None:
            lines.append(f"{indent}{field}:")
            lines += _block(nested, chosen[field], name, depth + 1)
        elif chosen is not None and field in chosen:
            lines.append(f"{indent}{field}: {_value(chosen[field], name)}")
        elif nested is not None:
            lines.append(f"{indent}# {field}:")
            lines += _block(nested, None, name, depth + 1)  # every line a comment: uncomment what you set
        else:
            shown = "(required)" if info.is_required() else _value(info.get_default(call_default_factory=True), name)
            lines.append(f"{indent}# {field}: {shown}")
    return lines


def _nested_model(annotation: Any) -> type[pydantic.BaseModel] | None:
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, pydantic.BaseModel):
            return candidate
    return None


def scaffolded_yaml(type_name: str, name: str) -> str:
    """The defs.yaml of a group named `name` (the scaffold's directory)."""
    from cohort.assets.component.settings import COMPONENT_SETTINGS

    chosen = {"group": name, **_SET}
    lines = [
        f"type: {type_name}",
        "",
        "# One consumer group (docs/user-guide.md, 'With dg'). Set attributes are what a group needs; the others",
        "# are commented out at their defaults. `{{ env.NAME }}` reads an environment variable (a project's .env).",
        "attributes:",
        *_block(COMPONENT_SETTINGS, chosen, name, 1),
    ]
    return "\n".join(lines) + "\n"


class CohortGroupScaffolder(dg.Scaffolder[NoParams]):
    """Writes `<path>/defs.yaml` (`dg scaffold defs ... <path>`)."""

    def scaffold(self, request: dg.ScaffoldRequest[NoParams]) -> None:
        if request.scaffold_format != "yaml":
            raise ValueError("a Cohort group is scaffolded as YAML only (--format yaml)")
        request.target_path.mkdir(parents=True, exist_ok=True)
        (request.target_path / "defs.yaml").write_text(
            scaffolded_yaml(request.type_name, request.target_path.name), encoding="utf-8"
        )
