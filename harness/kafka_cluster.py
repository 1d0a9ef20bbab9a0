"""A throwaway three-node Apache Kafka cluster for tests: KRaft nodes on loopback, each a broker and a controller.

Built on `harness.kafka_broker` (the same pinned jars, the same server.properties with its cluster parameters:
`node_id`, `controller_voters`, `cluster_id`, `properties`): one cluster id, `controller.quorum.voters` naming the
three controllers, free loopback ports, and the replication a production cluster has: topics created with
replication factor 3 by default, `min.insync.replicas=2`, the offsets and transaction-state topics replicated 3
times (min ISR 2). A broker may die (SIGKILL) and the cluster goes on: the controller quorum keeps a majority,
every partition keeps an in-sync replica to lead it, and producers with `acks=all` are still acknowledged.

The nodes are formatted and started in parallel from this (the main) thread, so each JVM is SIGKILLed by the kernel
when this process dies (`setpriv --pdeathsig`, as for `KafkaBroker`), and the cluster is ready once a metadata
request lists every broker. `kill(node)` SIGKILLs one node's JVM, `restart(node)` starts it again on its data
(no format: it recovers its log and catches up), `stop()` ends them all.

Example:
    >>> with KafkaCluster() as cluster:  # doctest: +SKIP
    ...     leader = cluster.leader_of("orders", 0)
    ...     cluster.kill(leader)
    ...     cluster.wait_for_leader("orders", 0, not_on=leader)
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from harness.kafka_broker import (
    BROKER_JVM_OPTIONS,
    LOG4J_TEMPLATE,
    TOOL_JVM_OPTIONS,
    KafkaBroker,
    KafkaBrokerError,
    _classpath,
    _die_with_us,
    _free_port,
    _java,
    _tail,
    kafka_jars,
    random_cluster_id,
)

__all__ = ["CLUSTER_PROPERTIES", "KafkaCluster", "PartitionState"]

CLUSTER_PROPERTIES: dict[str, str] = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
}
"""What three nodes change in `KafkaBroker`'s single-node properties: production's replication."""


@dataclass(frozen=True)
class PartitionState:
    """One partition as a metadata request answers it: its leader (None while it has none), replicas and ISR."""

    leader: int | None
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass
class KafkaCluster:
    """`size` KRaft nodes (broker and controller each) on 127.0.0.1 sharing one cluster id, in `log_dir` (a fresh
    temporary folder by default, `node-<id>/` per node, removed on stop unless `keep_log_dir`).

    `properties` override `CLUSTER_PROPERTIES` and `KafkaBroker`'s defaults on every node; `heap` is each JVM's
    maximum (three nodes share a small machine)."""

    size: int = 3
    heap: str = "384m"
    properties: Mapping[str, str] = field(default_factory=dict)
    startup_timeout_s: float = 180.0
    stop_timeout_s: float = 20.0
    log_dir: Path | None = None
    keep_log_dir: bool = False
    jars: Path | None = None
    cluster_id: str | None = None
    nodes: dict[int, KafkaBroker] = field(default_factory=dict, init=False)
    started_s: float | None = field(default=None, init=False)
    """Seconds the last `start()` took, from the first format to every broker listed."""
    _processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict, init=False, repr=False)
    _owned_log_dir: bool = field(default=False, init=False, repr=False)

    # ------------------------------------------------------------------------------------------ addresses

    @property
    def node_ids(self) -> list[int]:
        return list(range(1, self.size + 1))

    @property
    def bootstrap_servers(self) -> str:
        """Every node's client listener, comma-separated (a client bootstraps from whichever answers)."""
        if not self.nodes:
            raise KafkaBrokerError("the cluster has not been started")
        return ",".join(node.bootstrap_servers for node in self.nodes.values())

    @property
    def config(self) -> dict[str, Any]:
        """A librdkafka configuration for the cluster."""
        return {"bootstrap.servers": self.bootstrap_servers}

    def node_dir(self, node_id: int) -> Path:
        assert self.log_dir is not None
        return self.log_dir / f"node-{node_id}"

    def running(self, node_id: int) -> bool:
        process = self._processes.get(node_id)
        return process is not None and process.poll() is None

    @property
    def live_nodes(self) -> list[int]:
        return [n for n in self.node_ids if self.running(n)]

    def pid(self, node_id: int) -> int | None:
        process = self._processes.get(node_id)
        return process.pid if process is not None and process.poll() is None else None

    # ------------------------------------------------------------------------------------------ start, stop

    def start(self) -> KafkaCluster:
        """Format every node and start them together; return once a metadata request lists every broker."""
        if self._processes and all(self.running(n) for n in self.node_ids):
            return self
        if self.size < 1:
            raise ValueError(f"a cluster needs at least one node, got {self.size}")
        jars = self.jars or kafka_jars()
        if self.log_dir is None:
            self.log_dir = Path(tempfile.mkdtemp(prefix="cohort-kafka-cluster-"))
            self._owned_log_dir = True
        self.cluster_id = self.cluster_id or random_cluster_id()
        began = time.monotonic()
        for attempt in range(3):  # a port taken between _free_port() and bind: other ports, a fresh format
            self.configure()
            try:
                self._format_all(jars)
                for node_id in self.node_ids:
                    self._launch(node_id, jars)
                self.wait_for_brokers(self.node_ids, timeout_s=self.startup_timeout_s)
            except _NodeExited as exc:
                self._kill_all()
                if attempt == 2:
                    raise KafkaBrokerError(str(exc)) from None
                for node_id in self.node_ids:
                    shutil.rmtree(self.node_dir(node_id) / "data", ignore_errors=True)
                continue
            except BaseException:
                self._kill_all()
                raise
            self.started_s = time.monotonic() - began
            atexit.register(self.stop)
            return self
        raise AssertionError("unreachable")

    def configure(self) -> None:
        """Pick fresh ports and write every node's server.properties and log4j configuration (`start` does; a
        KafkaBroker per node, for its properties only: this cluster runs the JVMs)."""
        ports = {n: (_free_port(), _free_port()) for n in self.node_ids}
        voters = {n: controller for n, (_, controller) in ports.items()}
        self.nodes = {
            n: KafkaBroker(
                node_id=n,
                port=client,
                controller_port=controller,
                controller_voters=voters,
                cluster_id=self.cluster_id,
                properties={**CLUSTER_PROPERTIES, **self.properties},
                heap=self.heap,
                log_dir=self.node_dir(n),
                jars=self.jars,
            )
            for n, (client, controller) in ports.items()
        }
        for n, node in self.nodes.items():
            folder = self.node_dir(n)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "server.properties").write_text(
                "".join(f"{key}={value}\n" for key, value in node.server_properties().items())
            )
            (folder / "log4j2.xml").write_text(LOG4J_TEMPLATE.format(log=folder / "server.log"))

    def _jvm(self, node_id: int, jars: Path) -> list[str]:
        folder = self.node_dir(node_id)
        return [_java(), f"-Dlog4j2.configurationFile={folder / 'log4j2.xml'}", "-cp", _classpath(jars)]

    def _format_all(self, jars: Path) -> None:
        """`kafka-storage format` of every node, in parallel (one short JVM each)."""
        assert self.cluster_id is not None
        formats = {
            n: subprocess.Popen(
                [
                    *self._jvm(n, jars),
                    *TOOL_JVM_OPTIONS,
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    self.cluster_id,
                    "-c",
                    str(self.node_dir(n) / "server.properties"),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            for n in self.node_ids
        }
        failures = []
        for n, process in formats.items():
            try:
                output, _ = process.communicate(timeout=180)
            except subprocess.TimeoutExpired:
                process.kill()
                output, _ = process.communicate()
            if process.returncode != 0:
                failures.append(f"node {n} (exit {process.returncode}):\n{_tail(output.decode(errors='replace'), 20)}")
        if failures:
            raise KafkaBrokerError("kafka-storage format failed: " + "\n".join(failures))

    def _launch(self, node_id: int, jars: Path) -> None:
        """Start node `node_id`'s JVM on its formatted folder (not waiting for it)."""
        folder = self.node_dir(node_id)
        with (folder / "kafka.out").open("ab") as out:
            self._processes[node_id] = subprocess.Popen(
                [
                    *_die_with_us(),
                    *self._jvm(node_id, jars),
                    f"-Xmx{self.heap}",
                    *BROKER_JVM_OPTIONS,
                    "kafka.Kafka",
                    str(folder / "server.properties"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in a terminal reaches us, not the nodes: we stop them
                cwd=folder,
            )

    def stop(self, *, keep_log_dir: bool | None = None) -> None:
        """SIGTERM every node at once (none waits for a quorum the others already left), SIGKILL what is left after
        `stop_timeout_s`; then remove the folder it made unless `keep_log_dir` (default: the attribute). Idempotent."""
        processes = [p for p in self._processes.values() if p.poll() is None]
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        for process in processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        self._processes.clear()
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        keep = self.keep_log_dir if keep_log_dir is None else keep_log_dir
        if self._owned_log_dir and self.log_dir is not None and not keep:
            shutil.rmtree(self.log_dir, ignore_errors=True)
            self.log_dir = None
            self._owned_log_dir = False

    def _kill_all(self) -> None:
        for node_id in list(self._processes):
            self._sigkill(node_id)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------------ faults

    def kill(self, node_id: int) -> float:
        """SIGKILL node `node_id`'s JVM (no controlled shutdown: its leaderships and its controller vote vanish
        mid-request) and wait for it to be gone; returns the wall time (time.time()) of the kill."""
        if not self.running(node_id):
            raise KafkaBrokerError(f"node {node_id} is not running (live: {self.live_nodes})")
        at = time.time()
        self._sigkill(node_id)
        return at

    def _sigkill(self, node_id: int) -> None:
        process = self._processes.pop(node_id, None)
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=30)

    def restart(self, node_id: int, *, wait: bool = True, timeout_s: float | None = None) -> float:
        """Start node `node_id` again on its data (no format: it recovers its log and catches up with the leaders);
        with `wait`, return once a metadata request lists it again. Returns the seconds it took."""
        if self.running(node_id):
            raise KafkaBrokerError(f"node {node_id} is running")
        began = time.monotonic()
        self._launch(node_id, self.jars or kafka_jars())
        if wait:
            self.wait_for_brokers([node_id], timeout_s=timeout_s or self.startup_timeout_s)
        return time.monotonic() - began

    # ------------------------------------------------------------------------------------------ metadata

    def _admin(self, bootstrap: str | None = None) -> Any:
        from confluent_kafka.admin import AdminClient

        # log_level 0: a dead node's "connection refused" is expected here, not worth a log line.
        settings = {"socket.connection.setup.timeout.ms": 1000, "log_level": 0}
        return AdminClient({"bootstrap.servers": bootstrap or self._live_bootstrap(), **settings})

    def _live_bootstrap(self) -> str:
        live = [self.nodes[n].bootstrap_servers for n in self.live_nodes]
        return ",".join(live) if live else self.bootstrap_servers

    def topics(self, *, internal: bool = False, timeout_s: float = 10.0) -> list[str]:
        """The cluster's topics (`__consumer_offsets` and the like only with `internal`)."""
        names = self._admin().list_topics(timeout=timeout_s).topics
        return sorted(t for t in names if internal or not t.startswith("__"))

    def brokers(self, *, timeout_s: float = 5.0) -> set[int]:
        """The node ids a metadata request lists as brokers (registered and unfenced)."""
        metadata = self._admin().list_topics(timeout=timeout_s)
        return {int(b) for b in metadata.brokers}

    def wait_for_brokers(self, node_ids: Iterable[int], *, timeout_s: float = 120.0) -> None:
        """Wait until a metadata request lists every node of `node_ids` (each process alive meanwhile)."""
        from confluent_kafka import KafkaException

        wanted = set(node_ids)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for n in wanted:
                process = self._processes.get(n)
                if process is None or process.poll() is not None:
                    code = None if process is None else process.returncode
                    raise _NodeExited(f"Kafka node {n} exited early with code {code}:\n{self.log_tail(n)}")
            with contextlib.suppress(KafkaException):
                if wanted <= self.brokers(timeout_s=1.0):
                    return
            time.sleep(0.2)
        raise KafkaBrokerError(
            f"the metadata of {self.bootstrap_servers} did not list brokers {sorted(wanted)} "
            f"within {timeout_s:.0f} s:\n" + "\n".join(self.log_tail(n) for n in sorted(wanted))
        )

    def partition(self, topic: str, partition: int, *, timeout_s: float = 10.0) -> PartitionState:
        """`topic`-`partition`'s leader, replicas and in-sync replicas, as a metadata request answers them now."""
        metadata = self._admin().list_topics(topic, timeout=timeout_s)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or partition not in found.partitions:
            error = None if found is None else found.error
            raise KafkaBrokerError(f"no metadata for {topic}-{partition}: {error}")
        meta = found.partitions[partition]
        leader = int(meta.leader)
        return PartitionState(leader if leader >= 0 else None, tuple(meta.replicas), tuple(meta.isrs))

    def leader_of(self, topic: str, partition: int, *, timeout_s: float = 10.0) -> int:
        """The node id leading `topic`-`partition`; KafkaBrokerError while it has no leader."""
        leader = self.partition(topic, partition, timeout_s=timeout_s).leader
        if leader is None:
            raise KafkaBrokerError(f"{topic}-{partition} has no leader")
        return leader

    def leaders(self, topic: str, *, timeout_s: float = 10.0) -> dict[int, int | None]:
        """Each partition of `topic` and the node leading it (None while it has none)."""
        metadata = self._admin().list_topics(topic, timeout=timeout_s)
        found = metadata.topics[topic]
        return {p: (int(m.leader) if m.leader >= 0 else None) for p, m in sorted(found.partitions.items())}

    def wait_for_leader(
        self, topic: str, partition: int, *, not_on: Collection[int] | int = (), timeout_s: float = 60.0
    ) -> int:
        """Wait until `topic`-`partition` has a leader that is a live node and not in `not_on`; return it."""
        from confluent_kafka import KafkaException

        avoid = {not_on} if isinstance(not_on, int) else set(not_on)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(KafkaException, KafkaBrokerError):
                leader = self.partition(topic, partition, timeout_s=2.0).leader
                if leader is not None and leader not in avoid and self.running(leader):
                    return leader
            time.sleep(0.2)
        raise KafkaBrokerError(f"{topic}-{partition} got no leader outside {sorted(avoid)} within {timeout_s:.0f} s")

    def wait_in_sync(self, topics: Iterable[str], *, timeout_s: float = 120.0) -> None:
        """Wait until every partition of `topics` has a leader and all its replicas in sync (after a create, or a
        restarted node catching up)."""
        from confluent_kafka import KafkaException

        names = list(topics)
        deadline = time.monotonic() + timeout_s
        lagging: list[str] = []
        while time.monotonic() < deadline:
            lagging = []
            with contextlib.suppress(KafkaException):
                metadata = self._admin().list_topics(timeout=2.0)
                for name in names:
                    found = metadata.topics.get(name)
                    if found is None or found.error is not None:
                        lagging.append(f"{name}: {None if found is None else found.error}")
                        continue
                    lagging += [
                        f"{name}-{p}: leader {m.leader}, replicas {m.replicas}, isr {m.isrs}"
                        for p, m in sorted(found.partitions.items())
                        if m.leader < 0 or set(m.isrs) != set(m.replicas)
                    ]
                if not lagging:
                    return
            time.sleep(0.2)
        raise KafkaBrokerError(f"not in sync within {timeout_s:.0f} s: {lagging[:6]}")

    def log_tail(self, node_id: int, lines: int = 30) -> str:
        """The end of node `node_id`'s log4j file and console output."""
        parts = []
        for name in ("server.log", "kafka.out"):
            with contextlib.suppress(OSError):
                text = (self.node_dir(node_id) / name).read_text(errors="replace").strip()
                if text:
                    parts.append(f"--- node {node_id} {name}\n{_tail(text, lines)}")
        return "\n".join(parts) or f"(node {node_id}: no log)"


class _NodeExited(KafkaBrokerError):
    """A node's JVM exited before the cluster answered (a port taken, most likely): worth other ports."""
