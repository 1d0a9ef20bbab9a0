"""PipelineSpec refuses bad configuration when it is built, naming the problem."""

from __future__ import annotations

import pandera.pyspark as pa
import pyspark.sql.types as T
import pytest

from cohort.pipelines.planning.plan import ResetPolicy
from cohort.pipelines.spec import PipelineSpec
from cohort.pipelines.tasks.validate import ModelError
from tests.support.orders import ORDER_SCHEMA, Order


def field(name: str) -> T.StructType:
    return T.StructType([T.StructField(name, T.LongType())])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"value_schema": None}, "needs a non-empty Spark StructType"),
        ({"value_schema": field("kafka")}, r"\['kafka'\] clash with names the pipeline reserves"),
        ({"value_schema": field("partition")}, "clash with names the pipeline reserves"),
        ({"value_schema": field("_cohort_x")}, "clash with names the pipeline reserves"),
        ({"value_format": "orc"}, "unknown value format 'orc'"),
        ({"value_format": "utf8"}, "only applies to decoded formats, not 'utf8'"),
        ({"key_format": "json"}, "the 'json' key format needs a non-empty Spark StructType"),
        ({"key_format": "utf8", "key_schema": field("id")}, "a key schema only applies to decoded formats"),
        ({"value_format": "avro", "registry": "http://registry:8081"}, "registry must be a RegistryConnection"),
        ({"max_records_per_task": 0}, "max_records_per_task must be >= 1"),
        ({"max_records_per_partition": 0}, "max_records_per_partition must be >= 1"),
        ({"transform": "upper"}, "transform must be a callable"),
        ({"reset": "newest"}, "unknown reset policy 'newest'"),
        ({"sink_path": " "}, "sink_path must be a non-empty"),
        ({"read_timeout_s": 0}, "read_timeout_s must be > 0"),
    ],
)
def test_bad_configuration_is_refused(kwargs, message):
    base = {"sink_path": "/tmp/lake", "value_schema": ORDER_SCHEMA}
    with pytest.raises(ValueError, match=message):
        PipelineSpec(**{**base, **kwargs})


def test_a_model_that_does_not_fit_the_schema_is_refused_early():
    class Other(pa.DataFrameModel):
        price: T.DoubleType()  # type: ignore[valid-type]

    with pytest.raises(
        ModelError, match=r"Other.price: no such column among the decoded values \['amount', 'id', 'user'\]"
    ):
        PipelineSpec(sink_path="/tmp/lake", value_schema=ORDER_SCHEMA, model=Other)


def test_defaults_and_derived_values():
    spec = PipelineSpec(sink_path="hdfs://nn/lake/orders/", value_schema=ORDER_SCHEMA, model=Order, reset="latest")
    assert spec.reset == ResetPolicy("latest")
    assert spec.quarantine_root == "hdfs://nn/lake/orders/_quarantine"
    assert [c.description for c in spec.row_checks][:2] == ["id: greater_than(0)", "id: not_nullable"]
    assert spec.limits(target_tasks=4).target_tasks == 4
    assert PipelineSpec(sink_path="/l", value_format="bytes").value_columns.names == ["value"]
