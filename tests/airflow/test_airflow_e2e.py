"""The Airflow face against a real Airflow 3: api-server, scheduler (LocalExecutor), dag-processor and triggerer
as separate processes on one SQLite metadata database, the example DAG (tests/airflow/example_dag.py), the
embedded Kafka broker, a SQLite store shared by the task and trigger processes, a Parquet sink read with pyarrow.

- two slots land a topic exactly once, the asset events tile the ledger, and the CLI describes and audits the
  Airflow-driven group (the representative scenario CI runs);
- a slot's task runner SIGKILLed mid-batch (its process group: the task runner and its Spark JVM), before it
  writes or after its ledger commit: Airflow's retry of the same map index finishes the slot from the committed
  offsets (and reports a killed try's commit), the group's trigger sees the member's session expire and its
  DAG run reruns exactly that slot (the one that finishes it without retries);
- a new topic matching the group's pattern: the trigger signals every slot and the run lands it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from cohort.assignment.coordinator import Coordinator
from cohort.devtools.topics import create_topic, produce
from tests.airflow.processes import AirflowProcesses, group_alive, running, wait_for
from tests.airflow.support import AirflowHome, make_home

EXAMPLE_DAG = Path(__file__).with_name("example_dag.py")


@dataclass(frozen=True)
class Deployment:
    """One test's group as the example DAG runs it, and the Airflow running it."""

    group: str
    dag_id: str
    store: str
    sink: Path
    bootstrap: str
    home: AirflowHome
    airflow: AirflowProcesses

    def landed(self) -> Counter[tuple[str, int, int]]:
        """(topic, partition, offset) of every row in the Parquet sink, counted."""
        if not self.sink.exists():
            return Counter()
        rows = ds.dataset(self.sink, format="parquet", partitioning="hive").to_table(columns=["kafka"]).column("kafka")
        kafka = rows.combine_chunks()
        return Counter(
            zip(
                kafka.field("topic").to_pylist(),
                kafka.field("partition").to_pylist(),
                kafka.field("offset").to_pylist(),
                strict=True,
            )
        )

    def ledger(self, topic: str, partitions: int) -> dict[int, list[tuple[int, int, str]]]:
        """(from, until, run id) of every ledger entry of the topic's partitions, in order."""
        coordinator = Coordinator.from_url(self.store)
        try:
            history = {p: coordinator.ledger_history(self.group, topic, p) for p in range(partitions)}
        finally:
            coordinator.close()
        return {p: [(e.from_offset, e.until_offset, e.run_id or "") for e in entries] for p, entries in history.items()}

    def topic_events(self, topic: str) -> list[dict[str, Any]]:
        """The asset events of the topic's asset `kafka://<bootstrap>/<topic>`."""
        uri = f"kafka://{self.bootstrap.lower()}/{topic}"
        return [e for e in self.home.asset_events() if e["uri"] == uri]

    def signals(self) -> list[dict[str, Any]]:
        """The payloads of the group's trigger events (its signal asset), oldest first."""
        uri = f"x-cohort://{self.group}/signals"
        return [e["extra"]["payload"] for e in self.home.asset_events() if e["uri"] == uri]

    def tries(self, run_id: str) -> list[tuple[str, int, int, str]]:
        """(task, map index, try, state) of every try of the run's task instances (history and current)."""
        sql = "select task_id, map_index, try_number, state from {} where dag_id = ? and run_id = ?"
        current = self.airflow.query(sql.format("task_instance"), self.dag_id, run_id)
        history = self.airflow.query(sql.format("task_instance_history"), self.dag_id, run_id)
        return sorted({*current, *history})

    def slots_run(self, run_id: str) -> list[int]:
        """The slots the run's `slots` task chose (its XCom), i.e. what `run_slot` was mapped over."""
        path = f"/api/v2/dags/{self.dag_id}/dagRuns/{run_id}/taskInstances/slots/xcomEntries/return_value"
        value = self.airflow.api("GET", path)["value"]
        return list(json.loads(value) if isinstance(value, str) else value)

    def cli(self, *args: str) -> str:
        """`python -m cohort <args>` as a subprocess; its output (exit 0 asserted)."""
        done = self.home.run("-m", "cohort", *args, timeout_s=300)
        assert done.returncode == 0, f"cohort {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        return done.stdout


