"""The victim of the SIGKILL matrix: one worker slot run through Dagster that SIGKILLs its own process group
at a chosen point.

`python -m harness.reliability.fault_worker SCENARIO_JSON`, started by `harness.reliability.faults` with
`start_new_session=True`, so the victim's process group holds it and its Spark JVM. The real worker job runs
through `execute_in_process` against the shared store, broker and Dagster instance; the fault is injected
here, from the test side, by wrapping the real function at one boundary (see `install`). Right before the
kill, the victim writes a marker (the point and the wall time) for the harness.

The executor-side read runs in a Spark Python worker, which PySpark's daemon puts in a process group of its
own: the kill there targets the victim's group (passed in by value), then the worker's own.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from harness.reliability.fault_points import OBJECT_STORE_POINTS, SPARK_CONF, SPARK_MASTER, TABLE_POINTS, FaultScenario

__all__ = ["die", "install", "main"]


def die(marker: str, point: str, pgid: int) -> NoReturn:
    """Record `point` and the time in `marker`, then SIGKILL process group `pgid` (and this process's own)."""
    Path(marker).write_text(json.dumps({"point": point, "at": time.time(), "pid": os.getpid()}))
    os.killpg(pgid, signal.SIGKILL)
    os.killpg(os.getpgid(0), signal.SIGKILL)  # a Spark Python worker lives in the daemon's group
    raise SystemExit(137)  # not reached


class _KillOnCommit:
    """The run's ledger (its `GroupMember`), killing the process on entry to the commit of the batch's
    ranges: both outputs are staged, nothing is published. A commit of empty ranges only (a partition's
    starting position) goes through."""

    def __init__(self, ledger: Any, kill: Callable[[], NoReturn]) -> None:
        self._ledger, self._kill = ledger, kill

    def committed_offsets(self, partitions: Sequence[Any]) -> Any:
        return self._ledger.committed_offsets(partitions)

    def commit(self, ranges: Sequence[Any], *, run_id: str | None = None) -> None:
        if any(r.until_offset > r.from_offset for r in ranges):
            self._kill()
        self._ledger.commit(ranges, run_id=run_id)


class _KillOnMirror:
    """The run's Kafka mirror, killing the process on entry to `mirror`: the ledger has the commit."""

    def __init__(self, kill: Callable[[], NoReturn]) -> None:
        self._kill = kill

    def mirror(self, group: str, ranges: Sequence[Any], *, run_id: str | None) -> None:
        self._kill()


class _KillingTable:
    """One table store of the batch (the sink's or the quarantine's), killing the process on entry to, or on
    return from, the `commit` of a batch (`change.batch` set); a fence or a roll-back (no batch) goes through.
    Everything else is the real store's."""

    def __init__(self, table: Any, kill: Callable[[], NoReturn], *, before: bool) -> None:
        self._table, self._kill, self._before = table, kill, before

    def __getattr__(self, name: str) -> Any:
        return getattr(self._table, name)

    def commit(self, change: Any) -> None:
        if change.batch is not None and self._before:
            self._kill()
        self._table.commit(change)
        if change.batch is not None and not self._before:
            self._kill()


_TABLE_KILLS = {
    "after-stage": ("quarantine", True),
    "after-quarantine-commit": ("quarantine", False),
    "after-table-commit": ("sink", False),
}
"""Table points: which store of `open_tables`' pair kills, and whether before its commit (else after it)."""


def _killing_open_tables(original: Callable[..., Any], point: str, kill: Callable[[], NoReturn]) -> Callable[..., Any]:
    """`cohort.pipelines.tables.batch.open_tables` whose pair kills at a table point (`_TABLE_KILLS`)."""
    which, before = _TABLE_KILLS[point]

    def open_tables(target: Any) -> Any:
        pair = original(target)
        killing = _KillingTable(getattr(pair, which), kill, before=before)
        return dataclasses.replace(pair, **{which: killing})

    return open_tables


def _killing_read_range(original: Callable[..., Iterator[Any]], kill: Callable[[], NoReturn]) -> Callable[..., Any]:
    """`cohort.pipelines.tasks.reader.read_range` that dies after handing the first Arrow batch of a span to Spark.

    Defined here (`__main__` of the victim), so Spark pickles it by value into the executor-side reader.
    """

    def read_range(config: Any, span: Any, **options: Any) -> Iterator[Any]:
        for batch in original(config, span, **options):
            yield batch
            kill()

    return read_range


def _killing_copy(original: Callable[..., None], kill: Callable[[], NoReturn]) -> Callable[..., None]:
    """`ArrowFs.copy_file` that dies right after the first copy into a range directory (not under `_staging`)."""

    def copy_file(self: Any, source: str, target: str) -> None:
        original(self, source, target)
        if "/_staging/" not in target:
            kill()

    return copy_file


def install(point: str, marker: str) -> Callable[..., Any]:
    """Wrap the real function at `point`'s boundary; return the batch runner for the worker job (the real
    `run_batch`, with the ledger or mirror wrapped for the points there; it also marks the batch running).

    after-join: `Coordinator.sync` (the join phase completed, the sync request not sent);
    after-sync: `GroupMember.join` returning (the assignment received, nothing planned or read);
    mid-read: the executor-side `read_range`, after its first batch;
    after-write: the ledger's `commit`, on entry (the outputs are staged, nothing is published);
    after-stage (table sinks): the quarantine table's `commit` of the batch, on entry (both outputs staged, the
        quarantine's files placed in its data directories, no table commit);
    after-quarantine-commit (table sinks): the quarantine table's `commit` of the batch, on return (the sink
        table's commit not made);
    after-table-commit (table sinks): the sink table's `commit` of the batch, on return (no ledger commit);
    after-commit: the mirror's `mirror`, on entry (the ledger's commit stands);
    after-mirror: `cohort.assets.group_batch.materializations`, on entry (ledger and Kafka agree, nothing logged);
    heartbeat: `Coordinator.heartbeat` returning on the heartbeat thread while the batch runs;
    mid-publish (an object-store root): `ArrowFs.copy_file` returning from the first copy of a range into place.
    """
    from cohort.assets import group_batch
    from cohort.assignment.coordinator import Coordinator
    from cohort.assignment.member import GroupMember
    from cohort.pipelines.batch import run as batch
    from cohort.pipelines.tables import batch as table_batch
    from cohort.pipelines.tasks import reader

    pgid = os.getpgid(0)
    kill = functools.partial(die, marker, point, pgid)
    batch_running = threading.Event()

    def runner(spark: Any, spec: Any, kafka_config: Any, partitions: Any, ledger: Any, **kwargs: Any) -> Any:
        if point == "after-write":
            ledger = _KillOnCommit(ledger, kill)
        elif point == "after-commit":
            kwargs["mirror"] = _KillOnMirror(kill)
        batch_running.set()
        return batch.run_batch(spark, spec, kafka_config, partitions, ledger, **kwargs)

    if point == "after-join":
        Coordinator.sync = lambda *args, **kwargs: kill()  # type: ignore[method-assign]
    elif point == "after-sync":
        joined = GroupMember.join

        def join_then_die(self: GroupMember) -> NoReturn:
            joined(self)
            kill()

        GroupMember.join = join_then_die  # type: ignore[method-assign]
    elif point in _TABLE_KILLS:  # the table batch opens its stores through `open_tables`, fences and all
        table_batch.open_tables = _killing_open_tables(table_batch.open_tables, point, kill)
    elif point == "mid-read":
        reader.read_range = _killing_read_range(reader.read_range, kill)
    elif point == "mid-publish":
        from cohort.pipelines.tasks.writer import ArrowFs

        ArrowFs.copy_file = _killing_copy(ArrowFs.copy_file, kill)  # type: ignore[method-assign]
    elif point == "after-mirror":
        group_batch.materializations = lambda *args, **kwargs: kill()
    elif point == "heartbeat":
        beat = Coordinator.heartbeat

        def heartbeat_then_die(self: Coordinator, *args: Any, **kwargs: Any) -> Any:
            answer = beat(self, *args, **kwargs)
            if batch_running.is_set() and not kwargs.get("progress"):
                kill()
            return answer

        Coordinator.heartbeat = heartbeat_then_die  # type: ignore[method-assign]
    elif point not in {"after-write", "after-commit"}:
        known = [p.key for p in (*OBJECT_STORE_POINTS, *TABLE_POINTS)]
        raise ValueError(f"unknown fault point {point!r}; known: {known}")
    return runner


def _start_spark_early(point: str) -> None:
    """Start this process's Spark on a thread before the heavy imports and the join (a victim that reads
    needs its own JVM; starting it while the slot joins saves the scenario that time). The run's
    `SparkResource.get_session()` then gets this session: the same settings, the product's defaults."""
    if not next(p for p in (*OBJECT_STORE_POINTS, *TABLE_POINTS) if p.key == point).reads:
        return

    # Imported here, not on the thread: two threads importing pyspark at once meet its modules half-initialised.
    from cohort.pipelines.spark import build_session

    def start() -> None:
        build_session(master=SPARK_MASTER, conf={"spark.ui.showConsoleProgress": "false", **SPARK_CONF})

    threading.Thread(target=start, name="spark-start", daemon=True).start()


def main() -> int:
    """Run the scenario's victim slot with its fault installed; exit 0/1 only if the fault never hit."""
    scenario = FaultScenario.from_json(sys.argv[1])
    _start_spark_early(scenario.point)
    from cohort.assets.translator import DagsterCohortTranslator
    from cohort.assets.worker import SLOT_TAG, worker_run_config
    from harness.reliability.faults import open_instance, scenario_definitions

    runner = install(scenario.point, scenario.marker)
    defs, config = scenario_definitions(scenario, victim=True, runner=runner)
    job = defs.resolve_job_def(DagsterCohortTranslator().get_job_name(config.group))
    with open_instance(scenario) as instance:
        result = job.execute_in_process(
            run_config=worker_run_config(config, scenario.victim_slot),
            instance=instance,
            tags={SLOT_TAG: str(scenario.victim_slot), "cohort/fault": scenario.point},
            raise_on_error=False,
        )
    return 0 if result.success else 1


if __name__ == "__main__":
    raise SystemExit(main())
