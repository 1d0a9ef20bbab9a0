"""Smoke tests: each real component the suite relies on starts and does real work."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa
from confluent_kafka import KafkaException

from cohort.common.types import TopicPartition
from cohort.devtools.topics import create_topic, partition_counts
from cohort.pipelines.kafka.client import watermarks
from cohort.pipelines.tasks.reader import OffsetSpan, read_range, read_spans

ROOT = Path(__file__).resolve().parents[2]


def test_broker_round_trip(kafka_config, topic_factory, produce_records):
    topic = topic_factory(2)
    records = [(i % 2, f"k{i}".encode(), json.dumps({"i": i}).encode()) for i in range(20)]
    assert produce_records(topic, records) == 20
    assert partition_counts(kafka_config, [topic]) == {topic: 2}
    marks = watermarks(kafka_config, [TopicPartition(topic, 0), TopicPartition(topic, 1)])
    assert marks == {TopicPartition(topic, 0): (0, 10), TopicPartition(topic, 1): (0, 10)}
    batches = list(read_range(kafka_config, OffsetSpan(topic, 1, 0, 10)))
    values = [json.loads(v)["i"] for b in batches for v in b.column("value").to_pylist()]
    assert values == list(range(1, 20, 2))
    assert [k for b in batches for k in b.column("key").to_pylist()] == [f"k{i}".encode() for i in values]


def test_a_sample_script_may_create_its_topic_again(kafka_config, topic_factory):
    """`create_topic(..., exist_ok=True)` (the user guide's produce_sample.py) leaves an existing topic as it is,
    and names the difference when the partition count is not the one asked for."""
    topic = topic_factory(2)
    create_topic(kafka_config, topic, 2, exist_ok=True)
    assert partition_counts(kafka_config, [topic]) == {topic: 2}
    with pytest.raises(ValueError, match=f"topic '{topic}' exists with 2 partitions, not 3"):
        create_topic(kafka_config, topic, 3, exist_ok=True)
    with pytest.raises(KafkaException):
        create_topic(kafka_config, topic, 2)


def test_spark_job_runs_python_worker(spark, kafka_config, topic_factory, produce_records):
    topic = topic_factory(2)
    produce_records(topic, [(i % 2, None, str(i).encode()) for i in range(30)])
    frame = read_spans(spark, kafka_config, [OffsetSpan(topic, 0, 0, 15), OffsetSpan(topic, 1, 5, 15)])
    rows = frame.groupBy("partition").count().orderBy("partition").collect()
    assert [(r["partition"], r["count"]) for r in rows] == [(0, 15), (1, 10)]
    # the worker runs this interpreter (confluent-kafka and pyarrow come from the venv)
    worker_python = spark.sparkContext.parallelize([0], 1).map(lambda _: sys.executable).collect()
    assert worker_python == [sys.executable]


def test_sqlite_reachable(sqlite_url):
    engine = sa.create_engine(sqlite_url)
    with engine.begin() as conn:
        conn.execute(sa.text("create table t (x integer)"))
        conn.execute(sa.text("insert into t values (:x)"), [{"x": 1}, {"x": 2}])
        assert conn.execute(sa.text("select sum(x) from t")).scalar_one() == 3


def test_postgres_reachable(pg_url):
    engine = sa.create_engine(pg_url)
    try:
        with engine.begin() as conn:
            assert conn.execute(sa.text("select version()")).scalar_one().startswith("PostgreSQL")
            conn.execute(sa.text("create table t (x integer primary key)"))
            conn.execute(sa.text("insert into t values (:x)"), {"x": 7})
            assert conn.execute(sa.text("select x from t")).scalar_one() == 7
    finally:
        engine.dispose()


def test_dagster_definitions_validate():
    result = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
