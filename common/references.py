"""Python objects named in configuration files: `package.module:Name` (the entry-point form).

A dg component's YAML names a pandera model or a transform this way; the reference is imported when the
definitions load, so a misspelt one fails there, with a message naming it, not when a batch runs.

Example:
    >>> import_reference("os.path:join").__name__
    'join'
"""

from __future__ import annotations

import importlib
import re
from typing import Any

__all__ = ["BadReference", "import_reference"]

_REFERENCE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


class BadReference(ValueError):
    """A reference that is malformed or does not import."""


def import_reference(reference: str) -> Any:
    """The object `reference` ("package.module:Name", attributes dotted after the colon) names."""
    if not isinstance(reference, str) or not _REFERENCE.fullmatch(reference.strip()):
        raise BadReference(f"{reference!r} is not a reference of the form 'package.module:Name'")
    module_name, _, attributes = reference.strip().partition(":")
    try:
        value: Any = importlib.import_module(module_name)
    except Exception as exc:  # an import error, or any error the module raises while it loads
        raise BadReference(f"cannot import {reference!r}: {type(exc).__name__}: {exc}") from None
    for attribute in attributes.split("."):
        if not hasattr(value, attribute):
            raise BadReference(f"cannot import {reference!r}: {module_name} has no attribute {attributes!r}")
        value = getattr(value, attribute)
    return value
