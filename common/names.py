"""Validation of topic, group and instance names before they reach a path, a SQL row or a Kafka request.

Topic names follow Kafka's own rule (ASCII letters, digits, '.', '_', '-'; at most 249; not '.' or '..').
Group names are stricter than Kafka's (which allows any string) because Cohort uses them in file paths
and run keys. Worker-slot instance ids are `<group>/<slot>` or any name made of safe segments.
"""

from __future__ import annotations

import re

__all__ = ["InvalidNameError", "safe_name", "validate_group_name", "validate_instance_id", "validate_topic_name"]

_SAFE = re.compile(r"[A-Za-z0-9._-]+")
_MAX_TOPIC = 249
_MAX_GROUP = 249


def safe_name(text: str) -> str:
    """`text` with every character other than ASCII letters, digits and '_' replaced by '_': a name Dagster and
    Airflow accept for their jobs, DAGs, ops and assets."""
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


class InvalidNameError(ValueError):
    """A topic, group or instance name that is not allowed."""


def _check_segment(kind: str, name: object, max_len: int) -> str:
    if not isinstance(name, str):
        raise InvalidNameError(f"{kind} name must be a string, got {type(name).__name__}")
    if not name:
        raise InvalidNameError(f"{kind} name must not be empty")
    if len(name) > max_len:
        raise InvalidNameError(f"{kind} name {name[:40]!r}... is {len(name)} characters; the limit is {max_len}")
    if name in (".", ".."):
        raise InvalidNameError(f"{kind} name {name!r} is not allowed")
    if not _SAFE.fullmatch(name):
        bad = sorted({c for c in name if not _SAFE.fullmatch(c)})
        raise InvalidNameError(
            f"{kind} name {name!r} contains illegal characters {''.join(bad)!r}; "
            "use ASCII letters, digits, '.', '_' and '-'"
        )
    return name


def validate_topic_name(name: object) -> str:
    """Return `name` if it is a legal Kafka topic name, else raise InvalidNameError naming the problem."""
    return _check_segment("topic", name, _MAX_TOPIC)


def validate_group_name(name: object) -> str:
    """Return `name` if it is a legal Cohort group name (safe in paths and run keys)."""
    return _check_segment("group", name, _MAX_GROUP)


def validate_instance_id(name: object) -> str:
    """Return `name` if it is a legal static-membership instance id: safe segments joined by '/'."""
    if not isinstance(name, str) or not name:
        raise InvalidNameError("instance id must be a non-empty string")
    for segment in name.split("/"):
        _check_segment("instance id segment", segment, _MAX_GROUP)
    return name
