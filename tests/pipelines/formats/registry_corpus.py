"""The Schema Registry record corpus: per registry format, evolved and broken records with where each must land.

Each format's corpus interleaves records written with version 1 and version 2 of its subject's schema (v2
adds a field, removes one and, for Avro, widens int -> long and float -> double) with broken records
(unknown schema id, wrong magic byte, too short, tombstone, payloads that do not match their writer schema,
a schema of another type). Good values go through confluent-kafka's own serializers, so the framing is the
real one; broken values are made from them. `build_corpus` registers the schemas (v2 last, so it is the
reader schema) and returns the cases in the order they are to be produced.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from tests.pipelines.batch.corpus_records import Quarantined, Sink

__all__ = ["FORMATS", "READER_COLUMNS", "UNKNOWN_ID", "Format", "RegistryCase", "build_corpus", "frame", "schema_id_of"]

Format = Literal["avro", "protobuf", "json-schema"]
FORMATS: tuple[Format, ...] = ("avro", "protobuf", "json-schema")
UNKNOWN_ID = 9999
"""A schema id the test registry never hands out (its ids count up from 1)."""


@dataclass(frozen=True)
class RegistryCase:
    """One record as a producer sends it (its key is the case id) and where it must land."""

    id: str
    value: bytes | None
    expect: Sink | Quarantined

    @property
    def key(self) -> bytes:
        return self.id.encode()


def ok(**values: Any) -> Sink:
    """Sink with exactly these value columns (a reader column left out must be null)."""
    return Sink(values)


def bad(reason: str) -> Quarantined:
    return Quarantined(reason)


def frame(schema_id: int, payload: bytes, magic: int = 0) -> bytes:
    """The registry's wire framing: a magic byte and the 4-byte big-endian schema id, then the payload."""
    return bytes([magic]) + schema_id.to_bytes(4, "big") + payload


def schema_id_of(value: bytes) -> int:
    """The schema id a framed value names."""
    return int.from_bytes(value[1:5], "big")


def f32(x: float) -> float:
    """`x` as a 32-bit float holds it, widened back to a double (what a float field read as double gives)."""
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def _context(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


# Reasons, as the framing and the decoders word them (cohort.pipelines.formats.framing, registry_decode, ...).
TOMBSTONE = "null value (a tombstone): nothing to decode"
TOO_SHORT = "value is too short for the Schema Registry framing"
WRONG_MAGIC = "value does not start with the Schema Registry magic byte 0 (found 0x{:02x})"
UNKNOWN = f"schema id {UNKNOWN_ID} is not in the Schema Registry"
OTHER_TYPE = "schema id {} is {} schema, but the topic's values are read as {}"


def _framing_cases(good: bytes, tag: str) -> list[RegistryCase]:
    """Records that fail on their framing alone, made from one good framed value `good` (ids start `tag`)."""
    payload = good[5:]
    return [
        RegistryCase(f"{tag}-unknown-id", frame(UNKNOWN_ID, payload), bad(UNKNOWN)),
        RegistryCase(f"{tag}-magic-1", b"\x01" + good[1:], bad(WRONG_MAGIC.format(1))),
        RegistryCase(f"{tag}-magic-plain-json", b'{"id": 1}', bad(WRONG_MAGIC.format(ord("{")))),
        RegistryCase(f"{tag}-short-4", good[:4], bad(TOO_SHORT + " (4 bytes")),
        RegistryCase(f"{tag}-short-1", b"\x00", bad(TOO_SHORT + " (1 bytes")),
        RegistryCase(f"{tag}-empty", b"", bad(TOO_SHORT + " (0 bytes")),  # empty, not null
        RegistryCase(f"{tag}-tombstone", None, bad(TOMBSTONE)),
    ]


def _interleave(good: Sequence[RegistryCase], broken: Sequence[RegistryCase]) -> list[RegistryCase]:
    """Good and broken cases alternating (the rest of the broken ones at the end). With the good ones
    alternating v1, v2, v1 ... and case i produced to partition i % 3, every partition gets both versions in
    alternation: good case j lands on partition 2j % 3, so a partition's good cases are j, j + 3, j + 6 ..."""
    out: list[RegistryCase] = []
    rest = list(broken)
    for case in good:
        out.append(case)
        if rest:
            out.append(rest.pop(0))
    return out + rest


# ----------------------------------------------------------------------------------------------------- Avro

AVRO_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "float"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "note", "type": "string"},
    ],
}
AVRO_V2 = {  # `note` removed; id int -> long, amount float -> double; `currency` and `coupon` added with defaults
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "currency", "type": "string", "default": "EUR"},
        {"name": "coupon", "type": ["null", "string"], "default": None},
    ],
}
AVRO_INCOMPATIBLE = {  # `customer` as an int: no record written with it can be read as v2
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "customer", "type": "int"}],
}
AVRO_MISMATCH = "Avro value does not match its writer schema (id {})"
BLOCK_TOO_LONG = "Avro array or map block longer than the value"


