"""docs/deployment.md's standalone cluster and Spark Connect server, started with the page's commands.

The page's blocks run as a user runs them: each daemon's command with bash, after the page's "every
terminal" block, in a process group of its own, from a fresh directory, with the virtualenv's commands on
PATH and no SPARK_HOME (pip's `spark-class` finds its distribution itself). Only the ports change: free
ones replace 7077, 8080, 8081 and 15002 (other tests and daemons of the machine may hold those).

- In `make test`: the master and the worker come up, and the master lists the worker ALIVE with the cores
  and memory the page gives it.
- Slow: the page's Python blocks run Cohort's `SparkResource` on the cluster (an application whose executor
  runs on the worker) and on the page's Spark Connect server, itself an application of the cluster holding one
  core.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cohort.devtools.embedded_broker import free_port
from harness.spark_cluster import spark_free_env
from tests.support.doc_blocks import replace_all, titled_blocks

PAGE = "deployment.md"
DAEMONS = ("master", "worker", "Spark Connect server")
pytestmark = pytest.mark.spark_cluster  # the page starts its own master and worker

SCRIPTS = ("use the cluster", "use Spark Connect")
PORTS = ("7077", "8080", "8081", "15002")
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _environment() -> dict[str, str]:
    """A user's shell in the virtualenv: its commands first on PATH, nothing pointing Spark elsewhere."""
    env = spark_free_env()
    for name in ("SPARK_HOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP", "PYTHONPATH"):
        env.pop(name, None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _end_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group `process` leads (the daemon, its JVM, what the JVM started), then SIGKILL."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(20)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)


@dataclass
class DocCluster:
    """The page's daemons running in `root`, on the free ports `ports` maps the page's ports to."""

    root: Path
    ports: dict[str, str]
    blocks: dict[str, str]
    env: dict[str, str] = field(default_factory=_environment)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def command(self, title: str) -> str:
        """The page's block, preceded by its "every terminal" block, on this cluster's ports."""
        body = replace_all(self.blocks[title], self.ports, what=f"docs/{PAGE}", required=False)
        return f"set -euo pipefail\n{self.blocks['every terminal']}\n{body}"

    def start(self, title: str) -> None:
        """Start a daemon's block in the background, in a process group of its own, its output in a log."""
        with (self.root / f"{title}.log").open("wb") as log:
            self.processes[title] = subprocess.Popen(
                ["bash", "-c", self.command(title)],
                cwd=self.root,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log(self, title: str) -> str:
        path = self.root / f"{title}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def diagnostics(self) -> str:
        return "\n".join(f"--- {title} (last lines)\n{self.log(title)[-3000:]}" for title in self.processes)

    def status(self) -> dict[str, Any] | None:
        """The master's web UI JSON, None while it does not answer."""
        try:
            with _NO_PROXY.open(f"http://127.0.0.1:{self.ports['8080']}/json/", timeout=5) as answer:
                return dict(json.load(answer))
        except (OSError, ValueError):
            return None

    def wait(self, what: str, probe: Callable[[], Any], timeout_s: float) -> Any:
        """Poll `probe` until it answers something truthy; fail with the daemons' logs when one exited or after
        `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            exited = {t: p.returncode for t, p in self.processes.items() if p.poll() is not None}
            assert not exited, f"{exited} exited while waiting for {what}\n{self.diagnostics()}"
            value = probe()
            if value:
                return value
            assert time.monotonic() < deadline, f"no {what} within {timeout_s:.0f} s\n{self.diagnostics()}"
            time.sleep(0.5)

    def run_script(self, title: str, timeout_s: float = 600) -> str:
        """Run a Python block of the page (written to a file) in a shell set up as the page says; its output."""
        script = self.root / (title.replace(" ", "_") + ".py")
        script.write_text(replace_all(self.blocks[title], self.ports, what=f"docs/{PAGE}", required=False))
        done = subprocess.run(
            ["bash", "-c", f"{self.blocks['every terminal']}\nexec python {script.name}"],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
        assert done.returncode == 0, f"{title} exited {done.returncode}\n{done.stderr[-6000:]}\n{self.diagnostics()}"
        return done.stdout

    def stop(self) -> None:
        for process in reversed(list(self.processes.values())):
            _end_group(process)


@pytest.fixture(scope="module")
def doc_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DocCluster]:
    """The page's master and worker, started together (the worker retries until the master answers), up when
    the master lists the worker ALIVE."""
    blocks = titled_blocks(PAGE)
    missing = [t for t in ("every terminal", *DAEMONS, *SCRIPTS) if t not in blocks]
    assert not missing, f"docs/{PAGE} lost its blocks {missing}"
    every_command = "\n".join(blocks[t] for t in (*DAEMONS, *SCRIPTS))
    replace_all(every_command, dict.fromkeys(PORTS, ""), what=f"docs/{PAGE}'s commands")  # each port is there
    cluster = DocCluster(tmp_path_factory.mktemp("doc-cluster"), {port: str(free_port()) for port in PORTS}, blocks)
    try:
        cluster.start("master")
        cluster.start("worker")
        cluster.wait("worker ALIVE in the master's web UI", lambda: _alive_workers(cluster.status()), 240)
        yield cluster
    finally:
        cluster.stop()


def _alive_workers(status: dict[str, Any] | None) -> list[dict[str, Any]]:
    return [w for w in (status or {}).get("workers", []) if w.get("state") == "ALIVE"]


@pytest.mark.timeout(300)
def test_the_documented_master_and_worker_come_up(doc_cluster: DocCluster) -> None:
    status = doc_cluster.status()
    assert status is not None and status["status"] == "ALIVE"
    assert status["url"] == f"spark://127.0.0.1:{doc_cluster.ports['7077']}"
    [worker] = _alive_workers(status)
    assert (worker["host"], worker["cores"], worker["memory"]) == ("127.0.0.1", 2, 2048), worker
    assert worker["webuiaddress"].endswith(f":{doc_cluster.ports['8081']}"), worker
    assert (doc_cluster.root / "work").is_dir()  # the worker's --work-dir, relative to where it started


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_cohort_runs_on_the_documented_cluster_and_connect_server(doc_cluster: DocCluster) -> None:
    # a run on the cluster: an application of the master whose executor ran in the worker's work dir
    shown = doc_cluster.run_script("use the cluster")
    assert "1000 rows counted by the cluster's executors" in shown, shown
    apps = doc_cluster.wait(
        "the run's application among the master's completed applications",
        lambda: (doc_cluster.status() or {}).get("completedapps"),
        60,
    )
    assert [app["name"] for app in apps] == ["cohort"], apps
    assert (doc_cluster.root / "work" / apps[0]["id"]).is_dir()

    # the Connect server: an application of the cluster holding one core, answering Cohort's remote session
    doc_cluster.start("Spark Connect server")
    started = f"Spark Connect server started at: 127.0.0.1:{doc_cluster.ports['15002']}"
    doc_cluster.wait("the Spark Connect server", lambda: started in doc_cluster.log("Spark Connect server"), 300)
    shown = doc_cluster.run_script("use Spark Connect")
    assert "1000 rows counted by the Spark Connect server" in shown, shown
    active = (doc_cluster.status() or {}).get("activeapps", [])
    assert [(app["name"], app["cores"]) for app in active] == [
        ("org.apache.spark.sql.connect.service.SparkConnectServer", 1)
    ], active
