"""docs/airflow.md's DAG file, run in-process (`dag.test()`: Airflow's own task runner and execution API, no
scheduler): two slots land a topic exactly once through the fenced ledger, and the asset events tile the ledger.

The multi-process scenarios (scheduler, triggerer, a slot killed mid-batch) are in tests/airflow/test_airflow_e2e.py.
"""

import json
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.protocol.group_state import CLEAN_LEAVE, EventKind
from tests.airflow.support import dag_test, guide_dag, make_home

GROUP = "orders-airflow-local"


def test_two_slots_land_a_topic_once_and_the_asset_events_tile_the_ledger(
    tmp_path: Path, kafka_config, topic_factory, produce_records
):
    topic = topic_factory(4, suffix="af")
    produce_records(topic, [(i % 4, f"k{i}".encode(), json.dumps({"id": i, "kind": "v"}).encode()) for i in range(200)])
    store = f"sqlite:///{tmp_path / 'cohort.db'}"
    sink = tmp_path / "lake"
    bootstrap = kafka_config["bootstrap.servers"]
    home = make_home(
        tmp_path / "airflow",
        {
            "COHORT_AIRFLOW_GROUP": GROUP,
            "COHORT_AIRFLOW_TOPIC": topic,
            "COHORT_AIRFLOW_SINK": str(sink),
            "COHORT_STORE_URL": store,
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}}),
        },
    )
    dag_id = "cohort__orders_airflow_local"

    run = dag_test(home, dag_id)

    assert run["state"] == "success", run
    kafka = ds.dataset(sink, format="parquet", partitioning="hive").to_table(columns=["kafka"]).column("kafka")
    rows = kafka.combine_chunks()
    landed = Counter(zip(rows.field("partition").to_pylist(), rows.field("offset").to_pylist(), strict=True))
    assert landed == Counter((p, o) for p in range(4) for o in range(50))
    coordinator = Coordinator.from_url(store)
    try:
        ledger = {
            p: [(e.from_offset, e.until_offset, e.run_id) for e in coordinator.ledger_history(GROUP, topic, p)]
            for p in range(4)
        }
    finally:
        coordinator.close()
    assert all(entries and entries[0][0] == 0 and entries[-1][1] == 50 for entries in ledger.values()), ledger
    events = [e for e in home.asset_events() if e["uri"] == f"kafka://{bootstrap.lower()}/{topic}"]
    fields = ("cohort/partition", "cohort/from_offset", "cohort/until_offset", "cohort/run_id")
    shown = sorted(tuple(e["extra"][f] for f in fields) for e in events)
    assert shown == sorted((p, f, u, r) for p, entries in ledger.items() for f, u, r in entries)
    assert all(e["task"] == "run_slot" and e["extra"]["cohort/group"] == GROUP for e in events)
    assert all(e["extra"]["cohort/run_id"].startswith(f"airflow:{dag_id}/{run['run_id']}/slot-") for e in events)
    tries = home.task_tries(dag_id)
    assert [(t, i, s) for t, i, _n, s in tries] == [
        ("run_slot", 0, "success"),
        ("run_slot", 1, "success"),
        ("slots", -1, "success"),
    ]


FAILING = """

def _failing_batch(*args, **kwargs):
    raise RuntimeError("the batch failed")


dag = cohort_dag(  # the same group, every batch failing, no retries: each slot's only try is its last
    AirflowGroup(group, pipeline, kafka_conn_id="kafka_default", store_url_env="COHORT_STORE_URL"),
    schedule=None,
    retries=0,
    runner=_failing_batch,
)
"""


@pytest.mark.slow
def test_a_slot_failing_its_last_try_is_evicted_so_the_trigger_reruns_it(
    tmp_path: Path, kafka_config, topic_factory, produce_records
):
    topic = topic_factory(2, suffix="affail")
    produce_records(topic, [(i % 2, None, json.dumps({"id": i, "kind": "v"}).encode()) for i in range(10)])
    store = f"sqlite:///{tmp_path / 'cohort.db'}"
    group = "orders-airflow-failing"
    home = make_home(
        tmp_path / "airflow",
        {
            "COHORT_AIRFLOW_GROUP": group,
            "COHORT_AIRFLOW_TOPIC": topic,
            "COHORT_AIRFLOW_SINK": str(tmp_path / "lake"),
            "COHORT_STORE_URL": store,
            "AIRFLOW_CONN_KAFKA_DEFAULT": json.dumps(
                {"conn_type": "kafka", "extra": {"bootstrap.servers": kafka_config["bootstrap.servers"]}}
            ),
        },
        dag_source=guide_dag() + FAILING,
    )

    run = dag_test(home, "cohort__orders_airflow_failing")

    assert run["state"] == "failed", run
    coordinator = Coordinator.from_url(store)
    try:
        removed = [e for _, e in coordinator.group_events(group) if e.kind is EventKind.MEMBER_REMOVED]
        assert coordinator.describe_group(group).members == ()
    finally:
        coordinator.close()
    reasons = sorted(e.reason for e in removed)
    assert len(reasons) == 2 and all(not r.startswith(CLEAN_LEAVE) for r in reasons), reasons
    assert all("failed on its last try: RuntimeError" in r for r in reasons), reasons
    assert [f"slot-{n}/try-1" in r for n, r in zip((1, 2), reasons, strict=True)] == [True, True]
