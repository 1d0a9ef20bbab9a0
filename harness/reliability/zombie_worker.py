"""A worker slot held inside its batch: `python -m harness.reliability.zombie_worker ARGS_JSON`.

The real worker job of the group, with a transform (the pipeline's public extension point) whose Spark
tasks touch `reached` once the batch has read and validated its records, then wait until `gate` exists
before the sink write, publish and commit. The harness pauses this process group (SIGSTOP) while it is
held there, lets the group move on, then opens the gate and resumes it: a zombie with a stale plan.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

SPARK_MASTER = "local[2]"
SPARK_CONF = {"spark.sql.shuffle.partitions": "2"}
"""The Spark resource of the scenarios' Definitions (harness/reliability/broker_harness.py uses them too)."""


@dataclass(frozen=True)
class ZombieArgs:
    """What the subprocess needs: the group setup, its assignor, the slot, and the two marker paths."""

    setup: str
    assignor: str
    slot: int
    reached: str
    gate: str

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def held_batches(reached: str, gate: str) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """A mapInArrow function that signals `reached`, then waits for `gate` before passing rows on."""

    def hold(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        Path(reached).touch()
        while not Path(gate).exists():  # a real process observed by the harness, not a timeout
            time.sleep(0.05)
        yield from batches

    return hold


def _start_spark_early() -> None:
    """Start this process's Spark JVM on a thread while Dagster is imported and the slot joins; the run's
    `get_session()` then returns the same session (this process's start is the scenario's longest wait)."""

    # Imported here, not on the thread: two threads importing pyspark at once meet its modules half-initialised.
    from cohort.resources import SparkResource

    def start() -> None:
        SparkResource(master=SPARK_MASTER, conf=SPARK_CONF).get_session()

    threading.Thread(target=start, name="spark-start", daemon=True).start()


def main() -> int:
    _start_spark_early()
    import dagster as dg

    from cohort.assets.worker import worker_run_config
    from harness.dagster_group import Setup
    from harness.reliability.broker_harness import T, definitions, group_config

    args = ZombieArgs(**json.loads(sys.argv[1]))
    setup = Setup.from_json(args.setup)
    hold = held_batches(args.reached, args.gate)

    def transform(frame: Any) -> Any:  # a Spark DataFrame in and out
        return frame.mapInArrow(hold, frame.schema)

    config = group_config(setup, args.assignor, transform=transform)
    defs = definitions(config, setup.bootstrap)
    with dg.DagsterInstance.local_temp(tempdir=setup.dagster_home) as instance:
        result = defs.resolve_job_def(T.get_job_name(config.group)).execute_in_process(
            run_config=worker_run_config(config, args.slot),
            instance=instance,
            tags={"cohort/slot": str(args.slot), "cohort/zombie": "1"},
            raise_on_error=False,
        )
    return 0 if result.success else 1


if __name__ == "__main__":
    raise SystemExit(main())
