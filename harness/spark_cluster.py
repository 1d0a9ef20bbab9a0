"""A throwaway Spark standalone cluster for tests: one master and N workers, each its own JVM, from PySpark's
own distribution (`$SPARK_HOME/bin/spark-class`, SPARK_HOME being the installed `pyspark` package).

Loopback only: every daemon binds 127.0.0.1 (`--host`, and SPARK_LOCAL_IP for the web UIs, which bind
0.0.0.0 otherwise), the ports are free ones picked at start (no retry on the next port: a daemon whose port
was taken exits, and the start fails naming it), the master's REST submission server (port 6066 by default)
is off. Everything lives in one temporary directory: `conf/` (empty: no spark-env.sh or spark-defaults.conf
from the machine), `logs/` (each daemon's output) and `worker-<i>/work/` (each worker's work dir: an
application's executor `i` runs in `worker-<i>/work/<app id>/<executor id>/`, its stdout and stderr there).

`start()` waits until the master's web UI JSON (`http://127.0.0.1:<ui port>/json/`) lists every worker ALIVE,
and raises `SparkClusterError` with the tails of the daemons' logs when one exits or the cluster is not up
within `start_timeout_s`. Each daemon runs in a process group of its own (`spark-class` execs the JVM, and
the executors a worker launches and their Python workers stay in its group): `stop()` sends the groups
SIGTERM, then SIGKILL to whatever is left, so no JVM outlives the fixture.

Executors run `python` (default: this interpreter, the venv's, which imports `cohort`): the workers get it as
PYSPARK_PYTHON, and a driver must use it too (PySpark sends the driver's PYSPARK_PYTHON with every task).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import pyspark

from cohort.devtools.embedded_broker import free_port

__all__ = ["LOOPBACK", "SparkClusterError", "SparkStandaloneCluster", "spark_free_env", "spark_home"]

LOOPBACK = "127.0.0.1"

_DRIVER_ENV = (
    "PYSPARK_GATEWAY_PORT",
    "PYSPARK_GATEWAY_SECRET",
    "SPARK_REMOTE",
    "SPARK_CONNECT_MODE_ENABLED",
    "SPARK_LOCAL_REMOTE",
    "SPARK_CONF_DIR",
)
"""Variables that would make a PySpark driver attach to another JVM, use Spark Connect or read another
configuration directory: `spark_free_env` drops them."""


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Loopback requests never go through an HTTP proxy the environment may name."""


def spark_free_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) without what would make a Spark process attach to another
    JVM, use Spark Connect or read another configuration directory."""
    return {k: v for k, v in (os.environ if base is None else base).items() if k not in _DRIVER_ENV}


class SparkClusterError(RuntimeError):
    """The cluster did not come up (or a daemon died); the message holds the daemons' log tails."""


def spark_home() -> Path:
    """PySpark's distribution: the installed package holds `bin/spark-class` and `jars/`."""
    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        raise SparkClusterError(f"{home} is not a Spark distribution (no bin/spark-class or jars/)")
    return home


