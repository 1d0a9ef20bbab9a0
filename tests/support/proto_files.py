"""Protobuf files for the registry-format tests, built as `FileDescriptorProto`s (no protoc here) with message
classes of a pool of their own, as confluent-kafka's ProtobufSerializer takes them."""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = ["PAYMENTS", "message_classes", "payments_file"]

_INT64, _INT32, _STRING, _MESSAGE = 3, 5, 9, 11
_SINGULAR, _REPEATED = 1, 3

PAYMENTS = "shop/payments.proto"


def payments_file() -> Any:
    """shop/payments.proto, its messages in this order: `Money` (a helper `Payment` uses), `Payment` (with a
    nested `Line`), and `Refund`, which no message uses. Message indexes: Money [0], Payment [1],
    Payment.Line [1, 0], Refund [2]."""
    proto = descriptor_pb2.FileDescriptorProto(name=PAYMENTS, package="shop", syntax="proto3")
    money = proto.message_type.add(name="Money")
    money.field.add(name="cents", number=1, type=_INT64, label=_SINGULAR)
    money.field.add(name="currency", number=2, type=_STRING, label=_SINGULAR)
    payment = proto.message_type.add(name="Payment")
    line = payment.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=_STRING, label=_SINGULAR)
    line.field.add(name="qty", number=2, type=_INT32, label=_SINGULAR)
    payment.field.add(name="id", number=1, type=_INT64, label=_SINGULAR)
    payment.field.add(name="total", number=2, type=_MESSAGE, label=_SINGULAR, type_name=".shop.Money")
    payment.field.add(name="lines", number=3, type=_MESSAGE, label=_REPEATED, type_name=".shop.Payment.Line")
    refund = proto.message_type.add(name="Refund")
    refund.field.add(name="refund_id", number=1, type=_INT64, label=_SINGULAR)
    refund.field.add(name="reason", number=2, type=_STRING, label=_SINGULAR)
    return proto


def message_classes(proto: Any) -> dict[str, Any]:
    """Message classes of every message of `proto` (nested ones too), by full name, from a pool of its own."""
    pool = descriptor_pool.DescriptorPool()
    file = pool.Add(proto)
    classes: dict[str, Any] = {}

    def add(descriptor: Any) -> None:
        classes[descriptor.full_name] = message_factory.GetMessageClass(descriptor)
        for nested in descriptor.nested_types:
            add(nested)

    for descriptor in file.message_types_by_name.values():
        add(descriptor)
    return classes
