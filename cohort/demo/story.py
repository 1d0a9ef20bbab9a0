"""`make demo`: a consumer group of three worker slots through Dagster, one killed mid-batch, on embedded defaults.

The story: start the embedded broker; produce sample JSON events (a few malformed) to a 6-partition topic;
launch the worker job for slots 1-3 as three Dagster runs in their own processes (one group generation
splits the partitions three ways); slot 3 stalls mid-batch and is killed with SIGKILL; once its session
expires the membership sensor evicts it and requests a rerun of slot 3 whose run key holds the generation;
the rerun consumes exactly the orphaned ranges from the committed offsets; the asset checks audit the
offsets. Then the `cohort describe` table, an audit summary, and one JSON line:
{"produced", "in_sink", "quarantined", "duplicates", "gaps", "rebalances", "lag"}. The exit status is
non-zero unless produced = in_sink + quarantined, duplicates = gaps = lag = 0.

`python -m cohort.demo.story --worker SLOT --stall S` is one worker run (the demo's subprocesses).
"""

import argparse
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import dagster as dg

from cohort.assets.translator import DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.protocol.group_state import EventKind
from cohort.demo.definitions import DEMO_GROUP, DEMO_TOPIC, demo_config, demo_definitions
from cohort.devtools.topics import create_topic, produce
from cohort.resources.kafka import KafkaResource

__all__ = ["DemoSummary", "main", "run_group_demo"]

PARTITIONS = 6
EVENTS = 3_000
MALFORMED = frozenset({17, 404, 1111, 2222, 2999})
T = DagsterCohortTranslator()


@dataclass(frozen=True)
class DemoSummary:
    """The demo's final figures (the last line it prints)."""

    produced: int
    in_sink: int
    quarantined: int
    duplicates: int
    gaps: int
    rebalances: int
    lag: int

    @property
    def ok(self) -> bool:
        return (
            self.produced == self.in_sink + self.quarantined
            and self.duplicates == 0
            and self.gaps == 0
            and self.lag == 0
        )


def _events() -> list[tuple[int, bytes, bytes]]:
    kinds = ["view", "click", "purchase", "refund"]
    records = []
    for i in range(EVENTS):
        event = {"event_id": i, "user": f"user-{i % 97}", "kind": kinds[i % 4], "amount": round(1 + i % 200 * 0.5, 2)}
        value = b'{"event_id": ' + str(i).encode() + b', "broken' if i in MALFORMED else json.dumps(event).encode()
        records.append((i % PARTITIONS, f"user-{i % 97}".encode(), value))
    return records


