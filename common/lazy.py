"""Lazy re-exports for package `__init__`s: a public name is imported from its home module on first use.

A Spark executor that imports `cohort.pipelines.tasks.reader` runs `cohort/pipelines/__init__.py` first; with lazy
re-exports that costs nothing, so the executor loads only what the reading task needs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, homes: Mapping[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package` that imports each name in `homes` (name -> module) on first use."""

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(home), name)

    return __getattr__
