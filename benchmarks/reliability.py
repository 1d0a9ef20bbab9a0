"""The fault-injection matrix: SIGKILL at every fault point, then a zombie (SIGSTOP), the broker going down
mid-batch and a wrong bootstrap address, each under the eager and the cooperative assignor; with
`--sinks delta,iceberg`, the SIGKILL matrix of the table sinks too (every table point, both formats).

Usage:
    python -m benchmarks.reliability [--sinks parquet,delta,iceberg] [--points after-join,mid-read]
        [--assignors sticky] [--sigkill-only] [--write]

Each scenario (harness/reliability/faults.py) kills a real worker run's process group (SIGKILL, Spark JVM
included) at one point, recovers through the membership sensor (a ManualClock skips the session timeout)
and audits the sink, the quarantine, the ledger, Kafka's committed offsets and the materializations, then
runs `cohort audit` on the group. `--sinks` picks the sink formats (default: parquet only): a Parquet
scenario dies at each of POINTS, a Delta Lake or Iceberg one at each of TABLE_POINTS
(harness/reliability/fault_points.py), and its tables are read with the format's own reader and DuckDB.
The script prints the markdown tables and, last, one JSON object; `--write` rewrites the sections of
benchmarks/RELIABILITY.md it ran (the Parquet matrix and the other faults; the table sinks' matrix) with the
tables and the exact command, and keeps the others. It exits non-zero when any scenario lost or duplicated a
record or left an audit problem. The other faults (run with the Parquet sink) are
harness/reliability/zombie_scenarios.py and broker_scenarios.py, the same scenarios test_zombies.py and
test_broker_faults.py assert on.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from benchmarks.soak import SECTION as SOAK_SECTION
from cohort.devtools.embedded_broker import EmbeddedBroker
from cohort.pipelines.spark import build_session
from harness.reliability.broker_scenarios import run_broker_down_scenario, run_wrong_bootstrap_scenario
from harness.reliability.faults import (
    ASSIGNORS,
    POINTS,
    SINK_FORMATS,
    TABLE_POINTS,
    FaultReport,
    points_for,
    run_fault_scenario,
)
from harness.reliability.outcome import FaultOutcome
from harness.reliability.zombie_scenarios import run_zombie_scenario

ROOT = Path(__file__).resolve().parents[1]

OUTPUT = ROOT / "benchmarks" / "RELIABILITY.md"
HEADER = "| fault | point | assignor | produced | lost | duplicated | recovered in s |\n|---|---|---|---|---|---|---|"
TABLE_HEADER = (
    "| sink | fault | point | assignor | produced | lost | duplicated | recovered in s |\n"
    "|---|---|---|---|---|---|---|---|"
)
TABLE_SECTION = (
    "<!-- tables: the section below is written by `python -m benchmarks.reliability --sinks delta,iceberg --write` -->"
)


def _csv(value: str, known: list[str], what: str) -> list[str]:
    chosen = [v.strip() for v in value.split(",") if v.strip()]
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise SystemExit(f"unknown {what} {unknown}; known: {known}")
    return chosen


def _verdict(problems: list[str], *, tables: bool = False) -> str:
    if problems:
        return "Audit problems:\n\n" + "\n".join(problems)
    read = (
        " (counted from the tables as deltalake and pyiceberg read them, and the sink\ntables again with DuckDB)"
        if tables
        else ""
    )
    return (
        f"Every scenario's audit passed: nothing lost, nothing written twice{read}, every partition's ledger\n"
        "contiguous from 0 to the produced count, Kafka's committed offset equal to the ledger's, every committed\n"
        "range shown by a materialization, and `cohort audit` finding nothing."
    )


BOUNDARIES: tuple[tuple[str, str], ...] = (
    (
        "after join, before sync",
        "`Coordinator.sync`, on entry: the join phase completed; the victim leads and never syncs, so the "
        "survivor's sync waits until the sensor removes the victim",
    ),
    ("after sync, before reading", "`GroupMember.join`, on return: the assignment is received, nothing read"),
    ("mid-read", "the executor-side `read_range`, after its first Arrow batch reached Spark"),
    (
        "after the sink write, before the ledger commit",
        "the ledger's `commit` of the batch's ranges, on entry: the ranges are staged (and counted), not yet published",
    ),
    ("after the ledger commit, before the Kafka mirror", "the mirror's `mirror`, on entry"),
    (
        "after the Kafka mirror, before the materialization events",
        "`cohort.assets.group_batch.materializations`, on entry: the member is still in the group "
        "(it leaves once its events are logged)",
    ),
    ("while heartbeating", "`Coordinator.heartbeat` on the heartbeat thread, once accepted while the batch runs"),
)


def _other_faults(spark: object, bootstrap: str, workdir: Path, assignor: str) -> list[FaultOutcome]:
    """The zombie and broker-fault scenarios under one assignor, one row each."""
    return [
        run_zombie_scenario(spark, bootstrap, workdir / f"zombie-{assignor}", assignor=assignor),
        run_broker_down_scenario(spark, workdir / f"down-read-{assignor}", point="read", assignor=assignor),
        run_broker_down_scenario(spark, workdir / f"down-plan-{assignor}", point="plan", assignor=assignor),
        run_wrong_bootstrap_scenario(spark, bootstrap, workdir / f"wrong-{assignor}", assignor=assignor),
    ]


OTHER_FAULTS = """## Zombies and broker faults

