"""Protobuf files with several messages, the way a user meets them: records written by confluent-kafka's
ProtobufSerializer (message indexes in the framing) to the real broker, the file registered with the test
registry, one `run_batch` with real Spark. A record lands decoded from the message its indexes name, or goes to
the quarantine with a reason naming the subject and the messages; it never lands as a row of nulls."""

from __future__ import annotations

from typing import Any

import pyspark.sql.types as T
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from cohort.pipelines.spec import PipelineSpec
from tests.support.proto_files import message_classes, payments_file
from tests.support.registry_runs import connection, landed, run_one_partition

CLASSES = message_classes(payments_file())
Money, Payment, Line, Refund = (CLASSES[f"shop.{n}"] for n in ("Money", "Payment", "Payment.Line", "Refund"))


def serialized(registry: Any, topic: str, messages: list[Any]) -> list[bytes]:
    """Each message as ProtobufSerializer writes it for `topic` (registering its file under `<topic>-value`)."""
    client = SchemaRegistryClient(registry.client_config())
    context = SerializationContext(topic, MessageField.VALUE)
    serializers: dict[Any, ProtobufSerializer] = {}
    out = []
    for message in messages:
        kind = type(message)
        serializers.setdefault(kind, ProtobufSerializer(kind, client, {"use.deprecated.format": False}))
        out.append(serializers[kind](message, context))
    return out


def payment(i: int) -> Any:
    return Payment(id=i, total=Money(cents=100 * i, currency="EUR"), lines=[Line(sku=f"s{i}", qty=i % 7)])


def test_a_message_defined_after_its_helpers_lands_decoded(
    spark, kafka_config, topic, produce_records, ledger, lake, registry
):
    values = serialized(registry, topic, [payment(i) for i in range(1000)])
    assert {v[5:7] for v in values} == {b"\x02\x02"}  # message indexes [1]: Payment, the file's second message
    produce_records(topic, [(0, None, v) for v in values])
    spec = PipelineSpec(sink_path=str(lake), value_format="protobuf", registry=connection(registry))

    result = run_one_partition(spark, spec, kafka_config, topic, ledger)

    found = landed(spark, spec)
    assert (result.records, result.quarantined, found.reasons) == (1000, 0, {})
    assert found.columns == ["id", "total", "lines"]  # Payment's fields, not Money's
    assert found.rows[0] == {"id": 0, "total": {"cents": 0, "currency": "EUR"}, "lines": [{"sku": "s0", "qty": 0}]}
    assert found.rows[999] == {
        "id": 999,
        "total": {"cents": 99900, "currency": "EUR"},
        "lines": [{"sku": "s999", "qty": 5}],
    }


def test_records_of_another_message_of_the_file_are_quarantined_naming_subject_and_messages(
    spark, kafka_config, topic, produce_records, ledger, lake, registry, coordinator
):
    messages = [payment(1), Refund(refund_id=7, reason="late"), payment(2), Line(sku="x", qty=1)]
    values = serialized(registry, topic, messages)
    produce_records(topic, [(0, None, v) for v in values])
    derived = PipelineSpec(sink_path=str(lake / "derived"), value_format="protobuf", registry=connection(registry))

    result = run_one_partition(spark, derived, kafka_config, topic, ledger)

    found = landed(spark, derived)
    assert sorted(found.rows) == [0, 2] and result.committed  # the good records land, the batch commits
    assert found.rows[2] == {"id": 2, "total": {"cents": 200, "currency": "EUR"}, "lines": [{"sku": "s2", "qty": 2}]}
    assert sorted(found.reasons) == [1, 3]
    assert "holds Protobuf message shop.Refund (message indexes [2])" in found.reasons[1]
    assert "holds Protobuf message shop.Payment.Line (message indexes [1, 0])" in found.reasons[3]
    for reason in found.reasons.values():
        assert f"the fields of shop.Payment (subject {topic}-value" in reason and "value_schema" in reason

    # given columns, any message of the file is read by field name; one with none of them is quarantined
    refunds = T.StructType([T.StructField("refund_id", T.LongType()), T.StructField("reason", T.StringType())])
    explicit = PipelineSpec(
        sink_path=str(lake / "explicit"), value_format="protobuf", value_schema=refunds, registry=connection(registry)
    )
    run_one_partition(spark, explicit, kafka_config, topic, coordinator.standalone_ledger("explicit-refunds"))

    found = landed(spark, explicit)
    assert found.rows == {1: {"refund_id": 7, "reason": "late"}}
    assert sorted(found.reasons) == [0, 2, 3]
    assert "message shop.Payment has none of the reader columns (refund_id, reason)" in found.reasons[0]
    assert "message shop.Payment.Line has none of the reader columns" in found.reasons[3]