def assert_tiled(deployment: Deployment, topic: str, ends: dict[int, int]) -> dict[int, list[tuple[int, int, str]]]:
    """The ledger tiles each partition from 0 to its end, and the topic's asset events are exactly its ranges."""
    ledger = deployment.ledger(topic, len(ends))
    for partition, end in ends.items():
        entries = ledger[partition]
        assert entries and entries[0][0] == 0 and entries[-1][1] == end, (partition, entries)
        assert all(a[1] == b[0] for a, b in itertools.pairwise(entries)), (partition, entries)
    fields = ("cohort/partition", "cohort/from_offset", "cohort/until_offset", "cohort/run_id")
    events = deployment.topic_events(topic)
    shown = sorted(tuple(e["extra"][f] for f in fields) for e in events)
    assert shown == sorted((p, f, u, r) for p, entries in ledger.items() for f, u, r in entries), (shown, ledger)
    assert all(e["task"] == "run_slot" and e["extra"]["cohort/group"] == deployment.group for e in events)
    return ledger


def records(n: int, partitions: int) -> list[tuple[int, bytes, bytes]]:
    return [(i % partitions, f"k{i}".encode(), json.dumps({"id": i, "kind": "v"}).encode()) for i in range(n)]


@pytest.fixture
def deploy(tmp_path: Path, kafka_config: dict[str, Any]) -> Iterator[Any]:
    """`deploy(group, **env)`: an Airflow home running the example DAG for `group` (the env sets the DAG's
    COHORT_AIRFLOW_* settings), its four components started; all of its processes killed at the end."""
    stack = contextlib.ExitStack()
    bootstrap = kafka_config["bootstrap.servers"]

    def make(group: str, **env: str) -> Deployment:
        store = f"sqlite:///{tmp_path / 'cohort.db'}"
        sink = tmp_path / "lake"
        settings = {
            "COHORT_AIRFLOW_GROUP": group,
            "COHORT_AIRFLOW_SINK": str(sink),
            "COHORT_STORE_URL": store,
            "COHORT_AIRFLOW_SESSION_S": "10",
            "COHORT_AIRFLOW_POLL_S": "2",
            "COHORT_AIRFLOW_DELAY_S": "4",
            "COHORT_AIRFLOW_RETRIES": "1",
            "COHORT_AIRFLOW_RETRY_DELAY_S": "3",
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}),
            **env,
        }
        home = make_home(tmp_path / "airflow", settings, EXAMPLE_DAG.read_text())
        airflow = stack.enter_context(running(home))
        dag_id = "cohort__" + "".join(c if c.isalnum() or c == "_" else "_" for c in group)
        airflow.wait_dag(dag_id)
        return Deployment(group, dag_id, store, sink, bootstrap, home, airflow)

    with stack:
        yield make


@pytest.mark.timeout(900)  # Airflow's processes start in minutes on a loaded 2-core machine
@pytest.mark.slow
@pytest.mark.airflow_processes
def test_two_slots_land_a_topic_once_with_airflow_processes_and_the_cli_sees_the_group(
    deploy, kafka_config, topic_factory, produce_records
):
    topic = topic_factory(4, suffix="e2e")
    produce_records(topic, records(200, 4))
    started = time.monotonic()
    deployment = deploy("orders-e2e", COHORT_AIRFLOW_TOPIC=topic)
    ready = time.monotonic()

    deployment.airflow.trigger(deployment.dag_id, "manual-1")
    state = deployment.airflow.wait_run(deployment.dag_id, "manual-1")

    ran = time.monotonic()
    assert state == "success", deployment.airflow.diagnostics()
    assert deployment.landed() == Counter((topic, p, o) for p in range(4) for o in range(50))
    ledger = assert_tiled(deployment, topic, dict.fromkeys(range(4), 50))
    run_ids = {r for entries in ledger.values() for _f, _u, r in entries}
    prefix = f"airflow:{deployment.dag_id}/manual-1/slot-"
    assert run_ids <= {f"{prefix}1/try-1", f"{prefix}2/try-1"}, run_ids
    assert deployment.tries("manual-1") == [
        ("run_slot", 0, 1, "success"),
        ("run_slot", 1, 1, "success"),
        ("slots", -1, 1, "success"),
    ]
    assert deployment.slots_run("manual-1") == [1, 2]
    runs = [r["dag_run_id"] for r in deployment.airflow.runs(deployment.dag_id)]
    assert runs == ["manual-1"]  # the members left cleanly: the trigger signalled nothing
    assert deployment.signals() == []

    where = ("--store-url", deployment.store, "--bootstrap-servers", deployment.bootstrap)
    described = json.loads(deployment.cli("describe", deployment.group, *where, "--json"))
    assert described["group"] == deployment.group and described["state"] == "Empty", described
    shown = {(p["topic"], p["partition"]): (p["current_offset"], p["lag"]) for p in described["partitions"]}
    assert shown == {(topic, p): (50, 0) for p in range(4)}, described
    table = deployment.cli("describe", deployment.group, *where)
    assert deployment.group in table and topic in table, table
    deployment.cli("audit", deployment.group, "--sink", str(deployment.sink), *where)
    print(f"\nstart {ready - started:.1f} s, run {ran - ready:.1f} s, checks {time.monotonic() - ran:.1f} s")


