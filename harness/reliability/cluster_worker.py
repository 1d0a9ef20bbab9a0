"""The first run of a leader-kill scenario (harness/reliability/cluster_kills.py), in a process of its own: both worker
slots of the group on threads, on this process's Spark, with the fault installed.

`python -m harness.reliability.cluster_worker SCENARIO_JSON`, started by the scenario with `start_new_session=True`
(its process group holds it, its Spark JVM and Spark's Python workers). A process of its own because the batch may
take the process down when the broker dies: librdkafka aborts a process whose admin request to a group coordinator
fails as the coordinator goes away (the Kafka mirror's AlterConsumerGroupOffsets; see cluster_kills' module doc), as
it would take a Dagster run worker or an Airflow task down. The slots' outcomes are written to
`ClusterScenario.result` (JSON) when the run ends.

The fault is installed as the SIGKILL matrix's victim installs its own (harness/reliability/fault_worker.py), by
wrapping the real function at the point's boundary; here the wrapper does not die: it claims the kill (a marker file,
once, whichever slot or task gets there first), waits until the scenario, which owns the cluster, has SIGKILLed the
broker and released it, and goes on:

mid-read: the executor-side `read_range`, after the first Arrow batch of a span with more left to read: the leader of
    that span's partition dies, and the task reads the rest of the span from the next leader;
after-commit: the mirror's `mirror`, on entry (the ledger has the commit): the group's coordinator dies, and the
    real mirror runs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from harness.reliability.fault_points import SPARK_CONF, SPARK_MASTER

__all__ = ["claim_and_wait", "install", "main"]

RELEASE_WAIT_S = 90.0
"""How long the claiming code waits for the scenario to have killed the broker."""


def claim_and_wait(claim: str, release: str, what: dict[str, Any], wait_s: float = RELEASE_WAIT_S) -> bool:
    """Claim the kill (create `claim` holding `what`) unless someone did; if claimed, wait for `release`. Whether
    this call claimed it."""
    try:
        fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, json.dumps({**what, "at": time.time()}).encode())
    os.close(fd)
    deadline = time.monotonic() + wait_s
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


def _reading_then_wait(
    original: Callable[..., Iterator[Any]], claim: str, release: str, wait_s: float = RELEASE_WAIT_S
) -> Any:
    """`read_range` that claims the kill after the first batch of a span with more to read, and once that span is
    read writes `<claim>.resumed` (JSON: the rows read after the kill, the longest wait for one of its batches).
    Nested in `__main__`, so Spark pickles it by value into the reading tasks, which need no `harness` module."""

    def read_range(config: Any, span: Any, **options: Any) -> Iterator[Any]:
        import json as _json
        import os as _os
        import time as _time

        def _claim(where: dict[str, Any]) -> bool:  # claim_and_wait, which the reading tasks cannot import
            try:
                fd = _os.open(claim, _os.O_CREAT | _os.O_EXCL | _os.O_WRONLY)
            except FileExistsError:
                return False
            _os.write(fd, _json.dumps({**where, "at": _time.time()}).encode())
            _os.close(fd)
            deadline = _time.monotonic() + wait_s
            while not _os.path.exists(release) and _time.monotonic() < deadline:
                _time.sleep(0.05)
            return True

        first, claimed, rows, longest = True, False, 0, 0.0
        asked = _time.monotonic()
        for batch in original(config, span, **options):
            if claimed:
                rows, longest = rows + batch.num_rows, max(longest, _time.monotonic() - asked)
            yield batch
            asked = _time.monotonic()
            if not first:
                continue
            first = False
            last = batch.column("offset")[-1].as_py() if batch.num_rows else None
            if last is None or last + 1 >= span.until_offset:
                continue
            where = {"topic": span.topic, "partition": span.partition, "offset": last + 1, "until": span.until_offset}
            claimed = _claim(where)
            asked = _time.monotonic()
        if claimed:
            with open(f"{claim}.resumed", "w") as out:
                out.write(_json.dumps({"rows": rows, "longest_wait_s": round(longest, 2), "done_at": _time.time()}))

    return read_range


class _ClaimThenMirror:
    """The batch's Kafka mirror, claiming the kill of the group's coordinator on entry, then mirroring for real."""

    def __init__(self, mirror: Any, claim: str, release: str) -> None:
        self._mirror, self._claim, self._release = mirror, claim, release

    def mirror(self, group: str, ranges: Sequence[Any], *, run_id: str | None) -> None:
        claim_and_wait(self._claim, self._release, {"coordinator_of": group})
        self._mirror.mirror(group, ranges, run_id=run_id)


def install(point: str, claim: str, release: str) -> Callable[..., Any]:
    """Wrap the real function at `point`'s boundary; return the batch runner for the slots (the real `run_batch`,
    its mirror wrapped at after-commit)."""
    from cohort.pipelines.batch.run import run_batch
    from cohort.pipelines.tasks import reader

    def runner(*args: Any, **kwargs: Any) -> Any:
        if point == "after-commit" and kwargs.get("mirror") is not None:
            kwargs["mirror"] = _ClaimThenMirror(kwargs["mirror"], claim, release)
        return run_batch(*args, **kwargs)

    if point == "mid-read":
        reader.read_range = _reading_then_wait(reader.read_range, claim, release)
    elif point != "after-commit":
        raise ValueError(f"no broker kill at {point!r}: mid-read or after-commit")
    return runner


def main() -> int:
    """Run both slots with the fault installed; write their outcomes; 0 when every slot completed."""
    from cohort.pipelines.spark import build_session
    from harness.reliability.cluster_kills import ClusterScenario

    scenario = ClusterScenario.from_json(sys.argv[1])
    spark = build_session(master=SPARK_MASTER, conf={"spark.ui.showConsoleProgress": "false", **SPARK_CONF})
    spark.sparkContext.setLogLevel("ERROR")
    runner = install(scenario.point, scenario.claim, scenario.release)
    outcomes = scenario.run_group(spark, runner)
    scenario.write_result(outcomes)
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
