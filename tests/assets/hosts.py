"""Hosts of the multi-host test: a Dagster instance each (its DAGSTER_HOME, its `dagster-daemon`), one code location.

A `Host` is what one machine of a deployment would run: `dagster-daemon run -w workspace.yaml` in its own
DAGSTER_HOME (its own run, event and schedule storage, SQLite; the daemon serves the run queue, the sensors and
the schedules and starts the code server that launches the runs), with the environment that
`tests.assets.host_definitions` reads. The hosts share the coordinator's store (PostgreSQL), the broker and
the sink, nothing else. Every process a host starts carries `MARKER=<host's marker>` in its environment, so
its runs' processes (run worker, Spark JVM, Spark's Python workers) are found even after their parent died, and
killed on teardown.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
from dagster._core.scheduler.instigation import InstigatorType, TickStatus

from cohort.assets.sensors import instance_identity
from cohort.devtools.ui import stop_process_group
from tests.support import processes
from tests.support.processes import Proc, kill

ROOT = Path(__file__).resolve().parents[2]
MARKER = "COHORT_MULTIHOST_TEST"
LOCATION = "cohort_multihost"
INSTANCE_YAML = """\
telemetry:
  enabled: false
run_coordinator:  # the daemon serves the queue: runs launched by `dagster job launch` and by sensors alike
  module: dagster._core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
"""
WORKSPACE_YAML = f"""\
load_from:
  - python_module:
      module_name: tests.assets.host_definitions
      location_name: {LOCATION}
      working_directory: {ROOT}
