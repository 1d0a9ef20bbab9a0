"""The data path's bad-input corpus: every raw record in tests/pipelines/batch/corpus_records.py
goes through `pipelines.run_batch` in ONE batch over a three-partition topic on the real broker, with
real Spark and the real coordinator's ledger on SQLite, and lands exactly where the corpus says: in the
sink with its decoded values and its exact key and header bytes, or in quarantine with its exact raw
value bytes and a reason naming the problem. Nothing is lost: per partition, consumed == in sink +
quarantined, every offset is in exactly one output, and the ledger is committed to the end.

The names and limits at the Dagster and pipeline surface follow: topic and group names with path
traversal are refused with an error naming the value before any file is created; an unknown assignor,
an out-of-range session timeout and negative or non-number limits are refused naming the field.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow
import pyspark.sql.types as T
import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from cohort.assets.translator import CohortConfig
from cohort.assignment.coordinator import Coordinator
from cohort.cli.main import main as cli
from cohort.common.names import InvalidNameError
from cohort.common.types import TopicPartition
from cohort.pipelines.batch.run import run_batch
from cohort.pipelines.formats.decode import ValueDecoder
from cohort.pipelines.sink.layout import SinkLayout
from cohort.pipelines.spec import PipelineSpec
from cohort.resources import CohortGroupResource, KafkaResource
from tests.fixtures.kafka import LARGE_RECORDS
from tests.pipelines.batch.corpus_records import (
    CASES,
    CORPUS_SCHEMA,
    VALUE_COLUMNS,
    CorpusModel,
    Quarantined,
    RecordCase,
    Sink,
    produce_corpus,
)

PARTITIONS = 3


def _headers(row: Any) -> list[tuple[str, bytes | None]] | None:
    return None if row.kafka.headers is None else [(h.key, h.value) for h in row.kafka.headers]


def _same(actual: Any, expected: Any) -> bool:
    if isinstance(expected, float) and math.isnan(expected):
        return isinstance(actual, float) and math.isnan(actual)
    return bool(actual == expected)


def _check_sink_row(case: RecordCase, row: Any) -> list[str]:
    """What differs between a sink row and its case (empty when it matches)."""
    assert isinstance(case.expect, Sink)
    problems = []
    for column in VALUE_COLUMNS:
        expected, actual = case.expect.values.get(column), row[column]
        if not _same(actual, expected):
            problems.append(f"{column}={str(actual)[:60]!r}, expected {str(expected)[:60]!r}")
    if row.kafka.key != case.record_key:
        problems.append(f"key {row.kafka.key!r}, expected {case.record_key!r}")
    if _headers(row) != case.expected_headers:
        problems.append(f"headers {str(_headers(row))[:80]}, expected {str(case.expected_headers)[:80]}")
    return problems


def _check_quarantine_row(case: RecordCase, row: Any) -> list[str]:
    """What differs between a quarantine row and its case (empty when it matches)."""
    assert isinstance(case.expect, Quarantined)
    problems = []
    if case.expect.reason not in (row.reason or ""):
        problems.append(f"reason {row.reason!r} lacks {case.expect.reason!r}")
    if row.value != case.value:
        problems.append(f"raw value {str(row.value)[:60]}, expected {str(case.value)[:60]}")
    if row.kafka.key != case.record_key:
        problems.append(f"key {row.kafka.key!r}, expected {case.record_key!r}")
    if _headers(row) != case.expected_headers:
        problems.append(f"headers {str(_headers(row))[:80]}, expected {str(case.expected_headers)[:80]}")
    return problems


def test_every_corpus_record_lands_where_expected_in_one_batch(
    spark: Any, kafka_config: dict[str, Any], topic_factory: Any, coordinator: Coordinator, tmp_path: Path
) -> None:
    topic = topic_factory(PARTITIONS, suffix="corpus", config=LARGE_RECORDS)  # a 4 MB record among them
    placed = produce_corpus(kafka_config, topic, PARTITIONS)
    assert len(placed) == len(CASES)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    ledger = coordinator.standalone_ledger("corpus")
    lake = tmp_path / "lake"
    # most of the corpus is bad on purpose: no quarantine limit (docs/sink.md)
    spec = PipelineSpec(sink_path=str(lake), value_schema=CORPUS_SCHEMA, model=CorpusModel, quarantine_limit=None)

    result = run_batch(spark, spec, kafka_config, tps, ledger)

    sink = {(r.kafka.partition, r.kafka.offset): r for r in spark.read.parquet(str(lake)).collect()}
    quarantine = {(r.kafka.partition, r.kafka.offset): r for r in spark.read.parquet(spec.quarantine_root).collect()}
    assert not sink.keys() & quarantine.keys(), "a record landed in both outputs"
    assert sink.keys() | quarantine.keys() == placed.keys(), "a record is missing from both outputs"
    problems = {}
    for where, case in sorted(placed.items()):
        if isinstance(case.expect, Sink):
            found = (
                _check_sink_row(case, sink[where]) if where in sink else [f"quarantined: {quarantine[where].reason}"]
            )
        else:
            found = _check_quarantine_row(case, quarantine[where]) if where in quarantine else ["reached the sink"]
        if found:
            problems[case.id] = found
    assert problems == {}

    # nothing lost: per partition, consumed == in sink + quarantined, and the ledger is at the end
    for p in range(PARTITIONS):
        cases = [c for (part, _), c in placed.items() if part == p]
        good = sum(isinstance(c.expect, Sink) for c in cases)
        part = result.partition(topic, p)
        assert (part.from_offset, part.until_offset) == (0, len(cases))
        assert (part.records, part.quarantined, part.consumed) == (good, len(cases) - good, len(cases))
        assert sum(1 for (q, _) in sink if q == p) == good
    assert ledger.committed_offsets(tps) == {tp: sum(1 for (q, _) in placed if q == tp.partition) for tp in tps}
    assert sorted((r.partition, r.from_offset, r.until_offset) for r in result.committed) == [
        (p, 0, sum(1 for (q, _) in placed if q == p)) for p in range(PARTITIONS)
    ]


def test_blank_json_values_are_quarantined_even_when_no_field_is_required() -> None:
    """An empty or blank value is no object at all: with a schema of only nullable fields it must not reach
    the sink as a row of nulls."""
    schema = T.StructType([T.StructField("name", T.StringType())])
    values = [b"", b"   ", b"\n", b'{"name": "kept"}', b"{}"]
    columns, reasons = ValueDecoder("json", schema).decode(pyarrow.array(values, pyarrow.binary()))
    assert all("not valid JSON: it is empty or blank" in (r or "") for r in reasons[:3]), reasons
    assert reasons[3:] == [None, None] and columns[0].to_pylist()[3:] == ["kept", None]


# ------------------------------------------------------------------------ names at the Dagster surface

BAD_NAMES: list[tuple[str, str, str]] = [
    ("traversal", "../x", "'../x' contains illegal characters '/'"),
    ("slash", "a/b", "'a/b' contains illegal characters '/'"),
    ("dotdot", "..", "'..' is not allowed"),
    ("dot", ".", "'.' is not allowed"),
    ("empty", "", "must not be empty"),
    ("250-chars", "x" * 250, "is 250 characters; the limit is 249"),
    ("nul", "nul\x00byte", "'nul\\x00byte' contains illegal characters '\\x00'"),
    ("space", "has space", "'has space' contains illegal characters ' '"),
    ("backslash", "..\\x", "contains illegal characters '\\\\'"),
]


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize(("name", "fragment"), [n[1:] for n in BAD_NAMES], ids=[n[0] for n in BAD_NAMES])
def test_bad_topic_and_group_names_are_refused_before_any_file_exists(
    name: str, fragment: str, spark: Any, coordinator: Coordinator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd = tmp_path / "work" / "cwd"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)  # "../x" would land in tmp_path/work/x
    lake = tmp_path / "work" / "lake"
    store = tmp_path / "work" / "store" / "cohort.db"
    before = _tree(tmp_path)
    refusals: list[tuple[str, Any]] = [
        ("CohortConfig group", lambda: CohortConfig(CohortGroupResource(group=name, topics=["t"]))),
        ("CohortConfig topic", lambda: CohortConfig(CohortGroupResource(group="g", topics=["t", name]))),
        (
            "CohortConfig known topic",
            lambda: CohortConfig(CohortGroupResource(group="g", topic_pattern=".*"), known_topics=(name,)),
        ),
        ("group resource group", lambda: CohortGroupResource(group=name, topics=["t"], store_url=f"sqlite:///{store}")),
        ("group resource topic", lambda: CohortGroupResource(group="g", topics=[name], store_url=f"sqlite:///{store}")),
        ("sink partition dir", lambda: SinkLayout(str(lake)).partition_dir(name, 0)),
        ("sink range dir", lambda: SinkLayout(str(lake)).range_dir(name, 0, 0, 10)),
        ("sink staging dir", lambda: SinkLayout(str(lake)).staged_range_dir("a1", name, 0)),
        ("standalone ledger", lambda: coordinator.standalone_ledger(name)),
        ("kafka consumer group", lambda: KafkaResource(bootstrap_servers="127.0.0.1:1").get_consumer(name)),
        (
            "run_batch topic",
            lambda: run_batch(
                spark,
                PipelineSpec(sink_path=str(lake), value_format="bytes"),
                {"bootstrap.servers": "127.0.0.1:1"},
                [TopicPartition(name, 0)],
                coordinator.standalone_ledger("g"),
            ),
        ),
    ]
    for what, call in refusals:
        with pytest.raises((InvalidNameError, ValidationError)) as refused:
            call()
        assert fragment in str(refused.value), (what, str(refused.value))
    runner = CliRunner()
    store_url = ["--store-url", f"sqlite:///{store}"]
    for args in (
        ["describe", name, *store_url],
        ["delete", name, *store_url],
        ["simulate", "--group", name],
        ["describe", name],
    ):
        outcome = runner.invoke(cli, args)  # the last two use the default store under the working directory
        assert outcome.exit_code == 1 and fragment in outcome.output, (args, outcome.output)
    assert _tree(tmp_path) == before  # no store (given or default), no sink directory, nothing at ../x


# ------------------------------------------------------------------ group settings and pipeline limits

SPEC_ARGS: dict[str, Any] = {"sink_path": "/tmp/cohort-never-written", "value_format": "bytes"}

BAD_SETTINGS: list[tuple[str, Any, str]] = [
    (
        "unknown assignor",
        lambda: CohortGroupResource(group="g", topics=["t"], assignors=["nope"]),
        "unknown assignor 'nope'",
    ),
    ("no assignor", lambda: CohortGroupResource(group="g", topics=["t"], assignors=[]), "assignors needs at least one"),
    (
        "config assignor",
        lambda: CohortConfig(CohortGroupResource(group="g", topics=["t"], assignors=["range", "nope"])),
        "assignors",
    ),
    (
        "session too short",
        lambda: CohortGroupResource(group="g", topics=["t"], session_timeout_s=0.5),
        "session_timeout_s=0.5",
    ),
    (
        "session too long",
        lambda: CohortGroupResource(group="g", topics=["t"], session_timeout_s=1e9),
        "session_timeout_s=",
    ),
    (
        "session negative",
        lambda: CohortGroupResource(group="g", topics=["t"], session_timeout_s=-30),
        "session_timeout_s=-30",
    ),
    (
        "session NaN",
        lambda: CohortGroupResource(group="g", topics=["t"], session_timeout_s=math.nan),
        "session_timeout_s=nan",
    ),
    (
        "config session",
        lambda: CohortConfig(CohortGroupResource(group="g", topics=["t"], session_timeout_s=3600)),
        "session_timeout_s=3600",
    ),
    (
        "config setting typo",
        lambda: CohortConfig(CohortGroupResource(group="g", topics=["t"], sesion_timeout_s=10)),
        "sesion_timeout_s",
    ),
    ("slots zero", lambda: CohortGroupResource(group="g", topics=["t"], worker_slots=0), "worker_slots"),
    (
        "config slots negative",
        lambda: CohortConfig(CohortGroupResource(group="g", topics=["t"], worker_slots=-2)),
        "worker_slots",
    ),
    (
        "rebalance negative",
        lambda: CohortGroupResource(group="g", topics=["t"], rebalance_timeout_s=-1),
        "rebalance_timeout_s",
    ),
    (
        "progress negative",
        lambda: CohortGroupResource(group="g", topics=["t"], progress_timeout_s=-1),
        "progress_timeout_s",
    ),
    (
        "progress NaN",
        lambda: CohortGroupResource(group="g", topics=["t"], progress_timeout_s=math.nan),
        "progress_timeout_s",
    ),
    (
        "heartbeat negative",
        lambda: CohortGroupResource(group="g", topics=["t"], heartbeat_interval_s=-1),
        "heartbeat_interval_s",
    ),
    ("join negative", lambda: CohortGroupResource(group="g", topics=["t"], join_timeout_s=-5), "join_timeout_s"),
    (
        "initial delay negative",
        lambda: CohortGroupResource(group="g", topics=["t"], initial_rebalance_delay_s=-1),
        "initial_rebalance_delay_s",
    ),
    (
        "lag threshold negative",
        lambda: CohortConfig(CohortGroupResource(group="g", topics=["t"]), lag_threshold=-1),
        "lag_threshold must be >= 0",
    ),
    (
        "kafka timeout negative",
        lambda: KafkaResource(bootstrap_servers="h:1", request_timeout_s=-1),
        "request_timeout_s",
    ),
    (
        "cap negative",
        lambda: PipelineSpec(**SPEC_ARGS, max_records_per_partition=-1),
        "max_records_per_partition must be >= 1",
    ),
    (
        "cap fractional",
        lambda: PipelineSpec(**SPEC_ARGS, max_records_per_partition=2.5),
        "max_records_per_partition must be an integer",
    ),
    ("task size zero", lambda: PipelineSpec(**SPEC_ARGS, max_records_per_task=0), "max_records_per_task must be >= 1"),
    (
        "task size bool",
        lambda: PipelineSpec(**SPEC_ARGS, max_records_per_task=True),
        "max_records_per_task must be an integer",
    ),
    ("min task negative", lambda: PipelineSpec(**SPEC_ARGS, min_task_records=-1), "min_task_records must be >= 1"),
    ("batch size zero", lambda: PipelineSpec(**SPEC_ARGS, consume_batch_size=0), "consume_batch_size must be >= 1"),
    ("read timeout negative", lambda: PipelineSpec(**SPEC_ARGS, read_timeout_s=-1), "read_timeout_s must be > 0"),
    ("read timeout NaN", lambda: PipelineSpec(**SPEC_ARGS, read_timeout_s=math.nan), "read_timeout_s must be > 0"),
]


@pytest.mark.parametrize(("call", "fragment"), [c[1:] for c in BAD_SETTINGS], ids=[c[0] for c in BAD_SETTINGS])
def test_bad_group_settings_and_limits_are_refused_naming_the_field(call: Any, fragment: str) -> None:
    with pytest.raises((ValueError, ValidationError)) as refused:
        call()
    assert fragment in str(refused.value)