def _avro_cases(client: SchemaRegistryClient, topic: str) -> list[RegistryCase]:
    v1 = AvroSerializer(client, json.dumps(AVRO_V1))
    v2 = AvroSerializer(client, json.dumps(AVRO_V2))
    ctx = _context(topic)

    def old(case: str, id: int, customer: str, amount: float, tags: list[str], note: str) -> RegistryCase:
        value = v1({"id": id, "customer": customer, "amount": amount, "tags": tags, "note": note}, ctx)
        widened = {"id": id, "customer": customer, "amount": f32(amount), "tags": tags}
        return RegistryCase(case, value, ok(**widened, currency="EUR", coupon=None))

    def new(case: str, **fields: Any) -> RegistryCase:
        record = {"currency": "EUR", "coupon": None, "tags": [], **fields}
        return RegistryCase(case, v2(record, ctx), ok(**record))

    good = [
        old("v1-plain", 1, "ann", 1.5, ["a"], "first"),
        new("v2-plain", id=2**40, customer="bob", amount=2.25, tags=["x", "y"], currency="USD", coupon="SAVE10"),
        old("v1-int-limits", 2**31 - 1, "", -0.0, [], ""),
        new("v2-defaults-written", id=-(2**63), customer="cy", amount=1e300),
        old("v1-float-rounding", -(2**31), "dee", 0.1, ["b", "c", "d"], "n"),  # 0.1 as a float, widened
        new("v2-unicode", id=5, customer="émile 😀", amount=-3.75, tags=["é"], coupon="ünï"),
        old("v1-unicode", 6, "ß", 100.0, ["😀"], "ok"),
    ]
    v1_id, v2_id = schema_id_of(good[0].value or b""), schema_id_of(good[1].value or b"")
    assert v1_id != v2_id, "v1 and v2 must be different schemas"

    sample_v1 = v1({"id": 7, "customer": "eve", "amount": 1.0, "tags": ["t"], "note": "ab"}, ctx)
    sample_v2 = v2({"id": 8, "customer": "fay", "amount": 2.0, "tags": [], "currency": "EUR", "coupon": None}, ctx)
    assert sample_v1.endswith(b"\x04ab") and sample_v2.endswith(b"\x06EUR\x00")
    incompatible = AvroSerializer(client, json.dumps(AVRO_INCOMPATIBLE))
    elsewhere = _context(f"{topic}-elsewhere")  # registered under another subject: v2 stays the latest
    wrong_1 = incompatible({"id": 9, "customer": 42}, elsewhere)
    wrong_2 = incompatible({"id": 10, "customer": -1}, elsewhere)
    prefix = b"\x0e\x06eve\x00\x00\x80\x3f"  # v1's id 7, customer "eve", amount 1.0; then the tags
    json_id = client.register_schema(f"{topic}-json", Schema(json.dumps({"type": "object"}), "JSON"))
    broken = [
        RegistryCase("avro-truncated", sample_v1[:-1], bad(AVRO_MISMATCH.format(v1_id))),
        RegistryCase("avro-string-past-end", sample_v1[:-3] + b"\x7e" + b"ab", bad(AVRO_MISMATCH.format(v1_id))),
        RegistryCase("avro-bytes-left-over", sample_v2 + b"\x00\x00", bad("Avro value has 2 byte(s) after the record")),
        RegistryCase("avro-bad-union-index", sample_v2[:-1] + b"\x06", bad("Avro union index out of range")),
        RegistryCase("avro-invalid-utf8", sample_v1[:-2] + b"\xc3\x28", bad("UTF-8")),
        RegistryCase("avro-array-count-huge", frame(v1_id, prefix + b"\xfe\xff\xff\xff\x0f"), bad(BLOCK_TOO_LONG)),
        RegistryCase("avro-array-block-negative", frame(v1_id, prefix + b"\xff\xff\xff\xff\x0f"), bad(BLOCK_TOO_LONG)),
        RegistryCase("avro-empty-payload", frame(v2_id, b""), bad(AVRO_MISMATCH.format(v2_id))),
        RegistryCase("avro-json-schema-id", frame(json_id, b"{}"), bad(OTHER_TYPE.format(json_id, "a JSON", "Avro"))),
        RegistryCase("avro-unreadable-writer-1", wrong_1, bad("cannot be read as the reader schema")),
        RegistryCase("avro-unreadable-writer-2", wrong_2, bad("`$.customer`")),
        *_framing_cases(sample_v2, "avro"),
    ]
    return _interleave(good, broken)