class SparkStandaloneCluster:
    """One master and `workers` workers (`cores` cores and `memory` each) under `root` (a new temporary
    directory when None, deleted by `stop`)."""

    def __init__(
        self,
        root: Path | None = None,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        python: str = sys.executable,
        start_timeout_s: float = 90.0,
    ) -> None:
        self._owns_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="cohort-spark-")) if root is None else root
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.python = python
        self.start_timeout_s = start_timeout_s
        self.home = spark_home()
        self.master_port = free_port()
        self.master_ui_port = free_port()
        self.worker_ui_ports = [free_port() for _ in range(workers)]
        self.startup_seconds: float | None = None
        self._processes: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._logs: list[IO[bytes]] = []

    # -- addresses and places ---------------------------------------------------------------------------------

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.master_port}"

    @property
    def master_ui_url(self) -> str:
        return f"http://{LOOPBACK}:{self.master_ui_port}"

    def work_dir(self, index: int) -> Path:
        """Worker `index`'s work dir: its executors run in `<app id>/<executor id>/` under it."""
        return self.root / f"worker-{index}" / "work"

    def log_path(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def executor_workers(self, app_id: str) -> dict[str, int]:
        """{executor id: index of the worker that ran it} for the application, from the workers' work dirs."""
        found: dict[str, int] = {}
        for index in range(self.workers):
            app_dir = self.work_dir(index) / app_id
            if app_dir.is_dir():
                found.update({entry.name: index for entry in app_dir.iterdir() if entry.is_dir()})
        return found

    def driver_env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment for a driver process of this cluster: executors run `python`, Spark binds loopback,
        and nothing points PySpark at another JVM, at Spark Connect or at another configuration."""
        env = spark_free_env(base)
        env.update(PYSPARK_PYTHON=self.python, PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP=LOOPBACK)
        env.update(SPARK_HOME=str(self.home), SPARK_CONF_DIR=str(self.root / "conf"))
        return env

    # -- status -----------------------------------------------------------------------------------------------

    def status(self, timeout_s: float = 2.0) -> dict[str, Any] | None:
        """The master's web UI JSON (workers, their state, cores used, applications), None if unreachable."""
        try:
            with _NO_PROXY.open(f"{self.master_ui_url}/json/", timeout=timeout_s) as response:
                return dict(json.load(response))
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def alive_workers(self, status: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        status = self.status() if status is None else status
        return [w for w in (status or {}).get("workers", []) if w.get("state") == "ALIVE"]

    def wait_idle(self, timeout_s: float = 60.0) -> None:
        """Wait until no application holds a core (an earlier driver's executors are gone), so the next
        application gets an executor on every worker."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._check_running()
            status = self.status()
            alive = self.alive_workers(status)
            if status and len(alive) == self.workers and all(w.get("coresused", 0) == 0 for w in alive):
                return
            if time.monotonic() > deadline:
                raise SparkClusterError(
                    f"the cluster still has busy or missing workers after {timeout_s:.0f} s: "
                    f"{json.dumps(status)}\n{self.log_tails()}"
                )
            time.sleep(0.25)

    def log_tails(self, lines: int = 30) -> str:
        """The last `lines` lines of each daemon's log."""
        parts = []
        for name in [name for name, _ in self._processes] or ["master"]:
            path = self.log_path(name)
            text = path.read_text(errors="replace") if path.exists() else "(no log)"
            tail = "\n".join(text.splitlines()[-lines:])
            parts.append(f"--- {path} (last {lines} lines)\n{tail}")
        return "\n".join(parts)

    # -- life cycle -------------------------------------------------------------------------------------------

    def _daemon_env(self) -> dict[str, str]:
        env = spark_free_env()
        no_retry = f"-Dspark.port.maxRetries=0 -Djava.io.tmpdir={self.root / 'tmp'}"
        env.update(
            SPARK_HOME=str(self.home),
            SPARK_CONF_DIR=str(self.root / "conf"),
            SPARK_LOCAL_IP=LOOPBACK,
            SPARK_PUBLIC_DNS=LOOPBACK,
            SPARK_LOCAL_DIRS=str(self.root / "tmp"),  # the workers' (and so the executors') scratch space
            SPARK_DAEMON_MEMORY="512m",
            SPARK_MASTER_OPTS=f"{no_retry} -Dspark.master.rest.enabled=false",
            SPARK_WORKER_OPTS=no_retry,
            PYSPARK_PYTHON=self.python,
        )
        return env

    def _launch(self, name: str, main_class: str, *args: str) -> None:
        log = self.log_path(name).open("wb")
        self._logs.append(log)
        process = subprocess.Popen(
            [str(self.home / "bin" / "spark-class"), main_class, *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._daemon_env(),
            cwd=self.root,
            start_new_session=True,  # its own process group: the JVM, its executors and their Python workers
        )
        self._processes.append((name, process))

    def _check_running(self) -> None:
        for name, process in self._processes:
            if process.poll() is not None:
                raise SparkClusterError(
                    f"Spark {name} (pid {process.pid}) exited with code {process.returncode}\n{self.log_tails()}"
                )

    def _wait(self, what: str, ready: Any, deadline: float) -> None:
        while True:
            self._check_running()
            if ready():
                return
            if time.monotonic() > deadline:
                raise SparkClusterError(
                    f"the Spark standalone cluster was not up within {self.start_timeout_s:.0f} s ({what}); "
                    f"master web UI {self.master_ui_url}/json/ said: {json.dumps(self.status())}\n{self.log_tails()}"
                )
            time.sleep(0.25)

    def start(self) -> SparkStandaloneCluster:
        """Start the master, then the workers once it is up; return when every worker is ALIVE."""
        started = time.monotonic()
        deadline = started + self.start_timeout_s
        for sub in ("conf", "logs", "tmp"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        atexit.register(self.stop)
        try:
            self._launch(
                "master",
                "org.apache.spark.deploy.master.Master",
                "--host", LOOPBACK, "--port", str(self.master_port), "--webui-port", str(self.master_ui_port),
            )  # fmt: skip
            self._wait("the master", lambda: (self.status() or {}).get("status") == "ALIVE", deadline)
            for index in range(self.workers):
                self.work_dir(index).mkdir(parents=True, exist_ok=True)
                self._launch(
                    f"worker-{index}",
                    "org.apache.spark.deploy.worker.Worker",
                    self.master_url,
                    "--cores", str(self.cores), "--memory", self.memory,
                    "--host", LOOPBACK, "--webui-port", str(self.worker_ui_ports[index]),
                    "--work-dir", str(self.work_dir(index)),
                )  # fmt: skip
            self._wait(f"{self.workers} workers ALIVE", lambda: len(self.alive_workers()) == self.workers, deadline)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM every daemon's process group, SIGKILL what is left after `timeout_s`; delete an owned root."""
        atexit.unregister(self.stop)
        processes = list(reversed(self._processes))  # workers first, then the master
        for _, process in processes:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for _, process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))
        for _, process in processes:  # the executors and Python workers left in the group, and any laggard
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)
        self._end_stragglers(timeout_s)
        for log in self._logs:
            log.close()
        self._logs.clear()
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def _stragglers(self) -> list[int]:
        """Processes still running in an executor directory of this cluster: PySpark's daemon puts itself and
        its Python workers in a process group of their own (and exits when its executor's pipe closes)."""
        root, found = str(self.root.resolve()), []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if os.readlink(entry / "cwd").startswith(root + os.sep):
                        found.append(int(entry.name))
        return found

    def _end_stragglers(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while (left := self._stragglers()) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def __enter__(self) -> SparkStandaloneCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
