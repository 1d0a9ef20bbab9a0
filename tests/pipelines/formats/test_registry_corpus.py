"""The Schema Registry corpus end to end: per format, every record of tests/pipelines/formats/registry_corpus.py goes
through ONE `run_batch` over a three-partition topic on the real broker (produced with librdkafka's default
batching), with real Spark, the coordinator's ledger on SQLite and a registry over HTTP, and lands where the
corpus says: in the sink with its exact values decoded into the subject's latest schema, or in the quarantine
with its raw bytes and its reason. Nothing is lost, and the ledger is committed to the end offsets.

A registry outage, at the batch's start or in the reading tasks, fails the batch with nothing committed or
published; once the registry is back the same records all land.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient

from cohort.assignment.coordinator import Coordinator, StandaloneLedger
from cohort.common.types import TopicPartition
from cohort.pipelines.batch.results import BatchResult
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.formats.registry import RegistryConnection, RegistryUnavailableError
from cohort.pipelines.spec import PipelineSpec
from harness.schema_registry import SchemaRegistryServer
from tests.pipelines.batch.corpus_records import Quarantined, Sink
from tests.pipelines.formats.registry_corpus import (
    AVRO_V2,
    FORMATS,
    READER_COLUMNS,
    Format,
    RegistryCase,
    build_corpus,
    schema_id_of,
)

PARTITIONS = 3
Placed = dict[tuple[int, int], RegistryCase]


def _connection(server: SchemaRegistryServer) -> RegistryConnection:
    """Fast failures: a stopped registry refuses connections at once, one retry after 1 ms."""
    return RegistryConnection(server.url, max_retries=1, retry_wait_ms=1)


def _produce(config: dict[str, Any], topic: str, cases: Sequence[RegistryCase]) -> Placed:
    """Send case i to partition i % PARTITIONS through one producer with librdkafka's default batching, keyed by
    the case id; (partition, offset) -> case, from the delivery reports."""
    producer = Producer(config)
    placed: Placed = {}
    failures: list[str] = []

    def delivered(case: RegistryCase) -> Any:
        def report(err: Any, msg: Any) -> None:
            if err is not None:
                failures.append(f"{case.id}: {err}")
            else:
                placed[(msg.partition(), msg.offset())] = case

        return report

    for i, case in enumerate(cases):
        producer.produce(topic, value=case.value, key=case.key, partition=i % PARTITIONS, on_delivery=delivered(case))
    if producer.flush(30) or failures:
        raise KafkaException(f"records not delivered: {failures}")
    for p in range(PARTITIONS):  # one producer, no retries: each partition holds its cases in order from 0
        assert sorted(o for q, o in placed if q == p) == list(range(len(cases[p::PARTITIONS])))
    assert len(placed) == len(cases)
    return placed


NOT_VALUES = ("kafka", "topic", "partition")
"""Sink columns that are not decoded values: the Kafka coordinates, and the directories' partition columns."""


def _value_columns(row: Any) -> dict[str, Any]:
    values = row.asDict(recursive=True)
    for name in NOT_VALUES:
        del values[name]
    return values


def _landing_problems(spark: Any, spec: PipelineSpec, placed: Placed) -> dict[str, list[str]]:
    """Per case id, what differs between where its record landed and where the corpus says (empty: all as said)."""
    sink_rows = spark.read.parquet(spec.sink_path).collect()
    quarantine_rows = spark.read.parquet(spec.quarantine_root).collect()
    assert len(sink_rows) + len(quarantine_rows) == len(placed), "records produced != sink + quarantine rows"
    sink = {(r.kafka.partition, r.kafka.offset): r for r in sink_rows}
    quarantine = {(r.kafka.partition, r.kafka.offset): r for r in quarantine_rows}
    assert not sink.keys() & quarantine.keys(), "a record landed in both outputs"
    assert sink.keys() | quarantine.keys() == placed.keys(), "a record is missing from both outputs"
    problems: dict[str, list[str]] = {}
    for where, case in sorted(placed.items()):
        found: list[str] = []
        if isinstance(case.expect, Sink):
            if where not in sink:
                problems[case.id] = [f"quarantined: {quarantine[where].reason}"]
                continue
            row = sink[where]
            actual = _value_columns(row)
            expected = {name: case.expect.values.get(name) for name in actual}
            if actual != expected:
                found.append(f"values {actual}, expected {expected}")
            if set(case.expect.values) - set(actual):
                found.append(f"the sink lacks columns {sorted(set(case.expect.values) - set(actual))}")
        else:
            assert isinstance(case.expect, Quarantined)
            if where not in quarantine:
                problems[case.id] = ["reached the sink"]
                continue
            row = quarantine[where]
            if case.expect.reason not in (row.reason or ""):
                found.append(f"reason {row.reason!r} lacks {case.expect.reason!r}")
            if row.value != case.value:
                found.append(f"raw value {row.value!r}, expected {case.value!r}")
        if row.kafka.key != case.key:
            found.append(f"key {row.kafka.key!r}, expected {case.key!r}")
        if found:
            problems[case.id] = found
    return problems


