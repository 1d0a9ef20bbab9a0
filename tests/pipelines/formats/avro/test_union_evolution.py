"""Avro unions that evolve between schema versions, end to end: records written by confluent-kafka's
AvroSerializer under an older version and a newer one of a subject (harness.schema_registry), produced to
the real broker, landed by `run_batch` with real Spark into the subject's latest schema. Every older record
lands: a union widened with a new branch, a plain type turned into a union, a union reordered, an int branch
read into a long one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from cohort.assignment.coordinator import StandaloneLedger
from cohort.common.types import TopicPartition
from cohort.pipelines import PipelineSpec, run_batch
from cohort.pipelines.formats.registry import RegistryConnection
from harness.schema_registry import SchemaRegistryServer

OLDER = {
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "value", "type": ["null", "int"]},
        {"name": "unit", "type": "string"},
        {"name": "code", "type": ["long", "null"]},
    ],
}
LATEST = {  # every union now `["null", "long", "string"]`, and a field added with a default
    "type": "record",
    "name": "Reading",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "value", "type": ["null", "long", "string"]},
        {"name": "unit", "type": ["null", "long", "string"]},
        {"name": "code", "type": ["null", "long", "string"]},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}

COLUMNS = [f["name"] for f in LATEST["fields"]]


def member(value: Any) -> dict[str, Any] | None:
    """A `["null", "long", "string"]` value as its column holds it: a struct of the long and string members."""
    if value is None:
        return None
    return {"member0": value, "member1": None} if isinstance(value, int) else {"member0": None, "member1": value}


def test_records_of_an_older_union_land_in_the_latest_one(
    spark: Any,
    kafka_config: dict[str, Any],
    topic: str,
    produce_records: Any,
    registry: SchemaRegistryServer,
    ledger: StandaloneLedger,
    lake: Path,
    sink_rows: Any,
) -> None:
    client = SchemaRegistryClient(registry.client_config())
    context = SerializationContext(topic, MessageField.VALUE)
    older = [
        {"id": 1, "value": None, "unit": "kg", "code": 5},
        {"id": 2, "value": -(2**31), "unit": "", "code": None},
    ]
    latest = [
        {"id": 2**40, "value": "n/a", "unit": 3, "code": "X", "note": "new"},
        {"id": 4, "value": 2**40, "unit": None, "code": None, "note": None},
    ]
    first = [AvroSerializer(client, json.dumps(OLDER))(r, context) for r in older]  # registers version 1
    second = [AvroSerializer(client, json.dumps(LATEST))(r, context) for r in latest]  # version 2: the latest
    values = [first[0], second[0], first[1], second[1]]  # the versions interleaved in one partition
    produce_records(topic, [(0, None, v) for v in values])
    spec = PipelineSpec(
        sink_path=str(lake),
        value_format="avro",
        registry=RegistryConnection(registry.url, max_retries=1, retry_wait_ms=1),
    )

    result = run_batch(spark, spec, kafka_config, [TopicPartition(topic, 0)], ledger)

    assert (result.records, result.quarantined) == (4, 0)
    landed = [{k: v for k, v in row.asDict(recursive=True).items() if k in COLUMNS} for row in sink_rows(lake)]
    written = [older[0], latest[0], older[1], latest[1]]
    assert landed == [
        {
            "id": r["id"],
            "value": member(r["value"]),
            "unit": member(r["unit"]),
            "code": member(r["code"]),
            "note": r.get("note"),
        }
        for r in written
    ]
