"""The test Schema Registry server, driven by confluent-kafka's real client, serializers and deserializers."""

from __future__ import annotations

import base64
import json
import socket
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.common._httpx_compat import httpx
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import (  # type: ignore[import-untyped]
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    timestamp_pb2,
)

from harness.schema_registry import RegistryError, SchemaRegistryServer

TOPIC = "t"
SUBJECT = "t-value"
CTX = SerializationContext(TOPIC, MessageField.VALUE)

AVRO_V1 = json.dumps(
    {
        "type": "record",
        "name": "Event",
        "namespace": "cohort.test",
        "fields": [{"name": "id", "type": "long"}, {"name": "user", "type": "string"}],
    }
)
AVRO_V2 = json.dumps(
    {
        "type": "record",
        "name": "Event",
        "namespace": "cohort.test",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "user", "type": "string"},
            {"name": "score", "type": "double", "default": 0.5},
        ],
    }
)
JSON_SCHEMA = json.dumps(
    {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Event",
        "type": "object",
        "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["id"],
    }
)


def client_for(server: SchemaRegistryServer, **extra: Any) -> SchemaRegistryClient:
    """A new client (so no cache from another client), failing fast: no retry sleeps on connection errors."""
    return SchemaRegistryClient({**server.client_config(), "max.retries": 0, **extra})


def frame_id(data: bytes) -> int:
    """The schema id of a Confluent-framed record (magic byte 0, 4-byte big-endian id)."""
    assert data[0] == 0
    return int(struct.unpack(">I", data[1:5])[0])


def test_avro_round_trip_with_an_evolved_second_version(registry: SchemaRegistryServer) -> None:
    writer = client_for(registry)
    v1_bytes = AvroSerializer(writer, AVRO_V1)({"id": 1, "user": "ann"}, CTX)
    v2_bytes = AvroSerializer(writer, AVRO_V2)({"id": 2, "user": "bob", "score": 2.0}, CTX)
    assert v1_bytes is not None and v2_bytes is not None
    assert (frame_id(v1_bytes), frame_id(v2_bytes)) == (1, 2)

    reader = client_for(registry)
    assert AvroDeserializer(reader)(v1_bytes, CTX) == {"id": 1, "user": "ann"}
    assert AvroDeserializer(reader)(v2_bytes, CTX) == {"id": 2, "user": "bob", "score": 2.0}
    # A reader on the new schema fills the added field's default into an old record.
    assert AvroDeserializer(reader, AVRO_V2)(v1_bytes, CTX) == {"id": 1, "user": "ann", "score": 0.5}

    latest = reader.get_latest_version(SUBJECT)
    assert (latest.subject, latest.version, latest.schema_id) == (SUBJECT, 2, 2)
    assert latest.schema.schema_type == "AVRO"
    assert json.loads(latest.schema.schema_str or "") == json.loads(AVRO_V2)
    first = reader.get_version(SUBJECT, 1)
    assert (first.version, first.schema_id) == (1, 1)
    assert reader.get_versions(SUBJECT) == [1, 2]
    assert reader.get_subjects() == [SUBJECT]
    assert reader.get_schema(1).schema_str == AVRO_V1
    # Two registrations, then latest, version 1 and the version list. Ids: the deserializers fetched 1 and 2 once
    # (the client caches per subject), and get_schema(1) without a subject fetched 1 again.
    assert registry.request_count("/subjects/t-value/versions") == 5
    assert registry.request_count("/schemas/ids/") == 3


def test_the_same_schema_keeps_one_id(registry: SchemaRegistryServer) -> None:
    schema = Schema(AVRO_V1, "AVRO")
    first = client_for(registry).register_schema(SUBJECT, schema)
    assert client_for(registry).register_schema(SUBJECT, schema) == first
    assert registry.register(SUBJECT, json.dumps(json.loads(AVRO_V1), indent=2)) == first  # whitespace aside
    assert client_for(registry).get_versions(SUBJECT) == [1]

    other = client_for(registry).register_schema_full_response("other-value", schema)
    assert (other.schema_id, other.version) == (first, 1)
    assert client_for(registry).get_subjects() == ["other-value", SUBJECT]

    found = client_for(registry).lookup_schema(SUBJECT, schema)
    assert (found.schema_id, found.version, found.subject) == (first, 1, SUBJECT)
    with pytest.raises(SchemaRegistryError) as unknown:
        client_for(registry).lookup_schema(SUBJECT, Schema(AVRO_V2, "AVRO"))
    assert unknown.value.error_code == 40403

    assert registry.register(SUBJECT, AVRO_V2) == first + 1
    assert client_for(registry).get_latest_version(SUBJECT).version == 2


