"""The reading tasks' consumer in C: librdkafka's messages straight into Arrow buffers, no Python object per record.

`_kafka_arrow` (pipelines/tasks/kafka_arrow.c, built with the package) drives the librdkafka that confluent-kafka
bundles: the same library, version and settings the Python consumer uses, found among the process's loaded
libraries once confluent-kafka is imported. `open_native` returns None whenever that path is not available (the
extension was not built, the library is not found or is another version, the settings hold a Python callback):
the caller then reads with confluent-kafka's Python consumer, which yields the same batches.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pyarrow as pa

from cohort.pipelines.tasks.records import FATAL, UNREADABLE_HEADERS, ConsumeError, Headers, header_column, raw_batch

__all__ = ["NativeConsumer", "librdkafka_settings", "native_available", "open_native", "record_batch"]

_PYTHON_ONLY_SETTINGS = frozenset(
    {"error_cb", "throttle_cb", "stats_cb", "logger", "on_commit", "oauth_cb", "on_delivery", "default.topic.config"}
)
"""confluent-kafka settings that are Python objects handled by its own wrapper, not librdkafka's."""


@functools.cache
def _module() -> ModuleType | None:
    """The extension with confluent-kafka's librdkafka loaded into it, or None when either is missing."""
    try:
        from cohort.pipelines.tasks import _kafka_arrow
    except ImportError:
        return None
    import confluent_kafka  # loads its librdkafka into the process

    path = _loaded_librdkafka()
    if path is None:
        return None
    try:
        _kafka_arrow.load(path)
    except OSError:
        return None
    if _kafka_arrow.version() != confluent_kafka.libversion()[0]:
        return None  # another librdkafka than confluent-kafka's: its settings and behaviour may differ
    module: ModuleType = _kafka_arrow
    return module


def _loaded_librdkafka() -> str | None:
    """The path of the librdkafka mapped into this process (confluent-kafka's), from /proc/self/maps."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)  # address, perms, offset, device, inode[, path]
        if len(fields) == 6 and Path(fields[5]).name.startswith("librdkafka"):
            return fields[5]
    return None


def native_available() -> bool:
    """Whether reading tasks in this process read through the C consumer."""
    return _module() is not None


def librdkafka_settings(config: Mapping[str, Any]) -> list[tuple[str, str]] | None:
    """`config` as librdkafka's string settings (booleans as true/false), or None when a setting is a Python
    object only confluent-kafka's wrapper understands (a callback, a logger)."""
    settings: list[tuple[str, str]] = []
    for name, value in config.items():
        if name in _PYTHON_ONLY_SETTINGS:
            return None
        if isinstance(value, bool):
            settings.append((name, "true" if value else "false"))
        elif isinstance(value, int | float | str):
            settings.append((name, str(value)))
        else:
            return None
    return settings


class NativeConsumer:
    """A consumer assigned at (topic, partition, offset) whose batches are built in C (`open_native`)."""

    def __init__(self, consumer: Any, topic: str, partition: int) -> None:
        self._consumer = consumer
        self._topic = topic
        self._partition = partition

    def consume(self, max_messages: int, timeout_s: float) -> tuple[pa.RecordBatch | None, list[ConsumeError]]:
        """Up to `max_messages` records as one RECORD_SCHEMA batch (None if none came) and the error messages,
        returned early once an error or end-of-partition message is among them (kafka_arrow.c's `gather`)."""
        try:
            result = self._consumer.consume(max_messages, max(int(timeout_s * 1000), 0))
        except RuntimeError as exc:
            return None, [ConsumeError(-1, -1, str(exc))]
        n, offsets, stamps, keys, values, headers, errors = result
        failed = [ConsumeError(offset, code, reason, fatal=code == FATAL) for offset, code, reason in errors]
        if not n:
            return None, failed
        return record_batch(self._topic, self._partition, n, offsets, stamps, keys, values, headers), failed

    def close(self) -> None:
        """Leave and free the consumer (idempotent)."""
        self._consumer.close()


def open_native(config: Mapping[str, Any], topic: str, partition: int, offset: int) -> NativeConsumer | None:
    """A C consumer assigned at `offset` of `topic`-`partition` with `config` (librdkafka's settings), or None
    when it cannot be had here; a setting librdkafka refuses also gives None, so that confluent-kafka's consumer
    reports it in its own words."""
    module = _module()
    settings = librdkafka_settings(config)
    if module is None or settings is None:
        return None
    try:
        consumer = module.Consumer(settings, topic, partition, offset)
    except ValueError:
        return None
    return NativeConsumer(consumer, topic, partition)


def _binary(column: tuple[bytes, int, bytes, bytes], n: int) -> pa.Array:
    """A binary array from the C consumer's (validity bitmap, null count, int64 offsets, data)."""
    valid, nulls, offsets, data = column
    large = pa.Array.from_buffers(
        pa.large_binary(),
        n,
        [pa.py_buffer(valid) if nulls else None, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=nulls,
    )
    return large.cast(pa.binary())


def _headers(n: int, found: list[tuple[int, list[tuple[bytes, bytes | None]]]]) -> tuple[pa.Array, pa.Array | None]:
    """The headers column and the error column (None: no error): a header key that is not UTF-8 loses the
    record's headers and marks it (it is quarantined), as confluent-kafka's consumer cannot read it either."""
    if not found:
        return header_column([], n), None
    per_record: list[Headers | None] = [None] * n
    errors: list[str | None] = [None] * n
    for row, pairs in found:
        try:
            per_record[row] = [(key.decode(), value) for key, value in pairs]
        except UnicodeDecodeError:
            errors[row] = UNREADABLE_HEADERS
    return header_column(per_record, n), pa.array(errors, type=pa.string())


def record_batch(
    topic: str,
    partition: int,
    n: int,
    offsets: bytes,
    stamps: tuple[bytes, int, bytes],
    keys: tuple[bytes, int, bytes, bytes],
    values: tuple[bytes, int, bytes, bytes],
    headers: list[tuple[int, list[tuple[bytes, bytes | None]]]],
) -> pa.RecordBatch:
    """One batch of raw records (cohort.pipelines.tasks.reader.RECORD_SCHEMA) from the C consumer's buffers."""
    stamp_valid, stamp_nulls, stamp_data = stamps
    header_array, error_array = _headers(n, headers)
    return raw_batch(
        topic,
        partition,
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)], null_count=0),
        pa.Array.from_buffers(
            pa.int64(),
            n,
            [pa.py_buffer(stamp_valid) if stamp_nulls else None, pa.py_buffer(stamp_data)],
            null_count=stamp_nulls,
        ),
        _binary(keys, n),
        _binary(values, n),
        header_array,
        error_array,
    )