| fault | point | assignor | produced | lost | duplicated | recovered in s |
|---|---|---|---|---|---|---|
{rows}

Each: a topic of 2 partitions with 40 JSON records (one malformed) and a group of worker slots that are
real Dagster runs. SIGSTOP (zombie): the worker is paused inside its batch (after reading, before the sink
write) past its session; the membership sensor (ManualClock) expires it and its rerun commits everything;
resumed, the zombie's commit is refused (UNKNOWN_MEMBER_ID) before it publishes, so its output never becomes
visible and the ledger, Kafka's committed offsets and the sink stay as the rerun left them. Broker down: a
fault proxy in front of a broker that advertises the proxy (the embedded Tansu broker keeps its log in
memory, so closing and reopening the proxy stands in for a restart) goes down at the first Fetch of the read
or the first ListOffsets of the planning; the run fails with an error naming the partition and offset (or
the watermark request), nothing is committed or published, and once the broker is back the sensor's rerun
consumes everything once. Wrong bootstrap: a closed port; the run fails before joining with an error naming
the address, and the rerun with the right address consumes everything once. `recovered in s`: zombie, from
the pause to the rerun's success; broker down, from the broker's return to the end of the rerun; wrong
bootstrap, the rerun itself.
"""


TABLE_BOUNDARIES: tuple[tuple[str, str], ...] = (
    (
        "after staging, before the quarantine table commit",
        "the quarantine table's `commit` of the batch, on entry: both outputs staged, the quarantine's files placed "
        "in its data directories, no table commit; the ownership check recorded each partition's first position",
    ),
    (
        "after the quarantine table commit, before the sink table commit",
        "the quarantine table's `commit` of the batch, on return: the quarantine table holds the victim's "
        "partitions, the sink table nothing",
    ),
    (
        "after the sink table commit, before the ledger commit",
        "the sink table's `commit` of the batch, on return: both tables hold the victim's partitions, the ledger "
        "does not",
    ),
    ("after the ledger commit, before the Kafka mirror", "the mirror's `mirror`, on entry (as for Parquet)"),
    (
        "after the Kafka mirror, before the materialization events",
        "`cohort.assets.group_batch.materializations`, on entry (as for Parquet)",
    ),
)
"""Where each table point kills: a wrapper of the stores `cohort.pipelines.tables.batch.open_tables` returns
(commits with a batch record only: fences and roll-backs go through), or the Parquet points' wrappers."""


