"""Malformed and schema-violating records land in quarantine with raw bytes, offset and reason."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from cohort.common.types import TopicPartition
from cohort.pipelines.batch.frames import TransformError
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.spec import PipelineSpec
from tests.support.orders import ORDER_SCHEMA, Order, order, range_dirs

BAD = {
    3: (b"not json at all", "value is not valid JSON"),
    4: (b'{"id": "seven", "user": "u4", "amount": 1.0}', "JSON does not match the value schema"),
    5: (json.dumps({"id": -5, "user": "u5", "amount": 1.0}).encode(), "id: greater_than(0)"),
    6: (
        json.dumps({"id": 7, "user": "x6", "amount": 5000.0}).encode(),
        "user: str_startswith('u'); amount: less_than(1000)",
    ),
    7: (b'{"id": 8, "user": "u\xff", "amount": 1.0}', "value is not valid UTF-8"),
    8: (None, "null value (tombstone)"),
    9: (b'{"user": "u9", "amount": 1.0}', "field 'id' is missing or null"),
    10: (b"[1, 2, 3]", "value is not a JSON object"),
}


def test_bad_records_are_quarantined_and_counts_add_up(spark, kafka_config, topic, produce_records, ledger, lake):
    values = [BAD[i][0] if i in BAD else order(i) for i in range(20)]
    produce_records(topic, [(0, f"k{i}".encode(), v) for i, v in enumerate(values)], one_per_batch=False)
    tp = TopicPartition(topic, 0)
    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA, model=Order)

    result = run_batch(spark, spec, kafka_config, [tp], ledger)

    (partition,) = result.partitions
    assert (partition.records, partition.quarantined, partition.consumed) == (12, 8, 20)
    assert result.committed[0].records == 12 and result.committed[0].quarantined == 8
    quarantine = sorted(spark.read.parquet(str(lake / "_quarantine")).collect(), key=lambda r: r.kafka.offset)
    assert [r.kafka.offset for r in quarantine] == sorted(BAD)
    for row in quarantine:
        raw, reason = BAD[row.kafka.offset]
        assert row.value == raw and row.kafka.key == f"k{row.kafka.offset}".encode()
        assert row.reason.startswith(reason), (row.kafka.offset, row.reason)
    good = spark.read.parquet(str(lake))
    assert sorted(r.kafka.offset for r in good.collect()) == [i for i in range(20) if i not in BAD]
    assert range_dirs(lake / "_quarantine") == [f"topic={topic}/partition=0/{topic}-0-0-20.parquet"]

    # pandera agrees: the sink's rows pass the model, every rejected decodable row fails it alone
    Order.validate(good.select("id", "user", "amount"))
    assert not good.select("id", "user", "amount").pandera.errors
    parsed = spark.createDataFrame([json.loads(BAD[i][0]) for i in (5, 6)], "id long, user string, amount double")
    for offset in (5, 6):
        single = parsed.filter(F.col("user") == json.loads(BAD[offset][0])["user"])
        assert Order.validate(single).pandera.errors, f"pandera accepted offset {offset}"


def test_transform_runs_before_the_sink_and_must_keep_kafka(spark, kafka_config, topic, produce_records, ledger, lake):
    produce_records(topic, [(0, None, order(i)) for i in range(6)])
    tp = TopicPartition(topic, 0)

    def add_cents(frame):  # type: ignore[no-untyped-def]
        return frame.withColumn("cents", (F.col("amount") * 100).cast("long"))

    spec = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA, transform=add_cents)
    assert run_batch(spark, spec, kafka_config, [tp], ledger).records == 6
    assert sorted(r.cents for r in spark.read.parquet(str(lake)).collect()) == [i * 100 for i in range(6)]

    def drop_kafka(frame):  # type: ignore[no-untyped-def]
        return frame.drop("kafka")

    produce_records(topic, [(0, None, order(6))])
    bad = PipelineSpec(sink_path=str(lake), value_schema=ORDER_SCHEMA, transform=drop_kafka)
    with pytest.raises(TransformError, match="must keep the 'kafka' struct column"):
        run_batch(spark, bad, kafka_config, [tp], ledger)
    assert ledger.committed_offsets([tp]) == {tp: 6}


@pytest.mark.parametrize(("value_format", "expected"), [("utf8", ["héllo", None]), ("bytes", [b"h\xc3\xa9llo", None])])
def test_text_and_bytes_formats(spark, kafka_config, topic, produce_records, ledger, lake, value_format, expected):
    produce_records(topic, [(0, None, "héllo".encode()), (0, None, None), (0, None, b"\xff\xfe")])
    spec = PipelineSpec(sink_path=str(lake), value_format=value_format)
    result = run_batch(spark, spec, kafka_config, [TopicPartition(topic, 0)], ledger)
    rows = sorted(spark.read.parquet(str(lake)).collect(), key=lambda r: r.kafka.offset)
    if value_format == "utf8":
        assert [r.value for r in rows] == expected and result.quarantined == 1
    else:
        assert [r.value for r in rows] == [*expected, b"\xff\xfe"] and result.quarantined == 0
