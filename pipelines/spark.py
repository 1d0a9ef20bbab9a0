"""Spark session construction for the pipeline: local by default, a master URL or Spark Connect remote.

Python workers must run the same interpreter as the driver (the one with confluent-kafka and pyarrow),
so `PYSPARK_PYTHON` defaults to `sys.executable`.

`open_session` also records what it created (`OwnedSession`), so the session and the JVM it started are
ended (`close_session`) when their last user is done, and a session someone else in the process started and
shares is never stopped. `stop_session` ends a session its owner built (a script's, the tests'), with its py4j
gateway and JVM; a classic session still open when the interpreter exits is ended the same way first, so
nothing of py4j is left for the interpreter's own teardown (py4j closes a connection it finds then with a log
record, which a handler whose stream was closed by then, a test runner's capture, reports as a
"--- Logging error ---" traceback after everything else).

The data path takes either kind of session: `is_connect` tells them apart, and `parallelism` is the default
parallelism of both (a Spark Connect session has no SparkContext to ask).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark import SparkContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

__all__ = [
    "OwnedSession",
    "build_session",
    "cancel_jobs",
    "close_session",
    "is_connect",
    "open_session",
    "parallelism",
    "stop_session",
]

PYTHON_DAEMON = ("spark.python.daemon.module", "cohort.pipelines.tasks.python_daemon")
"""Spark's Python worker daemon with the reading tasks' modules imported before it forks (the setting and its
value): set for local sessions; a setting of the caller's wins."""

LOCAL_DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    "spark.driver.memory": "2g",
    "spark.sql.session.timeZone": "UTC",
}


