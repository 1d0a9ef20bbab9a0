"""Terminating a worker run from the Dagster UI stops its Spark work, its JVM and its processes, and its member
leaves the group.

The path users take: `dagster-webserver` on the demo code location (its own code server process) and a
Dagster instance in a temporary DAGSTER_HOME with the default run launcher, which starts each run in a
process of the code server; the run is launched and terminated through the webserver's GraphQL API (the
mutations behind the UI's Launch and Terminate buttons). The instance launches runs at once
(`DefaultRunCoordinator`): the default queue is served by the daemon, which `dagster dev` starts together with
sensors that launch runs of the group on their own.

The run's batch stalls (`COHORT_DEMO_STALL_S`: every task sleeps first), so it is terminated while its Spark
tasks run. Every process the test starts carries a marker in its environment, so the run's processes (run
worker, step process, Spark JVM, Spark's Python workers) are found even after their parent died, and killed
if the test fails. The JVM must be gone before the Python process driving it: the Spark resource ended it,
not the end of its parent (which closes the JVM's stdin).
"""

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
from dagster_graphql import DagsterGraphQLClient

from cohort.assets.translator import DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.assignment.coordinator import Coordinator
from cohort.demo.definitions import DEMO_GROUP, DEMO_TOPIC, demo_config
from cohort.devtools.embedded_broker import free_port
from cohort.devtools.topics import create_topic, partition_counts
from cohort.devtools.ui import stop_process_group, ui_environment
from cohort.resources import SparkResource
from tests.support.processes import Proc, alive, descendants, kill, marked

T = DagsterCohortTranslator()
MARKER = "COHORT_TERMINATE_TEST"
INSTANCE_YAML = """\
telemetry:
  enabled: false
run_coordinator:  # launch at once (the default queue is served by the daemon); the run launcher is the default
  module: dagster._core.run_coordinator
  class: DefaultRunCoordinator
"""
pytestmark = pytest.mark.filterwarnings("ignore:Using variable_values:DeprecationWarning")  # inside the GraphQL client
STOP_BOUND_S = 60.0
"""How long a terminated run may take to be CANCELED with no process left and its member gone."""


def _marked(marker: str) -> dict[int, Proc]:
    """Live processes whose environment carries `MARKER=marker` (zombies have none): this test's processes."""
    return marked(MARKER, marker)


def _watch_ends(procs: list[Proc], since: float) -> dict[int, float]:
    """Seconds after `since` at which each process ended, filled in by a thread polling every 20 ms (bounded)."""
    ended: dict[int, float] = {}

    def poll() -> None:
        deadline = since + STOP_BOUND_S
        while len(ended) < len(procs) and time.monotonic() < deadline:
            for proc in procs:
                if proc.pid not in ended and not alive(proc):
                    ended[proc.pid] = time.monotonic() - since
            time.sleep(0.02)

    threading.Thread(target=poll, name="watch-ends", daemon=True).start()
    return ended


def _wait_for(predicate: Callable[[], Any], timeout_s: float, what: str, log: Path) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}; webserver log:\n{_tail(log)}")


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:] if log.exists() else "(no log)"