# ------------------------------------------------------------------------------------------------- Protobuf

_INT32, _INT64, _FLOAT, _DOUBLE, _STRING, _ENUM = 5, 3, 2, 1, 9, 14
_OPTIONAL, _REPEATED = 1, 3


def _order_class(version: int) -> Any:
    """shop.Order, version 1 or 2, as a message class of a pool of its own (both are `shop/order.proto`).

    v1: id int32 = 1, customer = 2, amount float = 3, note = 4, tags = 5 (repeated).
    v2: id int64 = 1, customer = 2, tags = 5, amount double = 6 (3 and 4 retired), currency = 7, and
    status (an enum, STATUS_UNKNOWN = 0) = 8.
    """
    proto = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop", syntax="proto3")
    message = proto.message_type.add(name="Order")
    if version == 1:
        message.field.add(name="id", number=1, type=_INT32, label=_OPTIONAL)
        message.field.add(name="customer", number=2, type=_STRING, label=_OPTIONAL)
        message.field.add(name="amount", number=3, type=_FLOAT, label=_OPTIONAL)
        message.field.add(name="note", number=4, type=_STRING, label=_OPTIONAL)
        message.field.add(name="tags", number=5, type=_STRING, label=_REPEATED)
    else:
        status = message.enum_type.add(name="Status")
        for number, name in enumerate(("STATUS_UNKNOWN", "PAID", "SHIPPED")):
            status.value.add(name=name, number=number)
        message.field.add(name="id", number=1, type=_INT64, label=_OPTIONAL)
        message.field.add(name="customer", number=2, type=_STRING, label=_OPTIONAL)
        message.field.add(name="tags", number=5, type=_STRING, label=_REPEATED)
        message.field.add(name="amount", number=6, type=_DOUBLE, label=_OPTIONAL)
        message.field.add(name="currency", number=7, type=_STRING, label=_OPTIONAL)
        message.field.add(name="status", number=8, type=_ENUM, label=_OPTIONAL, type_name=".shop.Order.Status")
    pool = descriptor_pool.DescriptorPool()
    return message_factory.GetMessageClass(pool.Add(proto).message_types_by_name["Order"])


