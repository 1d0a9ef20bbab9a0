"""The Spark resource: local mode by default, a master URL or a Spark Connect remote for a cluster.

The resource owns the session it creates: at the end of the run (`teardown_after_execution`) it stops that
session and ends the local JVM it launched (if another run in the same process uses the session too, the
last of them does). A session that already existed in the process (one a test or a script started and
shares) is used but never stopped.

Example:
    >>> spark = SparkResource()                                  # local[2]
    >>> cluster = SparkResource(master="spark://spark-master:7077")
    >>> connect = SparkResource(master=None, remote="sc://spark-connect:15002")
"""

from __future__ import annotations

import contextlib

import dagster as dg
from pydantic import Field, PrivateAttr, model_validator
from pyspark.sql import SparkSession

from cohort.pipelines.spark import OwnedSession, cancel_jobs, close_session, open_session

__all__ = ["SparkResource"]


class SparkResource(dg.ConfigurableResource):
    """Where the pipeline's Spark work runs; `get_session()` returns the process's cached SparkSession.

    Executors read Kafka themselves, so a cluster needs `confluent-kafka` and `pyarrow` on its workers
    (no Maven packages).
    """

    master: str | None = Field(
        default="local[2]", description="Spark master URL: local[N], spark://host:7077, yarn, k8s://..."
    )
    remote: str | None = Field(default=None, description="Spark Connect URL (sc://host:15002); excludes master.")
    app_name: str = Field(default="cohort", description="Spark application name.")
    conf: dict[str, str] = Field(
        default_factory=dict,
        description="Extra Spark configuration properties (over Spark Connect: set on the session, not the server).",
    )
    log_level: str = Field(default="ERROR", description="SparkContext log level for local and master sessions.")

    _owned: OwnedSession | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _one_target(self) -> SparkResource:
        if self.master and self.remote:
            raise ValueError("give either a Spark master URL or a Spark Connect remote, not both")
        if self.remote is not None and not self.remote.startswith("sc://"):
            raise ValueError(f"a Spark Connect remote looks like sc://host:15002, got {self.remote!r}")
        return self

    def get_session(self) -> SparkSession:
        """The SparkSession (created on first use, then cached; Spark keeps one session per process)."""
        if self._owned is None:
            if self.remote:
                # Spark Connect: `conf` is set on the session; the server refuses static settings (a classic
                # session's UI defaults among them) with a CANNOT_MODIFY_CONFIG warning, so nothing else is sent
                owned = open_session(remote=self.remote, app_name=self.app_name, conf=self.conf)
            else:
                owned = open_session(
                    master=self.master,
                    app_name=self.app_name,
                    conf={"spark.ui.showConsoleProgress": "false", **self.conf},
                )
                owned.session.sparkContext.setLogLevel(self.log_level)
            self._owned = owned
        return self._owned.session

    def started_session(self) -> SparkSession | None:
        """The session if `get_session()` created it already, else None (never starts Spark)."""
        return self._owned.session if self._owned is not None else None

    def cancel_jobs(self) -> None:
        """Cancel the running Spark jobs of the session, if one was started (a terminated run calls this)."""
        if self._owned is not None:
            with contextlib.suppress(Exception):  # a stopped or unreachable session has nothing to cancel
                cancel_jobs(self._owned.session)

    def close(self) -> None:
        """Stop the session and end the local JVM if `get_session()` created them; a session that existed
        before is left running for its owner."""
        owned, self._owned = self._owned, None
        if owned is not None:
            close_session(owned)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        """Dagster's end of a run (finished, failed or terminated): `close()`."""
        self.close()
