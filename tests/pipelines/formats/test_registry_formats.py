"""Schema Registry formats, decoded the way a reading task decodes them: raw Kafka batches through the spec's
checker, the values written by confluent-kafka's own Avro, Protobuf and JSON Schema serializers (the real
framing) against a registry HTTP server (harness.schema_registry: decoding runs in Spark's worker
processes, which confluent-kafka's in-process mock registry cannot serve)."""

from __future__ import annotations

import json
from typing import Any

import pandera.pyspark as pandera
import pyarrow as pa
import pyspark.sql.types as T
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from cohort.pipelines import PipelineSpec
from cohort.pipelines.formats.decode import REASON_COLUMN
from cohort.pipelines.formats.registry import RegistryConnection, RegistryError, RegistryUnavailableError
from cohort.pipelines.tasks.reader import RECORD_SCHEMA
from harness.schema_registry import SchemaRegistryServer
from tests.support.order_schemas import ORDER_V1, ORDER_V2

TOPIC = "orders"
V1, V2 = ORDER_V1, ORDER_V2  # v2: `note` removed, `amount` widened to double, `currency` added with a default


def connection(server: SchemaRegistryServer) -> RegistryConnection:
    return RegistryConnection(server.url, max_retries=1, retry_wait_ms=1)


def serialize(server: SchemaRegistryServer, serializer_type: Any, schema: Any, records: list[Any]) -> list[bytes]:
    client = SchemaRegistryClient(server.client_config())
    if serializer_type is AvroSerializer:
        serializer = AvroSerializer(client, schema)
    else:  # JSONSerializer and ProtobufSerializer take the schema (or message class) first
        serializer = serializer_type(schema, client)
    context = SerializationContext(TOPIC, MessageField.VALUE)
    return [serializer(record, context) for record in records]


def raw_batch(values: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([TOPIC] * n),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([0] * n, pa.int64()),
            pa.nulls(n, pa.binary()),
            pa.array(values, pa.binary()),
            pa.nulls(n, RECORD_SCHEMA.field("headers").type),
            pa.nulls(n, pa.string()),
        ],
        schema=RECORD_SCHEMA,
    )


def check(spec: PipelineSpec, values: list[bytes | None]) -> tuple[list[dict[str, Any]], list[str | None]]:
    spec = spec.with_readers([TOPIC])
    checked = spec.checker.check(raw_batch(values))
    rows = spec.checker.sink_rows(checked).drop_columns(["kafka"]).to_pylist()
    return rows, checked.column(REASON_COLUMN).to_pylist()


def test_avro_versions_decode_into_the_latest_schema_and_broken_records_are_quarantined(registry):
    old = serialize(registry, AvroSerializer, json.dumps(V1), [{"id": 1, "amount": 1.5, "note": "a"}])
    new = serialize(registry, AvroSerializer, json.dumps(V2), [{"id": 2**40, "amount": 2.25, "currency": "USD"}])
    unknown_id = b"\x00\x00\x00\x03\xe7" + old[0][5:]
    broken = [old[0][:-1], b"\x01" + old[0][1:], b"\x00\x00", None, unknown_id]
    spec = PipelineSpec(sink_path="/tmp/unused", value_format="avro", registry=connection(registry))

    rows, reasons = check(spec, [*old, *new, *broken])

    assert rows == [  # v1 read as v2: long id, double amount, default currency; `note` dropped
        {"id": 1, "amount": 1.5, "currency": "EUR"},
        {"id": 2**40, "amount": 2.25, "currency": "USD"},
    ]
    assert reasons[:2] == [None, None]
    assert "does not match its writer schema" in reasons[2]
    assert "magic byte 0 (found 0x01)" in reasons[3]
    assert "too short" in reasons[4]
    assert "tombstone" in reasons[5]
    assert "schema id 999 is not in the Schema Registry" in reasons[6]


