"""A throwaway Spark Connect server for tests, and a Spark Connect client in a process of its own.

The server is PySpark's own distribution (`$SPARK_HOME/bin/spark-submit --class ...SparkConnectServer`,
SPARK_HOME being the installed `pyspark` package) with a `local[2]` driver, on a free loopback port. Everything
lives in one temporary directory: `conf/` (empty: no spark-defaults.conf from the machine), `work/` (the
server's working directory: warehouse, scratch), `server.log` and `client.log`. Its Python workers run
`python` (default: this interpreter, the venv's, which imports `cohort`) with the repository on PYTHONPATH, so
classes a test defines (pickled by reference) import there too. `start()` waits until the gRPC endpoint
answers and raises `SparkConnectError` with the log's tail when the server exits or is not up within
`start_timeout_s`. spark-submit execs the JVM, in a process group of its own: `stop()` sends the group SIGTERM,
then SIGKILL to whatever is left; the JVM's Python workers (pyspark.daemon, which makes a group of its own) exit
when the JVM ends and their stdin closes.

Why the client runs in another process: PySpark picks classic or Spark Connect columns and functions
(`pyspark.sql.functions`) per process, and refuses a remote session where a classic one runs
(SESSION_ALREADY_EXIST); the test process has one (tests/fixtures/spark.py's `spark`). `ConnectClient` starts one
interpreter that opens the remote session with `cohort.pipelines.spark.build_session(remote=...)` and runs
the calls it is given: `client.call(function, *args)` runs `function(session, *args)` there (function and
arguments pickled with cloudpickle: a test's lambdas travel too) and returns its result, or raises its
exception (the remote traceback as a note; an exception that does not pickle becomes `RemoteError`).

Example:
    >>> with SparkConnectServer() as server, ConnectClient(server.url, server.root) as client:  # doctest: +SKIP
    ...     client.call(lambda spark: spark.range(3).count())
    3
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from cohort.devtools.embedded_broker import free_port
from cohort.pipelines.spark import PYTHON_DAEMON
from harness.spark_cluster import LOOPBACK, spark_free_env, spark_home

__all__ = ["ConnectClient", "RemoteError", "SparkConnectError", "SparkConnectServer", "spark_home"]

REPOSITORY = Path(__file__).resolve().parents[1]
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"

SERVER_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": LOOPBACK,
    "spark.driver.bindAddress": LOOPBACK,
    "spark.connect.grpc.binding.address": LOOPBACK,
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    "spark.sql.session.timeZone": "UTC",
    PYTHON_DAEMON[0]: PYTHON_DAEMON[1],
}
"""The server's settings: those of the tests' classic session (tests/fixtures/spark.py, LOCAL_DEFAULTS, and the worker
daemon that preloads the reading modules: the server's workers run this project's interpreter), loopback only."""


class SparkConnectError(RuntimeError):
    """The server (or the client process) did not come up or died; the message holds its log's tail."""


class RemoteError(RuntimeError):
    """An exception in the client process that does not pickle: its type's name, message and traceback."""


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"({path} unreadable)"
    return "\n".join(text[-lines:])


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would make a child's Spark attach elsewhere (`spark_free_env`),
    plus `extra`: the environment of the server, the client and a benchmark's driver processes."""
    return {**spark_free_env(), **extra}


def _end_group(process: subprocess.Popen[Any], timeout_s: float) -> None:
    """SIGTERM the process group `process` leads (it was started in a session of its own), then SIGKILL."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout_s)
    with contextlib.suppress(ProcessLookupError):  # the group's last members (Python workers), or a stuck JVM
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)


class SparkConnectServer:
    """One Spark Connect server (local[2]) on a free loopback port, in `root` (a fresh temporary directory
    when omitted, deleted by `stop()`)."""

    def __init__(
        self,
        root: Path | None = None,
        *,
        python: str = sys.executable,
        conf: dict[str, str] | None = None,
        start_timeout_s: float = 90.0,
    ) -> None:
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="cohort-connect-")) if root is None else root
        self.python = python
        self.conf = {**SERVER_CONF, **(conf or {})}
        self.start_timeout_s = start_timeout_s
        self.port = free_port()
        self.log = self.root / "server.log"
        self.started_in: float | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://{LOOPBACK}:{self.port}"

    def start(self) -> SparkConnectServer:
        home = spark_home()
        (self.root / "conf").mkdir(parents=True, exist_ok=True)
        (self.root / "work").mkdir(exist_ok=True)
        settings = {**self.conf, "spark.connect.grpc.binding.port": str(self.port)}
        command = [
            str(home / "bin" / "spark-submit"),
            "--class",
            SERVER_CLASS,
            "--name",
            "cohort-connect-tests",
            "--master",
            "local[2]",
            "--driver-memory",
            "1g",
            *(arg for key, value in settings.items() for arg in ("--conf", f"{key}={value}")),
        ]
        pythonpath = os.pathsep.join(p for p in (str(REPOSITORY), os.environ.get("PYTHONPATH", "")) if p)
        env = clean_env(
            SPARK_HOME=str(home),
            SPARK_CONF_DIR=str(self.root / "conf"),
            SPARK_LOCAL_IP=LOOPBACK,
            PYSPARK_PYTHON=self.python,
            PYSPARK_DRIVER_PYTHON=self.python,
            PYTHONPATH=pythonpath,
        )
        started = time.monotonic()
        with self.log.open("wb") as log:
            self._process = subprocess.Popen(
                command,
                cwd=self.root / "work",
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        atexit.register(self.stop)  # a test run that ends without its fixture's teardown leaves no JVM behind
        try:
            self._wait_until_up(started + self.start_timeout_s)
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - started
        return self

    def _wait_until_up(self, deadline: float) -> None:
        import grpc

        assert self._process is not None
        while True:
            code = self._process.poll()
            if code is not None:
                raise SparkConnectError(
                    f"the Spark Connect server exited ({code}) before answering on {self.url}; {self.log}:\n"
                    + _tail(self.log)
                )
            if time.monotonic() > deadline:
                raise SparkConnectError(
                    f"the Spark Connect server did not answer on {self.url} within {self.start_timeout_s:.0f} s; "
                    f"{self.log}:\n" + _tail(self.log)
                )
            if "Spark Connect server started at" in self.log.read_text(errors="replace"):
                channel = grpc.insecure_channel(f"{LOOPBACK}:{self.port}")
                try:
                    grpc.channel_ready_future(channel).result(timeout=5)
                    return
                except grpc.FutureTimeoutError:
                    pass
                finally:
                    channel.close()
            time.sleep(0.25)

    def stop(self, timeout_s: float = 30.0) -> None:
        """End the server's JVM and its Python workers; delete the directory if this server made it."""
        atexit.unregister(self.stop)
        process, self._process = self._process, None
        if process is not None:
            _end_group(process, timeout_s)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> SparkConnectServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_HEADER = struct.Struct(">Q")


