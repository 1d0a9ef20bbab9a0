"""The names of the Parquet sink's layout: staging, markers, attempt ids and range directory names, and the sink's
error (cohort.pipelines.sink.layout builds paths from them; cohort.pipelines.sink.object_publish reads them too)."""

from __future__ import annotations

import hashlib
import uuid

from cohort.common.names import validate_topic_name
from cohort.pipelines.tasks.spans import validate_partition

__all__ = [
    "MARKER_PREFIX",
    "RANGE_PREFIX",
    "STAGING",
    "SinkError",
    "attempt_id",
    "attempt_run_tag",
    "parse_range_dir",
    "range_dir_name",
    "run_tag",
]

STAGING = "_staging"
MARKER_PREFIX = "_cohort_attempt="
RANGE_PREFIX = "_cohort_range="
_RUN_TAG_LENGTH = 24


def run_tag(run_id: str) -> str:
    """The hex digest that starts the attempt ids of run `run_id`: how a later batch finds the run's staging."""
    return hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:_RUN_TAG_LENGTH]


def attempt_id(run_id: str) -> str:
    """A fresh batch attempt id of run `run_id` (alphanumeric: it is a path segment)."""
    return run_tag(run_id) + uuid.uuid4().hex


def attempt_run_tag(name: str) -> str | None:
    """The run tag an attempt id starts with, None for a name `attempt_id` cannot have made (something else
    under `_staging`, left alone by the staging clean-up)."""
    if len(name) != _RUN_TAG_LENGTH + 32 or any(c not in "0123456789abcdef" for c in name):
        return None
    return name[:_RUN_TAG_LENGTH]


class SinkError(RuntimeError):
    """A sink operation failed: a rename or delete was refused, or the layout holds something unexpected."""


def range_dir_name(topic: str, partition: int, from_offset: int, until_offset: int) -> str:
    """`<topic>-<partition>-<from>-<until>.parquet`, after checking every part is safe in a path."""
    validate_topic_name(topic)
    validate_partition(topic, partition)
    if from_offset < 0 or until_offset < from_offset:
        raise ValueError(f"invalid offset range [{from_offset}, {until_offset}) for {topic}-{partition}")
    return f"{topic}-{partition}-{from_offset}-{until_offset}.parquet"


def parse_range_dir(name: str) -> tuple[str, int, int, int] | None:
    """(topic, partition, from, until) from a range directory name, None if it is not one."""
    if not name.endswith(".parquet"):
        return None
    parts = name[: -len(".parquet")].rsplit("-", 3)
    if len(parts) != 4 or not all(p.isdigit() for p in parts[1:]):
        return None
    return parts[0], int(parts[1]), int(parts[2]), int(parts[3])
