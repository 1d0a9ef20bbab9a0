"""The test Kafka broker (harness/kafka_broker.py): its configuration, its failure report, and Kafka's own tools run
on the same jars against the session's broker."""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from cohort.devtools.embedded_broker import EmbeddedBroker
from harness.kafka_broker import KafkaBroker, KafkaBrokerError, random_cluster_id, run_kafka_tool

CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
REPO = Path(__file__).resolve().parents[2]


def test_a_single_node_is_a_kraft_broker_and_controller_on_loopback(tmp_path: Path) -> None:
    node = KafkaBroker(port=9192, controller_port=9193, log_dir=tmp_path)
    props = node.server_properties()
    assert props["process.roles"] == "broker,controller"
    assert props["node.id"] == "1"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9193"
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9192,CONTROLLER://127.0.0.1:9193"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9192"
    assert props["log.dirs"] == str(tmp_path / "data")
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor"):
        assert props[key] == "1"
    assert props["transaction.state.log.min.isr"] == "1"
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert props["auto.create.topics.enable"] == "false"


def test_a_cluster_node_and_an_extra_listener_come_from_parameters(tmp_path: Path) -> None:
    """What a 3-node cluster or a SASL_SSL listener will pass: shared voters, a listener with its port, overrides."""
    node = KafkaBroker(
        node_id=2,
        port=9292,
        controller_port=9293,
        controller_voters={1: 9193, 2: 9293, 3: 9393},
        extra_listeners={"SASL_SSL": "SASL_SSL"},
        properties={"sasl.enabled.mechanisms": "PLAIN", "offsets.topic.replication.factor": "3"},
        log_dir=tmp_path,
    )
    node.listener_ports = {"SASL_SSL": 9294}  # start() picks free ports; set here to render without starting
    props = node.server_properties()
    assert props["controller.quorum.voters"] == "1@127.0.0.1:9193,2@127.0.0.1:9293,3@127.0.0.1:9393"
    assert props["listeners"].endswith(",SASL_SSL://127.0.0.1:9294")
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9292,SASL_SSL://127.0.0.1:9294"
    assert "SASL_SSL:SASL_SSL" in props["listener.security.protocol.map"].split(",")
    assert props["sasl.enabled.mechanisms"] == "PLAIN"
    assert props["offsets.topic.replication.factor"] == "3"


def test_cluster_ids_look_like_kafka_storage_random_uuid() -> None:
    for _ in range(200):
        text = random_cluster_id()
        assert len(text) == 22 and not text.startswith("-")
        assert len(base64.urlsafe_b64decode(text + "==")) == 16


@pytest.mark.kafka
def test_a_broker_that_cannot_start_names_the_cause_from_its_log(tmp_path: Path) -> None:
    """A port in use: the JVM exits, and the error carries the log's tail and where the folder is."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        node = KafkaBroker(port=port, log_dir=tmp_path, startup_timeout_s=120)
        with pytest.raises(KafkaBrokerError) as info:
            node.start()
    assert "exited early" in str(info.value) and str(tmp_path) in str(info.value)
    assert "Address already in use" in str(info.value) or "BindException" in str(info.value)
    assert not node.running


def test_consumer_group_command_describes_a_group(broker, kafka_config, topic_factory, produce_records) -> None:
    """`kafka-consumer-groups --describe --group` on the pinned jars, its table parsed: the committed offset, the
    log end and the lag of a group that committed without members."""
    if isinstance(broker, EmbeddedBroker):
        pytest.skip("on Tansu the tool shows LOG-END-OFFSET 1 and a negative lag (its high watermark, README)")
    topic = topic_factory(2)
    produce_records(topic, [(0, None, b"a")] * 5 + [(1, None, b"b")] * 3)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({**kafka_config, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(
            offsets=[KafkaTopicPartition(topic, 0, 4), KafkaTopicPartition(topic, 1, 3)], asynchronous=False
        )
    finally:
        consumer.close()

    done = run_kafka_tool(
        CONSUMER_GROUP_COMMAND,
        ["--bootstrap-server", kafka_config["bootstrap.servers"], "--describe", "--group", group],
    )
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines() if line.strip()]
    header = lines.index(next(line for line in lines if line[:2] == ["GROUP", "TOPIC"]))
    columns = lines[header]
    rows = [dict(zip(columns, line, strict=False)) for line in lines[header + 1 :]]
    found = {int(r["PARTITION"]): (r["CURRENT-OFFSET"], r["LOG-END-OFFSET"], r["LAG"]) for r in rows}
    assert {r["GROUP"] for r in rows} == {group} and {r["TOPIC"] for r in rows} == {topic}
    assert found == {0: ("4", "5", "1"), 1: ("3", "3", "0")}


@pytest.mark.kafka
def test_a_killed_owner_takes_its_broker_with_it(tmp_path: Path) -> None:
    """A test run killed by SIGKILL (or SIGTERM, which skips atexit) leaves no Kafka JVM running."""
    script = (
        "import sys, time\n"
        "from harness.kafka_broker import KafkaBroker\n"
        f"broker = KafkaBroker(log_dir=__import__('pathlib').Path({str(tmp_path)!r})).start()\n"
        "print(broker._process.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert owner.stdout is not None
        jvm = int(owner.stdout.readline())
        os.kill(jvm, 0)  # running
    finally:
        owner.kill()
        owner.wait(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(jvm):
        time.sleep(0.1)
    assert not _alive(jvm), "the broker outlived the process that started it"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
    except OSError:
        return False
    return state != "Z"
