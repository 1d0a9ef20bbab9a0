"""`cohort reset-offsets --to-datetime` and `--by-duration` (the command in a subprocess) on records with real
timestamps, on Apache Kafka (the embedded broker answers offset 0 to every time: README): each partition moves to
its first record at or after the time (the end when none is that recent), and the batch that follows lands exactly
the records from that time on, replacing them in the sink in one step (docs/replay.md): no record twice, none
missing, counted with DuckDB against the producer's delivery reports.

Partition 0 holds a record a minute, partition 1 one every two minutes, half a minute later, so one time lands
the partitions on different offsets, one of them between two records.
"""

from __future__ import annotations

import json
import subprocess
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from cohort.assignment.coordinator import Coordinator
from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.kafka.mirror import KafkaOffsetMirror, kafka_committed
from cohort.pipelines.spec import PipelineSpec
from harness.dagster_group import VALUE_SCHEMA
from tests.support.audit_command import COHORT
from tests.support.kafka_records import Event, produce_events, require_kafka, sink_events

MINUTE_MS = 60_000
RECORDS = 30
"""Records per partition."""


def stamp(t0: int, partition: int, offset: int) -> int:
    """The timestamp of a partition's record: partition 0 one a minute from t0, partition 1 every two minutes
    from t0 + 30 s."""
    return t0 + offset * (partition + 1) * MINUTE_MS + partition * MINUTE_MS // 2


def reset(store_url: str, bootstrap: str, group: str, topic: str, *target: str) -> dict[str, Any]:
    """`cohort reset-offsets GROUP --topic T <target> --execute --json`: the plan it applied."""
    done = subprocess.run(
        [COHORT, "reset-offsets", group, "--store-url", store_url, "--bootstrap-servers", bootstrap,
         "--topic", topic, *target, "--execute", "--reason", "replay by time", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    plan: dict[str, Any] = json.loads(done.stdout)
    assert plan["executed"] is True
    return plan


def moves(plan: dict[str, Any]) -> dict[int, tuple[int, int]]:
    """partition -> (current offset, new offset) of an executed plan."""
    return {p["partition"]: (p["current_offset"], p["new_offset"]) for p in plan["partitions"]}


def target_ms(plan: dict[str, Any]) -> int:
    """The time a plan's target names (`datetime <ISO 8601>`), in ms since the epoch."""
    assert plan["target"].startswith("datetime "), plan["target"]
    return round(datetime.fromisoformat(plan["target"].removeprefix("datetime ")).timestamp() * 1000)


def from_time(produced: list[Event], at_ms: int) -> set[tuple[int, int]]:
    """(partition, offset) of every record at or after `at_ms`."""
    return {(e.partition, e.offset) for e in produced if e.timestamp_ms >= at_ms}


def test_a_reset_to_a_time_replays_exactly_the_records_from_that_time_on(
    spark, kafka_config, topic_factory, coordinator: Coordinator, sqlite_url, group, lake: Path
):
    require_kafka("offsets_for_times")
    topic = topic_factory(2, suffix="bytime")
    tps = [TopicPartition(topic, p) for p in range(2)]
    bootstrap = kafka_config["bootstrap.servers"]
    t0 = int(time.time() * 1000) - 90 * MINUTE_MS  # every record in the past: Kafka refuses times far ahead
    produced = produce_events(
        kafka_config,
        topic,
        range(2 * RECORDS),
        partition=lambda i: i % 2,
        timestamp_ms=lambda i: stamp(t0, i % 2, i // 2),
    )
    assert [(e.partition, e.offset, e.timestamp_ms) for e in produced] == [
        (p, k, stamp(t0, p, k)) for p in range(2) for k in range(RECORDS)
    ], "Kafka keeps the producer's timestamps (CreateTime), one record per offset"
    spec = PipelineSpec(sink_path=str(lake), value_format="json", value_schema=VALUE_SCHEMA)
    ledger = coordinator.standalone_ledger(group)
    mirror = KafkaOffsetMirror(kafka_config)
    landed = run_batch(spark, spec, kafka_config, tps, ledger, group=group, mirror=mirror)
    assert [(p.from_offset, p.until_offset) for p in landed.partitions] == [(0, RECORDS), (0, RECORDS)]

    # to 20 minutes after t0, written in another zone: partition 0's record of that minute, partition 1's next one
    at = t0 + 20 * MINUTE_MS
    written = datetime.fromtimestamp(at / 1000, timezone(timedelta(hours=1))).isoformat()
    plan = reset(sqlite_url, bootstrap, group, topic, "--to-datetime", written)
    assert moves(plan) == {0: (30, 20), 1: (30, 10)}
    assert plan["replayed"] == 30 and target_ms(plan) == at
    assert kafka_committed(kafka_config, group, tps) == {
        tps[0]: (20, None),
        tps[1]: (10, None),
    }, "Kafka's committed offsets moved with the ledger (an operator's reset: no run id as metadata)"

    replay = run_batch(spark, spec, kafka_config, tps, ledger, group=group, mirror=mirror)

    read = {(p.partition, o) for p in replay.partitions for o in range(p.from_offset, p.until_offset)}
    assert read == from_time(produced, at), "exactly the records at or after the time"
    assert sink_events(lake) == produced, "the replayed offsets replaced in the sink: none twice, none missing"
    history = [(e.kind, e.from_offset, e.until_offset) for e in coordinator.ledger_history(group, topic, 1)]
    assert history == [("commit", 0, 30), ("reset", 30, 10), ("commit", 10, 30)]

    # by duration: as long ago as 39 minutes after t0, plus the command's start (up to 90 s); partition 1's record of
    # t0 + 40.5 minutes is the first that recent, partition 0 has none (its end: nothing to replay)
    target = t0 + 39 * MINUTE_MS
    ago = int(time.time() * 1000) - target
    duration = f"PT{ago // MINUTE_MS}M{ago % MINUTE_MS // 1000}S"
    plan = reset(sqlite_url, bootstrap, group, topic, "--by-duration", duration)
    assert moves(plan) == {0: (30, 30), 1: (30, 20)}
    assert 0 <= target_ms(plan) - target < 90_000, "the duration counted back from the command's own time"

    again = run_batch(spark, spec, kafka_config, tps, ledger, group=group, mirror=mirror)

    read = {(p.partition, o) for p in again.partitions for o in range(p.from_offset, p.until_offset)}
    assert read == from_time(produced, target_ms(plan)) == {(1, k) for k in range(20, RECORDS)}
    assert sink_events(lake) == produced
    assert coordinator.fetch_offsets(group, tps) == dict.fromkeys(tps, RECORDS)
    [*_, entry, _replayed] = coordinator.ledger_history(group, topic, 1)
    assert (entry.kind, entry.from_offset, entry.until_offset) == ("reset", 30, 20)
    assert entry.note is not None and entry.note.endswith(": replay by time")
