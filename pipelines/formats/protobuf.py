"""Protobuf records from the Schema Registry: message classes built from registered descriptors, and the
messages' fields as reader columns.

The registry holds a schema as a serialized `FileDescriptorProto` (asked for with `format=serialized`), and
its imports as references to other subjects. `message_pool` loads one writer schema with its references
into a descriptor pool of its own (well-known types such as google/protobuf/timestamp.proto come from the
protobuf runtime). `decode_messages` picks each record's message by its message indexes, parses it with the
dynamic message class, and reads the reader columns *by field name*: a field the writer's message lacks is
null, a field the reader does not declare is dropped, numbers widen as Arrow casts allow. Enums read as their
symbol names, `google.protobuf.Timestamp` as a UTC timestamp, maps as string-keyed maps. `reader_message`
picks the message of a file whose fields a derived reader schema takes; a record of another message, or
one whose non-empty payload sets none of the reader columns, gets a reason instead of a row of nulls.
"""

from __future__ import annotations

import base64
import datetime
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from cohort.pipelines.formats.registry import RegistrySchema, SchemaSource

__all__ = [
    "MessagePool",
    "ProtobufUnreadable",
    "decode_messages",
    "message_columns",
    "message_pool",
    "reader_message",
]

_TIMESTAMP = "google.protobuf.Timestamp"
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class ProtobufUnreadable(ValueError):
    """A registered Protobuf schema that cannot be loaded (or a message Cohort cannot map to columns)."""


@dataclass(frozen=True)
class MessagePool:
    """One writer schema's file descriptor, loaded with its imports into a pool of its own."""

    file: Any  # google.protobuf.descriptor.FileDescriptor

    def message(self, indexes: tuple[int, ...]) -> Any:
        """The descriptor the message indexes point at (the file's messages, then nested ones)."""
        if not indexes:
            raise ProtobufUnreadable("no message indexes")
        messages = list(self.file.message_types_by_name.values())
        if indexes[0] >= len(messages):
            raise ProtobufUnreadable(f"message index {indexes[0]} is past the file's {len(messages)} message(s)")
        descriptor = messages[indexes[0]]
        for index in indexes[1:]:
            if index >= len(descriptor.nested_types):
                raise ProtobufUnreadable(f"nested message index {index} is past {descriptor.full_name}'s messages")
            descriptor = descriptor.nested_types[index]
        return descriptor


def reader_message(pool: MessagePool, subject: str) -> Any:
    """The message whose fields a reader schema derived from `subject` takes (docs/formats.md): the message the
    subject is named after (the record-name strategies: `<full name>`, `<topic>-<full name>`), else the file's
    first top-level message that no other message of the file uses as a field's type (a file may define the
    messages its record is made of before the record)."""
    top = list(pool.file.message_types_by_name.values())
    if not top:
        raise ProtobufUnreadable(f"{pool.file.name} defines no message")
    for descriptor in _all_messages(top):
        if subject == descriptor.full_name or subject.endswith(f"-{descriptor.full_name}"):
            return descriptor
    used: set[str] = set()
    for owner in top:
        for descriptor in _all_messages([owner]):
            for f in descriptor.fields:
                if f.message_type is not None and f.message_type.full_name != owner.full_name:
                    used.add(f.message_type.full_name)
    roots = [m for m in top if m.full_name not in used]
    return roots[0] if roots else top[0]


def _all_messages(messages: list[Any]) -> list[Any]:
    """`messages` and the messages nested in them, depth first."""
    found: list[Any] = []
    for descriptor in messages:
        found.append(descriptor)
        found.extend(_all_messages(list(descriptor.nested_types)))
    return found


