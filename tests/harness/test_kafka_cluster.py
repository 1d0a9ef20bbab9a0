"""The three-node test cluster (harness/kafka_cluster.py) as configured, without starting it, and the group
coordinator's partition its leader-kill scenarios compute (harness/reliability/cluster_kills.py). The cluster
itself runs in tests/runtime/test_cluster_kills.py."""

from __future__ import annotations

from pathlib import Path

from harness.kafka_cluster import CLUSTER_PROPERTIES, KafkaCluster
from harness.reliability.cluster_kills import coordinator_partition


def _properties(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line)


def test_three_nodes_share_a_cluster_id_and_a_quorum_of_three_controllers(tmp_path: Path) -> None:
    cluster = KafkaCluster(log_dir=tmp_path, cluster_id="q1Sh2QbWRuqCx5yTrPQQ1w")
    cluster.configure()
    nodes = {n: _properties(tmp_path / f"node-{n}" / "server.properties") for n in (1, 2, 3)}
    voters = {props["controller.quorum.voters"] for props in nodes.values()}
    assert len(voters) == 1 and len(voters.pop().split(",")) == 3
    assert [props["node.id"] for props in nodes.values()] == ["1", "2", "3"]
    assert {props["process.roles"] for props in nodes.values()} == {"broker,controller"}
    ports = [cluster.nodes[n].port for n in (1, 2, 3)] + [cluster.nodes[n].controller_port for n in (1, 2, 3)]
    assert len(set(ports)) == 6
    assert cluster.bootstrap_servers == ",".join(f"127.0.0.1:{cluster.nodes[n].port}" for n in (1, 2, 3))
    for n, props in nodes.items():
        assert {key: props[key] for key in CLUSTER_PROPERTIES} == CLUSTER_PROPERTIES
        assert props["log.dirs"] == str(tmp_path / f"node-{n}" / "data")
    assert CLUSTER_PROPERTIES["default.replication.factor"] == "3"
    assert CLUSTER_PROPERTIES["min.insync.replicas"] == "2"
    assert cluster.heap == "384m" and cluster.cluster_id == "q1Sh2QbWRuqCx5yTrPQQ1w"


def test_a_group_s_coordinator_partition_is_kafka_s() -> None:
    """Utils.abs(groupId.hashCode()) % partitions, with Java's String.hashCode: "abc" is 96354, "hello" 99162322, and
    "polygenelubricants" hashes to Integer.MIN_VALUE, whose Utils.abs is 0."""
    assert coordinator_partition("abc", 50) == 96354 % 50
    assert coordinator_partition("hello", 50) == 99162322 % 50
    assert coordinator_partition("polygenelubricants", 50) == 0
    assert coordinator_partition("anything", 1) == 0
