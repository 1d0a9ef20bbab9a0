"""`cohort reset-offsets` as an operator runs it (a subprocess) against a real store and the real broker: dry
run by default, each executed move a ledger entry (visible in `describe`) mirrored to Kafka, refused while the
group has live members, every bad option a short error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cohort.assignment.coordinator import Coordinator
from cohort.assignment.protocol.group_state import GroupConfig
from cohort.assignment.protocol.messages import JoinRequest
from cohort.common.types import OffsetRange, TopicPartition
from cohort.pipelines.kafka.mirror import kafka_committed

COHORT = str(Path(sys.executable).with_name("cohort"))


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
    return subprocess.run([COHORT, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture
def landed(sqlite_url, kafka_config, topic_factory, produce_records):
    """A topic of 2 partitions (50 and 30 records) and an Empty group that committed [0, 40) and [0, 30)."""
    topic = topic_factory(2, suffix="reset")
    produce_records(topic, [(0, None, b"a")] * 50 + [(1, None, b"b")] * 30)
    coordinator = Coordinator.from_url(sqlite_url)
    coordinator.report_topic_metadata("resets", {topic: 2})
    coordinator.standalone_ledger("resets").commit(
        [OffsetRange(topic, 0, 0, 40, records=40), OffsetRange(topic, 1, 0, 30, records=30)], run_id="run-1"
    )
    yield coordinator, topic
    coordinator.close()


def _reset(url: str, bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return _run("reset-offsets", "resets", "--store-url", url, "--bootstrap-servers", bootstrap, *args)


def test_a_dry_run_prints_the_plan_and_changes_nothing(landed, sqlite_url, kafka_config):
    coordinator, topic = landed
    before = Path(sqlite_url.removeprefix("sqlite:///")).stat().st_mtime_ns
    done = _reset(sqlite_url, kafka_config["bootstrap.servers"], "--topic", topic, "--to-earliest", "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["executed"] is False and plan["target"] == "earliest"
    assert [(p["partition"], p["current_offset"], p["new_offset"], p["replayed"]) for p in plan["partitions"]] == [
        (0, 40, 0, 40),
        (1, 30, 0, 30),
    ]
    assert coordinator.fetch_offsets("resets", [TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): 40}
    assert Path(sqlite_url.removeprefix("sqlite:///")).stat().st_mtime_ns == before
    table = _reset(sqlite_url, kafka_config["bootstrap.servers"], "--topic", topic, "--to-earliest")
    assert "dry run" in table.stdout.lower() and "replay 40" in table.stdout and "--execute" in table.stdout


def test_an_executed_reset_is_in_the_ledger_in_describe_and_in_kafka(landed, sqlite_url, kafka_config):
    coordinator, topic = landed
    bootstrap = kafka_config["bootstrap.servers"]
    done = _reset(sqlite_url, bootstrap, "--topic", f"{topic}:0", "--shift-by", "-15", "--execute", "--reason", "bug 7")
    assert done.returncode == 0, done.stderr
    assert "replays 15 records" in done.stdout
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    assert coordinator.fetch_offsets("resets", [tp0, tp1]) == {tp0: 25, tp1: 30}  # partition 1 not selected
    [*_, entry] = coordinator.ledger_history("resets", topic, 0)
    assert (entry.kind, entry.from_offset, entry.until_offset) == ("reset", 40, 25)
    assert entry.note is not None and entry.note.endswith(": bug 7") and "@" in entry.note
    assert kafka_committed(kafka_config, "resets", [tp0])[tp0][0] == 25
    described = json.loads(_run("describe", "resets", "--store-url", sqlite_url, "--json").stdout)
    assert [(r["partition"], r["from_offset"], r["to_offset"]) for r in described["resets"]] == [(0, 40, 25)]
    forward = _reset(sqlite_url, bootstrap, "--topic", topic, "--to-latest", "--execute")
    assert forward.returncode == 0, forward.stderr
    assert "25 records are skipped" in forward.stdout and "replays" not in forward.stdout
    assert coordinator.fetch_offsets("resets", [tp0, tp1]) == {tp0: 50, tp1: 30}


def test_a_target_outside_the_log_is_clamped_and_said(landed, sqlite_url, kafka_config):
    _coordinator, topic = landed
    done = _reset(sqlite_url, kafka_config["bootstrap.servers"], "--topic", f"{topic}:1", "--to-offset", "999")
    assert done.returncode == 0, done.stderr
    assert "clamped" in done.stdout and " 30 " in done.stdout


def test_a_reset_is_refused_while_the_group_has_live_members(landed, sqlite_url, kafka_config):
    coordinator, topic = landed
    live = Coordinator.from_url(sqlite_url, config=GroupConfig(initial_rebalance_delay=0))
    request = JoinRequest(instance_id="resets/worker-1", client_id="run-2", topics=[topic], session_timeout=60)
    joined = live.join("resets", request)
    done = _reset(sqlite_url, kafka_config["bootstrap.servers"], "--all-topics", "--to-earliest", "--execute")
    assert done.returncode == 1
    assert done.stderr.strip().startswith("Error: cannot reset offsets of group 'resets'"), done.stderr
    assert "no members" in done.stderr and "Traceback" not in done.stderr
    assert coordinator.fetch_offsets("resets", [TopicPartition(topic, 0)]) == {TopicPartition(topic, 0): 40}
    live.leave("resets", joined.member_id, instance_id="resets/worker-1")
    live.close()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--to-earliest"], "give --topic (repeatable) or --all-topics"),
        (["--all-topics"], "give exactly one of --to-earliest"),
        (["--all-topics", "--to-earliest", "--to-latest"], "got --to-earliest, --to-latest"),
        (["--all-topics", "--by-duration", "15 minutes"], "is not an ISO 8601 duration"),
        (["--all-topics", "--to-datetime", "yesterday"], "is not an ISO 8601 date-time"),
        (["--topic", "no-such-topic-here", "--to-earliest"], "topic 'no-such-topic-here' does not exist in Kafka"),
        (["--topic", "{topic}:7", "--to-earliest"], "it has no partition [7]"),
        (["--topic", "{topic}:a", "--to-earliest"], "partitions are numbers separated by commas"),
        (["--topic", "../x", "--to-earliest"], "'--topic'"),
    ],
)
def test_every_bad_option_is_one_short_error(landed, sqlite_url, kafka_config, args, expected):
    _coordinator, topic = landed
    done = _reset(sqlite_url, kafka_config["bootstrap.servers"], *(a.format(topic=topic) for a in args))
    assert done.returncode != 0
    assert expected in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) <= 4, done.stderr


def test_an_unknown_group_does_not_exist(sqlite_url, kafka_config, landed):
    done = _run(
        "reset-offsets", "nobody", "--store-url", sqlite_url, "--bootstrap-servers",
        kafka_config["bootstrap.servers"], "--all-topics", "--to-earliest",
    )  # fmt: skip
    assert done.returncode == 1 and "group 'nobody' does not exist" in done.stderr
