"""The SIGKILL fault-injection matrix, and the two product fixes it led to.

A worker run (its process group: the Dagster run, its Spark JVM and, mid-read, the executor's Python
worker) is killed with SIGKILL at each point of a batch; recovery goes through the membership sensor
(ManualClock past the session timeout) and the requested rerun; the audit then demands: nothing lost,
nothing written twice, every partition's ledger contiguous up to the produced count, Kafka's committed
offsets = ledger = materializations. See `harness.reliability.faults` for one scenario step by step.

Runtime budget: each scenario starts a victim process (and, past the join, its own Spark JVM), so the 14
scenarios do not fit CI's budget on this 2-core machine. Here every point runs under one assignor and the
two assignors alternate across points (4 points eager `sticky`, 3 cooperative `cooperative-sticky`): every
point and every assignor is covered by `make test-all`; CI (`make test`) runs the three points where data is
staged, committed or mirrored but not yet reported (`CI` below), the rest are marked slow.
`python -m benchmarks.reliability` runs all 14 (benchmarks/RELIABILITY.md).

Real components only: the embedded broker, Spark, the SQLite store, Dagster's execution and instance. The
one stand-in: execute_in_process has no run-monitoring daemon, so the harness marks the killed run failed
the way Dagster's run monitoring does for a dead run worker (`instance.report_run_failed`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cohort.assets.audit import gather_audits
from cohort.assets.translator import DagsterCohortTranslator
from cohort.assets.worker import RERUN_TAG, SLOT_TAG, worker_run_config
from cohort.assignment.coordinator import Coordinator
from cohort.assignment.store.memory import MemoryGroupStore
from cohort.assignment.types import COOPERATIVE, EAGER
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.kafka.mirror import KafkaOffsetMirror, kafka_committed
from cohort.pipelines.spec import PipelineSpec
from cohort.resources import KafkaResource
from harness.dagster_group import VALUE_SCHEMA, Setup, config_for, definitions_for, instance_for, json_records
from harness.reliability.faults import ASSIGNORS, PARTITIONS, POINTS, RECORDS, FaultReport, run_fault_scenario

T = DagsterCohortTranslator()


CI = {"after-write", "after-commit"}
"""The points CI runs (the others, `after-mirror` included, are slow: `make test-all`): staged but not committed,
and committed but not mirrored."""
MATRIX = [
    pytest.param(
        p.key,
        ASSIGNORS[i % 2],
        id=f"{p.key}-{ASSIGNORS[i % 2]}",
        marks=() if p.key in CI else (pytest.mark.slow,),
    )
    for i, p in enumerate(POINTS)
]
PER_PARTITION = RECORDS // PARTITIONS


def _check_leftovers(point: str, report: FaultReport) -> None:
    """What the victim left behind proves the kill hit where it was meant to."""
    left = report.leftovers
    victim_parts = len(left.committed)
    if point == "after-join":
        assert left.victim_in_group and not left.victim_synced
    if point in {"after-join", "after-sync", "mid-read"}:
        assert left.victim_in_group and left.committed == {} and left.in_sink == {}, left
    if point == "after-sync":
        assert left.victim_synced
    if point == "after-write":  # the victim's two partitions staged: nothing is visible before the commit
        assert left.committed == {} and left.in_sink == {}, left
    if point in {"after-commit", "after-mirror"}:
        assert victim_parts == 2 and set(left.committed.values()) == {PER_PARTITION}, left
        assert left.victim_materializations == 0
    if point == "after-commit":
        assert all(offset is None for offset in left.kafka.values()), left.kafka
    if point == "after-mirror":  # committed and mirrored, not reported: the member stays in the group until
        assert left.victim_in_group  # its events are logged, so its session expiring tells the sensor
        assert {tp: left.kafka[tp] for tp in left.committed} == left.committed
    if point == "heartbeat":
        assert left.victim_in_group and left.victim_synced


@pytest.mark.parametrize(("point", "assignor"), MATRIX)
def test_a_worker_killed_at_any_point_is_recovered_through_the_sensors(
    point: str, assignor: str, broker: Any, spark: Any, tmp_path: Path
) -> None:
    report = run_fault_scenario(point, assignor, bootstrap=broker.bootstrap_servers, spark=spark, workdir=tmp_path)
    assert report.leftovers.marker_point == point and report.leftovers.exit_code == -9
    assert report.leftovers.elected == (assignor, COOPERATIVE if assignor == "cooperative-sticky" else EAGER)
    _check_leftovers(point, report)
    # one rerun of the victim's slot, keyed to its run, over both sensor ticks
    assert [(r[SLOT_TAG], r[RERUN_TAG]) for r in report.rerun_requests] == [("1", report.leftovers.victim_run_id)]
    assert report.reruns_before_run_marked_failed == 1  # the session expiry alone: no run monitoring needed
    assert report.survivor_ok and report.rerun_ok
    audit = report.audit
    assert (audit.lost, audit.duplicated, audit.problems) == (0, 0, ()), audit
    assert (audit.produced, audit.in_sink, audit.quarantined) == (RECORDS, RECORDS - 2, 2)
    assert report.final_state == "Empty"
    assert 0 < report.outcome.recovered_s < 300


def _spec(sink: Path) -> PipelineSpec:
    return PipelineSpec(sink_path=str(sink), value_format="json", value_schema=VALUE_SCHEMA)


def test_a_batch_mirrors_ledger_heads_whose_mirror_never_ran(
    spark: Any, kafka_config: dict[str, Any], topic_factory: Any, produce_records: Any, tmp_path: Path
) -> None:
    """A run killed between its ledger commit and its Kafka mirror leaves Kafka behind the ledger; the next
    batch of those partitions has nothing new to commit and still brings Kafka up to the ledger."""
    topic = topic_factory(2)
    produce_records(topic, json_records(10, 2))
    group = f"mirror-catch-up-{tmp_path.name}"[:60]
    coordinator = Coordinator.from_url(f"sqlite:///{tmp_path / 'cohort.db'}")
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    ledger = coordinator.standalone_ledger(group)
    ledger.commit([OffsetRange(topic, p, 0, 5, records=5) for p in (0, 1)], run_id="killed-before-mirror")
    assert {tp: o for tp, (o, _) in kafka_committed(kafka_config, group, tps).items()} == dict.fromkeys(tps)

    result = run_batch(
        spark, _spec(tmp_path / "lake"), kafka_config, tps, ledger, group=group, mirror=KafkaOffsetMirror(kafka_config)
    )
    assert result.committed == () and result.records == 0 and result.mirror_error is None
    assert {tp: o for tp, (o, _) in kafka_committed(kafka_config, group, tps).items()} == dict.fromkeys(tps, 5)
    coordinator.close()


@pytest.mark.parametrize("backend", ["sqlite", "memory"])
def test_the_ledger_lists_the_ranges_of_one_run(backend: str, tmp_path: Path) -> None:
    store = MemoryGroupStore() if backend == "memory" else None
    coordinator = Coordinator(store) if store else Coordinator.from_url(f"sqlite:///{tmp_path / 'c.db'}")
    ledger = coordinator.standalone_ledger("g")
    ledger.commit([OffsetRange("t", 0, 0, 3), OffsetRange("t", 1, 0, 2)], run_id="a")
    ledger.commit([OffsetRange("t", 0, 3, 7), OffsetRange("t", 1, 2, 2)], run_id="b")
    ledger.commit([OffsetRange("t", 1, 2, 4)], run_id="a")
    ranges = [(e.partition, e.from_offset, e.until_offset) for e in coordinator.run_ledger_history("g", "a")]
    assert ranges == [(0, 0, 3), (1, 0, 2), (1, 2, 4)]
    assert [(e.partition, e.from_offset) for e in coordinator.run_ledger_history("g", "b")] == [(0, 3)]
    assert coordinator.run_ledger_history("g", "c") == [] and coordinator.run_ledger_history("other", "a") == []
    coordinator.close()


def test_a_rerun_reports_the_ranges_its_lost_run_committed_but_never_materialized(
    kafka_config: dict[str, Any], topic_factory: Any, produce_records: Any, spark: Any, tmp_path: Path
) -> None:
    """The rerun of a run killed after its commit and mirror (its ranges are in the ledger under its run id,
    with no materialization) reports them from the ledger; a rerun of a run that reported everything adds
    nothing. Without this the offset audit finds ledger ranges with no materialization."""
    topic = topic_factory(2)
    produce_records(topic, json_records(8, 2))
    (tmp_path / "dagster").mkdir()
    setup = Setup(
        bootstrap=kafka_config["bootstrap.servers"],
        group=f"backfill-{tmp_path.name}"[:60],
        topics=(topic,),
        sink=str(tmp_path / "lake"),
        store_url=f"sqlite:///{tmp_path / 'cohort.db'}",
        dagster_home=str(tmp_path / "dagster"),
        slots=1,
        settings={"initial_rebalance_delay_s": 0.0},
    )
    config = config_for(setup)
    job = definitions_for(setup).resolve_job_def(T.get_job_name(config.group))
    with instance_for(setup) as instance:

        def run(tags: dict[str, str]) -> tuple[str, set[tuple[str, int, int, str]]]:
            result = job.execute_in_process(run_config=worker_run_config(config, 1), tags=tags, instance=instance)
            assert result.success
            return result.run_id, {
                (
                    e.materialization.partition or "",
                    int(e.materialization.metadata["cohort/from_offset"].value),
                    int(e.materialization.metadata["cohort/until_offset"].value),
                    str(e.materialization.metadata["cohort/run_id"].value),
                )
                for e in result.get_asset_materialization_events()
                if e.materialization.asset_key == key
            }

        key = T.get_asset_key(config.group, topic)
        first, shown = run({})
        assert shown == {("0", 0, 4, first), ("1", 0, 4, first)}
        _, shown = run({RERUN_TAG: first})  # its lost run had reported everything; nothing new to read
        assert shown == set()

        # a run killed after committing and mirroring [4, 6) of both partitions, before its materializations
        produce_records(topic, json_records(4, 2))
        coordinator = Coordinator.from_url(setup.store_url)
        lost = "0f0e0d0c-lost-run"
        committed = [OffsetRange(topic, p, 4, 6, records=2) for p in (0, 1)]
        coordinator.standalone_ledger(config.group).commit(committed, run_id=lost)
        KafkaOffsetMirror(kafka_config).mirror(config.group, committed, run_id=lost)
        kafka = KafkaResource(bootstrap_servers=setup.bootstrap)

        def problems() -> list[str]:
            audits = gather_audits(coordinator, config.group, topic, 2, instance=instance, asset_key=key, kafka=kafka)
            return [p for a in audits for p in a.problems]

        assert problems() == [f"{topic}-{p}: ledger range [4, 6) has no materialization" for p in (0, 1)]
        _, shown = run({RERUN_TAG: lost})
        assert shown == {("0", 4, 6, lost), ("1", 4, 6, lost)}
        assert problems() == []
        coordinator.close()
        kafka.close()
