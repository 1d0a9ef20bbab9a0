"""A throwaway Apache Kafka broker for tests: the jars pinned by harness/kafka/pom.xml, one KRaft node on loopback.

The tests run against it by default (tests/fixtures/kafka.py), so what they check holds on Kafka itself rather
than on the embedded Tansu broker. `kafka_jars()` resolves the pom once with Maven's default configuration and
keeps the jars in the user's cache folder, keyed by the pom's hash: later runs need neither Maven nor the
network. `KafkaBroker` has `EmbeddedBroker`'s surface (`bootstrap_servers`, start/stop, a context manager);
`run_kafka_tool` runs Kafka's own command-line tools (`kafka-consumer-groups` and the like) on the same jars.

`python -m harness.kafka_broker` resolves the jars and prints their folder (`make kafka-jars`).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from harness.maven_jars import MavenJarsError, cached_jars

__all__ = [
    "POM",
    "KafkaBroker",
    "KafkaBrokerError",
    "kafka_jars",
    "random_cluster_id",
    "run_kafka_tool",
]

HERE = Path(__file__).resolve().parent
POM = HERE / "kafka" / "pom.xml"
TOOLS_LOG4J = HERE / "kafka" / "tools-log4j2.xml"
ENV_JARS = "COHORT_KAFKA_JARS"
"""A folder of Kafka jars to use instead of resolving the pom (a distribution's `libs/`, say)."""

# Short-lived tools: a small heap and the C1 compiler only start faster; the broker gets the full JIT.
TOOL_JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")
# One GC thread (the machine has two cores) and a small initial heap, grown up to `heap` when needed.
BROKER_JVM_OPTIONS = ("-Xms128m", "-XX:+UseSerialGC", "-Djava.awt.headless=true")


class KafkaBrokerError(RuntimeError):
    """Kafka's jars could not be resolved, or the broker could not be formatted, started or reached."""


def kafka_jars(pom: Path = POM, *, offline: bool = False) -> Path:
    """The folder holding the jars `pom` pins: `$COHORT_KAFKA_JARS`, else `~/.cache/cohort/kafka-jars/<pom hash>`,
    copied there by Maven on first use (`offline`: from ~/.m2 only). Instant once cached."""
    explicit = os.environ.get(ENV_JARS)
    if explicit:
        folder = Path(explicit)
        if not any(folder.glob("kafka_2.13-*.jar")):
            raise KafkaBrokerError(f"${ENV_JARS} points at {folder}, which holds no kafka_2.13 jar")
        return folder
    try:
        return cached_jars(pom, "kafka-jars", offline=offline)
    except MavenJarsError as exc:
        raise KafkaBrokerError(str(exc)) from None


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise KafkaBrokerError("no Java runtime (java) found: install openjdk-17-jre-headless (`make system-deps`)")
    return found


def _die_with_us() -> list[str]:
    """A prefix that has the kernel SIGKILL the broker when this process dies (util-linux's `setpriv --pdeathsig`,
    then exec): a test run killed by a timeout or a SIGTERM, which skips atexit, leaves no JVM behind. Only from the
    main thread, since the signal follows the thread that started the child."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or threading.current_thread() is not threading.main_thread():
        return []
    return [setpriv, "--pdeathsig", "KILL", "--"]


def _classpath(jars: Path) -> str:
    return str(jars / "*")  # the JVM expands the wildcard to every jar in the folder


def run_kafka_tool(
    main_class: str, args: Sequence[str], *, timeout_s: float = 120.0, jars: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools (`org.apache.kafka.tools.consumer.group.ConsumerGroupCommand`, ...) on the pinned
    jars, as its `bin/kafka-*.sh` script would; its log goes to stderr at WARN, stdout holds only its output."""
    command = [
        _java(),
        *TOOL_JVM_OPTIONS,
        f"-Dlog4j2.configurationFile={TOOLS_LOG4J}",
        "-cp",
        _classpath(jars or kafka_jars()),
        main_class,
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)


def random_cluster_id() -> str:
    """A cluster id as `kafka-storage random-uuid` makes one (Kafka's `Uuid.randomUuid()`: 16 random bytes,
    URL-safe base64 without padding, never starting with '-'), without starting a JVM for it."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(text: str, lines: int) -> str:
    return "\n".join(text.splitlines()[-lines:])


LOG4J_TEMPLATE = """<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by harness/kafka_broker.py: the broker's log, WARN and above, into its own folder. -->
<Configuration status="WARN">
  <Appenders>
    <File name="server" fileName="{log}">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Root level="WARN"><AppenderRef ref="server"/></Root>
  </Loggers>
</Configuration>
"""


@dataclass
class KafkaBroker:
    """One Apache Kafka node in KRaft mode on 127.0.0.1, with its data and logs in `log_dir` (a fresh temporary
    folder by default, removed on stop unless `keep_log_dir`).

    Built for one combined broker+controller node; the parameters leave room for more: a cluster passes the same
    `cluster_id` and `controller_voters` ({node id: controller port}) to each node, a secured listener comes in
    through `extra_listeners` ({name: security protocol}, a port each) and `properties` (overrides, last).

    Example:
        >>> with KafkaBroker() as broker:  # doctest: +SKIP
        ...     print(broker.bootstrap_servers)
        127.0.0.1:40123
    """

    node_id: int = 1
    process_roles: str = "broker,controller"
    port: int | None = None
    controller_port: int | None = None
    controller_voters: Mapping[int, int] | None = None
    cluster_id: str | None = None
    extra_listeners: Mapping[str, str] = field(default_factory=dict)
    properties: Mapping[str, str] = field(default_factory=dict)
    heap: str = "512m"
    startup_timeout_s: float = 90.0
    stop_timeout_s: float = 30.0
    log_dir: Path | None = None
    keep_log_dir: bool = False
    jars: Path | None = None
    listener_ports: dict[str, int] = field(default_factory=dict, init=False)
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _owned_log_dir: bool = field(default=False, init=False, repr=False)

    @property
    def bootstrap_servers(self) -> str:
        if self.port is None:
            raise KafkaBrokerError("the broker has not been started")
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """The broker's log4j file (WARN and above)."""
        if self.log_dir is None:
            raise KafkaBrokerError("the broker has not been started")
        return self.log_dir / "server.log"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def server_properties(self) -> dict[str, str]:
        """The node's server.properties: KRaft, loopback listeners, replication 1 for the internal topics, no
        rebalance delay, no topic auto-creation (the tests create every topic they use)."""
        assert self.log_dir is not None and self.port is not None and self.controller_port is not None
        voters = self.controller_voters or {self.node_id: self.controller_port}
        listeners = {"PLAINTEXT": ("PLAINTEXT", self.port), "CONTROLLER": ("PLAINTEXT", self.controller_port)}
        listeners |= {name: (protocol, self.listener_ports[name]) for name, protocol in self.extra_listeners.items()}
        client = {name: spec for name, spec in listeners.items() if name != "CONTROLLER"}
        data = self.log_dir / "data"
        properties = {
            "process.roles": self.process_roles,
            "node.id": str(self.node_id),
            "controller.quorum.voters": ",".join(f"{n}@127.0.0.1:{p}" for n, p in sorted(voters.items())),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, (_, port) in listeners.items()),
            "advertised.listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, (_, port) in client.items()),
            "listener.security.protocol.map": ",".join(f"{name}:{proto}" for name, (proto, _) in listeners.items()),
            "log.dirs": str(data),
            "metadata.log.dir": str(data),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",  # created on the first group's use: one partition is quicker
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "num.network.threads": "2",  # two cores: Kafka's defaults (3 and 8) only add context switches
            "num.io.threads": "4",
        }
        return {**properties, **self.properties}

    def start(self) -> KafkaBroker:
        """Format the storage, start the JVM and return once the node answers a metadata request with itself."""
        if self.running:
            return self
        jars = self.jars or kafka_jars()
        if self.log_dir is None:
            self.log_dir = Path(tempfile.mkdtemp(prefix="cohort-kafka-"))
            self._owned_log_dir = True
        self.cluster_id = self.cluster_id or random_cluster_id()
        chosen = (self.port, self.controller_port)
        attempts = 3 if chosen == (None, None) else 1  # a port given is not worth retrying
        for attempt in range(attempts):
            self.port = chosen[0] or _free_port()
            self.controller_port = chosen[1] or _free_port()
            self.listener_ports = {name: _free_port() for name in self.extra_listeners}
            try:
                self._spawn(jars)
            except _EarlyExit as exc:  # most likely a port taken between _free_port() and bind: try others
                if attempt == attempts - 1:
                    raise KafkaBrokerError(str(exc)) from None
                shutil.rmtree(self.log_dir / "data", ignore_errors=True)
                continue
            atexit.register(self.stop)
            return self
        raise AssertionError("unreachable")

    def _spawn(self, jars: Path) -> None:
        assert self.log_dir is not None
        config = self.log_dir / "server.properties"
        config.write_text("".join(f"{key}={value}\n" for key, value in self.server_properties().items()))
        log4j = self.log_dir / "log4j2.xml"
        log4j.write_text(LOG4J_TEMPLATE.format(log=self.log_path))
        jvm = [_java(), f"-Dlog4j2.configurationFile={log4j}", "-cp", _classpath(jars)]
        assert self.cluster_id is not None
        formatted = subprocess.run(
            [*jvm, *TOOL_JVM_OPTIONS, "kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        if formatted.returncode != 0:
            raise KafkaBrokerError(
                f"kafka-storage format failed (exit {formatted.returncode}):\n"
                f"{_tail(formatted.stdout + formatted.stderr, 20)}"
            )
        out = (self.log_dir / "kafka.out").open("ab")
        try:
            self._process = subprocess.Popen(
                [*_die_with_us(), *jvm, f"-Xmx{self.heap}", *BROKER_JVM_OPTIONS, "kafka.Kafka", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in a terminal reaches us, not the broker: we stop it.
                cwd=self.log_dir,
            )
        finally:
            out.close()
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                code, self._process = self._process.returncode, None
                raise _EarlyExit(f"Kafka exited early with code {code}; log {self.log_dir}:\n{self._log_tail()}")
            if self._answers():
                return
            time.sleep(0.2)
        self._kill()
        raise KafkaBrokerError(
            f"Kafka did not answer a metadata request on {self.bootstrap_servers} within "
            f"{self.startup_timeout_s:.0f} s; log {self.log_dir}:\n{self._log_tail()}"
        )

    def _answers(self) -> bool:
        """True when a metadata request lists this node among the brokers (registered and unfenced)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        # log_level 0: "connection refused" while the JVM boots is expected, not worth a log line.
        admin = AdminClient(
            {"bootstrap.servers": self.bootstrap_servers, "socket.connection.setup.timeout.ms": 1000, "log_level": 0}
        )
        try:
            metadata = admin.list_topics(timeout=1.0)
        except KafkaException:
            return False
        return self.node_id in metadata.brokers

    def _log_tail(self, lines: int = 30) -> str:
        assert self.log_dir is not None
        parts = []
        for name in ("server.log", "kafka.out"):
            with contextlib.suppress(OSError):
                text = (self.log_dir / name).read_text(errors="replace").strip()
                if text:
                    parts.append(f"--- {name}\n{_tail(text, lines)}")
        return "\n".join(parts) or "(no log)"

    def stop(self, *, keep_log_dir: bool | None = None) -> None:
        """SIGTERM (a controlled shutdown), SIGKILL after `stop_timeout_s`; then remove the folder it made unless
        `keep_log_dir` (default: the attribute) says to keep it for a look. Idempotent."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=self.stop_timeout_s)
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        keep = self.keep_log_dir if keep_log_dir is None else keep_log_dir
        if self._owned_log_dir and self.log_dir is not None and not keep:
            shutil.rmtree(self.log_dir, ignore_errors=True)
            self.log_dir = None
            self._owned_log_dir = False

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class _EarlyExit(Exception):
    """The broker's JVM exited before it answered: worth another try on other ports."""


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m harness.kafka_broker [--offline]`: resolve the pinned jars (a no-op when cached), print the folder."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        print(kafka_jars(offline="--offline" in args))
    except KafkaBrokerError as exc:
        print(f"kafka-jars: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
