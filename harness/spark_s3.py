"""Spark as a reader of a sink on an S3 API: Hadoop's S3A file system (harness/spark_s3/pom.xml) pointed at the
endpoint and keys of the AWS variables, as a user's Spark reads a lake on S3 (`s3a://` for `s3://`).

`spark_offsets(root, environ)` reads the Parquet under `root` with a Spark session of its own, in a child process
(the tests' shared session started without these jars), and returns its rows' (topic, partition, offset), sorted.
`python -m harness.spark_s3` resolves the jars and prints their paths (`make kafka-jars` caches them);
`python -m harness.spark_s3 offsets s3://bucket/lake` prints a root's offsets as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from harness.maven_jars import cached_jars, jars_pyspark_lacks

__all__ = ["POM", "s3a_conf", "s3a_uri", "spark_offsets", "spark_s3_jars"]

POM = Path(__file__).resolve().parent / "spark_s3" / "pom.xml"
_TIMEOUT_S = 300


def spark_s3_jars(*, offline: bool = False) -> list[Path]:
    """hadoop-aws and the AWS SDK modules it loads, those PySpark lacks, sorted; resolved by Maven once."""
    return jars_pyspark_lacks(cached_jars(POM, "spark-s3-jars", offline=offline))


def s3a_uri(root: str) -> str:
    """`root` as S3A names it (`s3://b/p` -> `s3a://b/p`)."""
    return "s3a://" + root.removeprefix("s3://") if root.startswith("s3://") else root


def s3a_conf(environ: Mapping[str, str], *, offline: bool = False) -> dict[str, str]:
    """A session's settings for S3A against the endpoint, region and keys of `environ`'s AWS variables (path-style
    requests, as an S3-compatible server on one host needs; plain HTTP for an `http://` endpoint)."""
    settings = {
        "spark.jars": ",".join(str(jar) for jar in spark_s3_jars(offline=offline)),
        "spark.hadoop.fs.s3a.aws.credentials.provider": (
            "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
        ),
        "spark.hadoop.fs.s3a.endpoint.region": environ.get("AWS_REGION", environ.get("AWS_DEFAULT_REGION", "")),
    }
    endpoint = environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        settings["spark.hadoop.fs.s3a.endpoint"] = endpoint
        settings["spark.hadoop.fs.s3a.path.style.access"] = "true"
        settings["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(urlsplit(endpoint).scheme == "https").lower()
    return settings


def spark_offsets(root: str, environ: Mapping[str, str]) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of every row Spark reads under the `s3://` `root` with S3A and `environ`'s AWS
    variables (names starting with _ or . skipped, as Spark skips them), in a child process; sorted."""
    command = [sys.executable, "-m", "harness.spark_s3", "offsets", root]
    cwd = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        command,
        cwd=cwd,
        env={**os.environ, **environ},
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise RuntimeError(f"Spark could not read {root} (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return [(str(t), int(p), int(o)) for t, p, o in json.loads(done.stdout.strip().splitlines()[-1])]


def _offsets(root: str) -> list[list[object]]:
    """The child's read: a local session with S3A, the root's `kafka` coordinates."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("cohort-s3a-reader")
    for key, value in s3a_conf(os.environ, offline=True).items():
        builder = builder.config(key, value)
    spark = builder.config("spark.ui.enabled", "false").getOrCreate()
    try:
        spark.sparkContext.setLogLevel("ERROR")
        rows = spark.read.parquet(s3a_uri(root)).selectExpr("kafka.topic", "kafka.partition", "kafka.offset").collect()
    finally:
        spark.stop()
    return sorted([r[0], r[1], r[2]] for r in rows)


if __name__ == "__main__":
    if sys.argv[1:2] == ["offsets"]:
        print(json.dumps(_offsets(sys.argv[2])))
    else:
        print(",".join(str(jar) for jar in spark_s3_jars(offline="--offline" in sys.argv[1:])))
