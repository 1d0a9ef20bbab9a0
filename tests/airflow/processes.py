"""Airflow 3 as separate processes for a test: api-server, scheduler, dag-processor and triggerer on one home.

Each component is started in its own session (`setsid`) with a marker environment variable whose value is
unique to this deployment. `stop()` finds every process of the deployment, whatever happened in the test: those in
the components' sessions (LocalExecutor workers; task runners, which lead their own process group in the
scheduler's session; the triggerer's runner), those carrying the marker (Spark's JVMs and Python workers, even
orphaned; the processes that set their title overwrote their initial environment, so the marker alone misses
them) and their descendants; it kills them by process group, SIGTERM then SIGKILL. Runs are triggered and
followed through the REST API (a token from /auth/token with the SimpleAuthManager's generated password); task
instances and asset events are read from the SQLite metadata database (`AirflowHome`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from cohort.devtools.embedded_broker import free_port
from tests.airflow.support import AirflowHome
from tests.support.polling import poll
from tests.support.processes import marked

MARKER = "COHORT_AIRFLOW_E2E"
"""The environment variable every process of a deployment carries (value: the deployment's token)."""
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
FINISHED = ("success", "failed")

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float, interval_s: float = 1.0) -> T:
    """Poll `probe` until it answers something truthy; AssertionError naming `what` after `timeout_s`."""
    return poll(probe, timeout_s=timeout_s, what=what, interval_s=interval_s)


