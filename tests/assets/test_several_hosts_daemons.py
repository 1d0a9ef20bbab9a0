"""Several hosts, one group: two Dagster instances share one PostgreSQL store and one consumer group.

Two hosts, A and B, as two machines would run them: each its own DAGSTER_HOME (its own run storage), its own
`dagster-daemon` (run queue, sensors, schedules, and the code server that starts the runs), the same code
location (`tests.assets.host_definitions`, from a `workspace.yaml`), and its share of the group's worker
slots (`CohortConfig.host_slots`: A has slot 1, B slot 2). They share the coordinator's store (a real PostgreSQL
server), the embedded broker and the Parquet sink; every run uses Spark local.

How the slots are launched: `dagster job launch -w workspace.yaml -j <worker job>` with no run config, once per
host, with that host's DAGSTER_HOME: what an operator types on a host. The run is queued in that host's instance
and started by that host's daemon, as the schedule's runs and the sensors' reruns are. The run config's default
slot is `all`, which with `host_slots` means every worker slot of this host, so A's run hosts slot 1 and B's
slot 2: the launch itself exercises the hosts' shares. The schedule would launch the same runs, but only on a
minute boundary (and again a minute later), which would make the scenario wait up to a minute and start a
second batch in the middle of it.

The scenario, for two ways of losing host A's run:

1. Both daemons tick both sensors (the code location loaded, the topic seen) before anything is launched.
2. A's run joins as slot 1 and B's as slot 2; A's batch stalls in its Spark tasks (they sleep while a file
   exists, `COHORT_MULTIHOST_STALL_FILE`, given to host A only), B's batch commits its partitions and succeeds.
3. While A's run is alive and stalled (its member heartbeating), B's membership sensor ticks several times and
   requests nothing (read from B's instance: its ticks requested no run, it holds no run but its own).
4. A's run is lost, then the stall file is removed so a rerun does not stall:
   - `run`: SIGKILL of the run's processes (run worker, Spark JVM, Spark's Python workers); host A's daemon
     and code server live on. The code server sees its run process die and marks the run failed, so A's
     membership sensor evicts the member at its next tick (before the session would expire) and both sensors
     see the loss;
   - `host`: SIGKILL of everything host A runs (daemon, code server, the run and its Spark). Only B's sensor
     is left and it cannot see A's run: the member leaves the group only when its session expires, B reruns
     the slot, then host A comes back (its daemon restarted) and its sensor sees the same loss.
5. Exactly one rerun of slot 1 exists across both instances (counted in both run storages), it succeeds, and
   no further run of slot 1 appears while both sensors keep ticking; the loss was claimed once in the store
   (one `rerun_claimed` event, held by the host that reran it), and the other host's sensor logged that the
   claimer reruns it. B's run of slot 2 succeeded and was never fenced; no sensor tick failed.
6. Nothing lost or duplicated: every produced offset is once in the sink (read with pyarrow), the ledger tiles
   each partition from 0 to its end with the commits of B's run and the rerun, and `cohort audit` (with
   Kafka's committed offsets) exits 0. The rerun's asset checks pass (sink against ledger, lag, offset
   contiguity: the ranges the other host's run committed are that instance's to show).

Both variants take about two minutes (two daemons and two Spark runs on the machine), so they are `slow`; the
claim logic itself is covered in CI, in-process, by tests/assets/test_several_hosts.py.
"""

import contextlib
import itertools
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow.dataset as ds
import pytest

from cohort.assets.translator import DagsterCohortTranslator
from cohort.assets.worker import RERUN_TAG, SLOT_TAG
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.protocol.group_state import EventKind, GroupEvent
from cohort.devtools.topics import produce
from tests.assets.host_definitions import ENV_PREFIX
from tests.assets.hosts import (
    MEMBERSHIP_SENSOR,
    TOPIC_SENSOR,
    WORKSPACE_YAML,
    Host,
    host_environment,
    marked,
    running_hosts,
)
from tests.support.dagster_ui import poll, run_failure_messages
from tests.support.processes import alive, descendants, kill