"""
MEMBERSHIP_SENSOR = "cohort_membership_sensor"
TOPIC_SENSOR = "cohort_topic_sensor"


# ------------------------------------------------------------------------------------------------ processes


def marked(marker: str) -> dict[int, Proc]:
    """Live processes (zombies excluded) whose environment carries `MARKER=marker`."""
    return processes.marked(MARKER, marker)


# ------------------------------------------------------------------------------------------------- hosts


@dataclass
class Host:
    """One Dagster deployment: its name, DAGSTER_HOME, environment and (once started) daemon and instance."""

    name: str
    root: Path
    env: dict[str, str]
    marker: str
    daemon: subprocess.Popen[bytes] | None = None
    instance: dg.DagsterInstance | None = None
    _logs: list[Any] = field(default_factory=list)

    @property
    def home(self) -> Path:
        return Path(self.env["DAGSTER_HOME"])

    @property
    def log_path(self) -> Path:
        return self.root / f"daemon-{self.name}.log"

    def start(self) -> None:
        """Create this host's instance, then start its daemon."""
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "dagster.yaml").write_text(INSTANCE_YAML)
        # create the instance's SQLite storages before the daemon starts: processes creating them at once race
        # on their schema version tables
        self.instance = dg.DagsterInstance.local_temp(tempdir=str(self.home))  # reads its dagster.yaml
        self.instance.get_runs(limit=1)
        self.instance.all_instigator_state()
        self.instance.get_run_records(limit=1)
        self.start_daemon()

    def start_daemon(self) -> None:
        """`dagster-daemon run -w workspace.yaml` in this host's DAGSTER_HOME, in a session of its own."""
        daemon = str(Path(sys.executable).parent / "dagster-daemon")
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed by stop()
        self._logs.append(log)
        self.daemon = subprocess.Popen(
            [daemon, "run", "-w", str(self.root / "workspace.yaml")],
            cwd=self.root,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def lose(self) -> dict[int, Proc]:
        """The host is lost: SIGKILL every process it started (daemon, code server, runs and their Spark) at once;
        returns them, ended."""
        procs = marked(self.marker)
        kill(procs)
        if self.daemon is not None:
            self.daemon.wait(timeout=30)
        return procs

    @property
    def identity(self) -> str:
        """How this instance names itself as a rerun claim's holder."""
        assert self.instance is not None
        return instance_identity(self.instance)

    def sensor_messages(self, sensor: str, since: float = 0.0) -> list[str]:
        """What the sensor logged (`context.log`) in its ticks since `since` (epoch seconds), oldest first."""
        assert self.instance is not None
        messages = []
        for tick in self.finished_ticks(sensor):
            if tick.timestamp < since or not tick.log_key:
                continue
            data = self.instance.compute_log_manager.get_log_data(tick.log_key)
            for line in ((data.stderr or b"") + (data.stdout or b"")).decode(errors="replace").splitlines():
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    messages.append(str(json.loads(line)["dagster_meta"]["orig_message"]))
        return messages

    def stop(self) -> None:
        """Stop the daemon (its process group), then kill every process this host started that is left."""
        try:
            if self.daemon is not None:
                stop_process_group(self.daemon)
        finally:
            kill(marked(self.marker))
            if self.instance is not None:
                self.instance.dispose()
            for log in self._logs:
                log.close()

    def launch(self, job: str, run_id: str, run_config: Mapping[str, Any] | None = None) -> subprocess.Popen[bytes]:
        """`dagster job launch` through this host's instance (it queues the run; this host's daemon starts it)."""
        command = [str(Path(sys.executable).parent / "dagster"), "job", "launch", "-w", "workspace.yaml"]
        command += ["-j", job, "--run-id", run_id]
        if run_config is not None:
            command += ["--config-json", json.dumps(run_config)]
        log = open(self.root / f"launch-{self.name}-{run_id[:8]}.log", "wb")  # noqa: SIM115 - closed by stop()
        self._logs.append(log)
        return subprocess.Popen(command, cwd=self.root, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def runs(self, **filters: Any) -> list[dg.DagsterRun]:
        assert self.instance is not None
        return list(self.instance.get_runs(filters=dg.RunsFilter(**filters)))

    def run(self, run_id: str) -> dg.DagsterRun | None:
        assert self.instance is not None
        return self.instance.get_run_by_id(run_id)

    def ticks(self, sensor: str) -> list[Any]:
        """The sensor's ticks on this host, oldest first."""
        assert self.instance is not None
        for state in self.instance.all_instigator_state(instigator_type=InstigatorType.SENSOR):
            if state.instigator_name == sensor:
                ticks = self.instance.get_ticks(state.instigator_origin_id, state.selector_id, limit=1000)
                return sorted(ticks, key=lambda t: t.timestamp)
        return []

    def finished_ticks(self, sensor: str) -> list[Any]:
        """The sensor's evaluated ticks (skipped, success or failure), oldest first."""
        done = (TickStatus.SKIPPED, TickStatus.SUCCESS, TickStatus.FAILURE)
        return [t for t in self.ticks(sensor) if t.status in done]

    def failed_ticks(self) -> list[str]:
        """`<sensor>: <error>` of every failed tick of the group's sensors on this host."""
        return [
            f"{self.name} {sensor}: {tick.error.to_string() if tick.error else 'no error recorded'}"
            for sensor in (MEMBERSHIP_SENSOR, TOPIC_SENSOR)
            for tick in self.ticks(sensor)
            if tick.status == TickStatus.FAILURE
        ]

    def run_messages(self, run_id: str) -> list[str]:
        assert self.instance is not None
        return [entry.user_message for entry in self.instance.all_logs(run_id)]

    def check_results(self, run_id: str) -> dict[str, tuple[bool, str]]:
        """The asset checks a run evaluated: check name -> (passed, its `cohort/details`)."""
        assert self.instance is not None
        results = {}
        for record in self.instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
            assert record.dagster_event is not None
            evaluation = record.dagster_event.event_specific_data
            details = evaluation.metadata.get("cohort/details")
            results[evaluation.check_name] = (evaluation.passed, str(getattr(details, "value", details)))
        return results

    def run_worker_pid(self, run_id: str) -> int | None:
        """The pid of the run's process, from its engine event "Started process for run (pid: N)"."""
        assert self.instance is not None
        for record in self.instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
            event = record.dagster_event
            metadata = event.engine_event_data.metadata if event and event.engine_event_data else {}
            if "pid" in metadata:
                return int(metadata["pid"].value)
        return None

    def tail(self, chars: int = 3000) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else "(no log)"
        return f"--- daemon log of host {self.name} (last {chars} characters)\n{text[-chars:]}"


@contextlib.contextmanager
def running_hosts(hosts: list[Host]) -> Iterator[list[Host]]:
    """Start every host's daemon; on exit (failure included) stop them all and kill what their runs left."""
    try:
        for host in hosts:
            host.start()
        yield hosts
    finally:
        errors = []
        for host in hosts:
            try:
                host.stop()
            except Exception as exc:  # stop the others all the same
                errors.append(exc)
        if errors:
            raise errors[0]


def host_environment(marker: str, home: Path, settings: Mapping[str, str]) -> dict[str, str]:
    """The environment of one host's processes: ours, its DAGSTER_HOME, its marker and its settings."""
    env = {**os.environ, "DAGSTER_HOME": str(home), MARKER: marker}
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env.update(settings)
    return env
