"""JSON Schemas as generators write them (pydantic's `model_json_schema()`: optional fields as `anyOf` with
null, nested models as `$ref`s into `$defs`, lists, enums), the way a user meets them: records written by
confluent-kafka's JSONSerializer to the real broker, the schema registered with the test registry, one
`run_batch` with real Spark. A schema that cannot become columns fails the batch at its start, naming the
construct and the subject, with nothing read or committed."""

from __future__ import annotations

import datetime
import enum
import json
from typing import Any

import pydantic
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from cohort.common.types import TopicPartition
from cohort.pipelines.spec import PipelineSpec
from tests.support.registry_runs import connection, landed, run_one_partition


class Status(enum.StrEnum):
    PAID = "paid"
    SHIPPED = "shipped"


class Address(pydantic.BaseModel):
    city: str
    zip: str | None = None


class Order(pydantic.BaseModel):
    id: int
    note: str | None = None
    amount: float | None = None
    home: Address
    shipping: Address | None = None
    tags: list[str] = []
    status: Status
    at: datetime.datetime


def serialized(registry: Any, subject_topic: str, schema: dict[str, Any], records: list[dict[str, Any]]) -> list[bytes]:
    """`records` as JSONSerializer writes them, registering `schema` under `<subject_topic>-value`."""
    serializer = JSONSerializer(json.dumps(schema), SchemaRegistryClient(registry.client_config()))
    context = SerializationContext(subject_topic, MessageField.VALUE)
    return [serializer(record, context) for record in records]


AT = datetime.datetime(2026, 11, 24, 10, 0, tzinfo=datetime.UTC)


def test_a_pydantic_schema_with_optional_fields_decodes(
    spark, kafka_config, topic, produce_records, ledger, lake, registry
):
    full = Order(
        id=1,
        note="gift",
        amount=2.5,
        home=Address(city="Lyon", zip="69001"),
        shipping=Address(city="Nice"),
        tags=["a", "b"],
        status=Status.SHIPPED,
        at=AT,
    )
    bare = Order(id=2, home=Address(city="Paris"), status=Status.PAID, at=AT)
    records = [o.model_dump(mode="json") for o in (full, bare)]
    values = serialized(registry, topic, Order.model_json_schema(), records)
    # a record of another schema, without the reader's required fields: quarantined, never a row of nulls
    stray = serialized(
        registry, f"{topic}-other", {"type": "object", "properties": {"sku": {"type": "string"}}}, [{"sku": "x"}]
    )
    produce_records(topic, [(0, None, v) for v in [*values, *stray]])
    spec = PipelineSpec(sink_path=str(lake), value_format="json-schema", registry=connection(registry))

    result = run_one_partition(spark, spec, kafka_config, topic, ledger)

    found = landed(spark, spec)
    assert (result.records, result.quarantined) == (2, 1)
    assert found.rows[0] == {
        "id": 1,
        "note": "gift",
        "amount": 2.5,
        "home": {"city": "Lyon", "zip": "69001"},
        "shipping": {"city": "Nice", "zip": None},
        "tags": ["a", "b"],
        "status": "shipped",
        "at": AT.replace(tzinfo=None),  # Spark's session time zone is UTC in the tests
    }
    assert found.rows[1] == {
        "id": 2,
        "note": None,
        "amount": None,
        "home": {"city": "Paris", "zip": None},
        "shipping": None,
        "tags": [],
        "status": "paid",
        "at": AT.replace(tzinfo=None),
    }
    assert found.reasons == {2: "field 'id' is missing or null but the schema requires it"}


class Flexible(pydantic.BaseModel):
    id: int
    ref: int | str  # a union of two types: no one column holds it


def test_a_schema_that_cannot_become_columns_fails_the_batch_at_its_start(
    spark, kafka_config, topic, produce_records, ledger, lake, registry
):
    values = serialized(registry, topic, Flexible.model_json_schema(), [{"id": 1, "ref": "a"}, {"id": 2, "ref": 3}])
    produce_records(topic, [(0, None, v) for v in values])
    spec = PipelineSpec(sink_path=str(lake), value_format="json-schema", registry=connection(registry))

    with pytest.raises(ValueError) as refused:
        run_one_partition(spark, spec, kafka_config, topic, ledger)

    said = str(refused.value)
    assert f"subject {topic}-value" in said and "`$.ref`: anyOf of several types (bigint, string)" in said
    assert ledger.committed_offsets([TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): None}
    assert not lake.exists() or not any(lake.rglob("*.parquet"))