def _held_batches(stall: Path, count: int) -> set[int]:
    """The task runner pids whose batch waits on the stall file (once `count` of them do)."""
    pids = {int(p.name.rsplit(".", 1)[1]) for p in stall.parent.glob(stall.name + ".*")}
    return pids if len(pids) >= count else set()


@pytest.mark.slow
@pytest.mark.airflow_processes
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("retries", "stall_at"),
    [(1, "write"), (0, "write"), (1, "commit"), (0, "commit")],
    ids=["retried", "rerun-by-trigger", "killed-after-commit", "killed-after-commit-rerun-by-trigger"],
)
def test_a_slot_killed_mid_batch_is_finished_from_the_committed_offsets(
    deploy, tmp_path, kafka_config, topic_factory, produce_records, retries, stall_at
):
    """Slot 1's task runner is SIGKILLed (its whole process group: task runner and Spark JVM) while its batch
    waits, slot 2's batch held the same way; then both go on. The killed member's session expires and the
    trigger signals slot 1, once, in every variant:

    - retried (retry_delay 30 s, longer than the session's 10 s), killed before writing: the retry (try 2, same
      map index) lands slot 1's partitions from the committed offsets; the signalled run, which waits for the
      first (max_active_runs=1), runs exactly slot 1 again and finds nothing left;
    - rerun-by-trigger (no retries): the first run fails on slot 1; the signalled run runs exactly slot 1 and
      lands what it lost;
    - killed-after-commit (retried): try 1's ledger commit stands and nothing is read twice; try 2 reports try 1's
      ranges as asset events (try 1 never succeeded, so Airflow never registered its events);
    - killed-after-commit-rerun-by-trigger (no retries): the same, reported by the signalled run's task of slot 1
      (another DAG run: the slot's next task instance reads the group's events and reports what they lack).

    Every offset lands once, the ledger tiles each partition, the asset events tile the ledger, `cohort audit`
    finds nothing to repair.
    """
    topic = topic_factory(4, suffix="kill")
    produce_records(topic, records(200, 4))
    stall = tmp_path / "stall"
    stall.touch()
    deployment = deploy(
        "orders-kill",
        COHORT_AIRFLOW_TOPIC=topic,
        COHORT_AIRFLOW_STALL_FILE=str(stall),
        COHORT_AIRFLOW_STALL_AT=stall_at,
        COHORT_AIRFLOW_RETRIES=str(retries),
        COHORT_AIRFLOW_RETRY_DELAY_S="30",
    )
    airflow, dag_id = deployment.airflow, deployment.dag_id
    airflow.trigger(dag_id, "manual-1")
    held = wait_for("both slots' batches to wait on the stall file", lambda: _held_batches(stall, 2), 300, 1.0)
    rows = airflow.query(
        "select map_index, pid, state from task_instance where dag_id = ? and run_id = ? and task_id = 'run_slot'",
        dag_id,
        "manual-1",
    )
    pids = {index: pid for index, pid, _state in rows}
    assert set(pids.values()) == held, (rows, held)
    assert deployment.slots_run("manual-1") == [1, 2]
    victim = pids[0]  # map index 0 is slot 1
    assert os.getpgid(victim) == victim  # the task runner leads its own process group
    os.killpg(victim, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_for("the killed task runner's process group to be gone", lambda: not group_alive(victim), 60, 0.5)
    stall.unlink()  # slot 2 goes on; slot 1's retry (or rerun) does not wait

    first = airflow.wait_run(dag_id, "manual-1", timeout_s=400)
    signalled = wait_for(
        "the trigger's rerun of slot 1",
        lambda: [r for r in airflow.runs(dag_id) if r["run_type"] == "asset_triggered"],
        120,
        2.0,
    )
    assert len(signalled) == 1, signalled
    second = signalled[0]["dag_run_id"]
    assert airflow.wait_run(dag_id, second, timeout_s=400) == "success"
    finished = time.monotonic()

    # The trigger saw slot 1's member lost once (its session expired); not slot 2's, which left.
    killed = f"airflow:{dag_id}/manual-1/slot-1/try-1"
    payloads = deployment.signals()
    assert [p["slots"] for p in payloads] == [[1]], payloads
    assert "session" in payloads[0]["reason"] and payloads[0]["key"] == killed, payloads
    # The rerun ran exactly the lost slot.
    assert deployment.slots_run(second) == [1]
    assert deployment.tries(second) == [("run_slot", 0, 1, "success"), ("slots", -1, 1, "success")]
    retried = ("run_slot", 0, 2, "success")  # Airflow's retry: same map index, same slot
    assert deployment.tries("manual-1") == [
        ("run_slot", 0, 1, "failed"),  # the killed try (from task_instance_history when retried)
        *([retried] if retries else []),
        ("run_slot", 1, 1, "success"),
        ("slots", -1, 1, "success"),
    ]
    assert first == ("success" if retries else "failed")

    assert deployment.landed() == Counter((topic, p, o) for p in range(4) for o in range(50))
    ledger = assert_tiled(deployment, topic, dict.fromkeys(range(4), 50))
    run_ids = {r for entries in ledger.values() for _f, _u, r in entries}
    if stall_at == "commit":
        finisher = killed  # its commit stands: nothing was left for the retry
    elif retries:
        finisher = f"airflow:{dag_id}/manual-1/slot-1/try-2"
    else:
        finisher = f"airflow:{dag_id}/{second}/slot-1/try-1"
    assert finisher in run_ids and run_ids <= {finisher, f"airflow:{dag_id}/manual-1/slot-2/try-1"}, run_ids
    if stall_at == "commit":  # the killed try's ranges were reported by the slot's next task instance
        reported = {
            (e["extra"]["cohort/run_id"], e["extra"].get("cohort/reported_by")) for e in deployment.topic_events(topic)
        }
        reporter = f"airflow:{dag_id}/manual-1/slot-1/try-2" if retries else f"airflow:{dag_id}/{second}/slot-1/try-1"
        assert (killed, reporter) in reported, reported
    deployment.cli(
        "audit", deployment.group, "--sink", str(deployment.sink), "--store-url", deployment.store,
        "--bootstrap-servers", deployment.bootstrap,
    )  # fmt: skip
    print(f"\nkill to rerun done {finished - killed_at:.1f} s")


@pytest.mark.slow
@pytest.mark.airflow_processes
@pytest.mark.timeout(900)
def test_a_new_topic_matching_the_pattern_is_signalled_and_landed(deploy, kafka_config):
    prefix = f"af-new-{uuid.uuid4().hex[:8]}"
    first, second = f"{prefix}-a", f"{prefix}-b"
    create_topic(kafka_config, first, 2)
    produce(kafka_config, first, records(60, 2))
    deployment = deploy("orders-pattern", COHORT_AIRFLOW_TOPIC="", COHORT_AIRFLOW_PATTERN=f"{prefix}-.*")
    airflow, dag_id = deployment.airflow, deployment.dag_id
    airflow.trigger(dag_id, "manual-1")
    assert airflow.wait_run(dag_id, "manual-1") == "success"
    assert deployment.landed() == Counter((first, p, o) for p in range(2) for o in range(30))
    watching = airflow.query(
        "select t.id from trigger t join asset_watcher w on w.trigger_id = t.id where t.triggerer_id is not null"
    )
    assert len(watching) == 1, watching  # one watcher's trigger, running in the triggerer

    create_topic(kafka_config, second, 3)
    produce(kafka_config, second, records(90, 3))
    appeared = time.monotonic()
    signalled = wait_for(
        "the trigger's run for the new topic",
        lambda: [r for r in airflow.runs(dag_id) if r["run_type"] == "asset_triggered"],
        120,
        2.0,
    )
    assert len(signalled) == 1, signalled
    run_id = signalled[0]["dag_run_id"]
    assert airflow.wait_run(dag_id, run_id) == "success"
    landed_after = time.monotonic() - appeared

    payloads = deployment.signals()
    assert [p["slots"] for p in payloads] == [[1, 2]], payloads
    assert second in payloads[0]["reason"], payloads
    assert deployment.slots_run(run_id) == [1, 2]
    assert deployment.landed() == Counter(
        [(first, p, o) for p in range(2) for o in range(30)] + [(second, p, o) for p in range(3) for o in range(30)]
    )
    assert_tiled(deployment, first, dict.fromkeys(range(2), 30))
    ledger = assert_tiled(deployment, second, dict.fromkeys(range(3), 30))
    assert {r for entries in ledger.values() for _f, _u, r in entries} <= {
        f"airflow:{dag_id}/{run_id}/slot-1/try-1",
        f"airflow:{dag_id}/{run_id}/slot-2/try-1",
    }
    described = deployment.cli("describe", deployment.group, "--store-url", deployment.store, "--json")
    assert second in described, described
    print(f"\nnew topic to landed {landed_after:.1f} s")