T = DagsterCohortTranslator()
PARTITIONS = 4
RECORDS = 400
SESSION_S = 8
HEARTBEAT_S = SESSION_S / 3  # the member's default heartbeat interval
WATCHED_TICKS = 3
"""How many membership sensor ticks of a host the test watches for a decision that must not come."""
pytestmark = [pytest.mark.slow, pytest.mark.dagster_processes, pytest.mark.timeout(900)]


def _records(count: int) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(i % PARTITIONS, f"k{i}".encode(), json.dumps({"id": i, "host": "p"}).encode()) for i in range(count)]


def _sink_offsets(sink: Path) -> list[tuple[int, int]]:
    """(partition, offset) of every row in the sink, sorted (duplicates kept)."""
    table = ds.dataset(str(sink), format="parquet", partitioning="hive").to_table(columns=["kafka"])
    return sorted((k["partition"], k["offset"]) for k in table.column("kafka").to_pylist())


def _succeeded(host: Host, run_id: str) -> bool:
    """Whether the run succeeded; an AssertionError with its failure events if it ended otherwise."""
    run = host.run(run_id)
    if run is not None and run.status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED):
        assert host.instance is not None
        failures = run_failure_messages(host.instance, run_id)
        raise AssertionError(f"run {run_id} on host {host.name} {run.status.value}: {failures}\n{host.tail()}")
    return run is not None and run.status is dg.DagsterRunStatus.SUCCESS


