"""The worker job into a Delta Lake and an Iceberg sink, in process: real broker, Spark, coordinator store and
Dagster instance. The landed asset names the table; its check reads the table's files and marks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cohort.assets.translator import CHECK_CONTIGUOUS, CHECK_SINK, DagsterCohortTranslator
from cohort.assets.worker import worker_run_config
from harness.dagster_group import config_for, definitions_for, json_records
from harness.tables import duckdb_offsets, table_offsets
from tests.assets.test_worker import _checks, _of

T = DagsterCohortTranslator()


@pytest.mark.parametrize("table_format", ["delta", "iceberg"])
def test_worker_lands_into_a_table_and_its_check_reads_the_table(
    table_format, make_setup, topic_factory, produce_records, instance
) -> None:
    topic = topic_factory(2, suffix="orders")
    produce_records(topic, json_records(20, 2, malformed={3}))
    setup = make_setup((topic,), slots=1, settings={"initial_rebalance_delay_s": 0.0}, table_format=table_format)
    config = config_for(setup)
    defs = definitions_for(setup)
    job = defs.resolve_job_def(T.get_job_name(config.group))

    assert job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance).success
    produce_records(topic, [(0, None, b'{"id": 100, "kind": "late"}')])
    result = job.execute_in_process(run_config=worker_run_config(config, 1), instance=instance)
    assert result.success

    spec = config.pipeline
    assert spec is not None
    assert len(table_offsets(spec)) == 20 == len(set(duckdb_offsets(spec)))
    assert table_offsets(spec, quarantine=True) == [(1, 1)]
    landed = _of(result, T.get_landed_asset_key(config.group, topic))
    assert [(m.partition, m.metadata["dagster/row_count"].value) for m in landed] == [("0", 1)]
    landed_key = T.get_landed_asset_key(config.group, topic)
    metadata = defs.get_assets_def(landed_key).specs_by_key[landed_key].metadata
    assert metadata["cohort/table_format"] == table_format and metadata["dagster/uri"] == setup.sink
    if table_format == "iceberg":
        assert metadata["dagster/table_name"] == spec.iceberg_identifiers[0]

    checks = _checks(defs, config, instance)
    assert checks[CHECK_CONTIGUOUS].passed and checks[CHECK_SINK].passed, checks[CHECK_SINK].metadata
    partition = Path(setup.sink) / "data" / f"topic={topic}" / "partition=0"
    shutil.rmtree(next(d for d in partition.iterdir() if d.name.startswith("10-11-")))
    failed = _checks(defs, config, instance)[CHECK_SINK]
    assert not failed.passed
    details = failed.metadata["cohort/details"].value
    assert "committed range [10, 11)" in details or "[10, 11)" in details, details
