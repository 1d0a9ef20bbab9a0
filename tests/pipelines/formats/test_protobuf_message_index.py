"""Protobuf records of a file with several messages: the message indexes of the framing, the message a reader
schema derived from the registry takes, and records that would otherwise land as rows of nulls (pure: Protobuf
descriptors and Arrow only; through the broker and Spark: tests/pipelines/formats/test_protobuf.py)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyspark.sql.types as T
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool

from cohort.pipelines.formats.decode import arrow_type
from cohort.pipelines.formats.framing import split_frames
from cohort.pipelines.formats.protobuf import MessagePool, decode_messages, message_columns, reader_message
from cohort.pipelines.formats.registry_decode import other_schema_type
from tests.support.proto_files import message_classes, payments_file

CLASSES = message_classes(payments_file())
Money, Payment, Line, Refund = (CLASSES[f"shop.{n}"] for n in ("Money", "Payment", "Payment.Line", "Refund"))


def pool_of(proto: Any) -> MessagePool:
    return MessagePool(descriptor_pool.DescriptorPool().Add(proto))


PAYMENTS = pool_of(payments_file())


def framed(indexes: bytes, payload: bytes = b"", schema_id: int = 7) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + indexes + payload


@pytest.mark.parametrize(
    ("indexes", "read"),
    [
        (b"\x00", (0,)),  # the serializers' shorthand for the first message
        (b"\x02\x00", (0,)),  # [0] written out
        (b"\x02\x02", (1,)),  # the second message
        (b"\x04\x02\x00", (1, 0)),  # the second message's first nested message
        (b"\x02\x04", (2,)),
    ],
)
def test_message_indexes_are_read_as_confluent_writes_them(indexes: bytes, read: tuple[int, ...]) -> None:
    frames = split_frames(pa.array([framed(indexes, b"\x08\x01")]), message_indexes=True)
    assert frames.indexes == (read,) and frames.reasons == {} and frames.malformed == {}
    assert bytes(frames.data[frames.starts[0] : frames.ends[0]]) == b"\x08\x01"


def test_malformed_indexes_keep_their_schema_id_so_the_schema_type_is_checked_first() -> None:
    frames = split_frames(pa.array([framed(b"\x01"), framed(b"\x02\x80")]), message_indexes=True)
    assert frames.schema_ids.tolist() == [7, 7] and frames.reasons == {}
    assert set(frames.malformed) == {0, 1} and "malformed Protobuf message indexes" in frames.malformed[0]


def file_of(*messages: tuple[str, list[tuple[str, str]]]) -> Any:
    """A proto3 file of messages given as (name, [(field, type name or 'string')])."""
    proto = descriptor_pb2.FileDescriptorProto(name="t.proto", package="t", syntax="proto3")
    for name, fields in messages:
        message = proto.message_type.add(name=name)
        for number, (field, kind) in enumerate(fields, start=1):
            if kind == "string":
                message.field.add(name=field, number=number, type=9, label=1)
            else:
                message.field.add(name=field, number=number, type=11, label=1, type_name=f".t.{kind}")
    return proto


@pytest.mark.parametrize(
    ("proto", "subject", "chosen"),
    [
        (payments_file(), "payments-value", "shop.Payment"),  # Money is a helper of Payment: skipped
        (payments_file(), "shop.Refund", "shop.Refund"),  # RecordNameStrategy
        (payments_file(), "payments-shop.Refund", "shop.Refund"),  # TopicRecordNameStrategy
        (payments_file(), "shop.Payment.Line", "shop.Payment.Line"),
        (file_of(("A", [("a", "string")]), ("B", [("b", "string")])), "t-value", "t.A"),  # no helper: the first
        (file_of(("Tag", [("t", "string")]), ("Node", [("child", "Node"), ("tag", "Tag")])), "t-value", "t.Node"),
        (file_of(("A", [("b", "B")]), ("B", [("a", "A")])), "t-value", "t.A"),  # each uses the other: the first
    ],
)
def test_the_derived_reader_message(proto: Any, subject: str, chosen: str) -> None:
    assert reader_message(pool_of(proto), subject).full_name == chosen


def columns_of(*fields: tuple[str, T.DataType]) -> T.StructType:
    return T.StructType([T.StructField(n, t, True) for n, t in fields])


def decode(
    payloads: list[bytes], indexes: list[tuple[int, ...]], columns: T.StructType, **kwargs: Any
) -> tuple[list[Any], dict[int, str]]:
    arrow = pa.struct([pa.field(f.name, arrow_type(f.dataType)) for f in columns.fields])
    values, reasons = decode_messages(PAYMENTS, payloads, indexes, columns, arrow, **kwargs)
    return values.to_pylist(), reasons


PAYMENT_COLUMNS = message_columns(PAYMENTS.message((1,)))
ORIGIN = "subject payments-value (latest: schema id 7)"


def test_records_of_the_reader_message_decode_and_others_are_refused_naming_both() -> None:
    paid = Payment(id=4, total=Money(cents=250, currency="EUR"), lines=[Line(sku="x", qty=2)])
    payloads = [paid.SerializeToString(), Refund(refund_id=9).SerializeToString()]

    rows, reasons = decode(payloads, [(1,), (2,)], PAYMENT_COLUMNS, expected="shop.Payment", origin=ORIGIN)

    assert rows[0] == {"id": 4, "total": {"cents": 250, "currency": "EUR"}, "lines": [{"sku": "x", "qty": 2}]}
    assert rows[1] is None and list(reasons) == [1]
    assert "holds Protobuf message shop.Refund (message indexes [2])" in reasons[1]
    assert f"the fields of shop.Payment ({ORIGIN})" in reasons[1] and "value_schema" in reasons[1]


def test_a_nested_message_is_found_by_its_path() -> None:
    columns = columns_of(("sku", T.StringType()), ("qty", T.IntegerType()))
    rows, reasons = decode([Line(sku="y", qty=3).SerializeToString()], [(1, 0)], columns)
    assert rows == [{"sku": "y", "qty": 3}] and reasons == {}


def test_a_payload_that_sets_none_of_the_columns_is_refused_not_landed_as_nulls() -> None:
    explicit = columns_of(("refund_id", T.LongType()), ("reason", T.StringType()))
    messages = columns_of(("total", PAYMENT_COLUMNS["total"].dataType))
    cases = [
        (Payment(id=1).SerializeToString(), explicit),  # Payment has no field of the explicit columns
        (Payment(id=1).SerializeToString(), messages),  # it has `total`, which this payload leaves unset
        (b"", messages),  # an empty payload (every field unset) is a row as it is
    ]
    found = [decode([payload], [(1,)], columns) for payload, columns in cases]

    assert (
        found[0] == ([None], {0: found[0][1][0]})
        and "message shop.Payment has none of the reader columns (refund_id, reason)" in found[0][1][0]
    )
    assert found[1][0] == [None] and "sets none of the reader columns (total), only fields the reader" in found[1][1][0]
    assert found[2] == ([{"total": None}], {})


@pytest.mark.parametrize(
    ("schema_type", "fmt", "said"),
    [
        ("AVRO", "protobuf", "schema id 7 is an AVRO schema, but the topic's values are read as Protobuf"),
        ("JSON", "protobuf", "schema id 7 is a JSON schema, but the topic's values are read as Protobuf"),
        ("PROTOBUF", "avro", "schema id 7 is a PROTOBUF schema, but the topic's values are read as Avro"),
        ("AVRO", "json-schema", "schema id 7 is an AVRO schema, but the topic's values are read as JSON Schema"),
    ],
)
def test_a_record_of_another_schema_type_is_named_as_such(schema_type: str, fmt: str, said: str) -> None:
    assert other_schema_type(7, schema_type, fmt).startswith(said)
