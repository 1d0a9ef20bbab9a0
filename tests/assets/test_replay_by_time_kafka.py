"""A Dagster replay from a time (the op config `replay_from` and the run tag `cohort/replay_from`, an ISO 8601 time) on
records with real timestamps, on Apache Kafka (the embedded broker answers offset 0 to every time: README): the run
resets each selected partition to its first record at or after the time, reads exactly the records from that time on,
and the sink replaces them in one step, none twice and none missing (DuckDB against the producer's delivery reports).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

from cohort.assets.replay import REPLAY_TAG
from cohort.assets.translator import CHECK_CONTIGUOUS, CHECK_LAG, CHECK_SINK, DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.common.types import TopicPartition
from cohort.pipelines.kafka.mirror import kafka_committed
from harness.dagster_group import config_for, definitions_for
from tests.support.kafka_records import produce_events, require_kafka, sink_events

T = DagsterCohortTranslator()
MINUTE_MS = 60_000
RECORDS = 30


def iso(ms: int, hours: int = 0) -> str:
    """`ms` since the epoch as an ISO 8601 time in a zone `hours` from UTC."""
    return datetime.fromtimestamp(ms / 1000, timezone(timedelta(hours=hours))).isoformat()


def test_a_replay_from_a_time_reads_exactly_the_records_from_that_time_on(
    make_setup, topic_factory, kafka_config, instance, spark
):
    # `spark`: the session's Spark, which the runs share (a run stops only a session it started)
    require_kafka("offsets_for_times")
    topic = topic_factory(2, suffix="replaytime")
    t0 = int(time.time() * 1000) - 60 * MINUTE_MS
    # partition 0: a record a minute from t0; partition 1: one a minute from t0 + 30 s
    produced = produce_events(
        kafka_config,
        topic,
        range(2 * RECORDS),
        partition=lambda i: i % 2,
        timestamp_ms=lambda i: t0 + (i // 2) * MINUTE_MS + (i % 2) * MINUTE_MS // 2,
    )
    setup = make_setup((topic,), slots=1, settings={"initial_rebalance_delay_s": 0.0})
    config = config_for(setup)
    defs = definitions_for(setup)
    job = defs.resolve_job_def(T.get_job_name(config.group))
    key = T.get_asset_key(config.group, topic)
    assert job.execute_in_process(instance=instance).success

    def replayed(result) -> dict[int, tuple[int, int, str]]:
        return {
            int(e.materialization.partition): (
                int(e.materialization.metadata["cohort/from_offset"].value),
                int(e.materialization.metadata["cohort/until_offset"].value),
                str(e.materialization.metadata["cohort/replay"].value),
            )
            for e in result.get_asset_materialization_events()
            if e.materialization.asset_key == key
        }

    # partition 0 from t0 + 20 min (its record of that minute), by the launch config, the time written in UTC+2
    at = t0 + 20 * MINUTE_MS
    by_config = job.execute_in_process(
        run_config=worker_run_config(config, replay_from=iso(at, hours=2)),
        instance=instance,
        tags={"dagster/partition": "0"},
    )
    assert by_config.success
    assert replayed(by_config) == {0: (20, RECORDS, f"datetime {iso(at, hours=2)}")}
    assert sink_events(setup.sink) == produced

    # partition 1 by the run tag a backfill launched from the UI carries, from a time between two of its records
    # (t0 + 10 min 40 s, written in UTC): the first at or after it is t0 + 11.5 min's, at offset 11
    between = t0 + 10 * MINUTE_MS + 40_000
    by_tag = job.execute_in_process(instance=instance, tags={"dagster/partition": "1", REPLAY_TAG: iso(between)})
    assert by_tag.success
    assert replayed(by_tag) == {1: (11, RECORDS, f"datetime {iso(between)}")}
    stamps = {(e.partition, e.offset): e.timestamp_ms for e in produced}
    assert stamps[(1, 10)] < between < stamps[(1, 11)]

    assert sink_events(setup.sink) == produced, "the replayed offsets replaced in the sink: none twice, none missing"
    tps = [TopicPartition(topic, p) for p in range(2)]
    assert {tp: c for tp, (c, _) in kafka_committed(kafka_config, config.group, tps).items()} == dict.fromkeys(
        tps, RECORDS
    )
    coordinator = config.group_resource.get_coordinator()
    history = [(e.kind, e.from_offset, e.until_offset) for e in coordinator.ledger_history(config.group, topic, 1)]
    assert history == [("commit", 0, RECORDS), ("reset", RECORDS, 11), ("commit", 11, RECORDS)]
    checks = defs.resolve_job_def(T.get_checks_job_name(config.group)).execute_in_process(instance=instance)
    assert {e.check_name: e.passed for e in checks.get_asset_check_evaluations()} == {
        CHECK_CONTIGUOUS: True,
        CHECK_LAG: True,
        CHECK_SINK: True,
    }