def build_session(
    *,
    master: str | None = None,
    remote: str | None = None,
    app_name: str = "cohort",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get or create the process's SparkSession.

    `master` defaults to local[2]; `remote` is an `sc://host:port` Spark Connect URL (give one or the other).
    For local and master-URL sessions the Python workers use this interpreter, or the one
    `spark.pyspark.python` names in `conf` (PySpark itself only reads the PYSPARK_PYTHON variable).
    """
    if master and remote:
        raise ValueError("give either a Spark master URL or a Spark Connect remote, not both")
    builder = SparkSession.builder.appName(app_name)
    if remote:
        builder = builder.remote(remote)
    else:
        executor_python = (conf or {}).get("spark.pyspark.python")
        if executor_python:
            os.environ["PYSPARK_PYTHON"] = executor_python
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        builder = builder.master(master or "local[2]")
        for key, value in LOCAL_DEFAULTS.items():
            builder = builder.config(key, value)
        if (master or "local").startswith("local") and os.environ["PYSPARK_PYTHON"] == sys.executable:
            # the executors run this interpreter, where cohort is importable
            builder = builder.config(*PYTHON_DAEMON)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if not remote:
        _end_at_exit_once()
    return session


@dataclass(frozen=True)
class OwnedSession:
    """A handle on the session `open_session` returned; `close_session` releases it.

    `created` says whether this call created the session (the process had no live session: no classic
    SparkContext, no Spark Connect session). A session an `open_session` created is stopped, with the local
    JVM launched for it, when its last handle is closed (two runs in one process share it). A session that
    existed otherwise (a script's, the tests' shared one) is never stopped: `key` is None.
    """

    session: SparkSession
    created: bool
    key: int | None


@dataclass
class _Opened:
    """A session `open_session` created: the object keyed (kept alive so its id is not reused), the open
    handles, and the local JVM launched for it (None when one was running already, when it was provided
    from outside through `PYSPARK_GATEWAY_PORT`, and for Spark Connect)."""

    owner: object
    handles: int
    jvm: subprocess.Popen[bytes] | None


_opened: dict[int, _Opened] = {}
_opened_lock = threading.Lock()


def open_session(
    *,
    master: str | None = None,
    remote: str | None = None,
    app_name: str = "cohort",
    conf: Mapping[str, str] | None = None,
) -> OwnedSession:
    """`build_session`, as a handle that knows whether the session (and its JVM) are ours to end."""
    jvm = None
    if remote:
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        existing: object = ConnectSession.getActiveSession() or ConnectSession._get_default_session()
        session = build_session(master=None, remote=remote, app_name=app_name, conf=conf)
        created = existing is None or session is not existing
        owner: object = session
    else:
        with SparkSession.Builder._lock:  # getOrCreate's own (reentrant) lock: no other thread creates meanwhile
            had_context = SparkContext._active_spark_context is not None
            had_gateway = SparkContext._gateway is not None
            session = build_session(master=master, app_name=app_name, conf=conf)
        created = not had_context
        owner = session.sparkContext
        proc = None if had_gateway else getattr(SparkContext._gateway, "proc", None)
        jvm = proc if isinstance(proc, subprocess.Popen) else None
    key: int | None = id(owner)
    with _opened_lock:
        if created:
            _opened[id(owner)] = _Opened(owner, 1, jvm)
        elif id(owner) in _opened:
            _opened[id(owner)].handles += 1
        else:
            key = None
    return OwnedSession(session, created=created, key=key)


def is_connect(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect session: no SparkContext, no driver JVM in this process (py4j),
    no accumulators; DataFrames, SQL settings, caching, Observations and Python UDFs work as in a classic one."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


_parallelism: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
"""Spark Connect sessions' parallelism, found once per session (the entry goes with the session)."""

_PROBE_ROWS = 1 << 16
"""Rows of the range that finds a Spark Connect session's parallelism: more than any cluster has cores, so
every one of its partitions holds a row."""


def parallelism(spark: Any) -> int:
    """How many tasks the session runs at once by default (at least 1): what a batch spreads its reads over.

    Classic: the SparkContext's `defaultParallelism`. Spark Connect has no SparkContext: the session's
    `spark.default.parallelism` when set, else the number of partitions Spark gives a range without a
    partition count (the server's `leafNodeDefaultParallelism`: its default parallelism unless
    `spark.sql.leafNodeDefaultParallelism` says otherwise), found with one small job the first time and kept
    for the session's lifetime.
    """
    if not is_connect(spark):
        return max(1, int(spark.sparkContext.defaultParallelism))
    found = _parallelism.get(spark)
    if found is None:
        configured = spark.conf.get("spark.default.parallelism", None)
        if configured:
            found = int(configured)
        else:
            ids = spark.range(0, _PROBE_ROWS).select(F.spark_partition_id().alias("id"))
            found = int(ids.agg(F.max("id")).first()[0]) + 1
        found = max(1, found)
        _parallelism[spark] = found
    return found


def cancel_jobs(session: SparkSession) -> None:
    """Cancel every running and scheduled job of the session's application (Spark Connect: interrupt every
    operation of the session), so threads waiting on them get an error at once.

    Call it from a thread that is not itself inside a Spark call: py4j pins each thread to one connection,
    and a thread interrupted in the middle of a call leaves its connection waiting for the answer.
    """
    if is_connect(session):  # no SparkContext
        session.interruptAll()
        return
    session.sparkContext.cancelAllJobs()


def close_session(owned: OwnedSession, *, timeout_s: float = 60.0) -> None:
    """Release the handle; the last handle on a session `open_session` created stops it and ends its JVM.

    The stop runs on a fresh thread (its own py4j connection: the caller's may be stuck in an interrupted
    call), bounded by `timeout_s`; the JVM is then told to exit (its stdin closes, as when the driver process
    ends) and killed if it has not exited within `timeout_s`. A later `open_session` starts a new JVM.
    """
    if owned.key is None:
        return
    with _opened_lock:
        entry = _opened.get(owned.key)
        if entry is None:
            return
        entry.handles -= 1
        if entry.handles > 0:
            return
        del _opened[owned.key]
    _bounded(owned.session.stop, timeout_s, "spark-stop")
    if entry.jvm is not None:
        _end_jvm(entry.jvm, timeout_s)


def stop_session(session: SparkSession, *, timeout_s: float = 60.0) -> None:
    """Stop `session` for good, and what it runs on in this process: for a classic session, the py4j gateway (its
    connections closed) and the local JVM PySpark launched for it (one provided from outside through
    `PYSPARK_GATEWAY_PORT` is left running); for Spark Connect, the client session. For the session's owner (a
    script, the tests' fixture); a session `open_session` handed out is released with `close_session`.

    Each step is bounded by `timeout_s` (the JVM is killed past it). A later `build_session` starts a new JVM.
    """
    _bounded(session.stop, timeout_s, "spark-stop")
    if is_connect(session):
        return
    with SparkContext._lock:
        proc = getattr(SparkContext._gateway, "proc", None)
    if isinstance(proc, subprocess.Popen):
        _end_jvm(proc, timeout_s)


_PY4J_LOGGERS = ("py4j", "py4j.clientserver", "py4j.java_gateway")
_exit_registered = False


def _end_at_exit_once() -> None:
    """Have `_end_at_exit` run when the interpreter exits (registered once per process)."""
    global _exit_registered
    with _opened_lock:
        if not _exit_registered:
            atexit.register(_end_at_exit)
            _exit_registered = True


def _end_at_exit(timeout_s: float = 15.0) -> None:
    """At interpreter exit, end the classic session still open (none when its owner stopped it) as `stop_session`
    does. py4j's loggers are silenced first: its records on closing each connection are of no use now, and the
    handlers they would reach may write to streams closed already (a test runner's capture of the output)."""
    with SparkContext._lock:
        context, gateway = SparkContext._active_spark_context, SparkContext._gateway
    if gateway is None:
        return
    for name in _PY4J_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    if context is not None:
        _bounded(context.stop, timeout_s, "spark-stop")
    proc = getattr(gateway, "proc", None)
    if isinstance(proc, subprocess.Popen):
        _end_jvm(proc, timeout_s)


def _bounded(call: Callable[[], object], timeout_s: float, name: str) -> None:
    """Run `call` on a daemon thread; wait at most `timeout_s` (errors are ignored: we are closing). Where no
    thread can start any more (late in the interpreter's exit), `call` runs on the caller's."""

    def run() -> None:
        with contextlib.suppress(Exception):
            call()

    thread = threading.Thread(target=run, name=name, daemon=True)
    try:
        thread.start()
    except RuntimeError:
        run()
        return
    thread.join(timeout_s)


def _end_jvm(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Forget the process's gateway (if it is still this JVM's) and shut it down, close the JVM's stdin (Spark's
    gateway exits on EOF, as when the driver process ends), then kill it if it is alive after `timeout_s`."""
    with SparkContext._lock:
        gateway: Any = SparkContext._gateway
        if gateway is not None and getattr(gateway, "proc", None) is process:
            SparkContext._gateway = None
            SparkContext._jvm = None
            _bounded(gateway.shutdown, timeout_s, "spark-gateway-shutdown")
    if process.stdin is not None:
        with contextlib.suppress(OSError):
            process.stdin.close()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)
