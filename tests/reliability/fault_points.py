"""The SIGKILL matrix's fault points, assignors and scenario description: plain data, no heavy imports, so the
victim process (`tests.reliability.fault_worker`) can start its Spark JVM before it imports Dagster."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

__all__ = ["ASSIGNORS", "POINTS", "SPARK_CONF", "SPARK_MASTER", "FaultPoint", "FaultScenario"]


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
ASSIGNORS: tuple[str, ...] = ("sticky", "cooperative-sticky")
"""The eager and the cooperative assignor."""
SPARK_MASTER = "local[2]"
SPARK_CONF = {"spark.sql.shuffle.partitions": "2"}
"""The scenarios' Spark resource (the victim's own JVM; the harness's session for everything else)."""


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

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> FaultScenario:
        return cls(**json.loads(text))