def _say(text: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {text}", flush=True)


def _wait(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")


class _Env:
    """Where this demo's broker, store, sink and Dagster home live (passed to the worker processes)."""

    def __init__(self, bootstrap: str, root: Path) -> None:
        self.bootstrap = bootstrap
        self.root = root
        self.store_url = f"sqlite:///{root / 'cohort.db'}"
        self.sink = str(root / "lake")
        self.home = root / "dagster"
        self.home.mkdir(parents=True, exist_ok=True)

    def variables(self) -> dict[str, str]:
        return {
            "COHORT_BOOTSTRAP_SERVERS": self.bootstrap,
            "COHORT_STORE_URL": self.store_url,
            "COHORT_SINK": self.sink,
            "DAGSTER_HOME": str(self.home),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }

    def start_worker(self, slot: int, *, stall_s: float = 0.0, tags: dict[str, str] | None = None) -> subprocess.Popen:
        command = [sys.executable, "-m", "cohort.demo.story", "--worker", str(slot), "--stall", str(stall_s)]
        if tags:
            command += ["--tags", json.dumps(tags)]
        log = open(self.root / f"worker-{slot}-{int(time.time() * 1000)}.log", "wb")  # noqa: SIM115 - child's
        return subprocess.Popen(
            command,
            env={**os.environ, **self.variables()},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _worker_main(slot: int, stall_s: float, tags: dict[str, str]) -> int:
    """One worker run in this process, recorded in the instance at $DAGSTER_HOME."""
    defs = demo_definitions(
        os.environ["COHORT_BOOTSTRAP_SERVERS"],
        store_url=os.environ["COHORT_STORE_URL"],
        sink=os.environ["COHORT_SINK"],
        stall_s=stall_s,
    )
    job = defs.resolve_job_def(T.get_job_name(DEMO_GROUP))
    with dg.DagsterInstance.get() as instance:
        result = job.execute_in_process(
            run_config=worker_run_config(demo_config(), slot), instance=instance, tags=tags, raise_on_error=False
        )
    return 0 if result.success else 1


def _slot_assigned(coordinator: Coordinator, slot: int) -> bool:
    described = coordinator.describe_group(DEMO_GROUP)
    return any(m.instance_id == f"{DEMO_GROUP}/worker-{slot}" and m.assigned for m in described.members)


def _sensor_reruns(env: _Env, instance: dg.DagsterInstance, defs: dg.Definitions) -> list[dg.RunRequest]:
    sensor = defs.resolve_sensor_def("cohort_membership_sensor")
    cursor: str | None = None
    requests: list[dg.RunRequest] = []

    def tick() -> list[dg.RunRequest]:
        nonlocal cursor
        with dg.build_sensor_context(instance=instance, resources=defs.resources, cursor=cursor) as context:
            result = sensor.evaluate_tick(context)  # as the daemon evaluates it
        cursor = result.cursor
        requests.extend(result.run_requests or ())
        return requests

    return _wait(tick, 90, "the membership sensor to notice the lost member")


def run_group_demo(root: Path | None = None) -> tuple[DemoSummary, str]:
    """Run the story (it prints the `cohort describe` table last); returns the summary and the audit text."""
    from cohort.devtools.embedded_broker import EmbeddedBroker
    from cohort.devtools.topics import partition_counts

    root = root or Path(tempfile.mkdtemp(prefix="cohort-demo-"))
    with EmbeddedBroker() as broker:
        env = _Env(broker.bootstrap_servers, root)
        os.environ.update({k: v for k, v in env.variables().items() if k.startswith("PYSPARK")})
        config = {"bootstrap.servers": broker.bootstrap_servers}
        create_topic(config, DEMO_TOPIC, PARTITIONS)
        produced = produce(config, DEMO_TOPIC, _events())
        _say(f"produced {produced} events ({len(MALFORMED)} malformed) to {DEMO_TOPIC} ({PARTITIONS} partitions)")
        assert partition_counts(config, [DEMO_TOPIC]) == {DEMO_TOPIC: PARTITIONS}
        coordinator = Coordinator.from_url(env.store_url)
        defs = demo_definitions(broker.bootstrap_servers, store_url=env.store_url, sink=env.sink)
        with dg.DagsterInstance.local_temp(tempdir=str(env.home)) as instance:
            workers = {slot: env.start_worker(slot, stall_s=600.0 if slot == 3 else 0.0) for slot in (1, 2, 3)}
            _say("launched worker runs for slots 1, 2, 3 (slot 3 will stall mid-batch)")
            try:
                _wait(lambda: _slot_assigned(coordinator, 3), 180, "slot 3 to get its partitions")
                described = coordinator.describe_group(DEMO_GROUP)
                split = ", ".join(f"{m.instance_id}: {[tp.partition for tp in m.assigned]}" for m in described.members)
                _say(f"group {DEMO_GROUP}, generation {described.generation}, {described.assignor}: {split}")
                for slot in (1, 2):
                    workers[slot].wait(timeout=600)
                    _say(f"slot {slot} finished (exit {workers[slot].returncode})")
            finally:
                _kill(workers[3])
            _say("killed slot 3 mid-batch (SIGKILL): its partitions are orphaned, uncommitted")
            reruns = _sensor_reruns(env, instance, defs)
            for request in reruns:
                _say(f"membership sensor: rerun {request.run_key}")
                slot = int(request.tags["cohort/slot"])
                rerun = env.start_worker(slot, tags=dict(request.tags))
                rerun.wait(timeout=600)
                _say(f"rerun of slot {slot} finished (exit {rerun.returncode})")
            quiet = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
            checks_job = defs.resolve_job_def(T.get_checks_job_name(DEMO_GROUP))
            checks = checks_job.execute_in_process(instance=instance, run_config=quiet)
            passed = {e.check_name: e.passed for e in checks.get_asset_check_evaluations()}
            _say(f"asset checks: {passed}")
            summary, report = _audit(env, defs, coordinator, instance, produced)
            _kafka(defs).close()
        coordinator.close()
        gc.collect()  # the closed clients' threads end before the broker stops: no "connection refused" noise
    return summary, report


def _kafka(defs: dg.Definitions) -> KafkaResource:
    """The demo definitions' Kafka resource."""
    kafka = (defs.resources or {}).get("kafka")
    if not isinstance(kafka, KafkaResource):
        raise TypeError(f"the demo definitions' 'kafka' resource is {kafka!r}, not a KafkaResource")
    return kafka


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    process.wait(timeout=60)


def _audit(
    env: _Env, defs: dg.Definitions, coordinator: Coordinator, instance: dg.DagsterInstance, produced: int
) -> tuple[DemoSummary, str]:
    """Count the sink and quarantine, compare with the ledger, Kafka and the materializations."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    from cohort.assets.audit import gather_audits
    from cohort.cli.ops import describe_rows
    from cohort.cli.tables import print_describe

    kafka = _kafka(defs)

    def coordinates(root: Path) -> list[tuple[int, int]]:
        if not root.exists():
            return []
        table = ds.dataset(str(root), format="parquet").to_table(columns=["kafka"])
        column = cast(pa.StructArray, table.column("kafka").combine_chunks())  # the `kafka` struct column
        partitions, offsets = column.field("partition").to_pylist(), column.field("offset").to_pylist()
        return list(zip(cast("list[int]", partitions), cast("list[int]", offsets), strict=True))  # never null

    pairs = coordinates(Path(env.sink))
    bad = coordinates(Path(env.sink) / "_quarantine")
    audits = gather_audits(
        coordinator,
        DEMO_GROUP,
        DEMO_TOPIC,
        PARTITIONS,
        instance=instance,
        asset_key=T.get_asset_key(DEMO_GROUP, DEMO_TOPIC),
        kafka=kafka,
        full=True,
    )
    events = coordinator.group_events(DEMO_GROUP)
    rebalances = sum(1 for _, e in events if e.kind is EventKind.GENERATION and not e.reason.startswith("empty"))
    covered = set(pairs) | set(bad)
    missing = sum(1 for a in audits for o in range(a.end_offset) if (a.tp.partition, o) not in covered)
    summary = DemoSummary(
        produced=produced,
        in_sink=len(set(pairs)),
        quarantined=len(set(bad)),
        duplicates=len(pairs) - len(set(pairs)) + len(bad) - len(set(bad)) + len(set(pairs) & set(bad)),
        gaps=missing + sum(1 for a in audits for p in a.problems if "gap" in p) + sum(a.gaps for a in audits),
        rebalances=rebalances,
        lag=sum(a.lag for a in audits),
    )
    print_describe(coordinator.describe_group(DEMO_GROUP), describe_rows(coordinator, DEMO_GROUP, kafka.end_offsets))
    lines = []
    lines.append("audit: partition, ledger ranges, committed, Kafka committed, materializations agree")
    for a in audits:
        lines.append(
            f"  {a.tp}: {a.ledger_ranges} range(s), committed {a.committed}, Kafka {a.kafka_committed}, "
            f"lag {a.lag}, {'ok' if a.ok else '; '.join(a.problems)}"
        )
    return summary, "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", type=int, default=None, help="run one worker slot in this process")
    parser.add_argument("--stall", type=float, default=0.0, help="worker: stall each task this many seconds")
    parser.add_argument("--tags", default="{}", help="worker: run tags (JSON)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", category=dg.BetaWarning)  # Dagster's own beta notes, not the demo's
    if args.worker is not None:
        return _worker_main(args.worker, args.stall, json.loads(args.tags))
    started = time.monotonic()
    summary, report = run_group_demo()
    print(report)
    _say(f"done in {time.monotonic() - started:.0f} s")
    print(json.dumps({k: getattr(summary, k) for k in DemoSummary.__dataclass_fields__}))
    return 0 if summary.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