def _protobuf_cases(client: SchemaRegistryClient, topic: str) -> list[RegistryCase]:
    order_v1, order_v2 = _order_class(1), _order_class(2)
    conf = {"use.deprecated.format": False}
    v1 = ProtobufSerializer(order_v1, client, conf)
    v2 = ProtobufSerializer(order_v2, client, conf)
    ctx = _context(topic)

    def old(case: str, id: int, customer: str, amount: float, tags: list[str], note: str) -> RegistryCase:
        value = v1(order_v1(id=id, customer=customer, amount=amount, tags=tags, note=note), ctx)
        # fields v1 lacks (currency, status) are null; `note` is dropped; amount is the float widened
        read = {"id": id, "customer": customer, "amount": f32(amount), "tags": tags, "currency": None, "status": None}
        return RegistryCase(case, value, ok(**read))

    def new(case: str, **fields: Any) -> RegistryCase:
        read = {"id": 0, "customer": "", "amount": 0.0, "tags": [], "currency": "", "status": "STATUS_UNKNOWN"}
        value = v2(order_v2(**fields), ctx)
        return RegistryCase(case, value, ok(**{**read, **fields, **_enum_names(fields)}))

    good = [
        old("v1-plain", 1, "ann", 1.5, ["a"], "first"),
        new("v2-plain", id=2**40, customer="bob", amount=2.25, tags=["x", "y"], currency="USD", status=1),
        old("v1-int-limits", 2**31 - 1, "", 0.0, [], ""),
        new("v2-all-defaults"),  # proto3: nothing written, every field reads as its zero value
        old("v1-float-rounding", -(2**31), "dee", 0.1, ["b", "c", "d"], "n"),
        new("v2-unicode", id=-(2**63), customer="émile 😀", amount=-3.75, tags=["é"], status=2),
        old("v1-unicode", 6, "ß", 100.0, ["😀"], "ok"),
    ]
    sample = v2(order_v2(id=8, customer="fay-long-name", amount=2.0), ctx)
    header = sample[:6]  # magic, id, and the single 0 byte of message indexes [0]
    assert sample[5] == 0 and schema_id_of(sample) == schema_id_of(good[1].value or b"")
    avro_id = client.register_schema(f"{topic}-avro", Schema(json.dumps("string"), "AVRO"))
    broken = [
        RegistryCase("pb-truncated", sample[:-3], bad("Protobuf payload does not parse as shop.Order")),
        RegistryCase("pb-garbage", header + b"\xff\xff", bad("Protobuf payload does not parse as shop.Order")),
        RegistryCase(
            "pb-negative-index-count", sample[:5] + b"\x01" + sample[6:], bad("malformed Protobuf message indexes")
        ),
        RegistryCase("pb-unterminated-index", sample[:5] + b"\x02\x80", bad("malformed Protobuf message indexes")),
        RegistryCase(
            "pb-index-past-messages",
            sample[:5] + b"\x02\x02" + sample[6:],
            bad("message index 1 is past the file's 1 message(s)"),
        ),
        RegistryCase(
            "pb-avro-schema-id", frame(avro_id, b"\x00\x02a"), bad(OTHER_TYPE.format(avro_id, "an AVRO", "Protobuf"))
        ),
        # an Avro payload is no Protobuf message indexes: the schema's type is what the reason names
        RegistryCase(
            "pb-avro-schema-id-no-indexes",
            frame(avro_id, b"\x02a"),
            bad(OTHER_TYPE.format(avro_id, "an AVRO", "Protobuf")),
        ),
        *_framing_cases(sample, "pb"),
    ]
    return _interleave(good, broken)


def _enum_names(fields: dict[str, Any]) -> dict[str, Any]:
    names = ("STATUS_UNKNOWN", "PAID", "SHIPPED")
    return {"status": names[fields["status"]]} if "status" in fields else {}


# ---------------------------------------------------------------------------------------------- JSON Schema

JSON_V1 = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "customer": {"type": "string"},
        "amount": {"type": "integer"},
        "note": {"type": "string"},
    },
    "required": ["id", "customer"],
}
JSON_V2 = {  # `note` removed, amount integer -> number, `currency` added (with a default), no other properties
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "customer": {"type": "string"},
        "amount": {"type": "number"},
        "currency": {"type": "string", "default": "EUR"},
    },
    "required": ["id", "customer"],
    "additionalProperties": False,
}
JSON_BREAKS = "JSON does not match its writer schema (id {})"


