"""Assignors by name: the five built-ins plus any custom assignor registered at start-up.

The coordinator looks a group's strategy up here by the name its members agreed on. Registration is
process-wide configuration (like Kafka's `partition.assignment.strategy` class list), not assignment state:
assignors themselves stay stateless.
"""

from __future__ import annotations

import threading

from cohort.assignment.assignors.cooperative import CooperativeStickyAssignor
from cohort.assignment.assignors.lag_sticky import LagStickyAssignor
from cohort.assignment.assignors.range import RangeAssignor
from cohort.assignment.assignors.roundrobin import RoundRobinAssignor
from cohort.assignment.assignors.sticky import StickyAssignor
from cohort.assignment.types import COOPERATIVE, EAGER, Assignor

__all__ = ["UnknownAssignorError", "available_assignors", "get_assignor", "register_assignor"]

_lock = threading.Lock()
_assignors: dict[str, Assignor] = {}


class UnknownAssignorError(ValueError):
    """No assignor is registered under the requested name."""

    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown assignor {name!r}; known assignors: {', '.join(known) or '(none)'}")
        self.name = name
        self.known = known


def register_assignor(assignor: Assignor, *, replace: bool = False) -> None:
    """Make `assignor` available under `assignor.name`.

    Raises ValueError if the name is taken (unless `replace`), empty, or the protocol is not "eager" or
    "cooperative", or if the object has no callable `assign`.

    >>> from cohort.assignment import RangeAssignor, get_assignor, register_assignor
    >>> class ReverseRange(RangeAssignor):
    ...     name = "example-reverse-range"
    >>> register_assignor(ReverseRange(), replace=True)
    >>> get_assignor("example-reverse-range").protocol
    'eager'
    """
    name = getattr(assignor, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"an assignor needs a non-empty string name, got {name!r}")
    protocol = getattr(assignor, "protocol", None)
    if protocol not in (EAGER, COOPERATIVE):
        raise ValueError(f"assignor {name!r} has protocol {protocol!r}; expected {EAGER!r} or {COOPERATIVE!r}")
    if not callable(getattr(assignor, "assign", None)):
        raise ValueError(f"assignor {name!r} has no callable assign()")
    with _lock:
        if name in _assignors and not replace:
            raise ValueError(f"an assignor named {name!r} is already registered; pass replace=True to replace it")
        _assignors[name] = assignor


def get_assignor(name: str) -> Assignor:
    """The assignor registered under `name`; `UnknownAssignorError` (a ValueError) if there is none."""
    with _lock:
        assignor = _assignors.get(name)
        if assignor is None:
            raise UnknownAssignorError(name, sorted(_assignors))
        return assignor


def available_assignors() -> list[str]:
    """The registered names, sorted."""
    with _lock:
        return sorted(_assignors)


for _builtin in (
    RangeAssignor(),
    RoundRobinAssignor(),
    StickyAssignor(),
    CooperativeStickyAssignor(),
    LagStickyAssignor(),
):
    register_assignor(_builtin)
