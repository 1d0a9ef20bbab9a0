"""Shared checks for the numbers and lists callers hand to the coordinator.

Python lets a bool pass for an int, a float for an offset, NaN through every comparison (`nan <= 0` is
False) and a string for a list of names (iterated as its characters). These helpers refuse such values in
one place so every field is checked the same way. They import nothing beyond the standard library, so
`cohort.assignment.types` can use them.

Example:
    >>> as_integer(12, "from_offset of t-0")
    12
    >>> as_integer(0.5, "from_offset of t-0")
    Traceback (most recent call last):
    ...
    ValueError: from_offset of t-0 must be an integer, got float 0.5
    >>> is_number(float("nan")), is_number(True), is_number(2.5)
    (False, False, True)
"""

from __future__ import annotations

import math
import operator
from collections.abc import Collection
from numbers import Real
from typing import SupportsIndex, cast

__all__ = ["INT32_MAX", "INT64_MAX", "as_integer", "is_integer", "is_number", "require_collection"]

INT32_MAX = 2**31 - 1
"""The largest Kafka partition number or partition count."""

INT64_MAX = 2**63 - 1
"""The largest Kafka offset (and the largest integer SQLite and PostgreSQL BIGINT columns hold)."""


def is_integer(value: object) -> bool:
    """Whether `value` is an integer: an int or an int-like (`__index__`, e.g. numpy.int64), never a bool."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    try:
        operator.index(cast(SupportsIndex, value))  # the probe: TypeError means it is not int-like
    except TypeError:
        return False
    return True


def as_integer(value: object, what: str, *, maximum: int = INT64_MAX) -> int:
    """`value` as a plain int if it is an integer no larger than `maximum`; else ValueError naming `what`.

    Lower bounds are left to the caller (whose messages state the relation, e.g. an offset range).
    """
    if not is_integer(value):
        raise ValueError(f"{what} must be an integer, got {type(value).__name__} {value!r}")
    number = operator.index(cast(SupportsIndex, value))  # is_integer: it has __index__
    if number > maximum:
        raise ValueError(f"{what} is {number}, beyond the largest allowed value {maximum}")
    return number


def is_number(value: object) -> bool:
    """Whether `value` is a real number that compares meaningfully: not a bool, not NaN (infinity is a
    number: a timeout of `inf` means no limit where a field allows it)."""
    if isinstance(value, bool) or not isinstance(value, Real):
        return False
    return not math.isnan(value)


def require_collection(value: object, what: str) -> None:
    """Raise TypeError unless `value` is a collection (a list, tuple, set ...) that is not itself a string:
    a bare string would be read as the list of its characters. The items are the caller's to check."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{what} must be a collection of names, not a string: {value!r}")
    if not isinstance(value, Collection):
        raise TypeError(f"{what} must be a collection of names, got {type(value).__name__}")
