"""Benchmark of the Dagster sensors: one tick over 10 groups x 1,000 partitions (target: under 0.5 s).

Real components: the embedded broker holds 10 topics of 1,000 partitions, the coordinator's store is a
SQLite file, the Dagster instance is a real (temporary) one. Each group has 3 static members in a Stable
generation. Measured (wall and process CPU seconds, median of repeated ticks):

- membership sensor, steady state (nothing due: no write, one run-status query per group);
- membership sensor, one member per group expired (10 evictions -> 10 rebalances, 10 rerun requests);
- topic sensor, first tick (registers 10,000 dynamic partitions: 10 requests) and steady state.

Run: `python -m benchmarks.sensors` (prints a table and, last, one JSON line).
"""

import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import dagster as dg

from cohort.assets.factory import build_cohort_definitions
from cohort.assets.translator import CohortConfig
from cohort.assignment.clock import ManualClock
from cohort.assignment.protocol.messages import JoinComplete, JoinRequest
from cohort.devtools.embedded_broker import EmbeddedBroker
from cohort.devtools.topics import create_topic
from cohort.resources.group import CohortGroupResource
from cohort.resources.kafka import KafkaResource

GROUPS = 10
PARTITIONS = 1_000
MEMBERS = 3
TARGET_S = 0.5


def _form(coordinator, group: str, topic: str) -> None:
    requests = {
        s: JoinRequest(
            instance_id=f"{group}/worker-{s}", client_id=str(uuid.uuid4()), topics=[topic], session_timeout=30
        )
        for s in range(1, MEMBERS + 1)
    }
    done: dict[int, JoinComplete] = {}
    for _ in range(10):
        for slot, request in requests.items():
            answer = coordinator.join(group, request)
            requests[slot] = request.with_member_id(answer.member_id)
            if isinstance(answer, JoinComplete):
                done[slot] = answer
        if len(done) == MEMBERS and len({d.generation for d in done.values()}) == 1:
            break
    for answer in sorted(done.values(), key=lambda j: not j.is_leader):
        coordinator.sync(group, answer.member_id, answer.generation)


def _tick(sensor, instance, resources, cursor):
    wall, cpu = time.perf_counter(), time.process_time()
    with dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor) as context:
        result = sensor.evaluate_tick(context)
    return result, time.perf_counter() - wall, time.process_time() - cpu


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="cohort-bench-sensors-"))
    store = f"sqlite:///{root / 'cohort.db'}"
    clock = ManualClock(time.time())
    figures: dict[str, float] = {}
    with EmbeddedBroker() as broker:
        kafka_config = {"bootstrap.servers": broker.bootstrap_servers}
        started = time.perf_counter()
        for g in range(GROUPS):
            create_topic(kafka_config, f"bench-{g}", PARTITIONS)
        figures["setup_topics_s"] = time.perf_counter() - started
        settings = {"initial_rebalance_delay_s": 0.0, "session_timeout_s": 30.0}
        configs = [
            CohortConfig(
                CohortGroupResource(
                    group=f"bench-group-{g}", topics=[f"bench-{g}"], store_url=store, worker_slots=MEMBERS, **settings
                )
            )
            for g in range(GROUPS)
        ]
        kafka = KafkaResource(bootstrap_servers=broker.bootstrap_servers)
        defs = build_cohort_definitions(configs, kafka=kafka, clock=clock)
        resources = defs.resources
        coordinator = resources[configs[0].resource_key].get_coordinator(clock)
        for g, config in enumerate(configs):
            coordinator.report_topic_metadata(config.group, {f"bench-{g}": PARTITIONS})
            _form(coordinator, config.group, f"bench-{g}")
        membership = defs.resolve_sensor_def("cohort_membership_sensor")
        topics = defs.resolve_sensor_def("cohort_topic_sensor")
        (root / "dagster").mkdir()
        with dg.instance_for_test(temp_dir=str(root / "dagster")) as instance:
            result, wall, cpu = _tick(membership, instance, resources, None)  # warm-up: first cursor
            cursor = result.cursor
            walls, cpus = [], []
            for _ in range(20):
                result, wall, cpu = _tick(membership, instance, resources, cursor)
                assert not result.run_requests
                walls.append(wall)
                cpus.append(cpu)
            figures["membership_steady_tick_s"] = statistics.median(walls)
            figures["membership_steady_tick_cpu_s"] = statistics.median(cpus)

            for config in configs:  # one member per group goes silent: expire only its session
                record = coordinator.store.load(config.group)
                silent = next(m for m in record.members.values() if m.instance_id.endswith("worker-3"))
                for member in record.members.values():
                    if member is not silent:
                        coordinator.heartbeat(
                            config.group, member.member_id, member.generation, instance_id=member.instance_id
                        )
            clock.advance(20)
            for config in configs:
                for member in coordinator.store.load(config.group).members.values():
                    if not member.instance_id.endswith("worker-3"):
                        coordinator.heartbeat(
                            config.group, member.member_id, member.generation, instance_id=member.instance_id
                        )
            clock.advance(15)  # worker-3's session (last heartbeat 35 s ago) is over; the others' is not
            result, wall, cpu = _tick(membership, instance, resources, cursor)
            assert len(result.run_requests) == GROUPS, len(result.run_requests)
            figures["membership_expiry_tick_s"] = wall
            figures["membership_expiry_tick_cpu_s"] = cpu

            result, wall, cpu = _tick(topics, instance, resources, None)
            assert sum(len(r.partition_keys) for r in result.dynamic_partitions_requests) == GROUPS * PARTITIONS
            figures["topic_first_tick_s"] = wall
            for request in result.dynamic_partitions_requests:
                instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
            cursor = result.cursor
            walls = []
            for _ in range(10):
                result, wall, _cpu = _tick(topics, instance, resources, cursor)
                assert not result.run_requests and not result.dynamic_partitions_requests
                walls.append(wall)
            figures["topic_steady_tick_s"] = statistics.median(walls)
        kafka.close()
    print(f"{'measurement':<34} {'seconds':>8}")
    for name, value in figures.items():
        print(f"{name:<34} {value:>8.3f}")
    ticks = ["membership_steady_tick_s", "membership_expiry_tick_s", "topic_first_tick_s", "topic_steady_tick_s"]
    figures["all_ticks_under_target"] = all(figures[k] < TARGET_S for k in ticks)
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in figures.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