@contextlib.contextmanager
def _webserver(root: Path, env: dict[str, str], port: int, marker: str) -> Iterator[subprocess.Popen[bytes]]:
    """`dagster-webserver -m cohort.demo.definitions` on 127.0.0.1:`port`; on exit it is stopped and every process
    carrying the marker is killed."""
    webserver = str(Path(sys.executable).parent / "dagster-webserver")
    command = [webserver, "-m", "cohort.demo.definitions", "-h", "127.0.0.1", "-p", str(port)]
    log = open(root / "webserver.log", "wb")  # noqa: SIM115 - closed below, after the server
    process = subprocess.Popen(command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield process
    finally:
        stop_process_group(process)
        kill(_marked(marker))
        log.close()


def _run_worker_pid(instance: dg.DagsterInstance, run_id: str) -> int | None:
    """The pid of the run's process, from its engine event "Started process for run (pid: N)"."""
    for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        event = record.dagster_event
        metadata = event.engine_event_data.metadata if event and event.engine_event_data else {}
        if "pid" in metadata:
            return int(metadata["pid"].value)
    return None


JOBS = """{ workspaceOrError { ... on Workspace { locationEntries { locationOrLoadError {
  ... on RepositoryLocation { repositories { jobs { name } } } } } } } }"""
"""The jobs of the webserver's code locations (GraphQL)."""


def _loaded(port: int, job: str) -> bool:
    """Whether the webserver answers and its code location is loaded with `job`."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": JOBS}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return f'"{job}"' in answer.read().decode()
    except OSError:
        return False


OWN_SESSION = """
import contextlib
import os
import dagster as dg
from cohort.resources import SparkResource

def jvms():
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        name, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
        if name == "java" and int(fields[1]) == os.getpid():  # a JVM this process started
            found.append(int(pid))
    return found

first, second = contextlib.ExitStack(), contextlib.ExitStack()
creator = first.enter_context(dg.build_resources({"spark": SparkResource(master="local[1]")})).spark
sharer = second.enter_context(dg.build_resources({"spark": SparkResource(master="local[1]")})).spark
assert creator.get_session().range(3).count() == 3
assert sharer.get_session().range(4).count() == 4  # a second run in the process shares the session
started = jvms()
first.close()  # the run that created it ends first: the other still uses it
assert sharer.get_session().range(5).count() == 5
second.close()  # the last one ends: the session stops and the JVM ends
print(len(started), len(jvms()))
"""


@pytest.mark.slow
def test_the_spark_resource_stops_the_session_it_created_and_ends_its_jvm():
    """A process with no Spark session: a run's resource creates one, a second run's shares it, and the end of
    the last run (Dagster's resource teardown) stops it and ends its JVM while the process lives on."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    done = subprocess.run(
        [sys.executable, "-c", OWN_SESSION], capture_output=True, text=True, timeout=240, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["1", "0"], done.stdout  # one JVM during the run, none after it


def test_the_spark_resource_never_stops_a_session_it_did_not_create(spark):
    """The tests' shared session (or any session started before the run): the resource uses it and leaves it."""
    with dg.build_resources({"spark": SparkResource(master="local[1]")}) as resources:
        assert resources.spark.get_session().sparkContext is spark.sparkContext
    assert spark.range(3).count() == 3


@pytest.mark.slow
@pytest.mark.dagster_processes
@pytest.mark.parametrize("slot", [1, None], ids=["slot-1", "all-slots"])
def test_terminating_a_worker_run_cancels_spark_ends_its_processes_and_leaves_the_group(
    kafka_config, produce_records, tmp_path, slot
):
    if DEMO_TOPIC not in partition_counts(kafka_config, [DEMO_TOPIC]):
        create_topic(kafka_config, DEMO_TOPIC, 3)
    events = [(i % 3, None, f'{{"event_id": {i}, "kind": "view", "amount": 1.0}}'.encode()) for i in range(12)]
    produce_records(DEMO_TOPIC, events)
    marker = uuid.uuid4().hex
    env = {
        **os.environ,
        **ui_environment(kafka_config["bootstrap.servers"], tmp_path),
        "COHORT_DEMO_STALL_S": "600",  # every Spark task of the batch sleeps 10 minutes first
        MARKER: marker,
    }
    home = Path(env["DAGSTER_HOME"])
    home.mkdir()
    (home / "dagster.yaml").write_text(INSTANCE_YAML)
    coordinator = Coordinator.from_url(env["COHORT_STORE_URL"])
    port = free_port()
    log = tmp_path / "webserver.log"

    def members_of(run_id: str) -> list[Any]:
        return [m for m in coordinator.describe_group(DEMO_GROUP).members if m.client_id == run_id]

    with (
        _webserver(tmp_path, env, port, marker) as webserver,
        dg.DagsterInstance.local_temp(tempdir=str(home)) as instance,
    ):
        client = DagsterGraphQLClient("127.0.0.1", port_number=port)
        job = T.get_job_name(DEMO_GROUP)
        _wait_for(lambda: _loaded(port, job), 180, "the demo code location", log)
        before_launch = set(_marked(marker))  # the webserver and its code server

        started = time.monotonic()
        run_id = client.submit_job_execution(job, run_config=worker_run_config(demo_config(), slot))  # Launch
        worker = _wait_for(lambda: _run_worker_pid(instance, run_id), 120, "the run's process", log)

        def jvm() -> Proc | None:
            """The run's Spark JVM once it runs Python workers (tasks), while its members hold partitions."""
            tree = descendants(_marked(marker), worker)
            java = [p for p in tree.values() if p.name == "java" and any(c.ppid == p.pid for c in tree.values())]
            holding = [m for m in members_of(run_id) if m.assigned]
            return java[0] if java and len(holding) == (1 if slot else 3) else None

        java = _wait_for(jvm, 180, "the run's Spark tasks", log)
        assert client.get_run_status(run_id) is dg.DagsterRunStatus.STARTED
        in_batch_s = time.monotonic() - started

        driver = _marked(marker)[java.ppid]  # the Python process that drives the JVM (the step's)
        terminated = time.monotonic()
        gone = _watch_ends([java, driver], terminated)
        client.terminate_run(run_id)  # the UI's Terminate
        deadline = terminated + STOP_BOUND_S
        while time.monotonic() < deadline:
            marked = _marked(marker)
            left = [p for pid, p in marked.items() if pid not in before_launch and "resource_tracker" not in p.cmdline]
            status = client.get_run_status(run_id)
            if not left and not members_of(run_id) and status is dg.DagsterRunStatus.CANCELED:
                break
            time.sleep(0.1)
        else:
            left_names = [(p.name, p.cmdline[:120]) for p in left]
            raise AssertionError(
                f"{STOP_BOUND_S:.0f} s after Terminate: status {status}, processes left {left_names}, "
                f"members {members_of(run_id)}\n{_tail(log)}"
            )
        stop_s = time.monotonic() - terminated
        _wait_for(lambda: len(gone) == 2, 5, "the watcher to see the JVM and its driver end", log)
        assert webserver.poll() is None  # the UI itself keeps running
        messages = [record.user_message for record in instance.all_logs(run_id)]

    # the run canceled its Spark jobs, and the Spark resource ended the JVM before the run's process exited
    assert any("canceling the Spark jobs" in m for m in messages), messages
    assert any("closed" in m and "members of slot(s)" in m for m in messages), messages
    assert gone[java.pid] < gone[driver.pid], gone
    # the batch was canceled before its commit: nothing of this run in the ledger, its ranges are read again
    assert not [
        entry
        for partition in range(3)
        for entry in coordinator.ledger_history(DEMO_GROUP, DEMO_TOPIC, partition)
        if entry.run_id == run_id
    ]
    print(
        f"in batch after {in_batch_s:.1f} s; after Terminate: JVM gone in {gone[java.pid]:.1f} s, its driver process "
        f"in {gone[driver.pid]:.1f} s, everything in {stop_s:.1f} s"
    )