def _check_batch(
    spark: Any, spec: PipelineSpec, placed: Placed, result: BatchResult, ledger: StandaloneLedger, topic: str
) -> None:
    """Every record where the corpus says, nothing lost per partition, and the ledger at the end offsets."""
    assert _landing_problems(spark, spec, placed) == {}
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    ends = {tp: sum(1 for q, _ in placed if q == tp.partition) for tp in tps}
    for tp in tps:
        cases = [c for (q, _), c in placed.items() if q == tp.partition]
        good = sum(isinstance(c.expect, Sink) for c in cases)
        part = result.partition(topic, tp.partition)
        assert (part.from_offset, part.until_offset) == (0, ends[tp])
        assert (part.records, part.quarantined, part.consumed) == (good, len(cases) - good, len(cases))
    assert result.records + result.quarantined == len(placed)
    assert ledger.committed_offsets(tps) == ends
    assert sorted((r.partition, r.from_offset, r.until_offset) for r in result.committed) == [
        (tp.partition, 0, ends[tp]) for tp in tps
    ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_registry_record_lands_where_expected_in_one_batch(
    fmt: Format,
    spark: Any,
    kafka_config: dict[str, Any],
    topic_factory: Any,
    coordinator: Coordinator,
    registry: SchemaRegistryServer,
    tmp_path: Path,
) -> None:
    topic = topic_factory(PARTITIONS, suffix=fmt)
    cases = build_corpus(fmt, SchemaRegistryClient(registry.client_config()), topic)
    placed = _produce(kafka_config, topic, cases)
    writers = {  # per partition, in offset order: the writer schema id of each v1 / v2 record
        p: [
            schema_id_of(c.value or b"")
            for (q, _), c in sorted(placed.items())
            if q == p and c.id[:3] in ("v1-", "v2-")
        ]
        for p in range(PARTITIONS)
    }
    assert all(len(set(ids)) == 2 for ids in writers.values()), f"each partition mixes v1 and v2: {writers}"
    assert any(ids != sorted(ids) for ids in writers.values()), f"some v2 record precedes a v1 one: {writers}"
    ledger = coordinator.standalone_ledger(f"registry-{fmt}")
    # small consume batches: one reading task decodes several Arrow batches, each mixing writer schemas
    spec = PipelineSpec(
        sink_path=str(tmp_path / "lake"),
        value_format=fmt,
        registry=_connection(registry),
        consume_batch_size=5,
        quarantine_limit=None,  # most of the corpus is bad on purpose (docs/sink.md)
    )
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]

    result = run_batch(spark, spec, kafka_config, tps, ledger)

    _check_batch(spark, spec, placed, result, ledger, topic)
    sink_columns = [c for c in spark.read.parquet(spec.sink_path).columns if c not in NOT_VALUES]
    assert sink_columns == list(READER_COLUMNS[fmt]), "the sink's value columns are the latest schema's"


def _published_parquet(root: Path) -> list[str]:
    """Parquet files under a sink root (its quarantine included), staged output left out."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*.parquet") if "_staging" not in p.parts)


def _assert_nothing_committed(coordinator: Coordinator, group: str, topic: str, lake: Path) -> None:
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    assert coordinator.standalone_ledger(group).committed_offsets(tps) == dict.fromkeys(tps)
    assert all(coordinator.ledger_history(group, topic, p) == [] for p in range(PARTITIONS))
    assert _published_parquet(lake) == []


def test_a_registry_outage_fails_the_batch_with_nothing_committed_and_the_next_run_lands_everything(
    spark: Any,
    kafka_config: dict[str, Any],
    topic_factory: Any,
    coordinator: Coordinator,
    registry: SchemaRegistryServer,
    tmp_path: Path,
) -> None:
    topic = topic_factory(PARTITIONS, suffix="outage")
    placed = _produce(kafka_config, topic, build_corpus("avro", SchemaRegistryClient(registry.client_config()), topic))
    group, lake = "registry-outage", tmp_path / "lake"
    ledger = coordinator.standalone_ledger(group)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    # most of the corpus is bad on purpose: no quarantine limit (docs/sink.md)
    latest = PipelineSpec(
        sink_path=str(lake), value_format="avro", registry=_connection(registry), quarantine_limit=None
    )
    # the reader schema given: the batch starts without the registry, the reading tasks are the first to ask
    explicit = PipelineSpec(
        sink_path=str(lake),
        value_format="avro",
        value_schema=json.dumps(AVRO_V2),
        registry=_connection(registry),
        quarantine_limit=None,
    )
    requests = registry.request_count()
    registry.stop()

    with pytest.raises(RegistryUnavailableError, match=f"unreachable reading subject '{topic}-value'"):
        run_batch(spark, latest, kafka_config, tps, ledger)
    _assert_nothing_committed(coordinator, group, topic, lake)

    # raised in a reading task, it reaches the driver as itself (cohort.pipelines.batch.executor_errors)
    with pytest.raises(RegistryUnavailableError, match="unreachable reading schema id"):
        run_batch(spark, explicit, kafka_config, tps, ledger)
    _assert_nothing_committed(coordinator, group, topic, lake)
    assert registry.request_count() == requests  # a stopped registry saw nothing

    registry.start()
    asked = registry.request_count("/schemas/ids/")
    result = run_batch(spark, latest, kafka_config, tps, ledger)

    _check_batch(spark, latest, placed, result, ledger, topic)
    assert registry.request_count("/schemas/ids/") > asked  # the tasks asked for the writer schemas