def processes() -> dict[int, tuple[str, int, int, int]]:
    """Every process: pid -> (state, parent pid, process group, session)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # gone meanwhile
            continue
        found[int(entry.name)] = (fields[0], int(fields[1]), int(fields[2]), int(fields[3]))
    return found


def marked_pids(token: str) -> set[int]:
    """Live processes whose environment holds MARKER=token. A process that set its title (setproctitle: Airflow's
    components, workers and task runners) overwrote its initial environment block: it is found by its session."""
    return set(marked(MARKER, token))


def group_alive(pgid: int) -> bool:
    """Whether any process is left in process group `pgid` (zombies aside)."""
    return any(state != "Z" and group == pgid for state, _ppid, group, _sid in processes().values())


class AirflowProcesses:
    """The four components of one Airflow home, started with `start()`, stopped (all marked processes) by `stop()`."""

    def __init__(self, home: AirflowHome, **settings: str) -> None:
        self.home = home
        self.token = uuid.uuid4().hex
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.settings = {
            MARKER: self.token,
            "AIRFLOW__API__PORT": str(self.port),
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base}/execution/",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
            "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
            **settings,
        }
        self.logs = home.root / "logs-e2e"
        self.children: list[subprocess.Popen[bytes]] = []
        self._bearer: str | None = None

    # ------------------------------------------------------------------------------ life cycle

    def start(self, timeout_s: float = 180) -> None:
        """Start the components (each in its own session) and wait until the API reports them healthy."""
        self.logs.mkdir(exist_ok=True)
        env = self.home.env(**self.settings)
        for component in COMPONENTS:
            with open(self.logs / f"{component}.log", "wb") as out:
                self.children.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "airflow", component],
                        env=env,
                        cwd=self.home.root,
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        wait_for("a healthy Airflow (api-server /api/v2/monitor/health)", self._healthy, timeout_s, 2.0)

    def _healthy(self) -> bool:
        for child, component in zip(self.children, COMPONENTS, strict=True):
            assert child.poll() is None, f"airflow {component} exited {child.returncode}:\n{self.log_tail(component)}"
        try:
            with urllib.request.urlopen(f"{self.base}/api/v2/monitor/health", timeout=10) as answer:
                health = json.load(answer)
        except (OSError, ValueError):
            return False
        parts = ("metadatabase", "scheduler", "triggerer", "dag_processor")
        return all((health.get(part) or {}).get("status") == "healthy" for part in parts)

    def pids(self) -> set[int]:
        """Every live process of this deployment: in the components' sessions (task runners lead their own process
        group in the scheduler's session), marked by the environment (Spark's JVMs and Python workers, even when
        orphaned), or a descendant of one of those."""
        table = {pid: v for pid, v in processes().items() if v[0] != "Z"}
        sessions = {child.pid for child in self.children}  # each component leads its session (setsid)
        found = {pid for pid, (_s, _p, group, sid) in table.items() if sid in sessions or group in sessions}
        found |= marked_pids(self.token) & table.keys()
        grown = True
        while grown:
            more = {pid for pid, (_s, parent, _g, _sid) in table.items() if parent in found} - found
            found |= more
            grown = bool(more)
        return found

    def stop(self, grace_s: float = 5.0) -> list[int]:
        """SIGTERM every process group of the deployment, SIGKILL what is left after `grace_s`; the pids found."""
        first = sorted(self.pids())
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                pids = self.pids()
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(os.getpgid(pid), sig)
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, sig)
                for child in self.children:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        child.wait(timeout=0.1)
                time.sleep(0.5)
        for child in self.children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)
        left = self.pids()
        assert not left, f"processes of the Airflow deployment survived SIGKILL: {sorted(left)}"
        return first

    def log_tail(self, component: str, chars: int = 4000) -> str:
        path = self.logs / f"{component}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else "<no log>"

    def diagnostics(self) -> str:
        """The tail of every component's log (for assertion messages)."""
        return "\n".join(f"--- {c} ---\n{self.log_tail(c, 2500)}" for c in COMPONENTS)

    # ---------------------------------------------------------------------------------- REST

    def _token(self) -> str:
        if self._bearer is None:
            passwords = json.loads((self.home.root / "simple_auth_manager_passwords.json.generated").read_text())
            user, password = next(iter(passwords.items()))
            answer = self._call("POST", "/auth/token", {"username": user, "password": password}, auth=False)
            self._bearer = str(answer["access_token"])
        return self._bearer

    def _call(self, method: str, path: str, body: Any = None, *, auth: bool = True) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self._token()}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return json.load(answer)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{method} {path}: HTTP {exc.code}: {exc.read()[:2000]!r}") from None

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """A call of Airflow's public REST API (`/api/v2/...`), its JSON answer."""
        return self._call(method, path, body)

    def wait_dag(self, dag_id: str, timeout_s: float = 180) -> None:
        """Wait until the dag-processor has parsed `dag_id` (active, unpaused) and its watcher's trigger runs."""

        def parsed() -> bool:
            dags = self.api("GET", "/api/v2/dags?limit=100")["dags"]
            return any(d["dag_id"] == dag_id and not d["is_paused"] for d in dags)

        try:
            wait_for(f"DAG {dag_id} to be parsed", parsed, timeout_s, 2.0)
        except AssertionError as exc:
            errors = self.api("GET", "/api/v2/importErrors")
            raise AssertionError(f"{exc}; import errors: {errors}\n{self.diagnostics()}") from None

    def trigger(self, dag_id: str, run_id: str) -> None:
        """Start a manual run of `dag_id`."""
        self.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"dag_run_id": run_id, "logical_date": None})

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        """Every run of `dag_id`, oldest first (run_id, state, run_type, ...)."""
        runs = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100&order_by=id")["dag_runs"]
        return list(runs)

    def wait_run(self, dag_id: str, run_id: str, timeout_s: float = 300) -> str:
        """Wait until run `run_id` finished; its state."""

        def finished() -> str | None:
            state = self.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]
            return str(state) if state in FINISHED else None

        try:
            return wait_for(f"run {run_id} of {dag_id} to finish", finished, timeout_s, 2.0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.diagnostics()}") from None

    # ---------------------------------------------------------------------------- metadata DB

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        """Rows of a read-only query of the metadata database."""
        with contextlib.closing(sqlite3.connect(f"file:{self.home.database}?mode=ro", uri=True, timeout=30)) as db:
            return db.execute(sql, params).fetchall()


@contextlib.contextmanager
def running(home: AirflowHome, **settings: str) -> Iterator[AirflowProcesses]:
    """The home's Airflow running as separate processes; every one of them killed on exit, even on failure."""
    airflow = AirflowProcesses(home, **settings)
    try:
        airflow.start()
        yield airflow
    finally:
        airflow.stop()
