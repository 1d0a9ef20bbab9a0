"""An `AirflowGroup` from the settings a dg component's `defs.yaml` holds, so one file can declare a group for
both faces.

The top-level attributes that are `WorkerGroup` fields give the group (a store URL written `{{ env.NAME }}`
becomes `store_url_env`: the variable is read where the tasks and the trigger run); the `pipeline` block gives
the `PipelineSpec` (`cohort.pipelines.spec_settings`), its `{{ env.NAME }}` templates rendered when the DAG
file is parsed. Kafka is the Airflow connection `kafka_conn_id` names and Spark the `spark` block's `master`
(or `remote`, `conf`); the Dagster-only attributes (schedule, lag threshold, host slots, checks) are not read:
`cohort_dag` takes its own schedule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from cohort.airflow.slot import AirflowGroup
from cohort.assignment.worker_group import WorkerGroup
from cohort.common.env_templates import env_template, render_env
from cohort.pipelines.spec_settings import spec_from_settings

__all__ = ["group_from_settings"]


def _rendered(value: Any) -> Any:
    if isinstance(value, str):
        return render_env(value)
    if isinstance(value, list):
        return [_rendered(v) for v in value]
    if isinstance(value, dict):
        return {k: _rendered(v) for k, v in value.items()}
    return value


def group_from_settings(attributes: Mapping[str, Any], *, kafka_conn_id: str = "kafka_default") -> AirflowGroup:
    """The group `attributes` (a defs.yaml's `attributes`) declare, as `cohort_dag` takes it."""
    fields = {f.name for f in dataclasses.fields(WorkerGroup)}
    values = {k: v for k, v in attributes.items() if k in fields}
    store_url_env = env_template(values.get("store_url"))
    if store_url_env is not None:
        del values["store_url"]
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in _rendered(values).items()}
    spark = attributes.get("spark") or {}
    return AirflowGroup(
        WorkerGroup(**values),
        spec_from_settings(_rendered(dict(attributes["pipeline"]))),
        kafka_conn_id=kafka_conn_id,
        store_url_env=store_url_env,
        spark_master=spark.get("master", "local[2]"),
        spark_remote=spark.get("remote"),
        spark_conf=spark.get("conf", {}),
    )