def _event_class(dependency_name: str = "cohort_test/money.proto") -> Any:
    """A Protobuf message class built at run time from FileDescriptorProtos: Event imports Money (from another
    file, so the serializer registers a reference) and google.protobuf.Timestamp."""
    pool = descriptor_pool.DescriptorPool()
    timestamp_file = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(timestamp_file)
    pool.Add(timestamp_file)

    F = descriptor_pb2.FieldDescriptorProto
    money = descriptor_pb2.FileDescriptorProto(name=dependency_name, package="cohort.test", syntax="proto3")
    money_msg = money.message_type.add(name="Money")
    money_msg.field.add(name="cents", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    money_msg.field.add(name="currency", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    pool.Add(money)

    event = descriptor_pb2.FileDescriptorProto(
        name="cohort_test/event.proto",
        package="cohort.test",
        syntax="proto3",
        dependency=["google/protobuf/timestamp.proto", dependency_name],
    )
    event_msg = event.message_type.add(name="Event")
    event_msg.field.add(name="name", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    event_msg.field.add(
        name="at", number=2, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, type_name=".google.protobuf.Timestamp"
    )
    event_msg.field.add(
        name="price", number=3, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL, type_name=".cohort.test.Money"
    )
    pool.Add(event)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("cohort.test.Event"))


@pytest.mark.parametrize("skip_known_types", [True, False], ids=["default", "known-types-registered"])
def test_protobuf_round_trip_registers_imports_as_references(
    registry: SchemaRegistryServer, skip_known_types: bool
) -> None:
    event_class = _event_class()
    message = event_class(name="launch")
    message.at.seconds = 1_700_000_000
    message.at.nanos = 5
    message.price.cents = 1999
    message.price.currency = "EUR"

    writer = client_for(registry)
    data = ProtobufSerializer(event_class, writer, {"skip.known.types": skip_known_types})(message, CTX)
    assert data is not None
    schema_id = frame_id(data)
    assert data[5] == 0  # message index [0]: the first message of the file

    decoded = ProtobufDeserializer(event_class, {}, client_for(registry))(data, CTX)
    assert decoded == message

    reader = client_for(registry)
    latest = reader.get_latest_version(SUBJECT)
    assert (latest.schema_id, latest.version, latest.schema.schema_type) == (schema_id, 1, "PROTOBUF")
    expected = [SchemaReference("cohort_test/money.proto", "cohort_test/money.proto", 1)]
    expected_subjects = ["cohort_test/money.proto", SUBJECT]
    if not skip_known_types:  # the serializer then registers the well-known import under its file name too
        expected.insert(0, SchemaReference("google/protobuf/timestamp.proto", "google/protobuf/timestamp.proto", 1))
        expected_subjects.insert(1, "google/protobuf/timestamp.proto")
    assert latest.schema.references == expected
    assert reader.get_subjects() == expected_subjects
    assert reader.get_schema(schema_id).references == expected
    # format=serialized returns what the serializer registered: the base64 FileDescriptorProto.
    serialized = reader.get_schema(schema_id, fmt="serialized").schema_str
    assert serialized == latest.schema.schema_str
    file_proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(serialized or ""))
    assert file_proto.name == "cohort_test/event.proto"
    money_version = reader.get_version("cohort_test/money.proto", 1)
    assert reader.get_referenced_by("cohort_test/money.proto", 1) == [schema_id]
    assert money_version.schema.schema_type == "PROTOBUF"


def test_json_schema_round_trip(registry: SchemaRegistryServer) -> None:
    data = JSONSerializer(JSON_SCHEMA, client_for(registry))({"id": 7, "tags": ["a", "b"]}, CTX)
    assert data is not None
    assert frame_id(data) == 1
    assert JSONDeserializer(None, schema_registry_client=client_for(registry))(data, CTX) == {
        "id": 7,
        "tags": ["a", "b"],
    }
    latest = client_for(registry).get_latest_version(SUBJECT)
    assert (latest.schema_id, latest.schema.schema_type) == (1, "JSON")


def test_errors_have_the_registry_codes(registry: SchemaRegistryServer) -> None:
    client = client_for(registry)
    with pytest.raises(SchemaRegistryError) as unknown_id:
        client.get_schema(999)
    assert (unknown_id.value.http_status_code, unknown_id.value.error_code) == (404, 40403)
    with pytest.raises(SchemaRegistryError) as unknown_subject:
        client.get_latest_version("nope-value")
    assert unknown_subject.value.error_code == 40401
    registry.register(SUBJECT, AVRO_V1)
    with pytest.raises(SchemaRegistryError) as unknown_version:
        client.get_version(SUBJECT, 5)
    assert unknown_version.value.error_code == 40402
    with pytest.raises(SchemaRegistryError) as invalid:
        client.register_schema(SUBJECT, Schema("{not json", "AVRO"))
    assert (invalid.value.http_status_code, invalid.value.error_code) == (422, 42201)
    with pytest.raises(RegistryError):
        registry.register(SUBJECT, "x", "PROTOBUF", [{"name": "a.proto", "subject": "missing", "version": 1}])


@pytest.mark.schema_registry
def test_basic_auth(capfd: pytest.CaptureFixture[str]) -> None:
    with SchemaRegistryServer(username="alice", password="s3cret:x") as server:
        config = server.client_config()
        assert config == {"url": server.url, "basic.auth.user.info": "alice:s3cret:x"}
        with pytest.raises(SchemaRegistryError) as refused:
            SchemaRegistryClient({"url": server.url, "max.retries": 0}).get_subjects()
        assert (refused.value.http_status_code, refused.value.error_code) == (401, 401)
        with pytest.raises(SchemaRegistryError) as wrong:
            SchemaRegistryClient({"url": server.url, "basic.auth.user.info": "alice:nope"}).get_subjects()
        assert wrong.value.http_status_code == 401

        client = client_for(server)
        schema_id = client.register_schema(SUBJECT, Schema(AVRO_V1, "AVRO"))
        assert client_for(server).get_schema(schema_id).schema_str == AVRO_V1
        assert server.request_count() == 4
        assert server.request_count("/subjects") == 3
    assert capfd.readouterr().err == ""  # quiet: no request log


def test_stop_is_an_outage_and_start_restores_the_same_registry(registry: SchemaRegistryServer) -> None:
    schema_id = registry.register(SUBJECT, AVRO_V1)
    url = registry.url
    port = int(url.rsplit(":", 1)[1])
    client = client_for(registry)
    assert client.get_subjects() == [SUBJECT]

    registry.stop()
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    with pytest.raises(httpx.TransportError):
        client.get_subjects()
    with pytest.raises(httpx.TransportError):
        client_for(registry).get_schema(schema_id)

    registry.start()
    assert registry.url == url
    assert client.get_subjects() == [SUBJECT]
    again = client_for(registry)
    assert again.get_schema(schema_id).schema_str == AVRO_V1
    assert again.get_latest_version(SUBJECT).schema_id == schema_id
    assert registry.register("second-value", AVRO_V2) == schema_id + 1


def test_another_process_reaches_the_registry(registry: SchemaRegistryServer) -> None:
    schema_id = registry.register(SUBJECT, AVRO_V1)
    script = (
        "import json, sys\n"
        "from confluent_kafka.schema_registry import SchemaRegistryClient\n"
        "client = SchemaRegistryClient(json.loads(sys.argv[1]))\n"
        "print(client.get_schema(int(sys.argv[2])).schema_str)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, json.dumps(registry.client_config()), str(schema_id)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == AVRO_V1


def test_concurrent_registrations_get_distinct_dense_ids(registry: SchemaRegistryServer) -> None:
    def register(n: int) -> int:
        schema = json.dumps({"type": "record", "name": f"R{n}", "fields": [{"name": "x", "type": "long"}]})
        return client_for(registry).register_schema(f"s{n}-value", Schema(schema, "AVRO"))

    with ThreadPoolExecutor(max_workers=8) as pool:
        ids = list(pool.map(register, range(16)))
    assert sorted(ids) == list(range(1, 17))
    assert len(client_for(registry).get_subjects()) == 16


def test_config_answers_the_default_compatibility(registry: SchemaRegistryServer) -> None:
    client = client_for(registry)
    assert client.get_compatibility() == "BACKWARD"
    client.set_compatibility(level="none")
    assert client.get_compatibility() == "NONE"
    client.set_compatibility(SUBJECT, "FULL")
    assert client.get_compatibility(SUBJECT) == "FULL"
    with pytest.raises(SchemaRegistryError) as unset:
        client.get_compatibility("other-value")
    assert unset.value.error_code == 40408