def _header(what: str, count: int, seconds: float, command: str) -> str:
    load, when = os.getloadavg()[0], datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""Produced by `python -m benchmarks.reliability` on {when}, {count} {what} in
{seconds:.0f} s, on a 2-core machine shared with other engineers' test runs (load average {load:.1f} at the end), from
the repository root with the project's venv:

```
{command}
```"""


TABLE_FINDINGS = """## What the table matrix found

- after the sink table commit, before the ledger commit: nothing is lost or written twice (the rerun adopts the
  victim's sink-table commit into the ledger, under the victim's run id, and reads nothing again), but the
  adopted ranges have **no materialization** once recovery is over: the batch that adopts them reports only
  the ranges it read itself (`BatchResult.committed`), and the rerun reports its lost run's ledger ranges
  (`unreported_materializations`) before its batch runs, so before the adoption. The next run of the slot
  reports them from the ledger; until then the audit trail has a hole (the offsets_contiguous check fails).
  Open in the product; tests/assets/test_table_fault_matrix.py xfails on exactly this problem."""


def render_tables(reports: list[FaultReport], command: str, seconds: float) -> str:
    """The table sinks' section of RELIABILITY.md (from its marker on)."""
    rows = "\n".join(r.outcome.sink_row() for r in reports)
    problems = [f"- {o.sink} {o.point} / {o.assignor}: {p}" for o in (r.outcome for r in reports) for p in o.problems]
    boundaries = "\n".join(f"| {point} | {where} |" for point, where in TABLE_BOUNDARIES)
    return f"""{TABLE_SECTION}
## The table sinks (Delta Lake, Iceberg)

{_header("table-sink scenarios", len(reports), seconds, command)}

{TABLE_HEADER}
{rows}

{_verdict(problems, tables=True)}

The same scenario as the Parquet rows (above, "What one row is"), with `PipelineSpec(table_format="delta")` or
`"iceberg"` (the default SQLite catalog under the sink path). A table batch commits the quarantine table, then
the sink table, then the ledger, then mirrors to Kafka (cohort.pipelines.tables.batch), so its points are:

| point | boundary wrapped in the victim |
|---|---|
{boundaries}

`lost` and `duplicated` are counted from the sink and quarantine tables as the format's own reader returns
them (deltalake, pyiceberg), and again with the sink table's Arrow data read by DuckDB; the ledger, Kafka's
committed offsets and the materializations are audited as for Parquet, and `cohort audit` (Kafka compared) must
find nothing. `recovered in s` is measured as for Parquet. The test (tests/assets/test_table_fault_matrix.py)
also checks what the victim left: after staging, nothing in either table; after the quarantine commit, the
victim's partitions in the quarantine table only (the next batch rolls them back); after the sink table commit,
in both tables and not in the ledger (the next batch adopts the commit); after the ledger commit, in both tables
and the ledger, not in Kafka.

{TABLE_FINDINGS}
"""