def test_an_explicit_reader_schema_needs_no_subject_and_unreadable_writers_are_quarantined(registry):
    records = serialize(registry, AvroSerializer, json.dumps(V1), [{"id": 7, "amount": 0.5, "note": "n"}])
    columns = T.StructType([T.StructField("id", T.LongType(), False), T.StructField("missing", T.StringType(), True)])
    spec = PipelineSpec(
        sink_path="/tmp/unused", value_format="avro", value_schema=columns, registry=connection(registry)
    )
    rows, reasons = check(spec, records)
    assert rows == [{"id": 7, "missing": None}] and reasons == [None]

    required = T.StructType([T.StructField("currency", T.StringType(), False)])
    strict = PipelineSpec(
        sink_path="/tmp/unused", value_format="avro", value_schema=required, registry=connection(registry)
    )
    rows, reasons = check(strict, records)
    assert rows == [] and "`$.currency` is not in the writer schema and has no default" in reasons[0]


class PositiveOrder(pandera.DataFrameModel):
    """Checks on the columns the registry's latest schema gives (V2): a positive id, a known currency."""

    id: T.LongType() = pandera.Field(gt=0)  # type: ignore[valid-type]
    currency: T.StringType() = pandera.Field(isin=["EUR", "USD"])  # type: ignore[valid-type]


class NoteModel(pandera.DataFrameModel):
    note: T.StringType() = pandera.Field(nullable=True)  # type: ignore[valid-type]


def test_the_model_checks_the_columns_of_the_registry_reader_schema(registry):
    old = serialize(registry, AvroSerializer, json.dumps(V1), [{"id": 1, "amount": 1.0, "note": "a"}])
    new = serialize(
        registry,
        AvroSerializer,
        json.dumps(V2),
        [{"id": -5, "amount": 2.0, "currency": "USD"}, {"id": 6, "amount": 3.0, "currency": "GBP"}],
    )
    spec = PipelineSpec(
        sink_path="/tmp/unused", value_format="avro", registry=connection(registry), model=PositiveOrder
    )

    rows, reasons = check(spec, [*old, *new])

    assert rows == [{"id": 1, "amount": 1.0, "currency": "EUR"}]  # v1's default currency passes the model
    assert reasons == [None, "id: greater_than(0)", "currency: isin(['EUR', 'USD'])"]

    unknown = PipelineSpec(sink_path="/tmp/unused", value_format="avro", registry=connection(registry), model=NoteModel)
    # the latest schema dropped `note`: the batch fails at its start
    with pytest.raises(ValueError, match=r"NoteModel.note: no such column among the decoded values"):
        unknown.with_readers([TOPIC])


def test_a_registry_outage_fails_the_batch_instead_of_quarantining(registry):
    records = serialize(registry, AvroSerializer, json.dumps(V1), [{"id": 1, "amount": 1.0, "note": "x"}])
    spec = PipelineSpec(sink_path="/tmp/unused", value_format="avro", registry=connection(registry))
    spec = spec.with_readers([TOPIC])
    registry.stop()
    with pytest.raises(RegistryUnavailableError, match="unreachable"):
        spec.checker.check(raw_batch(records))


def test_json_schema_records_are_validated_against_their_writer_schema(registry):
    schema = {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "at": {"type": "string", "format": "date-time"}},
        "required": ["id"],
    }
    good = serialize(registry, JSONSerializer, json.dumps(schema), [{"id": 3, "at": "2026-11-24T10:00:00Z"}])
    header = good[0][:5]
    spec = PipelineSpec(sink_path="/tmp/unused", value_format="json-schema", registry=connection(registry))
    rows, reasons = check(spec, [good[0], header + b'{"id": "three"}', header + b"{not json"])
    assert [r["id"] for r in rows] == [3]
    assert "JSON does not match its writer schema" in reasons[1] and "'three' is not of type 'integer'" in reasons[1]
    assert "not valid JSON" in reasons[2]


def _order_message() -> Any:
    proto = descriptor_pb2.FileDescriptorProto(name="orders/order.proto", package="shop", syntax="proto3")
    message = proto.message_type.add(name="Order")
    message.field.add(name="id", number=1, type=3, label=1)  # int64
    message.field.add(name="status", number=2, type=9, label=1)  # string
    message.field.add(name="items", number=3, type=9, label=3)  # repeated string
    pool = descriptor_pool.DescriptorPool()
    return message_factory.GetMessageClass(pool.Add(proto).message_types_by_name["Order"])