def message_pool(schema: RegistrySchema, source: SchemaSource) -> MessagePool:
    """Load a registered Protobuf schema (serialized form) and its references into a new pool."""
    from google.protobuf import descriptor_pb2, descriptor_pool
    from google.protobuf import timestamp_pb2 as _timestamp  # noqa: F401 (registers the well-known types)

    pool = descriptor_pool.DescriptorPool()
    loaded: set[str] = set()

    def add(text: str, references: tuple[tuple[str, str, int], ...], stack: tuple[str, ...]) -> Any:
        for name, subject, version in references:
            if name in loaded or name in stack:
                continue
            if _well_known(pool, name):
                loaded.add(name)
                continue
            referenced = source.version(subject, version)
            add(referenced.text, referenced.references, (*stack, name))
        proto = descriptor_pb2.FileDescriptorProto()
        try:
            proto.ParseFromString(base64.b64decode(text, validate=True))
        except Exception as exc:  # not base64, or not a FileDescriptorProto
            raise ProtobufUnreadable(f"the registry's schema is not a serialized FileDescriptorProto ({exc})") from None
        for dependency in proto.dependency:
            if dependency not in loaded:
                _well_known(pool, dependency)
        try:
            added = pool.Add(proto)
        except Exception as exc:  # a missing import, a conflicting definition
            raise ProtobufUnreadable(f"{proto.name}: {exc}") from None
        loaded.add(proto.name)
        return added

    add(schema.text, schema.references, ())
    proto_name = _file_name(schema.text)
    return MessagePool(pool.FindFileByName(proto_name))


def _file_name(text: str) -> str:
    from google.protobuf import descriptor_pb2

    proto = descriptor_pb2.FileDescriptorProto()
    proto.ParseFromString(base64.b64decode(text))
    return str(proto.name)


def _well_known(pool: Any, name: str) -> bool:
    """Add a google/protobuf/*.proto file from the runtime to `pool`; whether `name` is one."""
    from google.protobuf import descriptor_pb2
    from google.protobuf import descriptor_pool as default_pools

    if not name.startswith("google/protobuf/"):
        return False
    try:
        pool.FindFileByName(name)
        return True
    except KeyError:
        pass
    try:
        found = default_pools.Default().FindFileByName(name)
    except KeyError:
        return False
    proto = descriptor_pb2.FileDescriptorProto()
    found.CopyToProto(proto)
    pool.Add(proto)
    return True


def message_columns(descriptor: Any) -> Any:
    """The Spark columns of a message (a derived reader schema)."""
    from pyspark.sql.types import StructField, StructType

    return StructType([StructField(f.name, _spark_type(f, (descriptor.full_name,)), True) for f in descriptor.fields])


def _spark_type(field: Any, stack: tuple[str, ...]) -> Any:
    from pyspark.sql import types as T

    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
        del key
        return T.MapType(T.StringType(), _scalar_or_message(value, stack), True)
    element = _scalar_or_message(field, stack)
    return T.ArrayType(element, True) if _repeated(field) else element


def _repeated(field: Any) -> bool:
    """A repeated field: `is_repeated` since protobuf 5.28 (protobuf 7 dropped `label`), `label` before."""
    repeated = getattr(field, "is_repeated", None)
    return bool(repeated) if repeated is not None else field.label == field.LABEL_REPEATED


def _scalar_or_message(field: Any, stack: tuple[str, ...]) -> Any:
    from google.protobuf.descriptor import FieldDescriptor as F
    from pyspark.sql import types as T

    if field.type == F.TYPE_MESSAGE:
        name = field.message_type.full_name
        if name == _TIMESTAMP:
            return T.TimestampType()
        if name in stack:
            raise ProtobufUnreadable(f"recursive message {name} cannot be read into columns")
        nested = field.message_type
        return T.StructType([T.StructField(f.name, _spark_type(f, (*stack, name)), True) for f in nested.fields])
    scalar = {
        F.TYPE_DOUBLE: T.DoubleType(),
        F.TYPE_FLOAT: T.FloatType(),
        F.TYPE_INT64: T.LongType(),
        F.TYPE_SINT64: T.LongType(),
        F.TYPE_SFIXED64: T.LongType(),
        F.TYPE_UINT64: T.DecimalType(20, 0),
        F.TYPE_FIXED64: T.DecimalType(20, 0),
        F.TYPE_INT32: T.IntegerType(),
        F.TYPE_SINT32: T.IntegerType(),
        F.TYPE_SFIXED32: T.IntegerType(),
        F.TYPE_UINT32: T.LongType(),
        F.TYPE_FIXED32: T.LongType(),
        F.TYPE_BOOL: T.BooleanType(),
        F.TYPE_STRING: T.StringType(),
        F.TYPE_BYTES: T.BinaryType(),
        F.TYPE_ENUM: T.StringType(),
    }
    return scalar[field.type]


