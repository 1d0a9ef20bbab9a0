"""Two versions of an `Order` Avro schema, as a producer evolves it: v2 drops `note`, widens `id` (int -> long) and
`amount` (float -> double), and adds `currency` with a default, so v1 records read as v2 take "EUR"."""

from __future__ import annotations

from typing import Any

__all__ = ["ORDER_V1", "ORDER_V2"]

ORDER_V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "amount", "type": "float"},
        {"name": "note", "type": "string"},
    ],
}
ORDER_V2: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "amount", "type": "double"},
        {"name": "currency", "type": "string", "default": "EUR"},
    ],
}
