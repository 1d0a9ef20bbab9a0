"""Errors of a dg component's YAML as one line: the file and line, the attribute's path, what is wrong.

`dg check defs` shows a `ResolutionException` raised while the component loads as it is given, so the message
built here is what the user reads: `.../defs.yaml:7 - attributes.pipeline.model: cannot import ...`.
"""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg
import pydantic
from dagster.components.resolved.errors import ResolutionException

__all__ = ["FieldError", "located", "validation_messages"]


class FieldError(ValueError):
    """A refused attribute: its path under `attributes` and the reason (a ValueError for Python callers)."""

    def __init__(self, path: Iterable[str | int], reason: str) -> None:
        self.path = tuple(path)
        self.reason = reason
        super().__init__(f"{'.'.join(str(p) for p in self.path) or 'attributes'}: {reason}")


def located(context: dg.ResolutionContext, error: FieldError) -> ResolutionException:
    """`error` as a one-line `ResolutionException` naming the YAML file and line of its attribute."""
    path = [*context.path, *error.path]
    where = ".".join(str(p) for p in path)
    tree = context.source_position_tree
    if tree is None:
        return ResolutionException(f"{where}: {error.reason}")
    position, _ = tree.lookup_closest_and_path(path, trace=None)
    return ResolutionException(f"{position.filename}:{position.start.line} - {where}: {error.reason}")


def validation_messages(exc: pydantic.ValidationError) -> list[tuple[tuple[str | int, ...], str]]:
    """(field path, reason) of each error pydantic reports, the reason without pydantic's prefixes."""
    found = []
    for error in exc.errors(include_url=False, include_input=False):
        reason = str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        found.append((tuple(error["loc"]), reason))
    return found
