"""Records produced as ordinary applications produce them, a topic grown, and a Parquet sink read back to compare.

`produce_events` writes JSON events (`{"id": i, "kind": ...}`, the value schema of `harness.dagster_group`) through
confluent-kafka's Producer with librdkafka's default batching, with explicit record timestamps when asked, and keeps
each record's (partition, offset, id, timestamp) from its delivery report. `sink_events` reads the same from a
Parquet sink with DuckDB through the layout's glob (docs/sink.md), duplicates included, so a test compares the two.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def require_kafka(why: str) -> None:
    """Skip on the embedded Tansu broker (`COHORT_TEST_BROKER=embedded`): the test proves `why` on Apache Kafka, where
    Tansu deviates (README)."""
    import pytest

    from tests.fixtures.kafka import broker_choice

    if broker_choice() == "embedded":
        pytest.skip(f"Apache Kafka's behaviour: {why} (the embedded broker deviates, README)")


DUCKDB_GLOB = "topic=*/partition=*/*/*.parquet"
"""The `.parquet` files of a Parquet sink's range directories (never `_staging` or `_quarantine`)."""


@dataclass(frozen=True, order=True)
class Event:
    """One delivered record: where Kafka put it, the event's id, and the record's timestamp (ms since the epoch)."""

    partition: int
    offset: int
    id: int
    timestamp_ms: int


def produce_events(
    config: Mapping[str, Any],
    topic: str,
    ids: Iterable[int],
    *,
    partition: Callable[[int], int],
    timestamp_ms: Callable[[int], int] | None = None,
    kind: str = "view",
) -> list[Event]:
    """Produce one JSON event per id into `partition(id)` (with record timestamp `timestamp_ms(id)` when given),
    librdkafka's default batching, and return the delivered records by (partition, offset)."""
    from confluent_kafka import Producer

    producer = Producer(dict(config))
    delivered: list[Event] = []
    failed: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
            return
        _type, stamp = msg.timestamp()
        delivered.append(Event(msg.partition(), msg.offset(), json.loads(msg.value())["id"], stamp))

    for count, i in enumerate(ids, 1):
        extra = {} if timestamp_ms is None else {"timestamp": timestamp_ms(i)}
        value = json.dumps({"id": i, "kind": kind}).encode()
        producer.produce(topic, key=f"k{i}".encode(), value=value, partition=partition(i), on_delivery=report, **extra)
        if count % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0 and not failed, f"{len(failed)} records not delivered: {failed[:1]}"
    return sorted(delivered)


def sink_events(sink: str | Path) -> list[Event]:
    """Every row of a Parquet sink as an Event, read with DuckDB (the layout's glob), sorted, duplicates kept."""
    import duckdb

    if not any(Path(sink).glob(DUCKDB_GLOB)):
        return []
    query = (
        'SELECT kafka."partition", kafka."offset", id, epoch_ms(kafka."timestamp") '
        f"FROM read_parquet('{sink}/{DUCKDB_GLOB}', hive_partitioning = true)"
    )
    return sorted(Event(int(p), int(o), int(i), int(t)) for p, o, i, t in duckdb.sql(query).fetchall())


def grow(config: Mapping[str, Any], topic: str, partitions: int) -> None:
    """CreatePartitions: `topic` to `partitions` partitions (what `kafka-topics --alter --partitions` does), then
    wait until the broker's metadata shows them (a producer that asks earlier is refused the new partitions)."""
    import time

    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient(dict(config))
    for future in admin.create_partitions([NewPartitions(topic, partitions)], operation_timeout=30).values():
        future.result(timeout=60)
    deadline = time.monotonic() + 30
    while len(admin.list_topics(topic, timeout=10).topics[topic].partitions) < partitions:
        assert time.monotonic() < deadline, f"the metadata of {topic} shows no {partitions} partitions after 30 s"
        time.sleep(0.1)
