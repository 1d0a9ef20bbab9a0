"""The `Attributes:` section of a Google-style docstring, by attribute name.

Configuration schemas generated from a class (a dg component's YAML) take their descriptions from the class's
own docstring, so the text is written once.

Example:
    >>> class Spec:
    ...     '''A spec.
    ...
    ...     Attributes:
    ...         path: where it goes.
    ...         low, high: the bounds.
    ...     '''
    >>> attribute_docs(Spec)["high"]
    'the bounds.'
"""

from __future__ import annotations

import inspect
import re

__all__ = ["attribute_docs"]


def attribute_docs(cls: type) -> dict[str, str]:
    """name -> description (continuation lines joined) of `cls`'s `Attributes:` section; several names before
    one colon share the description."""
    section = inspect.cleandoc(cls.__doc__ or "").partition("Attributes:")[2]
    docs: dict[str, str] = {}
    for entry in re.split(r"\n {4}(?=[a-z_][a-z0-9_, ]*:)", section):
        names, _, text = entry.partition(":")
        for name in names.split(","):
            if name.strip():
                docs[name.strip()] = " ".join(text.split())
    return docs
