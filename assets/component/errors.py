"""Errors of a dg component's YAML as one line: the file and line, the attribute's path, what is wrong.

A refused attribute fails the component's load with a `ComponentYamlError`, whose message is that line:
`.../defs.yaml:7 - attributes.pipeline.model: cannot import ...`. Dagster reports what fails a load with the
component tree and the stack of every exception in the chain; this error carries its own report, the line alone,
so `dg check defs`, `dg dev` and the UI show just the line (under dg's own header and footer).
"""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg
import pydantic
from dagster._core.errors import DagsterUserCodeProcessError
from dagster._utils.error import SerializableErrorInfo
from dagster.components.core.component_tree import ComponentTreeException
from dagster.components.resolved.errors import ResolutionException

__all__ = ["ComponentYamlError", "FieldError", "located", "validation_messages"]


class FieldError(ValueError):
    """A refused attribute: its path under `attributes` and the reason (a ValueError for Python callers)."""

    def __init__(self, path: Iterable[str | int], reason: str) -> None:
        self.path = tuple(path)
        self.reason = reason
        super().__init__(f"{'.'.join(str(p) for p in self.path) or 'attributes'}: {reason}")


class ComponentYamlError(ResolutionException, ComponentTreeException, DagsterUserCodeProcessError):
    """A component's YAML refused, as one line: `str()` is the line, and so is what Dagster reports.

    A `ResolutionException`, as Dagster's own refusals of a component's attributes. Dagster wraps any other
    exception raised while a component loads into a `ComponentTreeException` that draws the project's component
    tree, and reports a load error with its stack and its causes' stacks: being a `ComponentTreeException`
    already, this one is reported as raised, and as a `DagsterUserCodeProcessError` (an error whose report was
    made where it happened), with the report it carries, which is the line alone.
    """

    def __init__(self, line: str) -> None:
        report = SerializableErrorInfo(message=line, stack=[], cls_name=type(self).__name__)
        super().__init__(line, user_code_process_error_infos=[report])


def located(context: dg.ResolutionContext, error: FieldError) -> ComponentYamlError:
    """`error` as a one-line `ComponentYamlError` naming the YAML file and line of its attribute."""
    path = [*context.path, *error.path]
    where = ".".join(str(p) for p in path)
    tree = context.source_position_tree
    if tree is None:
        return ComponentYamlError(f"{where}: {error.reason}")
    position, _ = tree.lookup_closest_and_path(path, trace=None)
    return ComponentYamlError(f"{position.filename}:{position.start.line} - {where}: {error.reason}")


def validation_messages(exc: pydantic.ValidationError) -> list[tuple[tuple[str | int, ...], str]]:
    """(field path, reason) of each error pydantic reports, the reason without pydantic's prefixes."""
    found = []
    for error in exc.errors(include_url=False, include_input=False):
        reason = str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        found.append((tuple(error["loc"]), reason))
    return found
