"""The SIGKILL matrix's fault points, assignors, sink formats and scenario description: plain data, no heavy
imports, so the victim process (`harness.reliability.fault_worker`) can start its Spark JVM before it imports Dagster.

`POINTS` are the Parquet sink's; `TABLE_POINTS` those of a table sink (Delta Lake, Iceberg), whose batch commits
the quarantine table, the sink table, the ledger and Kafka in that order (cohort.pipelines.batch.table_sink)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

__all__ = [
    "ASSIGNORS",
    "OBJECT_STORE_POINTS",
    "POINTS",
    "SINK_FORMATS",
    "SPARK_CONF",
    "SPARK_MASTER",
    "TABLE_FORMATS",
    "TABLE_POINTS",
    "FaultPoint",
    "FaultScenario",
    "fault_point",
    "points_for",
]


@dataclass(frozen=True)
class FaultPoint:
    """Where the victim dies: `key` for the command line, `label` for the table; `reads` when the victim
    gets as far as its batch (it then needs its own Spark)."""

    key: str
    label: str
    reads: bool = True


POINTS: tuple[FaultPoint, ...] = (
    FaultPoint("after-join", "after join, before sync", reads=False),
    FaultPoint("after-sync", "after sync, before reading", reads=False),
    FaultPoint("mid-read", "mid-read (executor, after the first batch)"),
    FaultPoint("after-write", "after the sink write, before the ledger commit"),
    FaultPoint("after-commit", "after the ledger commit, before the Kafka mirror"),
    FaultPoint("after-mirror", "after the Kafka mirror, before the materialization events"),
    FaultPoint("heartbeat", "while heartbeating (batch running)"),
)
OBJECT_STORE_POINTS: tuple[FaultPoint, ...] = (
    *POINTS,
    FaultPoint("mid-publish", "mid-publish (one range copied into place, the others not)"),
)
"""The Parquet sink's points on an object store (`s3://`): its publish is one copy per range, so it can die between
two of them."""
_SHARED = {p.key: p for p in POINTS if p.key in {"after-commit", "after-mirror"}}
TABLE_POINTS: tuple[FaultPoint, ...] = (
    FaultPoint("after-stage", "after staging, before the quarantine table commit"),
    FaultPoint("after-quarantine-commit", "after the quarantine table commit, before the sink table commit"),
    FaultPoint("after-table-commit", "after the sink table commit, before the ledger commit"),
    _SHARED["after-commit"],
    _SHARED["after-mirror"],
)
"""A table sink's points: the batch's two table commits, then the ledger and the mirror as for Parquet."""
TABLE_FORMATS: tuple[str, ...] = ("delta", "iceberg")
SINK_FORMATS: tuple[str, ...] = ("parquet", *TABLE_FORMATS)
"""`PipelineSpec.table_format` values a scenario runs with (Iceberg: the default SQLite catalog in the sink)."""
ASSIGNORS: tuple[str, ...] = ("sticky", "cooperative-sticky")
"""The eager and the cooperative assignor."""
SPARK_MASTER = "local[2]"
SPARK_CONF = {"spark.sql.shuffle.partitions": "2"}
"""The scenarios' Spark resource (the victim's own JVM; the harness's session for everything else)."""


def points_for(table_format: str) -> tuple[FaultPoint, ...]:
    """The fault points of a sink format: the Parquet sink's, or a table sink's."""
    if table_format == "parquet":
        return POINTS
    if table_format in TABLE_FORMATS:
        return TABLE_POINTS
    raise ValueError(f"unknown sink format {table_format!r}; known: {list(SINK_FORMATS)}")


def fault_point(key: str, table_format: str = "parquet") -> FaultPoint:
    """The point `key` of a sink format; ValueError naming the known ones."""
    points = OBJECT_STORE_POINTS if table_format == "parquet" else points_for(table_format)
    for point in points:
        if point.key == key:
            return point
    raise ValueError(f"unknown fault point {key!r} for a {table_format} sink; known: {[p.key for p in points]}")


@dataclass(frozen=True)
class FaultScenario:
    """Everything the victim process needs (serializable), and the harness too."""

    bootstrap: str
    group: str
    topic: str
    sink: str
    store_url: str
    dagster_home: str
    assignor: str
    point: str
    marker: str
    victim_slot: int = 1
    survivor_slot: int = 2
    table_format: str = "parquet"
    iceberg_catalog: str | None = None
    """An Iceberg sink's catalog URL (None: the default SQLite file under a local sink)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> FaultScenario:
        return cls(**json.loads(text))