def _json_schema_cases(client: SchemaRegistryClient, topic: str) -> list[RegistryCase]:
    v1 = JSONSerializer(json.dumps(JSON_V1), client)
    v2 = JSONSerializer(json.dumps(JSON_V2), client)
    ctx = _context(topic)

    def case(serializer: Callable[..., bytes], name: str, record: dict[str, Any], read: dict[str, Any]) -> RegistryCase:
        return RegistryCase(name, serializer(record, ctx), ok(**read))

    good = [
        case(
            v1,
            "v1-plain",
            {"id": 1, "customer": "ann", "amount": 3, "note": "x"},
            {"id": 1, "customer": "ann", "amount": 3.0},
        ),
        case(
            v2,
            "v2-plain",
            {"id": 2**40, "customer": "bob", "amount": 2.25, "currency": "USD"},
            {"id": 2**40, "customer": "bob", "amount": 2.25, "currency": "USD"},
        ),
        case(v1, "v1-required-only", {"id": -(2**63), "customer": ""}, {"id": -(2**63), "customer": ""}),
        # JSON Schema's `default` is an annotation: a value without `currency` reads it as null
        case(v2, "v2-no-currency", {"id": 4, "customer": "cy"}, {"id": 4, "customer": "cy"}),
        case(v1, "v1-unicode", {"id": 5, "customer": "émile 😀", "note": "ß"}, {"id": 5, "customer": "émile 😀"}),
        case(
            v2,
            "v2-huge-amount",
            {"id": 6, "customer": "dee", "amount": -1e300},
            {"id": 6, "customer": "dee", "amount": -1e300},
        ),
    ]
    v1_id, v2_id = schema_id_of(good[0].value or b""), schema_id_of(good[1].value or b"")
    h1, h2 = frame(v1_id, b""), frame(v2_id, b"")
    sample = good[1].value or b""
    avro_id = client.register_schema(f"{topic}-avro", Schema(json.dumps("string"), "AVRO"))
    broken = [
        RegistryCase(
            "js-wrong-type",
            h1 + b'{"id": "seven", "customer": "x"}',
            bad(JSON_BREAKS.format(v1_id) + " at `$.id`: 'seven' is not of type 'integer'"),
        ),
        RegistryCase("js-missing-required", h2 + b'{"id": 7}', bad("'customer' is a required property")),
        RegistryCase(
            "js-additional-property",
            h2 + b'{"id": 8, "customer": "x", "note": "gone"}',
            bad("Additional properties are not allowed ('note' was unexpected)"),
        ),
        RegistryCase("js-null-customer", h2 + b'{"id": 11, "customer": null}', bad("None is not of type 'string'")),
        RegistryCase(
            "js-v1-fraction", h1 + b'{"id": 9, "customer": "x", "amount": 1.5}', bad("1.5 is not of type 'integer'")
        ),
        RegistryCase("js-array", h1 + b'[{"id": 10, "customer": "x"}]', bad("is not of type 'object'")),
        # JSON Schema counts 1.0 as an integer, the column's strict JSON rules (docs/sink.md) do not
        RegistryCase("js-integral-float-id", h2 + b'{"id": 1.0, "customer": "x"}', bad("got `float` - at `$.id`")),
        RegistryCase(
            "js-duplicate-key",
            h2 + b'{"id": 1, "id": 2, "customer": "x"}',
            bad("duplicate JSON key 'id' in the object"),
        ),
        RegistryCase("js-not-json", h2 + b"{not json", bad("value is not valid JSON")),
        RegistryCase("js-truncated", sample[:-4], bad("value is not valid JSON")),
        RegistryCase("js-empty-payload", h2, bad("value is not valid JSON")),
        RegistryCase(
            "js-id-past-long",
            h2 + b'{"id": 18446744073709551616, "customer": "x"}',
            bad("Expected `int` <= 9223372036854775807 - at `$.id`"),
        ),
        RegistryCase(
            "js-avro-schema-id", frame(avro_id, b'"x"'), bad(OTHER_TYPE.format(avro_id, "an AVRO", "JSON Schema"))
        ),
        *_framing_cases(sample, "js"),
    ]
    return _interleave(good, broken)


READER_COLUMNS: dict[str, tuple[str, ...]] = {
    "avro": ("id", "customer", "amount", "tags", "currency", "coupon"),
    "protobuf": ("id", "customer", "tags", "amount", "currency", "status"),
    "json-schema": ("id", "customer", "amount", "currency"),
}
"""The value columns of each format's v2 (its subject's latest schema, the reader), in order."""

BUILDERS: dict[str, Callable[[SchemaRegistryClient, str], list[RegistryCase]]] = {
    "avro": _avro_cases,
    "protobuf": _protobuf_cases,
    "json-schema": _json_schema_cases,
}


def build_corpus(fmt: Format, client: SchemaRegistryClient, topic: str) -> tuple[RegistryCase, ...]:
    """Register `fmt`'s schemas for `topic` (v1, then v2: the subject's latest) and return its cases in the
    order to produce them (ids unique)."""
    cases = tuple(BUILDERS[fmt](client, topic))
    assert len({c.id for c in cases}) == len(cases), "case ids must be unique"
    return cases