def render(reports: list[FaultReport], others: list[FaultOutcome], command: str, seconds: float) -> str:
    """RELIABILITY.md: the tables, the command that made them, and how to read them."""
    rows = "\n".join(r.outcome.row() for r in reports)
    outcomes = [r.outcome for r in reports] + others
    problems = [f"- {o.fault} {o.point} / {o.assignor}: {p}" for o in outcomes for p in o.problems]
    other_rows = OTHER_FAULTS.format(rows="\n".join(o.row() for o in others)) if others else ""
    boundaries = "\n".join(f"| {point} | {where} |" for point, where in BOUNDARIES)
    return f"""# Reliability: the fault-injection matrix

{_header("scenarios", len(reports) + len(others), seconds, command)}

{HEADER}
{rows}

{_verdict(problems)}

{other_rows}
## What one row is

A topic of 4 partitions holds 100 JSON records (2 of them malformed: they must end up in the quarantine).
A group of two worker slots consumes it; each slot is a real Dagster run of the group's worker job. The
victim (slot 1) runs in its own process group with its own Spark JVM and joins first; the survivor (slot 2)
joins the same generation, so the assignor (`sticky` is eager, `cooperative-sticky` cooperative) splits the
partitions 2 + 2, and waits at a gate before its batch. The victim SIGKILLs its whole process group (the
Spark JVM and, for the mid-read point, the executor's Python worker too) at the point of the row, from a
test-side wrapper of the real function at that boundary (harness/reliability/fault_worker.py):

| point | boundary wrapped in the victim |
|---|---|
{boundaries}

Recovery goes through the sensors: the membership sensor ticks with a ManualClock set just past the
victim's session deadline (the survivor, which heartbeats, stays live), expires the victim, rebalances and
requests a rerun of slot 1; the killed run is then marked failed, as Dagster's run monitoring does for a dead
run worker, and the sensor ticks again (a victim that had left the group before dying, as at the last
point, is found this way; no slot is rerun twice). The survivor then finishes through the rebalance (eager:
it commits before rejoining; cooperative: it rejoins on its heartbeat thread and commits in the new
generation; after a kill before sync it rejoins and takes every partition), and the requested rerun runs.
`lost` and `duplicated` count offsets of the produced records missing from, or present more than once in,
the sink and the quarantine together; the audit also checks each partition's ledger (contiguous from 0 to
the produced count) against Kafka's committed offsets and the materializations.

`recovered in s` is wall time from the kill to the end of the rerun that completes recovery, on this
loaded machine. The ManualClock skips the wait a deployment adds in front of it: the member's session
timeout (`session_timeout_s`, 30 s by default) plus up to one membership-sensor interval (15 s by
default), about 30 to 45 s more with the defaults; for a run that died after leaving the group, the run
monitoring's detection of the dead run worker instead.

## What the matrix found

Two points failed the audit before fixes in the product:

- after the ledger commit, before the Kafka mirror: the rerun found nothing new to read and mirrored
  nothing, so Kafka's committed offsets stayed behind the ledger for good (lag tools showed lag that was not
  there). `run_batch` now mirrors the ledger head of every planned partition with nothing new to commit.
- after the Kafka mirror, before the materialization events (and after the ledger commit): committed ranges
  had no materialization, a hole in the audit trail. A rerun (tagged `cohort/rerun_of`) now reports the
  ranges its lost run committed but never materialized, from the ledger, which records the run id
  (`Coordinator.run_ledger_history`).
"""


def _write(main: str | None, tables: str | None) -> None:
    """Rewrite the sections of RELIABILITY.md that ran (the main page; the table sinks' section), keeping the
    others and the soak's section (benchmarks/soak.py writes it, from its marker on)."""
    current = OUTPUT.read_text() if OUTPUT.exists() else ""
    before_soak, marker, soak = current.partition(SOAK_SECTION)
    old_main, table_marker, old_tables = before_soak.partition(TABLE_SECTION)
    sections = [main or old_main, tables or (f"{table_marker}{old_tables}" if table_marker else ""), marker + soak]
    OUTPUT.write_text("\n\n".join(part.strip("\n") for part in sections if part.strip()) + "\n")


