"""Ledger retention on a real group's history (real broker, Spark, store, Dagster instance; the `cohort` commands
as subprocesses): batches commit ranges, `cohort compact --execute` folds the old ones, and then the audit, the
full checks, `cohort describe`, the next batch's run start and a replay after the fold point all still work."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from cohort.assets.replay import REPLAY_TAG
from cohort.assets.translator import DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from cohort.common.types import TopicPartition
from harness.dagster_group import config_for, definitions_for, json_records
from tests.assets.test_replay_kafka import COHORT, audit
from tests.assets.test_worker import _checks

T = DagsterCohortTranslator()


@pytest.mark.slow  # four batches, compact, audit, checks, a replay: minutes on two cores (`make test-all`)
@pytest.mark.timeout(900)
def test_a_folded_history_keeps_the_audit_the_checks_and_replays_working(
    make_setup, topic_factory, produce_records, instance, spark
):
    topic = topic_factory(1, suffix="compacted")
    setup = make_setup((topic,), slots=1, settings={"initial_rebalance_delay_s": 0.0})
    config = config_for(setup)
    defs = definitions_for(setup)
    job = defs.resolve_job_def(T.get_job_name(config.group))
    for _ in range(4):  # four batches of ten: ranges [0, 10) .. [30, 40)
        produce_records(topic, json_records(10, 1))
        assert job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance).success
    coordinator = config.group_resource.get_coordinator()
    assert len(coordinator.ledger_history(config.group, topic, 0)) == 4

    before = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    done = subprocess.run(
        [COHORT, "compact", config.group, "--store-url", setup.store_url, "--before", before, "--execute", "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["executed"] is True
    history = coordinator.ledger_history(config.group, topic, 0)
    assert history[0].kind == "fold" and history[0].from_offset == 0 and history[0].records >= 20, history
    assert len(history) < 4 and history[-1].until_offset == 40

    code, report = audit(setup, config.group)
    assert (code, report["ok"]) == (0, True), report
    checks = _checks(defs, config, instance, full=True)
    assert all(e.passed for e in checks.values()), {n: e.metadata for n, e in checks.items() if not e.passed}
    described = subprocess.run(
        [COHORT, "describe", config.group, "--store-url", setup.store_url, "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert described.returncode == 0 and "Traceback" not in described.stderr, described.stderr

    # a replay after the fold point, then a plain batch: every offset once, nothing re-reported
    replay = job.execute_in_process(
        run_config=worker_run_config(config, 1),
        instance=instance,
        tags={"dagster/partition": "0", REPLAY_TAG: "offset 35"},
    )
    assert replay.success
    replayed = [m for m in replay.get_asset_materialization_events() if m.asset_key == T.get_landed_asset_key(
        config.group, topic)]  # fmt: skip
    assert len(replayed) == 1, replayed
    produce_records(topic, json_records(5, 1))
    assert job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance).success
    assert spark.read.parquet(setup.sink).count() == 45
    offsets = sorted(r.offset for r in spark.read.parquet(setup.sink).select("kafka.offset").collect())
    assert offsets == list(range(45))
    assert coordinator.fetch_offsets(config.group, [TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): 45}
    code, report = audit(setup, config.group)
    assert (code, report["ok"]) == (0, True), report