def test_protobuf_messages_decode_by_field_name(registry):
    order = _order_message()
    records = serialize(
        registry, ProtobufSerializer, order, [order(id=5, status="paid", items=["a", "b"]), order(id=6)]
    )
    spec = PipelineSpec(sink_path="/tmp/unused", value_format="protobuf", registry=connection(registry))
    rows, reasons = check(spec, [*records, records[0][:6] + b"\xff\xff"])
    assert rows == [{"id": 5, "status": "paid", "items": ["a", "b"]}, {"id": 6, "status": "", "items": []}]
    assert reasons[:2] == [None, None] and "does not parse as shop.Order" in reasons[2]


def test_keys_decode_into_a_key_column(registry):
    client = SchemaRegistryClient(registry.client_config())
    key_serializer = AvroSerializer(client, json.dumps("string"))
    key = key_serializer("customer-9", SerializationContext(TOPIC, MessageField.KEY))
    value = serialize(registry, AvroSerializer, json.dumps(V1), [{"id": 1, "amount": 1.0, "note": "x"}])[0]
    spec = PipelineSpec(
        sink_path="/tmp/unused", value_format="avro", key_format="avro", registry=connection(registry)
    ).with_readers([TOPIC])
    batch = raw_batch([value]).set_column(4, "key", pa.array([key], pa.binary()))
    rows = spec.checker.sink_rows(spec.checker.check(batch)).drop_columns(["kafka"]).to_pylist()
    assert rows == [{"key": "customer-9", "id": 1, "amount": 1.0, "note": "x"}]


@pytest.mark.schema_registry
def test_refused_credentials_are_named_not_taken_for_an_outage_or_a_missing_subject():
    with SchemaRegistryServer(username="cohort", password="right") as server:
        wrong = RegistryConnection(server.url, username="cohort", password="wrong", max_retries=0)
        spec = PipelineSpec(sink_path="/tmp/unused", value_format="avro", registry=wrong)
        with pytest.raises(RegistryError, match="refused the credentials") as refused:
            spec.with_readers([TOPIC])
        assert not isinstance(refused.value, RegistryUnavailableError) and "wrong" not in str(refused.value)


def test_a_missing_subject_is_named(registry):
    spec = PipelineSpec(sink_path="/tmp/unused", value_format="avro", registry=connection(registry))
    with pytest.raises(ValueError, match="subject 'orders-value' is not in the Schema Registry"):
        spec.with_readers([TOPIC])


ADDRESS = {
    "type": "record",
    "name": "Address",
    "namespace": "shop",
    "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "string"], "default": None}],
}
CUSTOMER = {
    "type": "record",
    "name": "Customer",
    "namespace": "shop",
    "fields": [{"name": "name", "type": "string"}, {"name": "home", "type": "shop.Address"}],
}
ORDER_WITH_REFS = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "buyer", "type": "shop.Customer"}],
}


def test_avro_schema_references_are_resolved_for_writer_and_reader(registry):
    registry.register("address", json.dumps(ADDRESS))
    registry.register(
        "customer", json.dumps(CUSTOMER), references=[{"name": "shop.Address", "subject": "address", "version": 1}]
    )
    registry.register(
        f"{TOPIC}-value",
        json.dumps(ORDER_WITH_REFS),
        references=[{"name": "shop.Customer", "subject": "customer", "version": 1}],
    )
    client = SchemaRegistryClient(registry.client_config())
    serializer = AvroSerializer(client, None, conf={"auto.register.schemas": False, "use.latest.version": True})
    context = SerializationContext(TOPIC, MessageField.VALUE)
    order = {"id": 3, "buyer": {"name": "Ada", "home": {"city": "Lyon", "zip": None}}}
    value = serializer(order, context)
    spec = PipelineSpec(sink_path="/tmp/unused", value_format="avro", registry=connection(registry))

    rows, reasons = check(spec, [value, value[:-2]])

    assert rows == [order]
    assert reasons[0] is None and "does not match its writer schema" in reasons[1]
    assert "UnknownType" not in reasons[1]  # fastavro's account of the bad record knows the referenced types too