def _within(hosts: list[Host], probe: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """`poll`, with the hosts' daemon logs appended to a timeout."""
    try:
        return poll(probe, timeout_s=timeout_s, what=what, interval_s=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n" + "\n".join(h.tail() for h in hosts)) from None


def _ticks_after(host: Host, since: float) -> list[Any]:
    """The membership sensor's ticks on `host` that started at or after `since` (epoch seconds)."""
    return [t for t in host.finished_ticks(MEMBERSHIP_SENSOR) if t.timestamp >= since]


def _member_clients(coordinator: Coordinator, group: str) -> list[str | None]:
    return [m.client_id for m in coordinator.describe_group(group).members]


@pytest.mark.parametrize("loss", ["run", "host"])
def test_two_hosts_share_one_group_and_rerun_a_lost_slot_once(
    loss: str, pg_url: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], tmp_path: Path
) -> None:
    began = time.monotonic()
    phases: dict[str, float] = {}

    def phase(name: str) -> None:
        phases[name] = time.monotonic() - began

    topic = topic_factory(PARTITIONS)
    group = f"multihost-{uuid.uuid4().hex[:8]}"
    job = T.get_job_name(group)
    produce(kafka_config, topic, _records(RECORDS))  # librdkafka's default batching
    produced = sorted((i % PARTITIONS, i // PARTITIONS) for i in range(RECORDS))
    sink = tmp_path / "lake"
    stall = tmp_path / "stall-host-a"
    stall.touch()
    (tmp_path / "workspace.yaml").write_text(WORKSPACE_YAML)
    common = {
        "BOOTSTRAP": kafka_config["bootstrap.servers"],
        "STORE_URL": pg_url,
        "SINK": str(sink),
        "GROUP": group,
        "TOPIC": topic,
        "SLOTS": "2",
        "SESSION_S": str(SESSION_S),
        "SENSOR_INTERVAL_S": "2",
    }

    def host(name: str, **settings: str) -> Host:
        marker = f"{name}-{uuid.uuid4().hex}"
        env = {ENV_PREFIX + k: v for k, v in {**common, **settings}.items()}
        return Host(name, tmp_path, host_environment(marker, tmp_path / f"dagster-{name}", env), marker)

    a, b = host("A", HOST_SLOTS="1", STALL_FILE=str(stall)), host("B", HOST_SLOTS="2")
    hosts = [a, b]
    coordinator = Coordinator.from_url(pg_url)
    run_a, run_b = str(uuid.uuid4()), str(uuid.uuid4())
    events: list[GroupEvent] = []
    try:
        with running_hosts(hosts):
            # 1. both daemons run both sensors: the code location is loaded and the topic was seen
            _within(
                hosts,
                lambda: all(h.finished_ticks(s) for h in hosts for s in (MEMBERSHIP_SENSOR, TOPIC_SENSOR)),
                240,
                "both hosts' sensors to tick",
            )
            phase("daemons up")

            # 2. each host launches its share of the slots through its own instance
            launches = [a.launch(job, run_a), b.launch(job, run_b)]
            assert [p.wait(timeout=240) for p in launches] == [0, 0], "dagster job launch failed (see launch-*.log)"
            _within(hosts, lambda: _succeeded(b, run_b), 300, f"B's run {run_b} (slot 2) to succeed")
            phase("B's slot 2 done")
            worker = _within(hosts, lambda: a.run_worker_pid(run_a), 120, "A's run's process")

            def stalled() -> bool:
                """A's run is alive, its member holds partitions and its Spark tasks run (Python workers)."""
                tree = descendants(marked(a.marker), worker)
                tasks = [p for p in tree.values() if p.name == "java" and any(c.ppid == p.pid for c in tree.values())]
                members = [m for m in coordinator.describe_group(group).members if m.client_id == run_a]
                run = a.run(run_a)
                return bool(tasks and members and members[0].assigned) and run is not None and not run.is_finished

            _within(hosts, stalled, 240, "A's run (slot 1) to stall in its Spark tasks")
            member_a = next(m.member_id for m in coordinator.describe_group(group).members if m.client_id == run_a)
            phase("A's slot 1 stalled")

            # 3. B's membership sensor ticks several times while A's run is alive, and requests nothing
            watched = time.time()
            _within(
                hosts,
                lambda: len(_ticks_after(b, watched)) >= WATCHED_TICKS,
                120,
                f"{WATCHED_TICKS} ticks of B's membership sensor",
            )
            assert stalled(), "A's run stopped stalling before it was lost"
            b_ticks = _ticks_after(b, watched)
            assert [t.run_ids for t in b_ticks] == [[]] * len(b_ticks), "B's sensor requested runs while A's run lived"
            assert [r.run_id for r in b.runs()] == [run_b], "B holds a run besides its own"
            assert [r.run_id for r in a.runs()] == [run_a], "A holds a run besides its own"
            assert _member_clients(coordinator, group) == [run_a]
            phase("B watched A's live run")

            # 4. host A loses its run (or everything it runs)
            if loss == "run":
                gone = descendants(marked(a.marker), worker)
                assert "java" in {p.name for p in gone.values()}, gone
                kill(gone)
            else:
                gone = a.lose()
            killed_at = time.time()
            stall.unlink()  # a rerun must not stall
            _within(hosts, lambda: not any(alive(p) for p in gone.values()), 30, "A's processes to end")
            phase(f"A's {loss} lost")

            # 5. the member leaves the group; exactly one rerun of slot 1, on one host or the other, succeeds
            _within(
                hosts,
                lambda: run_a not in _member_clients(coordinator, group),
                SESSION_S + 60,
                "A's member to leave the group",
            )
            removed_after_s = time.time() - killed_at
            reruns = _within(
                hosts,
                lambda: [(h, r) for h in hosts for r in h.runs(tags={RERUN_TAG: run_a})],
                120,
                f"a rerun of slot 1 (tagged {RERUN_TAG}={run_a})",
            )
            rerun_host, rerun = reruns[0]
            _within(hosts, lambda: _succeeded(rerun_host, rerun.run_id), 300, f"the rerun {rerun.run_id} to succeed")
            phase("rerun done")
            if loss == "host":
                a.start_daemon()  # host A comes back: its sensor sees the loss B already reran
            settled = time.time()
            _within(
                hosts,
                lambda: all(len(_ticks_after(h, settled)) >= WATCHED_TICKS for h in hosts),
                180,
                f"{WATCHED_TICKS} more ticks of each host's membership sensor",
            )
            phase("both sensors watched after the rerun")

            slot_1 = sorted((h.name, r.run_id) for h in hosts for r in h.runs(tags={SLOT_TAG: "1"}))
            assert slot_1 == sorted([("A", run_a), (rerun_host.name, rerun.run_id)]), slot_1
            assert [(h.name, r.run_id) for h in hosts for r in h.runs(tags={RERUN_TAG: run_a})] == [
                (rerun_host.name, rerun.run_id)
            ]
            assert [r.run_id for h in hosts for r in h.runs(tags={SLOT_TAG: "2"})] == [run_b]
            assert rerun.tags.get(SLOT_TAG) == "1", rerun.tags
            other = b if rerun_host is a else a
            messages = other.sensor_messages(MEMBERSHIP_SENSOR, since=killed_at)
            claimed = f"is rerun by {rerun_host.identity}"
            assert any(claimed in m for m in messages), (other.name, messages)

            # B's slot 2 was not disturbed; no sensor tick failed on either host
            assert _succeeded(b, run_b)
            assert not [m for m in b.run_messages(run_b) if "fenced" in m.lower()]
            assert a.failed_ticks() + b.failed_ticks() == []
            a_run = a.run(run_a)
            a_status = a_run.status.value if a_run else None
            checks = rerun_host.check_results(rerun.run_id)
    finally:
        with contextlib.suppress(Exception):  # a group that never formed has no events
            events = [e for _, e in coordinator.group_events(group)]
        print("group events:\n" + "\n".join(f"  {e.kind.value} {e.member_id} {e.reason}" for e in events))

    # the loss: who removed the member, and when; one claim, held by the host that reran it
    removals = [(e.at, e.reason) for e in events if e.kind is EventKind.MEMBER_REMOVED and e.member_id == member_a]
    assert len(removals) == 1, removals
    removed_at, removal = removals[0]
    if loss == "run":  # A's code server marked the run failed: A's sensor evicts it, or its session ran out first
        assert a_status == "FAILURE", a_status
        assert removal == f"evicted: run {run_a} failure" or re.fullmatch(r"session timeout .* expired", removal)
    else:  # no host can see A's run any more: only the session's end removes the member
        assert re.fullmatch(r"session timeout .* expired", removal), removal
        assert removed_at - killed_at >= SESSION_S - HEARTBEAT_S - 0.5, (removed_at, killed_at)
        assert rerun_host is b
    claims = [e.reason for e in events if e.kind is EventKind.RERUN_CLAIMED]
    assert claims == [f"slot 1: rerun of {run_a} by {rerun_host.identity}"], claims

    # 6. nothing lost or duplicated: the sink, the ledger and the audit agree with what was produced
    assert _sink_offsets(sink) == produced
    ends = {p: sum(1 for q, _ in produced if q == p) for p in range(PARTITIONS)}
    coordinator_ledger = {p: coordinator.ledger_history(group, topic, p) for p in range(PARTITIONS)}
    for partition in range(PARTITIONS):
        entries = [e for e in coordinator_ledger[partition] if not e.is_reset]
        tiles = [(e.from_offset, e.until_offset) for e in sorted(entries, key=lambda e: e.from_offset)]
        assert tiles and tiles[0][0] == 0 and tiles[-1][1] == ends[partition], (partition, tiles)
        assert all(prev[1] == nxt[0] for prev, nxt in itertools.pairwise(tiles)), (partition, tiles)
        assert {e.run_id for e in entries} <= {run_b, rerun.run_id}, (partition, entries)
    audit_command = [sys.executable, "-m", "cohort", "audit", group, "--sink", str(sink), "--store-url", pg_url]
    audit = subprocess.run(
        [*audit_command, "--bootstrap-servers", kafka_config["bootstrap.servers"]],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    coordinator.close()
    phase("audited")
    print(
        f"loss {loss}: member removed {removed_after_s:.1f} s after the kill ({removal}); rerun {rerun.run_id} "
        f"on host {rerun_host.name}; " + ", ".join(f"{name} at {at:.1f} s" for name, at in phases.items())
    )

    # the rerun's asset checks, evaluated in the instance that ran it
    assert checks.get("sink_matches_ledger", (False, "not evaluated"))[0], checks
    assert checks.get("lag_under_threshold", (False, "not evaluated"))[0], checks
    # each instance holds the materializations of its own runs: the rerun's contiguity check leaves the ranges the
    # other host's run committed to that host's instance, and finds nothing missing
    assert checks.get("offsets_contiguous", (False, "not evaluated"))[0], checks