def _send(stream: IO[bytes], payload: bytes) -> None:
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


def _read_exactly(stream: IO[bytes], size: int, deadline: float | None) -> bytes:
    """`size` bytes from a pipe, waiting at most until `deadline` (monotonic; None: no limit)."""
    chunks, left, fd = [], size, stream.fileno()
    while left:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        ready, _, _ = select.select([fd], [], [], wait)
        if not ready:
            raise TimeoutError(f"no answer within the time given ({size - left} of {size} bytes)")
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the other process closed the pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _receive(stream: IO[bytes], deadline: float | None = None) -> bytes:
    (size,) = _HEADER.unpack(_read_exactly(stream, _HEADER.size, deadline))
    return _read_exactly(stream, size, deadline)


class ConnectClient:
    """An interpreter holding a Spark Connect session to `url`, running the calls this process sends it
    (see the module doc); its output goes to `<root>/client.log`."""

    def __init__(self, url: str, root: Path, *, python: str = sys.executable, start_timeout_s: float = 60.0) -> None:
        self.url = url
        self.log = root / "client.log"
        self.python = python
        self.start_timeout_s = start_timeout_s
        self.started_in: float | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> ConnectClient:
        started = time.monotonic()
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                [self.python, "-m", "harness.spark_connect", self.url],
                cwd=REPOSITORY,
                env=clean_env(PYSPARK_PYTHON=self.python),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        try:
            self.call(_version, timeout_s=self.start_timeout_s)  # the session is open and answers
        except BaseException:
            self.close()
            raise
        self.started_in = time.monotonic() - started
        return self

    def call(self, function: Callable[..., Any], *args: Any, timeout_s: float = 300.0, **kwargs: Any) -> Any:
        """`function(session, *args, **kwargs)` in the client process; its result, or its exception raised here."""
        from pyspark import cloudpickle

        process = self._process
        if process is None or process.stdin is None or process.stdout is None:
            raise SparkConnectError("the Spark Connect client is not running")
        try:
            _send(process.stdin, cloudpickle.dumps((function, args, kwargs)))
            answer = pickle.loads(_receive(process.stdout, time.monotonic() + timeout_s))
        except (OSError, EOFError, TimeoutError) as exc:
            self.close()
            raise SparkConnectError(f"the Spark Connect client failed ({exc}); {self.log}:\n{_tail(self.log)}") from exc
        ok, value = answer
        if ok:
            return value
        raise value

    def close(self, timeout_s: float = 30.0) -> None:
        """Let the client stop its session and exit (stdin closes), then end it if it has not."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            with contextlib.suppress(OSError):
                process.stdin.close()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            _end_group(process, 10.0)
        if process.stdout is not None:
            process.stdout.close()

    def __enter__(self) -> ConnectClient:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _version(spark: Any) -> str:
    """The server's Spark version, once a query ran (the session answers)."""
    spark.range(1).collect()
    return str(spark.version)


def _portable(exc: BaseException) -> BaseException:
    """`exc` with the remote traceback as a note if it survives pickling, else a RemoteError saying it."""
    remote = "".join(traceback.format_exception(exc))
    try:
        copy = pickle.loads(pickle.dumps(exc))
        if type(copy) is not type(exc) or str(copy) != str(exc):
            raise TypeError("not the same exception after pickling")
    except Exception:
        return RemoteError(f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}\n(in the client process)\n{remote}")
    copy.add_note(f"(raised in the Spark Connect client process)\n{remote}")
    return copy


def _serve(url: str) -> None:
    """The client process: open the session, then run calls from stdin until it closes."""
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything else printed goes to the log, not into the replies
    from cohort.pipelines.spark import build_session

    spark = build_session(master=None, remote=url, app_name="cohort-connect-tests")
    try:
        while True:
            try:
                request = _receive(requests)
            except EOFError:
                return
            try:
                function, args, kwargs = pickle.loads(request)
                answer: tuple[bool, Any] = (True, function(spark, *args, **kwargs))
                payload = pickle.dumps(answer)
            except Exception as exc:  # every failure goes back to the caller
                payload = pickle.dumps((False, _portable(exc)))
            _send(replies, payload)
    finally:
        with contextlib.suppress(Exception):
            spark.stop()


if __name__ == "__main__":  # run as the module it is, so what it pickles names harness.spark_connect
    from harness.spark_connect import _serve as serve

    serve(sys.argv[1])