def _plan(sinks: list[str], points: list[str] | None) -> list[tuple[str, str]]:
    """(sink format, point) pairs to run, in order: every point of each sink, or the chosen ones it has."""
    return [(sink, p.key) for sink in sinks for p in points_for(sink) if points is None or p.key in points]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--sinks",
        default="parquet",
        help=f"comma-separated subset of {list(SINK_FORMATS)} (default parquet; delta and iceberg run TABLE_POINTS)",
    )
    parser.add_argument(
        "--points",
        default=None,
        help=f"comma-separated subset of the chosen sinks' points (default: all): parquet {[p.key for p in POINTS]}, "
        f"delta and iceberg {[p.key for p in TABLE_POINTS]}",
    )
    parser.add_argument("--assignors", default=",".join(ASSIGNORS), help=f"comma-separated subset of {ASSIGNORS}")
    parser.add_argument(
        "--sigkill-only", action="store_true", help="skip the zombie and broker-fault scenarios (Parquet sink)"
    )
    parser.add_argument("--write", action="store_true", help=f"rewrite {OUTPUT.relative_to(ROOT)}")
    args = parser.parse_args()
    sinks = _csv(args.sinks, list(SINK_FORMATS), "sinks")
    known = sorted({p.key for sink in sinks for p in points_for(sink)})
    points = _csv(args.points, known, "points") if args.points is not None else None
    assignors = _csv(args.assignors, list(ASSIGNORS), "assignors")
    plan = _plan(sinks, points)
    command = "python -m benchmarks.reliability " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    reports: list[FaultReport] = []
    others: list[FaultOutcome] = []
    seconds = {"parquet": 0.0, "tables": 0.0}
    started = time.perf_counter()
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory(prefix="cohort-reliability-") as tmp:
        spark = build_session(
            master="local[2]", app_name="cohort-reliability", conf={"spark.sql.shuffle.partitions": "2"}
        )
        spark.sparkContext.setLogLevel("ERROR")
        # start the Python worker pool: part of starting Spark, not of any scenario's recovery
        spark.range(2, numPartitions=2).mapInArrow(lambda batches: batches, "id long").count()
        seconds["parquet" if "parquet" in sinks else "tables"] += time.perf_counter() - started
        try:
            for sink, point in plan:
                for assignor in assignors:
                    began = time.perf_counter()
                    report = run_fault_scenario(
                        point,
                        assignor,
                        bootstrap=broker.bootstrap_servers,
                        spark=spark,
                        workdir=Path(tmp) / f"{sink}-{point}-{assignor}",
                        table_format=sink,
                    )
                    seconds["parquet" if sink == "parquet" else "tables"] += time.perf_counter() - began
                    reports.append(report)
                    print(report.outcome.row() if sink == "parquet" else report.outcome.sink_row(), flush=True)
                    timings = ", ".join(f"{k} {v:.1f}" for k, v in report.timings.items())
                    print(f"  {sink} {point} / {assignor}: {timings}", file=sys.stderr, flush=True)
            began = time.perf_counter()
            for assignor in [] if args.sigkill_only or "parquet" not in sinks else assignors:
                for outcome in _other_faults(spark, broker.bootstrap_servers, Path(tmp), assignor):
                    others.append(outcome)
                    print(outcome.row(), flush=True)
            seconds["parquet"] += time.perf_counter() - began
        finally:
            spark.stop()
    total = time.perf_counter() - started
    parquet = [r for r in reports if r.outcome.sink == "parquet"]
    tables = [r for r in reports if r.outcome.sink != "parquet"]
    print()
    if parquet or others:
        print(HEADER)
        for outcome in [r.outcome for r in parquet] + others:
            print(outcome.row())
    if tables:
        print(TABLE_HEADER)
        for report in tables:
            print(report.outcome.sink_row())
    outcomes = [r.outcome for r in reports] + others
    failed = [o for o in outcomes if o.lost or o.duplicated or o.problems]
    for outcome in failed:
        for problem in outcome.problems:
            print(
                f"problem: {outcome.sink} {outcome.fault} {outcome.point} / {outcome.assignor}: {problem}",
                file=sys.stderr,
            )
    if args.write:
        _write(
            render(parquet, others, command.strip(), seconds["parquet"]) if parquet or others else None,
            render_tables(tables, command.strip(), seconds["tables"]) if tables else None,
        )
    print(
        json.dumps(
            {
                "scenarios": len(outcomes),
                "lost": sum(o.lost for o in outcomes),
                "duplicated": sum(o.duplicated for o in outcomes),
                "problems": sum(len(o.problems) for o in outcomes),
                "max_recovered_s": round(max((o.recovered_s for o in outcomes), default=0.0), 2),
                "seconds": round(total, 1),
            }
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
