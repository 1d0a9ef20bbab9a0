"""Terminating a worker run from the Dagster UI stops its Spark work, its JVM and its processes, and its member
leaves the group.

The path users take: `dagster-webserver` on the demo code location (its own code server process) and a
Dagster instance in a temporary DAGSTER_HOME with the default run launcher, which starts each run in a
process of the code server; the run is launched and terminated through the webserver's GraphQL API (the
mutations behind the UI's Launch and Terminate buttons). `dagster dev` would also start the daemon, whose
sensors launch runs of the group on their own; the webserver alone launches only this test's run.

The run's batch stalls (`COHORT_DEMO_STALL_S`: every task sleeps first), so it is terminated while its Spark
tasks are running. Every process the test starts carries a marker in its environment, so the run's processes
(run worker, step process, Spark JVM, Spark's Python workers) are found even after their parent died, and
killed if the test fails.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
from dagster_graphql import DagsterGraphQLClient

from cohort.assets.translator import DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.assignment.coordinator import Coordinator
from cohort.demo.definitions import DEMO_GROUP, DEMO_TOPIC, demo_config
from cohort.devtools.embedded_broker import free_port
from cohort.devtools.topics import create_topic, partition_counts
from cohort.devtools.ui import ui_environment

T = DagsterCohortTranslator()
MARKER = "COHORT_TERMINATE_TEST"
STOP_BOUND_S = 60.0
"""How long a terminated run may take to be CANCELED with no process left and its member gone."""


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    started: int
    name: str
    cmdline: str


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:  # gone, or not ours to read
        return b""


def _marked(marker: str) -> dict[int, Proc]:
    """Live processes whose environment carries `MARKER=marker` (zombies have none): this test's processes."""
    found = {}
    needle = f"{MARKER}={marker}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or needle not in _read(f"/proc/{entry}/environ").split(b"\0"):
            continue
        stat = _read(f"/proc/{entry}/stat").decode(errors="replace")
        if ")" not in stat:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, ..., starttime (field 22 of stat)
        if fields[0] == "Z":
            continue
        cmdline = _read(f"/proc/{entry}/cmdline").replace(b"\0", b" ").decode(errors="replace").strip()
        found[int(entry)] = Proc(int(entry), int(fields[1]), int(fields[19]), name, cmdline)
    return found


def _descendants(procs: dict[int, Proc], root: int) -> dict[int, Proc]:
    """`root` and every process below it in `procs`."""
    tree, frontier = {}, [root]
    while frontier:
        pid = frontier.pop()
        if pid in procs:
            tree[pid] = procs[pid]
        frontier += [p.pid for p in procs.values() if p.ppid == pid]
    return tree


def _kill(procs: dict[int, Proc]) -> None:
    """SIGKILL these processes by pid, each only if it is still the same process (same start time)."""
    for proc in procs.values():
        stat = _read(f"/proc/{proc.pid}/stat").decode(errors="replace")
        if ")" in stat and int(stat[stat.rindex(")") + 2 :].split()[19]) == proc.started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)


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
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        _kill(_marked(marker))
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


def test_terminating_a_worker_run_cancels_spark_ends_its_processes_and_leaves_the_group(
    kafka_config, produce_records, tmp_path
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
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")  # default run launcher and coordinator
    coordinator = Coordinator.from_url(env["COHORT_STORE_URL"])
    port = free_port()
    log = tmp_path / "webserver.log"

    with (
        _webserver(tmp_path, env, port, marker) as webserver,
        dg.DagsterInstance.local_temp(tempdir=str(home)) as instance,
    ):
        client = DagsterGraphQLClient("127.0.0.1", port_number=port)
        job = T.get_job_name(DEMO_GROUP)
        _wait_for(lambda: _loaded(port, job), 180, "the demo code location", log)
        before_launch = set(_marked(marker))  # the webserver and its code server

        started = time.monotonic()
        run_id = client.submit_job_execution(job, run_config=worker_run_config(demo_config(), 1))  # Launch
        worker = _wait_for(lambda: _run_worker_pid(instance, run_id), 120, "the run's process", log)
        seen: dict[int, Proc] = {}

        def in_batch() -> bool:
            """The run's JVM is up and runs Python workers (tasks), and its member holds partitions."""
            tree = _descendants(_marked(marker), worker)
            seen.update(tree)
            java = [p for p in tree.values() if p.name == "java"]
            tasks = any(p.ppid in {j.pid for j in java} for p in tree.values())
            member = [m for m in coordinator.describe_group(DEMO_GROUP).members if m.client_id == run_id]
            return bool(java and tasks and member and member[0].assigned)

        _wait_for(in_batch, 180, "the run's Spark tasks", log)
        assert client.get_run_status(run_id) is dg.DagsterRunStatus.STARTED
        in_batch_s = time.monotonic() - started

        client.terminate_run(run_id)  # the UI's Terminate
        terminated = time.monotonic()

        def stopped() -> bool:
            left = {pid: p for pid, p in _marked(marker).items() if pid not in before_launch}
            left = {pid: p for pid, p in left.items() if "resource_tracker" not in p.cmdline}  # the code server's
            members = [m for m in coordinator.describe_group(DEMO_GROUP).members if m.client_id == run_id]
            return not left and not members and client.get_run_status(run_id) is dg.DagsterRunStatus.CANCELED

        try:
            _wait_for(stopped, STOP_BOUND_S, "the run to be CANCELED with no process left and its member gone", log)
        except AssertionError:
            left = [(p.name, p.cmdline[:120]) for pid, p in _marked(marker).items() if pid not in before_launch]
            members = coordinator.describe_group(DEMO_GROUP).members
            status = client.get_run_status(run_id)
            raise AssertionError(f"status {status}; processes left: {left}; members: {members}\n{_tail(log)}") from None
        stop_s = time.monotonic() - terminated
        assert webserver.poll() is None  # the UI itself keeps running

    # the batch was canceled before its commit: nothing of this run in the ledger, its ranges are read again
    assert not [
        entry
        for partition in range(3)
        for entry in coordinator.ledger_history(DEMO_GROUP, DEMO_TOPIC, partition)
        if entry.run_id == run_id
    ]
    print(f"in batch after {in_batch_s:.1f} s; canceled, processes gone and member left {stop_s:.1f} s after Terminate")
