"""Spark session construction for the pipeline: local by default, a master URL or Spark Connect remote.

Python workers must run the same interpreter as the driver (the one with confluent-kafka and pyarrow),
so `PYSPARK_PYTHON` defaults to `sys.executable`.

`open_session` also records what it created (`OwnedSession`), so whoever opened a session can end it
(`close_session`) without stopping a session, or a JVM, that someone else in the process started and shares.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark import SparkContext
from pyspark.sql import SparkSession

__all__ = ["OwnedSession", "build_session", "cancel_jobs", "close_session", "open_session"]

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
    master: str | None = "local[2]",
    remote: str | None = None,
    app_name: str = "cohort",
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get or create the process's SparkSession.

    `remote` (an `sc://host:port` Spark Connect URL) takes precedence over `master`; for local and
    master-URL sessions the Python workers use this interpreter.
    """
    if master and remote:
        raise ValueError("give either a Spark master URL or a Spark Connect remote, not both")
    builder = SparkSession.builder.appName(app_name)
    if remote:
        builder = builder.remote(remote)
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        builder = builder.master(master or "local[2]")
        for key, value in LOCAL_DEFAULTS.items():
            builder = builder.config(key, value)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


@dataclass(frozen=True)
class OwnedSession:
    """A session and what `open_session` created for it.

    `created` is False when the process already had a live session (a classic SparkContext, or a Spark
    Connect session) that `getOrCreate` returned: its owner stops it, not us. `jvm` is the local JVM
    (`spark-submit`) launched for this session, None when a JVM was already running in the process, when
    it was provided from outside (`PYSPARK_GATEWAY_PORT`) or for Spark Connect.
    """

    session: SparkSession
    created: bool
    jvm: subprocess.Popen[bytes] | None = None


def open_session(
    *,
    master: str | None = "local[2]",
    remote: str | None = None,
    app_name: str = "cohort",
    conf: Mapping[str, str] | None = None,
) -> OwnedSession:
    """`build_session`, noting whether it created the session and launched its JVM (see `OwnedSession`)."""
    if remote:
        from pyspark.sql.connect.session import SparkSession as ConnectSession

        existing: object = ConnectSession.getActiveSession() or ConnectSession._get_default_session()
        session = build_session(master=None, remote=remote, app_name=app_name, conf=conf)
        return OwnedSession(session, created=existing is None or session is not existing)
    with SparkSession.Builder._lock:  # getOrCreate's own (reentrant) lock: no other thread creates meanwhile
        had_context = SparkContext._active_spark_context is not None
        had_gateway = SparkContext._gateway is not None
        session = build_session(master=master, app_name=app_name, conf=conf)
    proc = None if had_gateway else getattr(SparkContext._gateway, "proc", None)
    return OwnedSession(session, created=not had_context, jvm=proc if isinstance(proc, subprocess.Popen) else None)


def cancel_jobs(session: SparkSession) -> None:
    """Cancel every running and scheduled job of the session's application (Spark Connect: interrupt every
    operation of the session), so threads waiting on them get an error at once.

    Call it from a thread that is not itself inside a Spark call: py4j pins each thread to one connection,
    and a thread interrupted in the middle of a call leaves its connection waiting for the answer.
    """
    try:
        context = session.sparkContext
    except Exception:  # Spark Connect has no SparkContext
        session.interruptAll()
        return
    context.cancelAllJobs()


def close_session(owned: OwnedSession, *, timeout_s: float = 60.0) -> None:
    """Stop the session if `open_session` created it, then end the JVM it launched (and only that one).

    The stop runs on a fresh thread (its own py4j connection: the caller's may be stuck in an interrupted
    call), bounded by `timeout_s`; the JVM is then told to exit (its stdin closes, as when the driver process
    ends) and killed if it has not exited within `timeout_s`. A later `open_session` starts a new JVM.
    """
    if not owned.created:
        return
    _bounded(owned.session.stop, timeout_s, "spark-stop")
    if owned.jvm is not None:
        _end_jvm(owned.jvm, timeout_s)


def _bounded(call: Callable[[], object], timeout_s: float, name: str) -> None:
    """Run `call` on a daemon thread; wait at most `timeout_s` (errors are ignored: we are closing)."""

    def run() -> None:
        with contextlib.suppress(Exception):
            call()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
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
