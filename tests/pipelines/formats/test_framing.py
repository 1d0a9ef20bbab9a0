"""What the registry framing says about a record, the way a user meets it: records written by confluent-kafka's
Avro, Protobuf and JSON Schema serializers to one topic of the real broker, schemas registered with the test
registry, `run_batch` with real Spark. A record framed for another schema type is quarantined naming the type
and how the topic is read; a record produced without a key lands with a null `key` column."""

from __future__ import annotations

import json
from typing import Any

import pyspark.sql.types as T
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from cohort.pipelines.spec import PipelineSpec
from tests.support.proto_files import message_classes, payments_file
from tests.support.registry_runs import connection, landed, run_one_partition

CLASSES = message_classes(payments_file())
Payment, Refund = CLASSES["shop.Payment"], CLASSES["shop.Refund"]
ID_RECORD = {"type": "record", "name": "Event", "namespace": "shop", "fields": [{"name": "id", "type": "long"}]}
ID_OBJECT = {"type": "object", "properties": {"id": {"type": "integer"}}}
SKU_OBJECT = {"type": "object", "properties": {"sku": {"type": "string"}}}
ID_COLUMN = T.StructType([T.StructField("id", T.LongType(), True)])


def context(topic: str, what: MessageField = MessageField.VALUE) -> SerializationContext:
    return SerializationContext(topic, what)


SKU_RECORD = {"type": "record", "name": "Item", "namespace": "shop", "fields": [{"name": "sku", "type": "string"}]}
NAMES = ("avro", "protobuf", "json-schema")
"""Per format, two records on the mixed topic: one with an `id` (it lands), one of another schema of the same
type without it (it would be a row of nulls)."""
TYPES = {"avro": ("an AVRO", "Avro"), "protobuf": ("a PROTOBUF", "Protobuf"), "json-schema": ("a JSON", "JSON Schema")}
UNRELATED = {
    "avro": "has none of the reader's fields (id; reader schema: explicit)",
    "protobuf": "message shop.Refund has none of the reader columns (id)",
    "json-schema": "the JSON object has none of the reader columns (id), only fields the reader does not read (sku)",
}


@pytest.fixture
def mixed_topic(topic: str, produce_records: Any, registry: Any) -> list[tuple[str, int]]:
    """`topic` holding, per serializer, a record with `id` = offset + 1 and one of another schema without it
    (each schema under a subject of its own): Avro at offsets 0 and 1, Protobuf at 2 and 3, JSON at 4 and 5.
    Returns each record's (format, writer schema id)."""
    client = SchemaRegistryClient(registry.client_config())
    protobuf = {"use.deprecated.format": False}
    values = [
        AvroSerializer(client, json.dumps(ID_RECORD))({"id": 1}, context(f"{topic}.avro")),
        AvroSerializer(client, json.dumps(SKU_RECORD))({"sku": "x"}, context(f"{topic}.avro-sku")),
        ProtobufSerializer(Payment, client, protobuf)(Payment(id=3), context(f"{topic}.pb")),
        ProtobufSerializer(Refund, client, protobuf)(Refund(refund_id=9), context(f"{topic}.pb-refund")),
        JSONSerializer(json.dumps(ID_OBJECT), client)({"id": 5}, context(f"{topic}.json")),
        JSONSerializer(json.dumps(SKU_OBJECT), client)({"sku": "x"}, context(f"{topic}.json-sku")),
    ]
    produce_records(topic, [(0, None, v) for v in values])
    return [(NAMES[i // 2], int.from_bytes(v[1:5], "big")) for i, v in enumerate(values)]


def test_a_record_framed_for_another_schema_type_is_named_as_such_and_none_is_a_row_of_nulls(
    spark, kafka_config, topic, mixed_topic, coordinator, lake, registry
):
    for fmt in NAMES:
        spec = PipelineSpec(
            sink_path=str(lake / fmt), value_format=fmt, value_schema=ID_COLUMN, registry=connection(registry)
        )
        run_one_partition(spark, spec, kafka_config, topic, coordinator.standalone_ledger(f"read-as-{fmt}"))

        found = landed(spark, spec)
        good = 2 * NAMES.index(fmt)
        assert found.rows == {good: {"id": good + 1}}, fmt
        assert UNRELATED[fmt] in found.reasons[good + 1], (fmt, found.reasons[good + 1])
        for offset, (written, schema_id) in enumerate(mixed_topic):
            if written != fmt:
                said = f"schema id {schema_id} is {TYPES[written][0]} schema, but the topic's values are read as "
                assert found.reasons[offset].startswith(said + TYPES[fmt][1]), (fmt, offset, found.reasons[offset])


def test_a_record_without_a_key_lands_with_a_null_key_column(
    spark, kafka_config, topic, produce_records, ledger, lake, registry
):
    client = SchemaRegistryClient(registry.client_config())
    keys = JSONSerializer(json.dumps({"type": "object", "properties": {"customer": {"type": "string"}}}), client)
    values = ProtobufSerializer(Payment, client, {"use.deprecated.format": False})
    records = [
        (0, keys({"customer": "ann"}, context(topic, MessageField.KEY)), values(Payment(id=1), context(topic))),
        (0, None, values(Payment(id=2), context(topic))),  # a producer that sets no key
    ]
    produce_records(topic, records)
    spec = PipelineSpec(
        sink_path=str(lake), value_format="protobuf", key_format="json-schema", registry=connection(registry)
    )

    result = run_one_partition(spark, spec, kafka_config, topic, ledger)

    found = landed(spark, spec)
    assert (result.records, result.quarantined, found.reasons) == (2, 0, {})
    assert [(r["key"], r["id"]) for _, r in sorted(found.rows.items())] == [({"customer": "ann"}, 1), (None, 2)]
