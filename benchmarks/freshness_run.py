"""One scheduled worker run in a fresh process, as Dagster's run launcher starts one (for benchmarks/freshness.py).

    python -m benchmarks.freshness_run JOB_JSON

JOB_JSON holds `bootstrap`, `group`, `topic`, `sink`, `store_url`, `remote` (a Spark Connect URL, or null: a local
Spark of the run's own, `SparkResource()`), `keep_session` (the kept-session prototype: the Spark Connect session,
which the URL names with `;session_id=`, is left open on the server at the run's end instead of being released),
`executor` and `report` (a path). The process does what `dagster api execute_run` does for a run of the group's
worker job: import the code (Dagster, PySpark, Cohort), build the Definitions (`build_cohort_definitions`: one
worker slot, `initial_rebalance_delay_s=0`, every other setting at its default), open the instance of
`$DAGSTER_HOME` and execute the job for slot 1, with `executor`:

- `in_process`: `execute_in_process`, the step in this process;
- `launched`: `dg.execute_job` on the reconstructable job with the job's own executor, as `dagster api
  execute_run` runs a launched run (the worker job's executor runs its step in the run process; a job with
  Dagster's default executor would start a step process that imports the code and rebuilds the job again).

It then writes the report: the run's outcome and a timeline in wall-clock seconds (`time.time()`, the clock of the
ledger's `committed_at` and of the parent's launch time):

- `main`: this module began (the interpreter is up); `imported`: Dagster, PySpark and Cohort imported;
  `defs`: the Definitions built and the job resolved; `instance`: the Dagster instance opened;
- `events`: the first and last time each Dagster event type was logged (RUN_START, STEP_START, ...);
- `join`: [start, end] of the member's `GroupMember.join()` (the group protocol's store transactions);
- `spark_session`: [start, end] of the first `SparkResource.get_session()`, `spark_close`: [start, end] of its
  `close()` at the run's end;
- `batch`: [start, end] of `run_batch`, its `stage_seconds`, the reading tasks' own `task_seconds` (per
  partition) and `parallelism_s`, the time `run_batch` spent asking the session's parallelism (a Spark job on a
  new Spark Connect session; nothing on a classic one);
- `executed`: the execution returned.

The step runs in this process (both ways), so one timeline holds everything. The timings come from thin wrappers
that only note the time: a subclass of `SparkResource`, the worker's `runner` hook around `run_batch`, and
`GroupMember.join` and `cohort.pipelines.batch.run.parallelism` wrapped in this process. Nothing else differs from a
plain run.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import types
from pathlib import Path
from typing import Any

STARTED = time.time()
"""When this module began to run (the interpreter and the few standard modules above are loaded)."""

JOB_VARIABLE = "COHORT_FRESHNESS_JOB"
"""The environment variable that hands JOB_JSON to `step_job` (which rebuilds the job from it)."""

_STATE = "_cohort_freshness_state"
"""The name in `sys.modules` of this process's timeline: one per process, whichever copy of this module uses it
(the reconstructable job imports this file as `benchmarks.freshness_run` beside `__main__`)."""


def _state() -> Any:
    state = sys.modules.get(_STATE)
    if state is None:
        state = sys.modules[_STATE] = types.ModuleType(_STATE)
        state.timeline = {"main": STARTED}
    return state


def build(job: dict[str, Any]) -> tuple[Any, Any]:
    """(the group's worker job, its CohortConfig), with the timing wrappers installed in this process."""
    import dagster as dg
    import pyspark.sql.types as T

    from cohort.assets.factory import build_cohort_definitions
    from cohort.assets.translator import CohortConfig, DagsterCohortTranslator
    from cohort.assignment.member import GroupMember
    from cohort.pipelines.batch.results import BatchResult
    from cohort.pipelines.batch.run import run_batch
    from cohort.pipelines.planning import batch_plan as batch
    from cohort.pipelines.spark import is_connect
    from cohort.pipelines.spec import PipelineSpec
    from cohort.resources import CohortGroupResource, KafkaResource, SparkResource

    timeline: dict[str, Any] = _state().timeline
    timeline.setdefault("imported", time.time())
    join = GroupMember.join
    parallelism = batch.parallelism

    def timed_join(self: GroupMember) -> Any:
        started = time.time()
        try:
            return join(self)
        finally:
            timeline.setdefault("join", [started, time.time()])

    def timed_parallelism(spark: Any) -> int:
        started = time.time()
        try:
            return parallelism(spark)
        finally:
            timeline["parallelism_s"] = timeline.get("parallelism_s", 0.0) + time.time() - started

    # once per process (a step process may build the job twice)
    if not getattr(batch, "_cohort_freshness_timed", False):
        GroupMember.join = timed_join  # type: ignore[method-assign]
        batch.parallelism = timed_parallelism
        batch._cohort_freshness_timed = True  # type: ignore[attr-defined]

    class TimedSparkResource(SparkResource):
        """SparkResource, noting when its session was opened and closed."""

        def get_session(self) -> Any:
            if self.started_session() is not None:
                return super().get_session()
            started = time.time()
            session = super().get_session()
            if job.get("keep_session"):
                session.release_session_on_close = False  # stop() closes the channel only
            timeline["spark_session"] = [started, time.time()]
            timeline["connect"] = is_connect(session)
            return session

        def close(self) -> None:
            started = time.time()
            super().close()
            timeline.setdefault("spark_close", [started, time.time()])

    def runner(spark: Any, *args: Any, **kwargs: Any) -> BatchResult:
        started = time.time()
        result = run_batch(spark, *args, **kwargs)
        timeline["batch"] = [started, time.time()]
        timeline["stage_seconds"] = dict(result.stage_seconds)
        timeline["task_seconds"] = [p.seconds for p in result.partitions]
        timeline["ranges"] = [[r.partition, r.from_offset, r.until_offset, r.records] for r in result.committed]
        return result

    schema = T.StructType([T.StructField("id", T.LongType(), nullable=False), T.StructField("kind", T.StringType())])
    config = CohortConfig(
        CohortGroupResource(
            group=job["group"],
            topics=[job["topic"]],
            worker_slots=1,
            store_url=job["store_url"],
            initial_rebalance_delay_s=0.0,
        ),
        pipeline=PipelineSpec(sink_path=job["sink"], value_format="json", value_schema=schema),
    )
    spark = TimedSparkResource() if job["remote"] is None else TimedSparkResource(master=None, remote=job["remote"])
    defs = build_cohort_definitions(
        [config], kafka=KafkaResource(bootstrap_servers=job["bootstrap"]), spark=spark, runner=runner
    )
    worker_job = defs.resolve_job_def(DagsterCohortTranslator().get_job_name(config.group))
    assert isinstance(worker_job, dg.JobDefinition)
    return worker_job, config


def step_job() -> Any:
    """The worker job as `dagster api execute_run` loads it (`dg.reconstructable` points here)."""
    return build(json.loads(os.environ[JOB_VARIABLE]))[0]


def main() -> int:
    job = json.loads(sys.argv[1])
    import dagster as dg

    from cohort.assets.worker import worker_run_config

    worker_job, config = build(job)
    timeline = _state().timeline
    timeline["defs"] = time.time()
    with dg.DagsterInstance.get() as instance:
        timeline["instance"] = time.time()
        run_config = worker_run_config(config, 1)
        if job["executor"] == "in_process":
            result = worker_job.execute_in_process(run_config=run_config, instance=instance, raise_on_error=False)
            success, run_id = result.success, result.run_id
            failures = [str(e.event_specific_data) for e in result.all_events if e.is_failure]
        else:
            from benchmarks import freshness_run  # this file as the module a step process imports

            os.environ[JOB_VARIABLE] = json.dumps(job)
            with dg.execute_job(
                dg.reconstructable(freshness_run.step_job), instance, run_config=run_config, raise_on_error=False
            ) as executed:
                success, run_id = executed.success, executed.run_id
                failures = [str(e.event_specific_data) for e in executed.all_events if e.is_failure]
        timeline["executed"] = time.time()
        events: dict[str, list[float]] = {}
        for entry in instance.all_logs(run_id):
            if entry.dagster_event is not None:
                name = entry.dagster_event.event_type_value
                seen = events.setdefault(name, [entry.timestamp, entry.timestamp])
                seen[0], seen[1] = min(seen[0], entry.timestamp), max(seen[1], entry.timestamp)
        timeline["events"] = events
    usage = resource.getrusage(resource.RUSAGE_SELF)
    timeline["cpu_s"] = usage.ru_utime + usage.ru_stime
    report = {"success": success, "run_id": run_id, "pid": os.getpid(), "failures": failures, **timeline}
    Path(job["report"]).write_text(json.dumps(report))
    return 0 if success else 1


if __name__ == "__main__":
    raise SystemExit(main())