def _value(message: Any, field: Any) -> Any:
    """A field of a parsed message as a Python value for Arrow (see the module doc)."""
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        value_field = field.message_type.fields_by_name["value"]
        return [(str(k), _single(v, value_field)) for k, v in getattr(message, field.name).items()]
    if _repeated(field):
        return [_single(v, field) for v in getattr(message, field.name)]
    if field.type == F.TYPE_MESSAGE and not message.HasField(field.name):
        return None
    if getattr(field, "has_presence", False) and field.type != F.TYPE_MESSAGE and not message.HasField(field.name):
        return None
    return _single(getattr(message, field.name), field)


def _single(value: Any, field: Any) -> Any:
    from google.protobuf.descriptor import FieldDescriptor as F

    if field.type == F.TYPE_ENUM:
        symbol = field.enum_type.values_by_number.get(value)
        return symbol.name if symbol is not None else str(value)
    if field.type == F.TYPE_MESSAGE:
        if field.message_type.full_name == _TIMESTAMP:
            return _EPOCH + datetime.timedelta(seconds=value.seconds, microseconds=value.nanos // 1000)
        return {f.name: _value(value, f) for f in field.message_type.fields}
    return value


def decode_messages(
    pool: MessagePool,
    payloads: list[bytes],
    indexes: list[tuple[int, ...]],
    columns: Any,
    arrow: pa.StructType,
    *,
    expected: str | None = None,
    origin: str = "",
    what: str = "value",
) -> tuple[pa.Array, dict[int, str]]:
    """Parse each payload with its message class and read the reader columns by name: (struct of the
    columns, reasons by position).

    With `expected` (the full name of the message the reader columns were derived from, `origin` saying
    where from), a record holding another message is refused: its fields are not the columns'. A non-empty
    payload that sets none of the reader columns is refused too, rather than landing as a row of nulls.
    """
    from google.protobuf import message_factory
    from google.protobuf.message import DecodeError

    classes: dict[tuple[int, ...], Any] = {}
    rows: list[dict[str, Any] | None] = []
    reasons: dict[int, str] = {}
    names = [f.name for f in columns.fields]
    for i, (payload, index) in enumerate(zip(payloads, indexes, strict=True)):
        rows.append(None)
        try:
            descriptor = pool.message(index)
        except ProtobufUnreadable as exc:
            reasons[i] = f"Protobuf message indexes {list(index)} do not name a message of the writer schema: {exc}"
            continue
        if expected is not None and descriptor.full_name != expected:
            reasons[i] = (
                f"the record holds Protobuf message {descriptor.full_name} (message indexes {list(index)}), but the "
                f"reader columns are the fields of {expected} ({origin}): give {what}_schema (a StructType) to "
                "read other messages of the file by field name"
            )
            continue
        try:
            if index not in classes:
                classes[index] = message_factory.GetMessageClass(descriptor)
            message = classes[index]()
            message.ParseFromString(payload)
        except DecodeError as exc:
            reasons[i] = f"Protobuf payload does not parse as {descriptor.full_name}: {exc}"
            continue
        known = message.DESCRIPTOR.fields_by_name
        read: dict[str, Any] = {name: _value(message, known[name]) if name in known else None for name in names}
        if payload and all(v is None for v in read.values()):
            reasons[i] = _nothing_read(descriptor, names)
            continue
        rows[-1] = read
    try:
        return pa.array(rows, arrow), reasons
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        values: list[dict[str, Any] | None] = []
        for i, row in enumerate(rows):
            try:
                pa.array([row], arrow)
                values.append(row)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                values.append(None)
                reasons.setdefault(i, f"Protobuf message does not fit the reader columns: {exc}")
        return pa.array(values, arrow), reasons


def _nothing_read(descriptor: Any, names: list[str]) -> str:
    """Why a non-empty payload that set none of the reader columns is refused (it would be a row of nulls)."""
    shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
    if not any(name in descriptor.fields_by_name for name in names):
        return (
            f"Protobuf message {descriptor.full_name} has none of the reader columns ({shown}): it would land as a "
            "row of nulls"
        )
    return (
        f"the Protobuf message {descriptor.full_name} sets none of the reader columns ({shown}), only fields the "
        "reader does not read: it would land as a row of nulls"
    )
