"""One public import path per name a user writes: what a user puts in a `PipelineSpec`, a `CohortConfig` or a
resource is importable from the package they configure, and the docs import only from the public packages.

Internal module paths move (Shape II and III moved several): a user's code that imports
`cohort.pipelines.formats.registry.RegistryConnection` breaks on the next move, `cohort.pipelines.RegistryConnection`
does not.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PUBLIC = (
    "cohort.pipelines",
    "cohort.resources",
    "cohort.assets",
    "cohort.assignment",
    "cohort.common",
    "cohort.airflow",
    "cohort.devtools",
)
"""The packages a user imports from; every other `cohort.` module is internal."""

CONFIGURED = ("cohort.pipelines", "cohort.resources", "cohort.assets")
"""The packages a user configures a group with (a `PipelineSpec`, resources, a `Definitions`)."""

_FENCE = re.compile(r"^```(?:python|py)\b[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_IMPORT = re.compile(r"^\s*from (cohort(?:\.\w+)*) import (\([^)]*\)|[^\n]+)", re.MULTILINE)


def _doc_imports() -> Iterator[tuple[str, str, str]]:
    """(doc, module, name) of every `from cohort... import name` in a Python block of README.md and docs/."""
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in _FENCE.findall(doc.read_text(encoding="utf-8")):
            for module, names in _IMPORT.findall(block):
                for name in names.strip("()").replace("\n", " ").split(","):
                    if name.strip():
                        yield doc.relative_to(ROOT).as_posix(), module, name.strip().split(" as ")[0]


def test_the_docs_import_only_from_public_packages() -> None:
    imports = list(_doc_imports())
    assert len(imports) > 10, "the walk found the docs' imports"
    offenders = [f"{doc}: from {module} import {name}" for doc, module, name in imports if module not in PUBLIC]
    assert not offenders, offenders


@pytest.mark.parametrize(("doc", "module", "name"), sorted(set(_doc_imports())))
def test_each_name_the_docs_import_is_exported(doc: str, module: str, name: str) -> None:
    package = importlib.import_module(module)
    assert name in getattr(package, "__all__", ()), f"{doc}: {name} is not in {module}.__all__"
    assert getattr(package, name) is not None


def _cohort_classes(annotation: object) -> Iterator[type]:
    """The classes of Cohort's own that a type annotation names (inside unions, optionals and containers)."""
    if isinstance(annotation, type) and annotation.__module__.startswith("cohort."):
        yield annotation
    for inner in typing.get_args(annotation):
        yield from _cohort_classes(inner)


def _field_types(cls: type) -> dict[str, object]:
    hints = typing.get_type_hints(cls)
    if dataclasses.is_dataclass(cls):
        return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init and f.repr}
    return {name: hints[name] for name in getattr(cls, "model_fields", {})}


def _settings_classes() -> list[type]:
    from cohort.assets import CohortConfig
    from cohort.pipelines import PipelineSpec
    from cohort.resources import (
        CohortGroupResource,
        KafkaResource,
        SchemaRegistryResource,
        SparkResource,
    )

    return [PipelineSpec, CohortConfig, CohortGroupResource, KafkaResource, SchemaRegistryResource, SparkResource]


def test_what_a_user_writes_in_a_spec_or_definitions_is_exported_where_they_configure() -> None:
    found = {}
    for owner in _settings_classes():
        for field, annotation in _field_types(owner).items():
            for cls in _cohort_classes(annotation):
                found[cls] = f"{owner.__name__}.{field}"
    assert {c.__name__ for c in found} >= {"RegistryConnection", "TableRetention", "ResetPolicy", "PipelineSpec"}
    missing = [
        f"{cls.__module__}.{cls.__name__} ({where})"
        for cls, where in found.items()
        if not any(getattr(importlib.import_module(p), cls.__name__, None) is cls for p in CONFIGURED)
    ]
    assert not missing, missing


def test_the_reset_and_replay_types_have_public_homes() -> None:
    from cohort.assets import REPLAY_TAG, Replay
    from cohort.assignment import ResetTarget
    from cohort.pipelines import ResetPolicy

    assert Replay.parse("earliest").target == ResetTarget.earliest()
    assert REPLAY_TAG.startswith("cohort/")
    assert ResetPolicy.__module__.startswith("cohort.pipelines.")


def test_every_public_name_imports() -> None:
    for name in PUBLIC:
        package = importlib.import_module(name)
        for exported in package.__all__:
            assert getattr(package, exported) is not None, f"{name}.{exported}"


def test_the_import_walk_reads_a_parenthesized_import() -> None:
    """The walk above can fail: a multi-line import from an internal module is seen."""
    block = "```python\nfrom cohort.pipelines.spec import (\n    PipelineSpec,\n    RecordSide,\n)\n```\n"
    imports = [(m, n) for b in _FENCE.findall(block) for m, n in _IMPORT.findall(b)]
    assert imports and imports[0][0] == "cohort.pipelines.spec" and "RecordSide" in imports[0][1]
    assert ast.parse(_FENCE.findall(block)[0])
